use super::*;
use rand::SeedableRng;
use rand::rngs::StdRng;

const T: Tuning = Tuning::DEFAULT;

fn late(probe: Probe, copy: Copy) -> Late {
    Late {
        probe,
        copy,
        shared_stall: false,
        other_server: true,
        token: true,
    }
}

#[test]
fn a_hung_server_is_left_at_once_whatever_else_is_known() {
    for copy in [Copy::None, Copy::OnTime, Copy::Late, Copy::Failed] {
        assert_eq!(at_deadline(late(Probe::Hung, copy)), AtDeadline::Hung);
        let stalled = Late {
            shared_stall: true,
            token: false,
            ..late(Probe::Hung, copy)
        };
        assert_eq!(at_deadline(stalled), AtDeadline::Hung);
    }
}

#[test]
fn a_slow_server_is_left_only_when_another_can_do_better() {
    assert_eq!(
        at_deadline(late(Probe::Alive, Copy::None)),
        AtDeadline::Abandon,
        "one server slow, the others fine: move"
    );
    let stall = Late {
        shared_stall: true,
        ..late(Probe::Alive, Copy::None)
    };
    assert_eq!(at_deadline(stall), AtDeadline::Reprobe, "shared stall");
    assert_eq!(
        at_deadline(late(Probe::Alive, Copy::Late)),
        AtDeadline::KeepWaiting,
        "the copy is late too: the cause is shared"
    );
    let alone = Late {
        other_server: false,
        ..late(Probe::Alive, Copy::None)
    };
    assert_eq!(at_deadline(alone), AtDeadline::KeepWaiting, "nowhere to go");
    let broke = Late {
        token: false,
        ..late(Probe::Alive, Copy::Failed)
    };
    assert_eq!(at_deadline(broke), AtDeadline::Reprobe, "no budget");
}

#[test]
fn a_call_on_a_server_found_alive_is_never_left_to_the_slow_deadline_unseen() {
    // A call's server answered its probe (a moment before it hung, or
    // beside another server as silent on a loaded machine), the call
    // has no copy out, and it cannot leave: no token, or a shared
    // stall. Keeping it waiting held it to the slow deadline (2.1 s on
    // loopback at load 20) however hung the server was: look again.
    for copy in [Copy::None, Copy::Failed] {
        for (shared_stall, token) in [(false, false), (true, true), (true, false)] {
            let stuck = Late {
                shared_stall,
                token,
                ..late(Probe::Alive, copy)
            };
            assert_eq!(
                at_deadline(stuck),
                AtDeadline::Reprobe,
                "{copy:?}, shared stall {shared_stall}, token {token}"
            );
        }
    }
}

#[test]
fn a_copy_in_time_is_waited_for_and_a_pending_probe_decides() {
    assert_eq!(
        at_deadline(late(Probe::Alive, Copy::OnTime)),
        AtDeadline::KeepWaiting
    );
    assert_eq!(
        at_deadline(late(Probe::Pending, Copy::OnTime)),
        AtDeadline::KeepWaiting
    );
    assert_eq!(
        at_deadline(late(Probe::Pending, Copy::None)),
        AtDeadline::WaitForProbe,
        "a far server's deadline can come before its probe's"
    );
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// At `elapsed` ms, the other having answered at `other` ms (`None`:
/// there is no other; `Some(None)`: not yet).
fn probing(
    answered: bool,
    overdue: bool,
    other: Option<Option<u64>>,
    elapsed: u64,
    given_up: bool,
) -> Probe {
    let now = Probing {
        answered,
        overdue,
        other: other.map(|o| o.map(ms)),
        elapsed: ms(elapsed),
        given_up,
        own_round_trip: ms(2),
    };
    probe_verdict(&T, now)
}

#[test]
fn a_server_that_alone_does_not_answer_is_silent_before_its_verdict() {
    // Loopback: the other answered at 1 ms; the late server has 1 ms
    // and the slack, or its own round trip (2 ms) and the slack.
    assert_eq!(
        probing(false, false, Some(Some(1)), 11, false),
        Probe::Pending
    );
    assert_eq!(
        probing(false, false, Some(Some(1)), 12, false),
        Probe::Silent
    );
    assert_eq!(
        probing(false, false, Some(Some(20)), 29, false),
        Probe::Pending,
        "the other answered late: the late one gets as long"
    );
    assert_eq!(
        probing(false, false, Some(Some(20)), 30, false),
        Probe::Silent
    );
    assert_eq!(
        probing(false, false, Some(None), 90, false),
        Probe::Pending,
        "nobody answered: nothing to compare"
    );
    assert_eq!(probing(false, false, None, 90, false), Probe::Pending);
    assert_eq!(probing(true, false, Some(Some(1)), 50, false), Probe::Alive);
    assert_eq!(
        probing(false, true, Some(Some(1)), 40, false),
        Probe::Silent,
        "overdue but within the hung slack: still only silent"
    );
    assert_eq!(probing(false, true, Some(Some(1)), 51, false), Probe::Hung);
    // A far server (own round trip 210 ms) beside a near one.
    let far = Probing {
        answered: false,
        overdue: false,
        other: Some(Some(ms(1))),
        elapsed: ms(100),
        given_up: false,
        own_round_trip: ms(210),
    };
    assert_eq!(probe_verdict(&T, far), Probe::Pending);
    assert_eq!(
        probe_verdict(
            &T,
            Probing {
                elapsed: ms(220),
                ..far
            }
        ),
        Probe::Silent
    );
}

#[test]
fn a_second_win_over_one_server_moves_calls_and_a_first_does_not() {
    let at = Instant::now();
    let ms = Duration::from_millis;
    assert!(!win_moves_calls(&T, None, "a", at + ms(50), at + ms(55)));
    let beaten = Some(("a", at));
    assert!(win_moves_calls(&T, beaten, "a", at + ms(50), at + ms(55)));
    assert!(
        !win_moves_calls(&T, beaten, "b", at + ms(50), at + ms(55)),
        "a win over another server"
    );
    assert!(
        !win_moves_calls(&T, beaten, "a", at - ms(1), at + ms(5)),
        "a call sent before the first win was late in the same moment"
    );
    assert!(
        !win_moves_calls(&T, beaten, "a", at + ms(600), at + ms(605)),
        "too long after the first win"
    );
}

#[test]
fn a_servers_queue_excuses_a_wait_only_as_long_as_itself() {
    let sent = Instant::now();
    let ms = Duration::from_millis;
    assert_eq!(busy_excused_until(&T, sent, ms(4), ms(2)), sent + ms(8));
    assert_eq!(busy_excused_until(&T, sent, ms(4), ms(50)), sent + ms(104));
}

#[test]
fn a_shared_stall_lets_a_copy_through_less_often_each_try() {
    let seen = Instant::now();
    let ms = Duration::from_millis;
    assert!(!stall_trial_due(&T, Some(seen), 0, seen));
    assert!(!stall_trial_due(&T, Some(seen), 0, seen + ms(49)));
    assert!(stall_trial_due(
        &T,
        Some(seen),
        0,
        seen + T.stall_trial_after
    ));
    // Tries that did not end the stall: 100 ms, 200 ms, … 1.6 s.
    assert!(!stall_trial_due(&T, Some(seen), 1, seen + ms(99)));
    assert!(stall_trial_due(&T, Some(seen), 1, seen + ms(100)));
    assert!(!stall_trial_due(&T, Some(seen), 3, seen + ms(399)));
    assert!(stall_trial_due(&T, Some(seen), 3, seen + ms(400)));
    assert!(!stall_trial_due(&T, Some(seen), 40, seen + ms(1599)));
    assert!(stall_trial_due(
        &T,
        Some(seen),
        40,
        seen + T.stall_trial_longest
    ));
    assert_eq!(stall_trial_at(&T, Some(seen), 1), Some(seen + ms(100)));
    assert_eq!(stall_trial_at(&T, None, 3), None);
    assert!(
        stall_trial_due(&T, None, 0, seen),
        "never seen: nothing holds it"
    );
}

#[test]
fn a_copy_back_before_its_first_call_ends_a_shared_stall() {
    let ms = Duration::from_millis;
    // On time: ends it, whatever the first call does.
    assert!(copy_answer_ends_stall(&T, ms(8), ms(9), ms(9), false));
    assert!(copy_answer_ends_stall(&T, ms(8), ms(9), ms(9), true));
    // A little late, but back while the first server is still silent
    // on the call: one server is slow, not both.
    assert!(copy_answer_ends_stall(&T, ms(10), ms(9), ms(9), true));
    // The same answer after the first had failed says nothing of the
    // first server's speed.
    assert!(!copy_answer_ends_stall(&T, ms(10), ms(9), ms(9), false));
    // Back first, but as slow as a stall: both servers are in it.
    assert!(!copy_answer_ends_stall(&T, ms(30), ms(9), ms(9), true));
    // Sent 40 ms into its call and back in 30: its server is the
    // faster one.
    assert!(copy_answer_ends_stall(&T, ms(30), ms(9), ms(40), true));
}

#[test]
fn a_copy_is_late_only_past_twice_its_delay_and_its_first_calls_wait() {
    let ms = Duration::from_millis;
    // The copies of a game's players land on one server together and
    // queue at its gate: one hedge delay is not late yet.
    assert_eq!(copy_late_after(&T, ms(3), ms(3)), ms(6));
    // The slow run's case: copied 7.5 ms in, the copy was back in 6.1
    // ms, before it counted as late.
    let late = copy_late_after(&T, ms(3), Duration::from_micros(7_500));
    assert!(Duration::from_micros(6_100) < late);
    assert!(copy_answer_ends_stall(
        &T,
        Duration::from_micros(6_100),
        ms(3),
        Duration::from_micros(7_500),
        true
    ));
}

#[test]
fn a_silent_server_gets_a_copy_whatever_the_budget_or_a_stall_say() {
    assert!(copy_when_silent(Copy::None, true));
    assert!(!copy_when_silent(Copy::None, false), "nowhere to send it");
    for out in [Copy::OnTime, Copy::Late, Copy::Failed] {
        assert!(!copy_when_silent(out, true), "{out:?}: one copy a call");
    }
    assert_eq!(
        at_deadline(late(Probe::Silent, Copy::None)),
        AtDeadline::WaitForProbe
    );
    assert_eq!(
        at_deadline(late(Probe::Silent, Copy::OnTime)),
        AtDeadline::KeepWaiting
    );
    assert!(!late_copy_is_shared_stall(Copy::Late, Probe::Silent));
}

#[test]
fn a_server_is_hung_when_it_alone_is_silent() {
    for overdue in [false, true] {
        for other in [None, Some(None), Some(Some(10))] {
            assert_eq!(probing(true, overdue, other, 300, false), Probe::Alive);
        }
    }
    assert_eq!(
        probing(false, false, Some(Some(10)), 90, false),
        Probe::Silent,
        "within its deadline no verdict, only a suspicion"
    );
    assert_eq!(
        probing(false, true, Some(Some(10)), 100, false),
        Probe::Hung
    );
    assert_eq!(
        probing(false, true, None, 100, false),
        Probe::Hung,
        "none to compare"
    );
    assert_eq!(
        probing(false, true, Some(None), 200, true),
        Probe::Alive,
        "everyone silent for long: the machine is slow, not this server"
    );
}

#[test]
fn a_verdict_waits_for_the_other_server_before_calling_everyone_slow() {
    // The other server, busy with every client's copies, has not
    // answered by the late server's deadline (280 ms, 100 ms away): no
    // verdict yet (before, this said "alive", and the hung server kept
    // its calls).
    assert_eq!(probing(false, true, Some(None), 280, false), Probe::Pending);
    // It answers at 310 ms, the late server still silent: given as
    // long and the slack more, it is hung.
    assert_eq!(
        probing(false, true, Some(Some(310)), 310, false),
        Probe::Pending
    );
    assert_eq!(
        probing(false, true, Some(Some(310)), 360, false),
        Probe::Hung
    );
    // Or the late server answers first: alive.
    assert_eq!(probing(true, true, Some(None), 300, false), Probe::Alive);
}

#[test]
fn a_silent_health_check_drops_its_server_only_beside_one_that_answered() {
    assert!(drop_silent(true, false), "hung beside a live server");
    assert!(!drop_silent(false, false), "slow for everyone");
    assert!(!drop_silent(true, true), "its calls are answered");
    assert!(!drop_silent(false, true));
}

#[test]
fn a_late_copy_is_a_shared_stall_only_beside_a_live_server() {
    assert!(late_copy_is_shared_stall(Copy::Late, Probe::Alive));
    assert!(
        !late_copy_is_shared_stall(Copy::Late, Probe::Pending),
        "the first server may be hung: its copies make the other busy"
    );
    assert!(!late_copy_is_shared_stall(Copy::Late, Probe::Hung));
    for copy in [Copy::None, Copy::OnTime, Copy::Failed] {
        assert!(!late_copy_is_shared_stall(copy, Probe::Alive));
    }
}

#[test]
fn only_an_answer_to_a_call_sent_after_the_late_one_clears_a_suspicion() {
    let opened_at = Instant::now();
    let mut open = Suspicion::opened(&T, Hedge::Paid, opened_at);
    // An answer to a call sent 50 ms before: carried out before the
    // hang, arriving after it.
    open.answer(opened_at - Duration::from_millis(50));
    assert!(!open.answered);
    // The late call's own answer: it too reached the server before the
    // hang, only later than its hedge delay.
    open.answer(opened_at);
    assert!(!open.answered, "the late call itself says nothing of now");
    assert_eq!(
        when_late(LateNow {
            token: false,
            ..late_now(Some(open))
        })
        .hedge,
        Hedge::Covered,
        "the calls behind it keep their copies"
    );
    open.answer(opened_at + Duration::from_millis(1));
    assert!(open.answered, "a later call answered: alive");
}

#[test]
fn hedges_stay_out_of_shared_trouble() {
    assert!(should_hedge(false, false, true, true));
    assert!(!should_hedge(true, false, true, true), "shared stall");
    assert!(!should_hedge(false, true, true, true), "database down");
    assert!(!should_hedge(false, false, false, true), "no other server");
    assert!(!should_hedge(false, false, true, false), "no budget");
}

fn late_now(suspicion: Option<Suspicion>) -> LateNow {
    LateNow {
        suspicion,
        shared_stall: false,
        database_unavailable: false,
        other_server: true,
        token: true,
    }
}

#[test]
fn the_first_late_call_probes_and_hedges_at_once_for_one_token() {
    assert_eq!(
        when_late(late_now(None)),
        WhenLate {
            probe: true,
            hedge: Hedge::Paid
        }
    );
    let broke = LateNow {
        token: false,
        ..late_now(None)
    };
    assert_eq!(
        when_late(broke),
        WhenLate {
            probe: true,
            hedge: Hedge::No
        },
        "no token: probe only, the verdict moves the call"
    );
}

#[test]
fn pipelined_calls_on_a_suspect_server_share_its_probe_and_token() {
    let mut open = Suspicion::opened(&T, Hedge::Paid, Instant::now());
    let mut covered = 0;
    // A player's other calls go late one after another, the budget
    // long spent: each hedges, none probes, up to the pipeline's depth.
    loop {
        let step = when_late(LateNow {
            token: false,
            ..late_now(Some(open))
        });
        assert!(!step.probe, "one probe for the lot");
        if step.hedge != Hedge::Covered {
            assert_eq!(step.hedge, Hedge::No);
            break;
        }
        covered += 1;
        open.covered_left -= 1;
    }
    assert_eq!(covered + 1, T.copies_per_suspicion, "the first paid");
}

#[test]
fn a_suspicion_covers_nothing_into_shared_trouble_and_ends_once_the_server_answered() {
    let open = Suspicion::opened(&T, Hedge::Paid, Instant::now());
    let stall = LateNow {
        shared_stall: true,
        ..late_now(Some(open))
    };
    assert_eq!(when_late(stall).hedge, Hedge::No, "shared stall");
    let db = LateNow {
        database_unavailable: true,
        ..late_now(Some(open))
    };
    assert_eq!(when_late(db).hedge, Hedge::No, "database down");
    let answered = Suspicion {
        answered: true,
        ..open
    };
    assert_eq!(
        when_late(late_now(Some(answered))),
        WhenLate {
            probe: true,
            hedge: Hedge::Paid
        },
        "alive when it answered: a call late since asks again, as the first"
    );
    let broke = LateNow {
        token: false,
        ..late_now(Some(answered))
    };
    assert_eq!(
        when_late(broke),
        WhenLate {
            probe: true,
            hedge: Hedge::No
        }
    );
    // Opened without a token: nothing to cover with.
    let unfunded = Suspicion::opened(&T, Hedge::No, Instant::now());
    let step = when_late(LateNow {
        token: false,
        ..late_now(Some(unfunded))
    });
    assert_eq!(
        step,
        WhenLate {
            probe: false,
            hedge: Hedge::No
        }
    );
}

#[test]
fn failures_decide_the_servers_fate() {
    let mut plan = CallPlan::default();
    assert_eq!(plan.failed("a", FailureKind::Refused, None), Fate::Return);
    assert!(!plan.failed_over);
    assert_eq!(
        plan.failed("a", FailureKind::ServerDown, None),
        Fate::MarkDown
    );
    assert_eq!(plan.failed("b", FailureKind::Hung, None), Fate::MarkDown);
    assert_eq!(plan.failed("c", FailureKind::Timeout, None), Fate::Leave);
    assert_eq!(
        plan.failed("d", FailureKind::DatabaseUnavailable, None),
        Fate::Leave
    );
    assert!(plan.failed_over && plan.database_trouble);
    let skip = plan.skip();
    assert!(["a", "b", "c", "d"].iter().all(|s| skip.contains(*s)));
}

#[test]
fn a_database_outage_backs_off_with_growing_jittered_pauses_and_pushback() {
    let mut rng = StdRng::seed_from_u64(9);
    let live = ["a", "b"];
    let mut plan = CallPlan::default();
    let mut longest = Duration::ZERO;
    for round in 0..8 {
        plan.failed("a", FailureKind::DatabaseUnavailable, None);
        plan.failed("b", FailureKind::DatabaseUnavailable, None);
        let Pause::Sleep {
            duration,
            database_down,
        } = plan.exhausted(&T, &live, false, &mut rng)
        else {
            panic!("servers are live");
        };
        assert!(database_down);
        assert!(duration <= Duration::from_millis(10 << round).min(Duration::from_millis(200)));
        longest = longest.max(duration);
        assert!(plan.skip().is_empty(), "asked again after the pause");
    }
    assert!(longest > Duration::from_millis(50), "{longest:?}");
    // A pushback is obeyed once.
    plan.failed(
        "a",
        FailureKind::DatabaseUnavailable,
        Some(Duration::from_secs(2)),
    );
    plan.failed("b", FailureKind::DatabaseUnavailable, None);
    assert!(matches!(
        plan.exhausted(&T, &live, false, &mut rng),
        Pause::Sleep { duration, .. } if duration == Duration::from_secs(2)
    ));
    plan.failed("a", FailureKind::DatabaseUnavailable, None);
    plan.failed("b", FailureKind::DatabaseUnavailable, None);
    assert!(matches!(
        plan.exhausted(&T, &live, false, &mut rng),
        Pause::Sleep { duration, .. } if duration <= Duration::from_millis(200)
    ));
}

#[test]
fn a_database_outage_is_retried_within_the_short_cap_even_with_the_budget_spent() {
    const BACKOFF_CAP: Duration = T.backoff_cap;
    let mut rng = StdRng::seed_from_u64(5);
    let live = ["a", "b"];
    let mut longest_down = Duration::ZERO;
    let mut longest_slow = Duration::ZERO;
    for _ in 0..200 {
        let mut plan = CallPlan {
            pauses: 10,
            ..CallPlan::default()
        };
        plan.failed("a", FailureKind::DatabaseUnavailable, None);
        plan.failed("b", FailureKind::DatabaseUnavailable, None);
        let Pause::Sleep { duration, .. } = plan.exhausted(&T, &live, true, &mut rng) else {
            panic!("servers are live");
        };
        longest_down = longest_down.max(duration);
        // Slow servers with the budget spent still wait longer.
        let mut plan = CallPlan {
            pauses: 10,
            ..CallPlan::default()
        };
        plan.failed("a", FailureKind::Timeout, None);
        plan.failed("b", FailureKind::Timeout, None);
        let Pause::Sleep { duration, .. } = plan.exhausted(&T, &live, true, &mut rng) else {
            panic!("servers are live");
        };
        longest_slow = longest_slow.max(duration);
    }
    assert!(longest_down <= BACKOFF_CAP, "{longest_down:?}");
    assert!(longest_slow > BACKOFF_CAP, "{longest_slow:?}");
}

#[test]
fn when_every_server_was_slow_the_next_attempts_get_the_slow_deadline() {
    let mut rng = StdRng::seed_from_u64(1);
    let mut timing = ServerTiming::default();
    timing.record_probe(Duration::from_millis(200));
    let mut plan = CallPlan::default();
    let (deadline, longest) = plan.deadlines(&timing);
    assert!(deadline < longest);
    plan.failed("a", FailureKind::Timeout, None);
    plan.failed("b", FailureKind::DatabaseUnavailable, None);
    let pause = plan.exhausted(&T, &["a", "b"], false, &mut rng);
    assert!(matches!(
        pause,
        Pause::Sleep {
            database_down: false,
            ..
        }
    ));
    assert_eq!(plan.deadlines(&timing).0, timing.slow_deadline());
    assert!(!plan.skip().contains("a"), "the slow server is tried again");
    assert!(plan.skip().contains("b"), "the cut-off one is not");
    assert_eq!(
        CallPlan::default().exhausted(&T, &[], false, &mut rng),
        Pause::WaitForServer
    );
}

#[test]
fn a_player_goes_back_to_its_games_server_once_that_server_has_settled() {
    // Elsewhere, the game's server settled: back to it.
    assert_eq!(game_server(Some(1), Some(0), true), Some(0));
    // Just (re)connected: stay where the calls go.
    assert_eq!(game_server(Some(1), Some(0), false), Some(1));
    // Already there, or no choice (every live server cooling off).
    assert_eq!(game_server(Some(0), Some(0), false), Some(0));
    assert_eq!(game_server(Some(2), None, true), Some(2));
    // No usable current server: the game's choice, settled or not.
    assert_eq!(game_server(None, Some(1), false), Some(1));
    assert_eq!(game_server(None, None, true), None);
}

#[test]
fn a_player_moved_by_a_copys_wins_goes_back_when_alone_at_most_every_few_seconds() {
    let at = Instant::now();
    assert!(back_when_alone(&T, Some("a"), "b", None, at));
    assert!(
        !back_when_alone(&T, None, "b", None, at),
        "moved for no copy's win"
    );
    assert!(
        !back_when_alone(&T, Some("b"), "b", None, at),
        "back already"
    );
    assert!(!back_when_alone(
        &T,
        Some("a"),
        "b",
        Some(at),
        at + T.alone_return_every - ms(1)
    ));
    assert!(back_when_alone(
        &T,
        Some("a"),
        "b",
        Some(at),
        at + T.alone_return_every
    ));
}

#[test]
fn players_that_left_a_server_apart_go_back_on_one_beat() {
    let ms = Duration::from_millis;
    let epoch = Duration::from_secs(1_700_000_000);
    // Four players of a game leave a server within 50 ms, each to wait
    // a second: all go back at the same moment of the wall clock.
    let back: Vec<Duration> = [10, 25, 40, 60]
        .into_iter()
        .map(|left| epoch + ms(left) + on_the_beat(T.beat, epoch + ms(left), T.settle))
        .collect();
    assert!(back.iter().all(|at| *at == epoch + ms(1250)), "{back:?}");
    // Never sooner than the wait, at most a beat later.
    for left in [0, 1, 249, 250, 251, 999] {
        let wait = on_the_beat(T.beat, epoch + ms(left), T.settle);
        assert!(
            wait >= T.settle && wait < T.settle + T.beat,
            "{left}: {wait:?}"
        );
        assert_eq!((epoch + ms(left) + wait).as_nanos() % T.beat.as_nanos(), 0);
    }
    // On a beat already: no more than the wait.
    assert_eq!(on_the_beat(T.beat, epoch, T.settle), T.settle);
}
