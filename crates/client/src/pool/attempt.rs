//! One attempt of a call, as a state machine with no I/O and no clock:
//! events in (an answer, an error, a timer, a probe's verdict, a server
//! dropped, the pool's answer to a question), actions out (ask the pool
//! for a copy, send it, declare a shared stall, answer the caller, give
//! up). The runner (`pool::call`) owns the requests, the probe and the
//! timers, passes the time in with every event, and sleeps until
//! [`AttemptMachine::next_timer`].
//!
//! What the pool as a whole decides (whether a copy goes out now, who
//! pays for it, the probe shared by every call late on a server, whether
//! the pool is in a shared stall) stays with the pool: the machine asks
//! ([`Action::Ask`], [`Action::AskPool`]) and the runner answers at once
//! with [`Event::Offered`] or [`Event::Pool`]. A question is always the
//! last action of a batch: the machine goes on from there when the answer
//! comes.
//!
//! The rules are `pool::decide`'s; this holds their order. An attempt is
//! late after its hedge delay: the pool probes the server and may send a
//! copy. A copy held back (shared stall, the server's queue, the budget's
//! reserve) is asked for again when the pool says, or at once when an
//! answer on time ends the stall. A probe that finds the server silent
//! beside a live one copies the call whatever the budget says; one that
//! finds it hung leaves it. A copy late too beside a live first server is
//! a shared stall. At the deadline [`at_deadline`] decides; past the
//! longest wait the attempt gives up.

use std::time::{Duration, Instant};

use super::decide::{
    AtDeadline, Copy, Late, Probe, at_deadline, copy_answer_ends_stall, copy_late_after,
    copy_when_silent, late_copy_is_shared_stall,
};

/// Where the attempt's first request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum First {
    Pending,
    /// Failed with a status (the runner keeps it).
    Failed,
    /// Its server was found hung or dropped.
    Hung,
}

/// What the pool asks the attempt's question about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// The attempt is late: probe its server (or join the probe open on
    /// it), and send a copy if the pool allows one now
    /// (`ServerPool::late`).
    Late,
    /// A copy held back earlier is asked for again
    /// (`ServerPool::held_copy`).
    HeldCopy,
    /// The probe found the server silent: a copy if another server can
    /// take it (`ServerPool::silent_copy`).
    SilentCopy,
}

/// The pool's answer to an [`Ask`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offer {
    /// A copy may go out now, to a server whose hedge delay is this.
    pub copy: Option<Duration>,
    /// No copy now: ask again then (the stall's next try, the end of the
    /// server's queue excuse, the reserve's turn).
    pub ask_again: Option<Instant>,
}

/// What the pool knows when the attempt's deadline passes (see [`Late`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolNow {
    /// A shared stall, or a server that says it queues calls for the
    /// database.
    pub shared_stall: bool,
    /// Another live server could take the call.
    pub other_server: bool,
    /// The budget has a token.
    pub token: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The timer armed for [`AttemptMachine::next_timer`] fired.
    Timer,
    FirstAnswered,
    FirstFailed,
    CopyAnswered,
    /// The copy failed; `server_down`: its status says its server is gone.
    CopyFailed {
        server_down: bool,
    },
    /// The server's probe said this (never [`Probe::Pending`]).
    Verdict(Probe),
    /// An answer on time ended the shared stall.
    StallOver,
    /// The attempt's server was dropped (hung, dead).
    ServerDown,
    /// The copy's server was dropped.
    CopyServerDown,
    /// The pool's answer to [`Action::Ask`].
    Offered(Offer),
    /// The pool's answer to [`Action::AskPool`].
    Pool(PoolNow),
}

/// How an attempt that got no answer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The first request's status.
    Status,
    /// Its server is hung (or was dropped).
    Hung,
    /// No answer within this long; the server answers its probes.
    Late(Duration),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Ask the pool; answer with [`Event::Offered`].
    Ask(Ask),
    /// Send the copy the pool just offered.
    SendCopy,
    /// Tell what the pool knows now; answer with [`Event::Pool`].
    AskPool,
    /// Two servers are slow together: the pool is in a shared stall.
    Stall,
    /// The copy's failure says its server is gone: drop it.
    MarkCopyDown,
    /// Answer the caller with the first request's answer or the copy's;
    /// `on_time` ends a shared stall.
    Answer { copy: bool, on_time: bool },
    /// The attempt is over without an answer; `spend`: a token pays for
    /// leaving a server that may still be working on the call.
    GiveUp { spend: bool, outcome: Outcome },
}

/// Where the machine goes on once the pool has answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Then {
    /// After [`Ask::Late`]: the held copy's turn, then the rest of the
    /// timers.
    Held,
    /// After [`Ask::HeldCopy`]: the copy's lateness, the deadline, the end.
    CopyLate,
    /// After [`Ask::SilentCopy`]: the rest of the verdict.
    Verdict,
    /// After [`Action::AskPool`]: the deadline's decision.
    Decide,
}

/// One attempt on one server.
#[derive(Clone, Debug)]
pub struct AttemptMachine {
    started: Instant,
    hedge_after: Duration,
    deadline: Duration,
    /// The longest the attempt waits at all.
    longest: Duration,
    first: First,
    copy: Copy,
    copy_sent_at: Option<Instant>,
    /// The copy's server's hedge delay when the copy went out.
    copy_delay: Duration,
    /// When the (last) copy went out, from the start of the attempt.
    hedge_sent: Option<Duration>,
    hedges: u32,
    probe: Probe,
    hedge_at: Option<Instant>,
    /// When a copy the pool held back is asked for again.
    held_copy_at: Option<Instant>,
    copy_late_at: Option<Instant>,
    deadline_at: Option<Instant>,
    overdue: bool,
    final_at: Instant,
    /// The deadline's decision is due once the current step is over.
    decide: bool,
    then: Option<Then>,
    done: bool,
}

impl AttemptMachine {
    /// An attempt sent at `started`, late after `hedge_after`, overdue at
    /// `deadline`, waited for at most `longest` (or the deadline if
    /// longer).
    pub fn new(
        started: Instant,
        hedge_after: Duration,
        deadline: Duration,
        longest: Duration,
    ) -> AttemptMachine {
        let longest = longest.max(deadline);
        AttemptMachine {
            started,
            hedge_after,
            deadline,
            longest,
            first: First::Pending,
            copy: Copy::None,
            copy_sent_at: None,
            copy_delay: Duration::ZERO,
            hedge_sent: None,
            hedges: 0,
            probe: Probe::Pending,
            hedge_at: Some(started + hedge_after),
            held_copy_at: None,
            copy_late_at: None,
            deadline_at: Some(started + deadline),
            overdue: false,
            final_at: started + longest,
            decide: false,
            then: None,
            done: false,
        }
    }

    /// When the runner wakes the machine with [`Event::Timer`].
    pub fn next_timer(&self) -> Instant {
        [
            self.hedge_at,
            self.held_copy_at,
            self.copy_late_at,
            self.deadline_at,
        ]
        .into_iter()
        .flatten()
        .fold(self.final_at, Instant::min)
    }

    /// The first request may still answer.
    pub fn first_pending(&self) -> bool {
        self.first == First::Pending
    }

    /// A copy is out and may still answer.
    pub fn copy_pending(&self) -> bool {
        matches!(self.copy, Copy::OnTime | Copy::Late)
    }

    /// What the probe has said so far (a verdict other than this one is
    /// news).
    pub fn probe(&self) -> Probe {
        self.probe
    }

    /// The copy, if one went out.
    pub fn copy(&self) -> Copy {
        self.copy
    }

    /// Whether the probe's verdict is still awaited.
    pub fn awaits_verdict(&self) -> bool {
        matches!(self.probe, Probe::Pending | Probe::Silent)
    }

    /// A copy held back waits for the shared stall's end.
    pub fn holds_copy(&self) -> bool {
        self.held_copy_at.is_some()
    }

    /// Copies sent so far.
    pub fn hedges(&self) -> u32 {
        self.hedges
    }

    /// When the last copy went out, from the start of the attempt.
    pub fn hedge_sent(&self) -> Option<Duration> {
        self.hedge_sent
    }

    /// The machine has answered the caller or given up.
    #[cfg(test)]
    pub fn done(&self) -> bool {
        self.done
    }

    /// Takes `event`, which happened at `now`: what to do.
    pub fn handle(&mut self, event: Event, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        if self.done {
            return out;
        }
        match event {
            Event::FirstAnswered => {
                let on_time = now.saturating_duration_since(self.started) <= self.hedge_after;
                self.finish(
                    Action::Answer {
                        copy: false,
                        on_time,
                    },
                    &mut out,
                );
            }
            Event::FirstFailed => {
                self.first = First::Failed;
                if !self.copy_pending() {
                    self.give_up(false, Outcome::Status, &mut out);
                }
            }
            Event::CopyAnswered => {
                let rtt = self
                    .copy_sent_at
                    .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
                let on_time = copy_answer_ends_stall(
                    rtt,
                    self.copy_delay,
                    self.hedge_sent.unwrap_or_default(),
                    self.first_pending(),
                );
                self.finish(
                    Action::Answer {
                        copy: true,
                        on_time,
                    },
                    &mut out,
                );
            }
            Event::CopyFailed { server_down } => {
                if server_down {
                    out.push(Action::MarkCopyDown);
                }
                self.copy_lost(&mut out);
            }
            Event::CopyServerDown => {
                self.copy_late_at = None;
                self.copy_lost(&mut out);
            }
            Event::ServerDown => self.first_hung(&mut out),
            Event::StallOver => {
                if self.held_copy_at.is_some() {
                    self.held_copy_at = Some(now);
                }
            }
            Event::Verdict(verdict) => {
                self.probe = verdict;
                if verdict == Probe::Silent
                    && self.first_pending()
                    && copy_when_silent(self.copy, true)
                {
                    // Another server answered its health check, this one
                    // did not: a copy now, whatever the budget or a stall
                    // say.
                    self.ask(Ask::SilentCopy, Then::Verdict, &mut out);
                } else {
                    self.after_verdict(now, &mut out);
                }
            }
            Event::Timer => {
                self.decide = false;
                self.on_timers(now, &mut out);
            }
            Event::Offered(offer) => match self.then.take() {
                Some(Then::Held) => {
                    self.offered(offer, now, &mut out);
                    self.held_copy_due(now, &mut out);
                }
                Some(Then::CopyLate) => {
                    self.offered(offer, now, &mut out);
                    self.later_timers(now, &mut out);
                }
                Some(Then::Verdict) => {
                    self.offered(offer, now, &mut out);
                    self.after_verdict(now, &mut out);
                }
                Some(Then::Decide) | None => debug_assert!(false, "an offer nobody asked for"),
            },
            Event::Pool(pool) => match self.then.take() {
                Some(Then::Decide) => self.decided(pool, now, &mut out),
                _ => debug_assert!(false, "the pool told what nobody asked"),
            },
        }
        out
    }

    fn ask(&mut self, ask: Ask, then: Then, out: &mut Vec<Action>) {
        self.then = Some(then);
        out.push(Action::Ask(ask));
    }

    fn finish(&mut self, action: Action, out: &mut Vec<Action>) {
        self.done = true;
        self.then = None;
        out.push(action);
    }

    fn give_up(&mut self, spend: bool, outcome: Outcome, out: &mut Vec<Action>) {
        self.finish(Action::GiveUp { spend, outcome }, out);
    }

    /// How the attempt ends once neither request can answer.
    fn without_answer(&self) -> Outcome {
        match self.first {
            First::Failed => Outcome::Status,
            First::Hung => Outcome::Hung,
            First::Pending => Outcome::Late(self.longest),
        }
    }

    /// The copy will not answer.
    fn copy_lost(&mut self, out: &mut Vec<Action>) {
        self.copy = Copy::Failed;
        if !self.first_pending() {
            self.give_up(false, self.without_answer(), out);
        }
    }

    /// The first request will not answer: its server is hung or gone.
    fn first_hung(&mut self, out: &mut Vec<Action>) {
        if !self.first_pending() {
            return;
        }
        self.first = First::Hung;
        if !self.copy_pending() {
            self.give_up(false, Outcome::Hung, out);
        }
    }

    /// The pool answered an [`Ask`]: send the copy it allows, and note
    /// when to ask again.
    fn offered(&mut self, offer: Offer, now: Instant, out: &mut Vec<Action>) {
        self.held_copy_at = offer.ask_again;
        let Some(copy_delay) = offer.copy else {
            return;
        };
        let copied_after = now.saturating_duration_since(self.started);
        self.hedges += 1;
        self.hedge_sent = Some(copied_after);
        self.copy_delay = copy_delay;
        self.copy_late_at = Some(now + copy_late_after(copy_delay, copied_after));
        self.copy_sent_at = Some(now);
        self.copy = Copy::OnTime;
        out.push(Action::SendCopy);
    }

    /// The rest of a verdict: a late copy beside a live server is a
    /// shared stall, a hung server is left, an overdue attempt decides.
    fn after_verdict(&mut self, now: Instant, out: &mut Vec<Action>) {
        if late_copy_is_shared_stall(self.copy, self.probe) {
            out.push(Action::Stall);
        }
        if self.probe == Probe::Hung {
            self.first_hung(out);
            if self.done {
                return;
            }
        }
        self.decide = self.overdue && self.first_pending();
        self.decide_if_due(now, out);
    }

    /// The timers due at `now`, in order: late, a held copy, the copy
    /// late, the deadline, the end.
    fn on_timers(&mut self, now: Instant, out: &mut Vec<Action>) {
        if self.hedge_at.is_some_and(|at| at <= now) {
            self.hedge_at = None;
            self.ask(Ask::Late, Then::Held, out);
            return;
        }
        self.held_copy_due(now, out);
    }

    fn held_copy_due(&mut self, now: Instant, out: &mut Vec<Action>) {
        if self.held_copy_at.is_some_and(|at| at <= now) {
            self.held_copy_at = None;
            if self.first_pending() && self.copy == Copy::None {
                self.ask(Ask::HeldCopy, Then::CopyLate, out);
                return;
            }
        }
        self.later_timers(now, out);
    }

    fn later_timers(&mut self, now: Instant, out: &mut Vec<Action>) {
        if self.copy_late_at.is_some_and(|at| at <= now) {
            self.copy_late_at = None;
            if self.copy == Copy::OnTime {
                self.copy = Copy::Late;
                // Two servers slow together: the cause is shared. (While
                // the first server's probe is pending, its verdict
                // decides.)
                if late_copy_is_shared_stall(self.copy, self.probe) {
                    out.push(Action::Stall);
                }
            }
        }
        if self.deadline_at.is_some_and(|at| at <= now) {
            self.deadline_at = None;
            self.overdue = true;
            self.decide = self.first_pending();
        }
        if now >= self.final_at {
            self.give_up(false, self.without_answer(), out);
            return;
        }
        self.decide_if_due(now, out);
    }

    fn decide_if_due(&mut self, _now: Instant, out: &mut Vec<Action>) {
        if std::mem::take(&mut self.decide) {
            self.then = Some(Then::Decide);
            out.push(Action::AskPool);
        }
    }

    /// The deadline has passed and the pool said how things stand.
    fn decided(&mut self, pool: PoolNow, now: Instant, out: &mut Vec<Action>) {
        let late = Late {
            probe: self.probe,
            copy: self.copy,
            shared_stall: pool.shared_stall,
            other_server: pool.other_server,
            token: pool.token,
        };
        match at_deadline(late) {
            AtDeadline::Abandon => self.give_up(true, Outcome::Late(self.deadline), out),
            AtDeadline::Hung => self.give_up(false, Outcome::Hung, out),
            AtDeadline::Reprobe => {
                // Probe again at once (joining a probe under way if another
                // call opened one), with a copy if one is covered; the
                // verdict alone decides nothing until the next deadline,
                // so a server that answers its probes is looked at once a
                // deadline.
                self.probe = Probe::Pending;
                self.overdue = false;
                self.deadline_at = Some(now + self.deadline);
                self.hedge_at = Some(now);
                self.on_timers(now, out);
            }
            AtDeadline::WaitForProbe | AtDeadline::KeepWaiting => {}
        }
    }
}

#[cfg(test)]
mod tests {
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
                machine: AttemptMachine::new(t0, ms(hedge), ms(deadline), ms(longest)),
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
            let mut queue: std::collections::VecDeque<Action> =
                self.machine.handle(event, now).into();
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
}
