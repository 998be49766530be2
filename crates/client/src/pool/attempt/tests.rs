use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The pool as a test sees it: what it answers the machine's
/// questions.
#[derive(Clone, Copy, Debug)]
struct FakePool {
    /// A copy may go out when the call is late (budget, no stall).
    copy: bool,
    /// Another live server exists.
    other_server: bool,
    shared_stall: bool,
    token: bool,
    /// When a held copy is asked for again, if one is held.
    ask_again: Option<Instant>,
    /// The copy's server's hedge delay.
    copy_delay: Duration,
}

impl Default for FakePool {
    fn default() -> Self {
        FakePool {
            copy: true,
            other_server: true,
            shared_stall: false,
            token: true,
            ask_again: None,
            copy_delay: ms(3),
        }
    }
}

/// Drives a machine with made-up times, answering its questions as
/// `pool` says, and keeps every action it took.
struct Driver {
    t0: Instant,
    machine: AttemptMachine,
    pool: FakePool,
    actions: Vec<(Duration, Action)>,
    asked: Vec<(Duration, Ask)>,
}

impl Driver {
    /// An attempt late after `hedge` ms, overdue at `deadline` ms,
    /// given up at `longest` ms.
    fn new(hedge: u64, deadline: u64, longest: u64, pool: FakePool) -> Driver {
        let t0 = Instant::now();
        Driver {
            t0,
            machine: AttemptMachine::new(
                &Tuning::DEFAULT,
                t0,
                ms(hedge),
                ms(deadline),
                ms(longest),
            ),
            pool,
            actions: Vec::new(),
            asked: Vec::new(),
        }
    }

    fn at(&self, t: u64) -> Instant {
        self.t0 + ms(t)
    }

    /// `event` at `t` ms (after every timer due before it).
    fn on(&mut self, t: u64, event: Event) -> &mut Driver {
        self.run_timers_until(t);
        self.feed(event, self.at(t));
        self
    }

    /// Every timer due up to `t` ms fires.
    fn run_timers_until(&mut self, t: u64) -> &mut Driver {
        while !self.machine.done() && self.machine.next_timer() <= self.at(t) {
            let at = self.machine.next_timer();
            self.feed(Event::Timer, at);
        }
        self
    }

    fn feed(&mut self, event: Event, now: Instant) {
        let mut queue: std::collections::VecDeque<Action> = self.machine.handle(event, now).into();
        while let Some(action) = queue.pop_front() {
            let t = now - self.t0;
            self.actions.push((t, action));
            let answer = match action {
                Action::Ask(ask) => {
                    self.asked.push((t, ask));
                    let copy = match ask {
                        Ask::SilentCopy => self.pool.other_server,
                        Ask::Late | Ask::HeldCopy => self.pool.copy,
                    };
                    Some(Event::Offered(Offer {
                        copy: copy.then_some(self.pool.copy_delay),
                        ask_again: if copy { None } else { self.pool.ask_again },
                    }))
                }
                Action::AskPool => Some(Event::Pool(PoolNow {
                    shared_stall: self.pool.shared_stall,
                    other_server: self.pool.other_server,
                    token: self.pool.token,
                })),
                _ => None,
            };
            if let Some(answer) = answer {
                queue.extend(self.machine.handle(answer, now));
            }
        }
    }

    /// When the attempt ended, and how.
    fn end(&self) -> Option<(Duration, Action)> {
        self.actions
            .iter()
            .copied()
            .find(|(_, a)| matches!(a, Action::Answer { .. } | Action::GiveUp { .. }))
    }

    fn copies(&self) -> Vec<Duration> {
        self.actions
            .iter()
            .filter(|(_, a)| *a == Action::SendCopy)
            .map(|(t, _)| *t)
            .collect()
    }

    fn stalled(&self) -> bool {
        self.actions.iter().any(|(_, a)| *a == Action::Stall)
    }
}

#[test]
fn an_answer_in_time_is_answered_at_once_with_nothing_else() {
    let mut d = Driver::new(3, 150, 1000, FakePool::default());
    d.on(2, Event::FirstAnswered);
    assert_eq!(
        d.actions,
        vec![(
            ms(2),
            Action::Answer {
                copy: false,
                on_time: true
            }
        )]
    );
}

#[test]
fn kill_a_reset_gives_up_at_once_for_a_failover() {
    let mut d = Driver::new(3, 150, 1000, FakePool::default());
    d.on(1, Event::FirstFailed);
    assert_eq!(
        d.end(),
        Some((
            ms(1),
            Action::GiveUp {
                spend: false,
                outcome: Outcome::Status
            }
        ))
    );
    assert!(d.asked.is_empty(), "no probe, no copy");
}

#[test]
fn kill_while_a_copy_is_out_waits_for_the_copy() {
    let mut d = Driver::new(3, 150, 1000, FakePool::default());
    d.on(4, Event::FirstFailed);
    assert_eq!(d.copies(), vec![ms(3)]);
    assert_eq!(d.end(), None, "the copy may still answer");
    d.on(6, Event::CopyAnswered);
    assert!(matches!(
        d.end(),
        Some((t, Action::Answer { copy: true, .. })) if t == ms(6)
    ));
}

#[test]
fn hang_the_copy_goes_with_the_probe_and_wins() {
    let mut d = Driver::new(3, 150, 1000, FakePool::default());
    d.run_timers_until(3);
    assert_eq!(d.asked, vec![(ms(3), Ask::Late)]);
    assert_eq!(d.copies(), vec![ms(3)], "the copy beside the probe");
    d.on(5, Event::Verdict(Probe::Silent));
    assert_eq!(d.copies().len(), 1, "one copy a call");
    d.on(5, Event::CopyAnswered);
    assert!(matches!(
        d.end(),
        Some((
            _,
            Action::Answer {
                copy: true,
                on_time: true
            }
        ))
    ));
}

#[test]
fn hang_without_a_copy_leaves_at_the_verdict_not_the_deadline() {
    let pool = FakePool {
        copy: false,
        other_server: false,
        ..FakePool::default()
    };
    let mut d = Driver::new(3, 150, 1000, pool);
    d.on(103, Event::Verdict(Probe::Hung));
    assert_eq!(
        d.end(),
        Some((
            ms(103),
            Action::GiveUp {
                spend: false,
                outcome: Outcome::Hung
            }
        ))
    );
}

#[test]
fn hang_a_silent_server_gets_a_copy_whatever_the_budget_says() {
    // No token, a stall: no copy when late; the probe finds the server
    // silent beside a live one: the copy goes then.
    let pool = FakePool {
        copy: false,
        token: false,
        shared_stall: true,
        ..FakePool::default()
    };
    let mut d = Driver::new(3, 150, 1000, pool);
    d.run_timers_until(3);
    assert!(d.copies().is_empty());
    d.on(20, Event::Verdict(Probe::Silent));
    assert_eq!(d.copies(), vec![ms(20)]);
    // Then found hung: the copy is waited for, not the server.
    d.on(103, Event::Verdict(Probe::Hung));
    assert_eq!(d.end(), None);
    d.on(104, Event::CopyAnswered);
    assert!(matches!(
        d.end(),
        Some((_, Action::Answer { copy: true, .. }))
    ));
}

#[test]
fn hang_found_by_another_call_leaves_at_once() {
    let pool = FakePool {
        copy: false,
        ..FakePool::default()
    };
    let mut d = Driver::new(3, 150, 1000, pool);
    d.on(50, Event::ServerDown);
    assert_eq!(
        d.end(),
        Some((
            ms(50),
            Action::GiveUp {
                spend: false,
                outcome: Outcome::Hung
            }
        ))
    );
}

#[test]
fn slow_server_alive_and_copy_late_too_is_a_shared_stall() {
    let mut d = Driver::new(3, 150, 1000, FakePool::default());
    d.run_timers_until(3);
    d.on(4, Event::Verdict(Probe::Alive));
    assert!(!d.stalled(), "the copy is not late yet");
    // Late past twice its delay and the first call's wait: 3 + 6.
    d.run_timers_until(8);
    assert!(!d.stalled());
    d.run_timers_until(9);
    assert!(d.stalled(), "two servers slow together");
    // The first answers at last: not on time.
    d.on(40, Event::FirstAnswered);
    assert!(matches!(
        d.end(),
        Some((
            _,
            Action::Answer {
                copy: false,
                on_time: false
            }
        ))
    ));
}

#[test]
fn slow_server_without_a_copy_is_left_at_its_deadline_for_a_token() {
    let pool = FakePool {
        copy: false,
        ..FakePool::default()
    };
    let mut d = Driver::new(3, 150, 1000, pool);
    d.on(10, Event::Verdict(Probe::Alive));
    d.run_timers_until(150);
    assert_eq!(
        d.end(),
        Some((
            ms(150),
            Action::GiveUp {
                spend: true,
                outcome: Outcome::Late(ms(150))
            }
        ))
    );
}

#[test]
fn shared_stall_no_copy_no_failover_only_a_probe_each_deadline() {
    let pool = FakePool {
        copy: false,
        shared_stall: true,
        ..FakePool::default()
    };
    let mut d = Driver::new(3, 150, 600, pool);
    // Each probe finds the server alive.
    for t in [10, 160, 310, 460] {
        d.on(t, Event::Verdict(Probe::Alive));
    }
    assert!(d.copies().is_empty(), "no hedging into a shared stall");
    let probes: Vec<Duration> = d
        .asked
        .iter()
        .filter(|(_, a)| *a == Ask::Late)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(probes, vec![ms(3), ms(150), ms(300), ms(450)]);
    assert_eq!(d.end(), None);
    d.run_timers_until(600);
    assert_eq!(
        d.end(),
        Some((
            ms(600),
            Action::GiveUp {
                spend: false,
                outcome: Outcome::Late(ms(600))
            }
        ))
    );
}

#[test]
fn shared_stall_over_the_held_copy_goes_at_once() {
    let t0_pool = FakePool {
        copy: false,
        ..FakePool::default()
    };
    let mut d = Driver::new(3, 150, 1000, t0_pool);
    let try_at = d.at(53);
    d.pool.ask_again = Some(try_at);
    d.run_timers_until(3);
    assert!(d.machine.holds_copy());
    d.pool.copy = true;
    d.on(20, Event::StallOver);
    d.run_timers_until(20);
    assert_eq!(d.copies(), vec![ms(20)], "not at the stall's next try");
}

#[test]
fn busy_server_copy_held_until_its_queue_no_longer_excuses_the_wait() {
    // The server said it queues for the database: the pool holds the
    // copy until 3 + 2 × 7 ms queued.
    let mut d = Driver::new(
        3,
        150,
        1000,
        FakePool {
            copy: false,
            ..FakePool::default()
        },
    );
    d.pool.ask_again = Some(d.at(17));
    d.run_timers_until(16);
    assert!(d.copies().is_empty());
    d.pool.copy = true;
    d.run_timers_until(17);
    assert_eq!(d.asked, vec![(ms(3), Ask::Late), (ms(17), Ask::HeldCopy)]);
    assert_eq!(d.copies(), vec![ms(17)]);
}

#[test]
fn busy_server_is_waited_for_at_its_deadline_not_left() {
    let pool = FakePool {
        copy: false,
        shared_stall: true,
        ..FakePool::default()
    };
    let mut d = Driver::new(3, 150, 1000, pool);
    d.on(5, Event::Verdict(Probe::Alive));
    d.on(200, Event::FirstAnswered);
    assert!(matches!(
        d.end(),
        Some((t, Action::Answer { copy: false, .. })) if t == ms(200)
    ));
    assert!(d.copies().is_empty());
}

#[test]
fn copy_wins_back_before_it_counts_as_late_ends_a_stall() {
    let mut d = Driver::new(3, 150, 1000, FakePool::default());
    d.run_timers_until(3);
    // 5 ms: past its server's 3 ms delay, within twice that.
    d.on(8, Event::CopyAnswered);
    assert!(matches!(
        d.end(),
        Some((t, Action::Answer { copy: true, on_time: true })) if t == ms(8)
    ));
}

#[test]
fn copy_fails_the_first_still_answers() {
    let mut d = Driver::new(3, 150, 1000, FakePool::default());
    d.run_timers_until(3);
    d.on(4, Event::CopyFailed { server_down: true });
    assert_eq!(d.actions.last(), Some(&(ms(4), Action::MarkCopyDown)));
    assert_eq!(d.end(), None);
    d.on(6, Event::FirstAnswered);
    assert!(matches!(
        d.end(),
        Some((_, Action::Answer { copy: false, .. }))
    ));
}

#[test]
fn distance_nothing_is_late_within_the_far_servers_round_trip() {
    // 100 ms away: hedged after 210 ms, overdue at 340.
    let mut d = Driver::new(210, 340, 1360, FakePool::default());
    d.run_timers_until(209);
    assert!(
        d.asked.is_empty(),
        "no probe, no copy within the round trip"
    );
    d.on(205, Event::FirstAnswered);
    assert!(matches!(
        d.end(),
        Some((
            _,
            Action::Answer {
                copy: false,
                on_time: true
            }
        ))
    ));
}

#[test]
fn distance_a_far_hung_server_costs_its_hedge_delay_and_the_copys_round_trip() {
    let pool = FakePool {
        copy_delay: ms(210),
        ..FakePool::default()
    };
    let mut d = Driver::new(210, 340, 1360, pool);
    d.run_timers_until(210);
    assert_eq!(d.copies(), vec![ms(210)]);
    d.on(330, Event::Verdict(Probe::Silent));
    d.on(415, Event::CopyAnswered);
    assert!(matches!(
        d.end(),
        Some((t, Action::Answer { copy: true, on_time: true })) if t == ms(415)
    ));
}

#[test]
fn budget_exhausted_no_copy_and_at_the_deadline_no_leaving_only_a_probe() {
    let pool = FakePool {
        copy: false,
        token: false,
        ..FakePool::default()
    };
    let mut d = Driver::new(3, 150, 1000, pool);
    d.on(10, Event::Verdict(Probe::Alive));
    d.run_timers_until(150);
    assert!(d.copies().is_empty());
    assert_eq!(d.end(), None, "no token to leave a working server with");
    assert_eq!(d.asked.last(), Some(&(ms(150), Ask::Late)), "probed again");
    // The new probe finds it hung since: left at once, for free.
    d.on(260, Event::Verdict(Probe::Hung));
    assert_eq!(
        d.end(),
        Some((
            ms(260),
            Action::GiveUp {
                spend: false,
                outcome: Outcome::Hung
            }
        ))
    );
}

#[test]
fn overdue_with_the_probe_pending_waits_for_its_verdict() {
    let mut d = Driver::new(
        3,
        150,
        1000,
        FakePool {
            copy: false,
            ..FakePool::default()
        },
    );
    d.run_timers_until(150);
    assert_eq!(d.end(), None);
    d.on(170, Event::Verdict(Probe::Alive));
    assert_eq!(
        d.end(),
        Some((
            ms(170),
            Action::GiveUp {
                spend: true,
                outcome: Outcome::Late(ms(150))
            }
        ))
    );
}

#[test]
fn both_requests_lost_gives_up_with_the_first_ones_failure() {
    let mut d = Driver::new(3, 150, 1000, FakePool::default());
    d.run_timers_until(3);
    d.on(4, Event::FirstFailed);
    d.on(5, Event::CopyServerDown);
    assert_eq!(
        d.end(),
        Some((
            ms(5),
            Action::GiveUp {
                spend: false,
                outcome: Outcome::Status
            }
        ))
    );
}

/// The case: a server 100 ms away hangs while the budget is down to
/// its reserve. The first late call's copy waits for the reserve, which
/// comes a few of the server's work-lengths after its hedge delay
/// (`budget::stays_late`), before the probe could find the server silent
/// (a network RTO after the hedge delay); answered within 2 × RTT + 100.
/// Counted as four whole hedge delays (900 ms), the reserve came after the
/// silent verdict, and the call was answered at ~670 ms.
#[test]
fn distance_a_far_hung_server_with_the_budget_at_its_reserve_costs_its_hedge_delay_and_a_little() {
    use crate::pool::budget::stays_late;
    let (hedge, net_rtt) = (225, 205);
    let reserve = stays_late(&Tuning::DEFAULT, ms(hedge), ms(net_rtt));
    assert_eq!(reserve, ms(285));
    let silent_at = hedge + 250;
    let pool = FakePool {
        copy: false,
        copy_delay: ms(hedge),
        ..FakePool::default()
    };
    let mut d = Driver::new(hedge, 345, 1380, pool);
    d.pool.ask_again = Some(d.t0 + reserve);
    d.run_timers_until(hedge);
    assert!(d.copies().is_empty(), "the reserve is not the call's yet");
    d.pool.copy = true;
    d.run_timers_until(285);
    assert_eq!(d.copies(), vec![ms(285)], "before the silent verdict");
    assert!(285 < silent_at);
    d.on(285 + net_rtt, Event::CopyAnswered);
    let (answered, _) = d.end().expect("answered");
    assert!(answered <= ms(2 * 200 + 100), "{answered:?}");
}
