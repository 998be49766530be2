//! The pure decisions of a commit, tested without a database.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::apply::*;
use super::calls::*;
use super::decode::*;
use super::known::*;
use super::reads::*;
use super::snapshot::*;
use super::write::*;
use crate::error::Error;
use crate::store::queries::*;
use crate::store::tuning::*;
use crate::token::TokenHash;
use borbaman_game::{Action, Ending, GameState, Outcome, Phase, SEATS, TICK_MS};

/// A game of four seated players, their sessions (session id 10 + seat,
/// token `[seat; 32]`), none of which applied anything yet.
fn four_players() -> (GameState, HashMap<TokenHash, SessionRead>) {
    let mut state = GameState::new(7, 0);
    let mut sessions = std::collections::HashMap::new();
    for seat in 0..SEATS as u8 {
        assert_eq!(state.seat_player(0), Some(seat));
        sessions.insert(
            [seat; 32],
            SessionRead {
                session_id: 10 + i64::from(seat),
                game_id: 1,
                seat: i16::from(seat),
                in_game: true,
                last_seq: 0,
                last_kind: 0,
                last_outcome: 0,
                last_tick: 0,
            },
        );
    }
    (state, sessions)
}

fn act_call(seat: u8, seqs: &[u64], batch: bool) -> Call {
    Call::Act(ActCall {
        token_hash: [seat; 32],
        game_id: 1,
        seat,
        inputs: seqs
            .iter()
            .map(|&seq| Input {
                seq,
                action: if seq % 2 == 0 {
                    Action::Idle
                } else {
                    Action::Bomb
                },
            })
            .collect(),
        batch,
    })
}

fn leave_call(seat: u8, seq: u64) -> Call {
    Call::Leave(LeaveCall {
        token_hash: [seat; 32],
        game_id: 1,
        seat,
        seq,
    })
}

/// (session, seq) of a commit's log rows, in the order applied.
fn logged(commit: &Commit) -> Vec<(i64, i64)> {
    commit.rows.iter().map(|r| (r.session_id, r.seq)).collect()
}

fn acked(answer: &Result<Answer, Error>) -> (u64, u32, bool) {
    match answer {
        Ok(Answer::Acted {
            ack,
            applied,
            replayed,
            ..
        }) => (*ack, *applied, *replayed),
        other => panic!("not an applied Act: {other:?}"),
    }
}

/// The calls queued behind a game's gate, applied in one commit: each
/// caller's inputs its session has not applied yet, each once, in the
/// calls' arrival order and each session's seq order, at one tick; one
/// writer per session; each call answered for itself.
#[test]
fn a_commit_applies_each_callers_new_inputs_once_in_arrival_order() {
    let (mut state, mut sessions) = four_players();
    let calls = [
        act_call(0, &[1, 2], true),
        act_call(1, &[1], false),
        // Player 0 again, its batch repeating 1 and 2 (not yet
        // acknowledged when it sent this): only 3 is new.
        act_call(0, &[1, 2, 3], true),
        leave_call(3, 1),
        act_call(2, &[1], true),
    ];
    let mut expected = state.clone();
    let applied = apply_calls(&calls, &mut sessions, &mut state, 5);
    assert_eq!(applied.tick, 5);
    assert_eq!(
        logged(&applied.commit),
        vec![(10, 1), (10, 2), (11, 1), (10, 3), (13, 1), (12, 1)]
    );
    let writers: Vec<(i64, bool, bool)> = applied
        .commit
        .writers
        .iter()
        .map(|w| (w.session_id, w.leaving, w.freed))
        .collect();
    assert_eq!(
        writers,
        vec![
            (10, false, false),
            (11, false, false),
            (13, true, false),
            (12, false, false)
        ],
        "one writer per session; the leaver forfeits (four seated: the game runs)"
    );
    assert_eq!(acked(&applied.answers[0]), (2, 2, false));
    assert_eq!(acked(&applied.answers[1]), (1, 1, false));
    assert_eq!(acked(&applied.answers[2]), (3, 1, false));
    assert!(matches!(applied.answers[3], Ok(Answer::Left { seq: 1 })));
    assert_eq!(acked(&applied.answers[4]), (1, 1, false));
    // The state is the inputs applied one by one, in that order.
    for row in &applied.commit.rows {
        let seat = row.seat as u8;
        match Action::from_code(row.action) {
            Some(action) => {
                assert_eq!(expected.apply(seat, action, 5).code(), row.outcome);
            }
            None => {
                expected.advance(5);
                assert_eq!(expected.phase(), Phase::Playing);
                expected.forfeit(seat, 5);
            }
        }
    }
    assert_eq!(state.encode(), expected.encode());
    assert_eq!(sessions[&[0; 32]].last_seq, 3);
    assert!(!sessions[&[3; 32]].in_game);
}

/// A call that fails its own checks gets its error, applies nothing,
/// and does not fail the others.
#[test]
fn a_call_that_fails_its_checks_is_refused_alone() {
    let (mut state, mut sessions) = four_players();
    let unknown = Call::Leave(LeaveCall {
        token_hash: [9; 32],
        game_id: 1,
        seat: 0,
        seq: 1,
    });
    let calls = [
        act_call(0, &[1], true),
        // Seat 1's token naming seat 2.
        Call::Act(ActCall {
            seat: 2,
            ..match act_call(1, &[1], true) {
                Call::Act(call) => call,
                Call::Leave(_) => unreachable!(),
            }
        }),
        unknown,
        // Player 0 skipping input 2.
        act_call(0, &[3], true),
        act_call(2, &[1], true),
    ];
    let mut alone = state.clone();
    let applied = apply_calls(&calls, &mut sessions, &mut state, 0);
    assert_eq!(logged(&applied.commit), vec![(10, 1), (12, 1)]);
    assert!(matches!(
        applied.answers[1],
        Err(Error::PermissionDenied(_))
    ));
    assert!(matches!(applied.answers[2], Err(Error::Unauthenticated(_))));
    assert!(matches!(
        applied.answers[3],
        Err(Error::FailedPrecondition(_))
    ));
    assert_eq!(acked(&applied.answers[4]), (1, 1, false));
    alone.apply(0, Action::Bomb, 0);
    alone.apply(2, Action::Bomb, 0);
    assert_eq!(
        state.encode(),
        alone.encode(),
        "the refused calls changed nothing"
    );
    assert_eq!(sessions[&[1; 32]].last_seq, 0);
}

/// A second copy of a call in one commit (a hedge through the same
/// server) is a repeat of the first, answered with the first's outcome;
/// an Act after its session's Leave is refused.
#[test]
fn a_copy_in_the_same_commit_is_a_repeat() {
    let (mut state, mut sessions) = four_players();
    let calls = [
        act_call(1, &[1], false),
        act_call(1, &[1], false),
        leave_call(2, 1),
        act_call(2, &[2], true),
        leave_call(2, 1),
    ];
    let applied = apply_calls(&calls, &mut sessions, &mut state, 4);
    assert_eq!(logged(&applied.commit), vec![(11, 1), (12, 1)]);
    let first = applied.answers[0].as_ref().unwrap();
    let Ok(Answer::Acted {
        outcome,
        replayed,
        applied_tick,
        ..
    }) = &applied.answers[1]
    else {
        panic!("the copy is answered");
    };
    let Answer::Acted {
        outcome: first_outcome,
        ..
    } = first
    else {
        panic!("an Act");
    };
    assert_eq!(
        (*replayed, *applied_tick, outcome),
        (true, 4, first_outcome)
    );
    assert!(matches!(
        applied.answers[3],
        Err(Error::FailedPrecondition(_))
    ));
    assert!(matches!(applied.answers[4], Ok(Answer::Left { seq: 1 })));
}

#[test]
fn a_stored_seat_out_of_range_is_corrupt_not_seat_0() {
    for seat in 0..SEATS as i16 {
        assert_eq!(seat_index(seat).unwrap(), seat as usize);
    }
    for seat in [-1, SEATS as i16, i16::MAX, i16::MIN] {
        assert!(
            matches!(seat_index(seat), Err(Error::Corrupt(_))),
            "seat {seat}"
        );
    }
}

#[test]
fn an_unknown_stored_outcome_is_corrupt_not_no_effect() {
    let known = Outcome::Applied;
    assert_eq!(outcome_from_code(known.code()).unwrap(), known);
    for code in [-1, 99, i16::MAX] {
        assert!(
            matches!(outcome_from_code(code), Err(Error::Corrupt(_))),
            "code {code}"
        );
    }
}

/// Acts that do not finish the game go through the statement without a
/// leave's parts; a leave (a forfeit, a freed lobby seat) or the commit
/// that finishes the game needs the full one.
#[test]
fn only_a_commit_of_acts_that_does_not_finish_takes_the_act_statement() {
    let writer = |leaving, freed| Writer {
        session_id: 7,
        seat: 1,
        leaving,
        freed,
    };
    let commit = |writers: Vec<Writer>| Commit {
        writers,
        rows: Vec::new(),
    };
    let acts = commit(vec![
        writer(false, false),
        Writer {
            session_id: 8,
            ..writer(false, false)
        },
    ]);
    assert_eq!(write_statement(&acts, None), WRITE_ACTS);
    assert_eq!(write_statement(&acts, Some(Ending::Draw)), WRITE_CALLS);
    assert_eq!(write_statement(&acts, Some(Ending::Winner(2))), WRITE_CALLS);
    let with_leave = commit(vec![
        writer(false, false),
        Writer {
            session_id: 8,
            ..writer(true, false)
        },
    ]);
    assert_eq!(write_statement(&with_leave, None), WRITE_CALLS);
    assert_eq!(
        write_statement(&commit(vec![writer(true, true)]), None),
        WRITE_CALLS
    );
}

#[test]
fn the_clock_since_a_reading_counts_ticks_as_the_database_does() {
    let tick_us = i64::from(TICK_MS) * 1000;
    let created = 1_700_000_000_000_000;
    let reading = created + 3 * tick_us - 1;
    assert_eq!(
        clock_since(created, reading, Duration::ZERO),
        (reading, 2),
        "floor, as now_tick! does"
    );
    assert_eq!(
        clock_since(created, reading, Duration::from_micros(1)),
        (reading + 1, 3)
    );
    assert_eq!(
        clock_since(
            created,
            reading,
            Duration::from_millis(u64::from(TICK_MS) * 10)
        )
        .1,
        12
    );
    assert_eq!(clock_since(created, created - 5, Duration::ZERO).1, 0);
}

/// What a server knows of a game after its commit: seats 0-2 known, at
/// version 7, the database clock read at tick 10.
fn known(at: Instant) -> Known {
    let (state, mut sessions) = four_players();
    sessions.remove(&[3; 32]);
    Known {
        version: 7,
        state,
        roster: Roster::default(),
        sessions,
        created_us: 0,
        clock_us: 10 * i64::from(TICK_MS) * 1000,
        clock_at: at,
        roster_read_at: at,
    }
}

#[test]
fn a_known_game_stands_in_for_a_read_only_of_known_callers_with_a_fresh_roster() {
    let t0 = Instant::now();
    let known = known(t0);
    let tokens: [&[u8]; 2] = [&[0; 32], &[2; 32]];
    let read = known
        .read_for(&tokens, t0 + Duration::from_millis(u64::from(TICK_MS) * 2))
        .expect("both callers are known");
    let game = read.game.expect("the game");
    assert_eq!((game.version, game.now_tick), (7, 12));
    assert_eq!(read.sessions.len(), 2);
    assert_eq!(read.sessions[&[2; 32]].session_id, 12);
    assert!(
        known.read_for(&[&[3; 32]], t0).is_none(),
        "seat 3 is not known: the commit reads"
    );
    assert!(
        known.read_for(&tokens, t0 + KNOWN_FOR).is_none(),
        "a roster read KNOWN_FOR ago is read again"
    );
}

#[test]
fn what_is_known_after_a_commit_keeps_other_players_only_if_nobody_wrote_in_between() {
    let t0 = Instant::now();
    let before = known(t0);
    // A commit of seat 0's call, which read version 7 (what was known)
    // and wrote version 8.
    let commit = |read_version: i64, left: bool| {
        let mut session = before.sessions[&[0; 32]];
        session.last_seq = 5;
        session.in_game = !left;
        let after = Known {
            version: read_version + 1,
            sessions: HashMap::from([([0; 32], session)]),
            ..before.clone()
        };
        Known::after(after, 1, read_version, Some(before.clone()))
    };
    let after = commit(7, false);
    assert_eq!(after.sessions.len(), 3, "seats 1 and 2 kept from before");
    assert_eq!(after.sessions[&[0; 32]].last_seq, 5, "seat 0 as written");
    let after = commit(9, false);
    assert_eq!(
        after.sessions.keys().collect::<Vec<_>>(),
        vec![&[0; 32]],
        "the commit read version 9: someone wrote after 7, the others may have moved on"
    );
    let after = commit(7, true);
    assert!(
        !after.sessions.contains_key(&[0; 32]),
        "seat 0 left: not brought back from before"
    );
    assert_eq!(after.sessions.len(), 2);
}

#[test]
fn winner_codes() {
    assert_eq!(winner_code(Some(Ending::Winner(2))), 2);
    assert_eq!(winner_code(Some(Ending::Draw)), -1);
}

fn inputs(seqs: &[u64]) -> Vec<Input> {
    seqs.iter()
        .map(|&seq| Input {
            seq,
            action: Action::Bomb,
        })
        .collect()
}

const BOMB: i16 = Action::BOMB_CODE;

/// A batch applies exactly the inputs above the last applied one, and
/// nothing when it holds none: a repeat, a late copy, an older batch.
#[test]
fn a_batch_applies_exactly_the_inputs_not_applied_yet() {
    assert_eq!(
        plan(&inputs(&[1, 2, 3]), true, 0, 0).unwrap(),
        Plan::Apply { from: 0 }
    );
    assert_eq!(
        plan(&inputs(&[3, 4, 5, 6]), true, 4, BOMB).unwrap(),
        Plan::Apply { from: 2 }
    );
    assert_eq!(
        plan(&inputs(&[3, 4]), true, 4, BOMB).unwrap(),
        Plan::Repeat {
            newest_is_last: true
        }
    );
    assert_eq!(
        plan(&inputs(&[1, 2]), true, 4, BOMB).unwrap(),
        Plan::Repeat {
            newest_is_last: false
        }
    );
}

#[test]
fn a_batch_never_skips_an_input_nor_reuses_a_number() {
    // 5 is missing: applying 6 would lose it.
    let gap = plan(&inputs(&[6, 7]), true, 4, BOMB).unwrap_err();
    assert!(gap.to_string().contains("input 5 is missing"), "{gap}");
    // 4 was logged as another action.
    let idle = [
        Input {
            seq: 4,
            action: Action::Idle,
        },
        Input {
            seq: 5,
            action: Action::Bomb,
        },
    ];
    let reused = plan(&idle, true, 4, BOMB).unwrap_err();
    assert!(reused.to_string().contains("different call"), "{reused}");
}

/// One input sent the old way keeps the old rules: a repeat of the last
/// answers as one, an older one is refused, a gap is allowed.
#[test]
fn a_single_input_keeps_the_old_rules() {
    assert_eq!(
        plan(&inputs(&[4]), false, 4, BOMB).unwrap(),
        Plan::Repeat {
            newest_is_last: true
        }
    );
    assert!(plan(&inputs(&[3]), false, 4, BOMB).is_err());
    assert_eq!(
        plan(&inputs(&[9]), false, 4, BOMB).unwrap(),
        Plan::Apply { from: 0 }
    );
}
