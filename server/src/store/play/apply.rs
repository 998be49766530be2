//! The decisions of one commit, pure: each queued call checked and applied
//! to the game in arrival order ([`apply_calls`]), which inputs of an Act
//! are new ([`plan`]), and what the commit writes ([`Commit`]).

use std::collections::HashMap;

use super::*;
use crate::error::Error;
use crate::token::TokenHash;
use borbaman_game::{Action, Ending, GameState, Outcome, Phase, Tick};

/// `actions.action` of a Leave (Acts use their own codes, 1-6).
pub(super) const KIND_LEAVE: i16 = Action::LEAVE_CODE;

/// What one commit writes besides the game row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Commit {
    /// The sessions it writes for, once each.
    pub(super) writers: Vec<Writer>,
    /// Its action-log rows, in the order they were applied.
    pub(super) rows: Vec<LogRow>,
}

/// A session a commit writes for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Writer {
    pub(super) session_id: i64,
    pub(super) seat: i16,
    /// It left the game.
    pub(super) leaving: bool,
    /// It left while the game was waiting: its seat is free again.
    pub(super) freed: bool,
}

/// One action-log row of a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LogRow {
    pub(super) session_id: i64,
    pub(super) seq: i64,
    pub(super) seat: i16,
    pub(super) action: i16,
    pub(super) outcome: i16,
}

impl Commit {
    pub(super) fn write_for(&mut self, session: &SessionRead, leaving: bool, freed: bool) {
        match self
            .writers
            .iter_mut()
            .find(|w| w.session_id == session.session_id)
        {
            Some(writer) => {
                writer.leaving |= leaving;
                writer.freed |= freed;
            }
            None => self.writers.push(Writer {
                session_id: session.session_id,
                seat: session.seat,
                leaving,
                freed,
            }),
        }
    }
}

/// A call's answer before the commit: the reply without the state.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Answer {
    Acted {
        seq: u64,
        outcome: Option<Outcome>,
        applied_tick: Tick,
        replayed: bool,
        ack: u64,
        applied: u32,
    },
    Left {
        seq: u64,
    },
}

impl Answer {
    pub(super) fn into_reply(self, snapshot: &Snapshot) -> Reply {
        match self {
            Answer::Acted {
                seq,
                outcome,
                applied_tick,
                replayed,
                ack,
                applied,
            } => Reply::Acted(Box::new(Acted {
                seq,
                outcome,
                applied_tick,
                replayed,
                ack,
                applied,
                snapshot: snapshot.clone(),
            })),
            Answer::Left { seq } => Reply::Left(Left { seq }),
        }
    }
}

/// What [`apply_calls`] did to a game.
#[derive(Debug)]
pub(super) struct Applied {
    /// The tick every input was applied at.
    pub(super) tick: Tick,
    pub(super) commit: Commit,
    /// Each call's answer, in the calls' order.
    pub(super) answers: Vec<Result<Answer, Error>>,
}

/// Applies `calls` (oldest first) to `state`, the game they name, read at
/// the clock's `now_tick`, with their sessions as read (`sessions`, by
/// token hash; updated as the calls apply). Pure: the decisions of one
/// commit. Each call in turn: checked on its own (a call that fails gets
/// its error and changes nothing; the others go on); an Act applies the
/// inputs its session has not applied yet (see [`plan`]), in seq order; a
/// Leave unseats or forfeits; a repeat is answered from its session's last
/// reply. Every input at one tick, the current one (a move during the move
/// cooldown queues, as it would from calls arriving within one tick).
pub(super) fn apply_calls(
    calls: &[Call],
    sessions: &mut HashMap<TokenHash, SessionRead>,
    state: &mut GameState,
    now_tick: Tick,
) -> Applied {
    let tick = state.tick().max(now_tick);
    let mut commit = Commit::default();
    let answers = calls
        .iter()
        .map(|call| {
            let session = sessions
                .get_mut(call.token_hash())
                .ok_or_else(unknown_token)?;
            match call {
                Call::Act(call) => act_on(call, session, state, tick, &mut commit),
                Call::Leave(call) => leave_on(call, session, state, tick, &mut commit),
            }
        })
        .collect();
    Applied {
        tick,
        commit,
        answers,
    }
}

/// One Act of [`apply_calls`].
pub(super) fn act_on(
    call: &ActCall,
    session: &mut SessionRead,
    state: &mut GameState,
    tick: Tick,
    commit: &mut Commit,
) -> Result<Answer, Error> {
    check_owner(session, call.game_id, call.seat)?;
    let newest = call.newest()?;
    let from = match plan(
        &call.inputs,
        call.batch,
        session.last_seq,
        session.last_kind,
    )? {
        Plan::Apply { from } => from,
        Plan::Repeat { newest_is_last } => {
            let outcome = newest_is_last
                .then(|| outcome_from_code(session.last_outcome))
                .transpose()?;
            return Ok(Answer::Acted {
                seq: newest.seq,
                outcome,
                applied_tick: if newest_is_last {
                    session.last_tick.max(0) as Tick
                } else {
                    0
                },
                replayed: true,
                ack: session.last_seq.max(0) as u64,
                applied: 0,
            });
        }
    };
    check_in_game(session)?;
    let fresh = &call.inputs[from..];
    let seqs = fresh
        .iter()
        .map(|input| to_db_seq(input.seq))
        .collect::<Result<Vec<_>, _>>()?;
    let mut outcome = Outcome::NoEffect;
    for (input, &seq) in fresh.iter().zip(&seqs) {
        outcome = state.apply(call.seat, input.action, tick);
        commit.rows.push(LogRow {
            session_id: session.session_id,
            seq,
            seat: session.seat,
            action: input.action.code(),
            outcome: outcome.code(),
        });
    }
    session.last_seq = to_db_seq(newest.seq)?;
    session.last_kind = newest.action.code();
    session.last_outcome = outcome.code();
    session.last_tick = tick as i32;
    commit.write_for(session, false, false);
    Ok(Answer::Acted {
        seq: newest.seq,
        outcome: Some(outcome),
        applied_tick: tick,
        replayed: false,
        ack: newest.seq,
        applied: fresh.len() as u32,
    })
}

/// One Leave of [`apply_calls`].
pub(super) fn leave_on(
    call: &LeaveCall,
    session: &mut SessionRead,
    state: &mut GameState,
    tick: Tick,
    commit: &mut Commit,
) -> Result<Answer, Error> {
    check_owner(session, call.game_id, call.seat)?;
    let seq = to_db_seq(call.seq)?;
    if seq == session.last_seq && session.last_kind == KIND_LEAVE {
        return Ok(Answer::Left { seq: call.seq });
    }
    check_fresh(session, seq)?;
    state.advance(tick);
    let waiting = state.phase() == Phase::Waiting;
    match state.phase() {
        Phase::Waiting => state.unseat_player(call.seat),
        Phase::Playing => state.forfeit(call.seat, tick),
        Phase::Finished => {}
    }
    commit.rows.push(LogRow {
        session_id: session.session_id,
        seq,
        seat: session.seat,
        action: KIND_LEAVE,
        outcome: Outcome::APPLIED_CODE,
    });
    session.last_seq = seq;
    session.last_kind = KIND_LEAVE;
    session.last_outcome = Outcome::APPLIED_CODE;
    session.last_tick = tick as i32;
    session.in_game = false;
    commit.write_for(session, true, waiting);
    Ok(Answer::Left { seq: call.seq })
}

/// Why `call` is refused when no caller's session is in the game it names.
pub(super) fn refusal_without_game(
    call: &Call,
    sessions: &HashMap<TokenHash, SessionRead>,
) -> Error {
    let Some(session) = sessions.get(call.token_hash()) else {
        return unknown_token();
    };
    let (game_id, seat) = match call {
        Call::Act(call) => (call.game_id, call.seat),
        Call::Leave(call) => (call.game_id, call.seat),
    };
    match check_owner(session, game_id, seat) {
        Err(err) => err,
        Ok(()) => Error::Internal(format!("game {game_id} was not read")),
    }
}

/// A session whose lobby seat went to another player (see the module doc).
pub(super) fn seat_freed(game_id: i64) -> Error {
    Error::SeatGivenAway(format!(
        "your seat in game {game_id} was given to another player: you sent nothing \
         while the game was waiting for players; join again to play"
    ))
}

pub(super) fn unknown_token() -> Error {
    Error::Unauthenticated("unknown session token; join a game first".into())
}

/// The request's game and seat must be the session's, and the session must
/// still hold its seat.
pub(super) fn check_owner(read: &SessionRead, game_id: u64, seat: u8) -> Result<(), Error> {
    if read.seat < 0 {
        return Err(seat_freed(read.game_id));
    }
    if Some(read.game_id) != i64::try_from(game_id).ok() {
        return Err(Error::PermissionDenied(format!(
            "game {game_id} is not your game (yours is {})",
            read.game_id
        )));
    }
    if i16::from(seat) != read.seat {
        return Err(Error::PermissionDenied(format!(
            "seat {seat} is not your seat (yours is {})",
            read.seat
        )));
    }
    Ok(())
}

/// What an Act does with its inputs, decided by [`plan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Plan {
    /// Apply `inputs[from..]`, in order: the ones the session has not
    /// applied yet.
    Apply { from: usize },
    /// Nothing is new: answer as a repeat. `newest_is_last`: the newest
    /// input is the session's last applied one, so its stored outcome and
    /// tick answer it.
    Repeat { newest_is_last: bool },
}

/// Which of an Act's `inputs` (oldest first, seq strictly increasing) to
/// apply, given the session's last applied sequence number and the kind
/// logged with it. Exactly the inputs above `last_seq`: the action log
/// holds every one up to it (a batch must continue from `last_seq + 1`, so
/// none is ever skipped), and each was applied by the commit that logged
/// it. A single input sent the old way (`batch` false) is refused when it
/// is older than the last, or reuses its number for another action.
pub(super) fn plan(
    inputs: &[Input],
    batch: bool,
    last_seq: i64,
    last_kind: i16,
) -> Result<Plan, Error> {
    let Some(newest) = inputs.last() else {
        return Err(Error::InvalidArgument("an Act needs an input".into()));
    };
    let last = u64::try_from(last_seq).unwrap_or(0);
    if let Some(reused) = inputs
        .iter()
        .find(|i| i.seq == last && last > 0 && i.action.code() != last_kind)
    {
        return Err(Error::FailedPrecondition(format!(
            "sequence number {} was already used by a different call",
            reused.seq
        )));
    }
    let Some(from) = inputs.iter().position(|i| i.seq > last) else {
        if !batch && newest.seq < last {
            return Err(Error::FailedPrecondition(format!(
                "sequence number {} is older than the last applied ({last})",
                newest.seq
            )));
        }
        return Ok(Plan::Repeat {
            newest_is_last: newest.seq == last,
        });
    };
    if batch && inputs[from].seq != last + 1 {
        return Err(Error::FailedPrecondition(format!(
            "input {} is missing: the last applied is {last} and this call starts at {}; \
             send every input the server has not acknowledged",
            last + 1,
            inputs[from].seq
        )));
    }
    Ok(Plan::Apply { from })
}

/// A new call needs a newer sequence number and a session still in its
/// game.
pub(super) fn check_fresh(read: &SessionRead, seq: i64) -> Result<(), Error> {
    if seq == read.last_seq {
        return Err(Error::FailedPrecondition(format!(
            "sequence number {seq} was already used by a different call"
        )));
    }
    if seq < read.last_seq {
        return Err(Error::FailedPrecondition(format!(
            "sequence number {seq} is older than the last applied ({})",
            read.last_seq
        )));
    }
    check_in_game(read)
}

/// A session that left its game applies nothing more.
pub(super) fn check_in_game(read: &SessionRead) -> Result<(), Error> {
    if !read.in_game {
        return Err(Error::FailedPrecondition(format!(
            "you left game {}; join again to play",
            read.game_id
        )));
    }
    Ok(())
}

/// The ending, if this commit is the one that finishes the game.
pub(super) fn finishing(before: Phase, state: &GameState) -> Option<Ending> {
    if before != Phase::Finished && state.phase() == Phase::Finished {
        state.ending()
    } else {
        None
    }
}

/// The winner's seat for the rankings, or -1.
pub(super) fn winner_code(ending: Option<Ending>) -> i16 {
    match ending {
        Some(Ending::Winner(seat)) => i16::from(seat),
        _ => -1,
    }
}
