//! The game calls: join, act, leave, state and rankings.
//!
//! An `Act` or a `Leave` is an optimistic, compare-and-set write in two
//! statements, with no transaction around them: one `SELECT` (no lock)
//! reads the caller's session, its newest action-log row (its last sequence
//! number and reply), its game and the database clock (`LOAD_CALLERS`); the game core
//! computes the new state in memory; one statement writes the game row and
//! the action-log row (a leave also its session and seat, and the commit
//! that finishes a game also the rankings) with data-modifying CTEs, all of
//! it only if the game is still at the version read and the session still
//! seated in it. If another call committed first, the write changes nothing
//! and returns, instead of a new version, the caller's read done again
//! after that commit (`game_call_read`, in the same round trip; the hot
//! path's `WRITE_ACTS` returns nothing, and the caller reads again in a
//! round trip of its own); the call
//! applies on it and writes again, a bounded number of times: at once at
//! first, after a short random pause once it keeps losing (see
//! `Store::lost`). Calls on one game through one server take turns (see
//! `gates`), so they do not collide with each other at all; and the call
//! whose turn it is writes the calls queued behind it too (group commit):
//! one read of all their sessions and the game, each call applied in
//! arrival order (`apply_calls`), one compare-and-set write of them all
//! (`WRITE_CALLS`: one new version, every action-log row, numbered in the
//! order applied; `WRITE_ACTS`, the same without a leave's parts and the
//! rankings, when the commit holds Acts only and does not finish the game),
//! and each call answered with its own reply or error. The commit after
//! that, through the same server, skips the read: it writes on what the
//! server knows of the game after its own commit ([`Known`]), which the
//! compare-and-set confirms or, if anything else wrote the game since,
//! refuses, and the commit reads (one statement per commit while a game's
//! calls keep coming through one server).
//!
//! Why not `SELECT … FOR UPDATE` in a transaction: that holds the game's
//! row lock across the round trips from the read to the commit, and a
//! server stopped inside such a transaction (SIGSTOP, a long pause) blocks
//! every other player of the game until the database ends the transaction
//! for idling. A compare-and-set write takes its locks only while its one
//! statement runs, and the database runs and commits that statement without
//! the server: a stopped server holds nothing. It also saves two of the
//! four round trips (`BEGIN` and `COMMIT`). The price is a write again
//! when two calls on one game cross: calls that would have queued for the
//! lock compute and write again instead.
//!
//! A server that stalls between its read and its write must not commit,
//! long after, an action computed at a tick long gone (in a game no one
//! else wrote meanwhile, so the version still matches): the write matches
//! only within the idle-in-transaction timeout of its read, by the database
//! clock, as a transaction idle that long would have been ended. Otherwise
//! the call reads again and applies at the current tick.
//!
//! A join that seats a player still runs in a transaction: it locks the
//! single `lobby` row first, so simultaneous joiners fill one game instead
//! of each opening their own, then the oldest waiting game, and writes the
//! game and the session. A server stopped inside a join holds those locks
//! until the idle-in-transaction timeout, as before; joins are rare, and a
//! compare-and-set lobby would turn the queue of simultaneous joiners into
//! a storm of retries. A join that puts a player back in its running game
//! (a rejoin) only reads, without a lock. The game clock is the database's:
//! tick = floor((clock - games.created_at) / tick), and the state's tick
//! never goes backwards. Reading the state takes no lock and never waits
//! for writers; when the clock alone finished the game, that is committed
//! once, compare-and-set, so the rankings are recorded once.
//!
//! A join that finds no waiting game with a seat for it opens a new game
//! only if the server's [`Seats`] find room for one among the running
//! games, counted under the lobby's lock (`COUNT_LIVE_GAMES`); otherwise
//! it is refused `server-full` and the transaction rolls back. A join that
//! fills a waiting game, and a rejoin, are never refused for that, so games
//! are seated whole (see [`crate::seating`]).
//!
//! Lobby seats: a player seated in a waiting game who has made no writing
//! call (a join or an `Act`; `GetState` is a read and does not count) for
//! the lobby seat TTL (`--lobby-seat-ttl-ms`, by the database clock) loses
//! the seat to the next joiner. The join frees such seats of the oldest
//! waiting game before it seats the newcomer, in its own transaction (under
//! the lobby and game locks), so a crashed client never starts a game as a
//! player who does not move. The freed session keeps its token but no seat
//! (`sessions.seat` = -1, `in_game` false): its `Act`, `Leave` and
//! `GetState` calls fail with `PERMISSION_DENIED` saying the seat was given
//! away, and a `Join` with the same token seats it again as a new player
//! (`rejoined` false, its sequence numbers continue) in the oldest waiting
//! game. Clients keep their seat by acting (idle) every second while their
//! game waits.
//!
//! Exactly once: a call whose sequence number is the session's last applied
//! one answers with the stored reply and the current state, without
//! applying. Two copies of one call racing on two servers (a client
//! retrying elsewhere) read the same version; one write matches, the other
//! writes nothing, gets the read again and answers as a repeat. The action
//! log's primary key (session, seq) refuses a second row for one number
//! whatever else lets it through: that statement fails as a whole, is
//! retried, and answers as a repeat.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArgumentBuffer, PgConnection, PgRow, PgTypeInfo};
use sqlx::{Postgres, Row, Transaction};

use tokio::time::Instant;

use super::Store;
use super::gates::Turn;
use super::queries::*;
use crate::admission::{Priority, pushback};
use crate::error::Error;
use crate::seating::{LIVE_WITHIN, SHARED_WITHIN, Seats, Verdict};
use crate::token::TokenHash;
use borbaman_game::{
    Action, Arena, Ending, GameState, MAX_ENCODED_BYTES, Outcome, Phase, SEATS, TICK_MS, Tick,
};
use borbaman_proto::pb;

use crate::wire::ToProto;

/// `actions.action` of a Leave (Acts use their own codes, 1-6).
const KIND_LEAVE: i16 = Action::LEAVE_CODE;

/// Names and "connected" flags of a game's seats (not part of the state).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Roster {
    pub names: [String; SEATS],
    pub connected: [bool; SEATS],
}

/// A game as the client sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub game_id: u64,
    pub version: u64,
    pub state: GameState,
    pub roster: Roster,
}

impl Snapshot {
    /// The wire message; consumes the snapshot so the names move into it.
    pub fn into_proto(self) -> pb::GameState {
        self.state.to_proto_with_names(
            self.game_id,
            self.version,
            self.roster.names,
            self.roster.connected,
        )
    }
}

/// A state bound as a `bytea` parameter: packed straight into the query's
/// parameter buffer, with no intermediate `Vec` per call.
struct Packed<'a>(&'a GameState);

impl sqlx::Type<Postgres> for Packed<'_> {
    fn type_info() -> PgTypeInfo {
        <Vec<u8> as sqlx::Type<Postgres>>::type_info()
    }
}

impl sqlx::Encode<'_, Postgres> for Packed<'_> {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        self.0.encode_into(buf);
        Ok(IsNull::No)
    }

    fn size_hint(&self) -> usize {
        MAX_ENCODED_BYTES
    }
}

/// Result of a join.
#[derive(Clone, Debug)]
pub struct Joined {
    pub game_id: u64,
    pub seat: u8,
    pub rejoined: bool,
    pub last_seq: u64,
    pub snapshot: Snapshot,
}

/// One player input: a sequence number and its action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Input {
    pub seq: u64,
    pub action: Action,
}

/// An Act request, validated.
#[derive(Clone, Debug)]
pub struct ActCall {
    pub token_hash: TokenHash,
    pub game_id: u64,
    pub seat: u8,
    /// Oldest first, sequence numbers strictly increasing; never empty.
    pub inputs: Vec<Input>,
    /// The request carried its inputs as a batch: those already applied are
    /// skipped, not refused (see [`plan`]). Otherwise it holds one input,
    /// applied the old way.
    pub batch: bool,
}

impl ActCall {
    /// The newest input (the request's `seq` / `action`).
    fn newest(&self) -> Result<Input, Error> {
        self.inputs
            .last()
            .copied()
            .ok_or_else(|| Error::InvalidArgument("an Act needs an input".into()))
    }
}

/// Result of an Act.
#[derive(Clone, Debug)]
pub struct Acted {
    /// The newest input's sequence number.
    pub seq: u64,
    /// The newest input's outcome; `None` when it was applied by an
    /// earlier call that is no longer the session's last.
    pub outcome: Option<Outcome>,
    pub applied_tick: Tick,
    /// A repeat of an applied request: the original outcome and tick, the
    /// current state.
    pub replayed: bool,
    /// The session's highest applied sequence number after this call.
    pub ack: u64,
    /// Inputs this call applied.
    pub applied: u32,
    pub snapshot: Snapshot,
}

/// A Leave request, validated.
#[derive(Clone, Debug)]
pub struct LeaveCall {
    pub token_hash: TokenHash,
    pub game_id: u64,
    pub seat: u8,
    pub seq: u64,
}

/// Result of a Leave.
#[derive(Clone, Copy, Debug)]
pub struct Left {
    pub seq: u64,
}

/// Who is joining, beyond the session: the hash of its identity secret
/// (or of its token, for a client that sent none), and whether that
/// identity is long-lived and so may claim names. A session-only identity
/// claims none: a name claimed for a token would be lost with it.
#[derive(Clone, Debug)]
pub struct Identity {
    pub hash: TokenHash,
    pub claims_names: bool,
}

impl Identity {
    /// The identity of a client that sent none: its token's, claiming no
    /// names.
    pub fn session_only(token_hash: &TokenHash) -> Identity {
        Identity {
            hash: crate::token::identity_hash(token_hash),
            claims_names: false,
        }
    }
}

/// One line of the rankings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ranking {
    pub name: String,
    pub games: u32,
    pub wins: u32,
    pub draws: u32,
}

/// A compare-and-set attempt: done, or nothing written because another
/// call wrote first, with the caller's read done again if the write
/// returned it.
enum Written<T> {
    Done(T),
    /// Boxed: a read holds a whole game state, and misses are the rare case.
    Missed(Option<Box<Reads>>),
    /// Nothing written: the calls were decided on what this server knew of
    /// the game, and would write nothing; read the game and decide again.
    ReadFirst,
}

/// The caller's session and game, as one statement read them.
struct Read {
    session: SessionRead,
    state: GameState,
    version: i64,
    now_tick: Tick,
    /// The database clock at the read, in microseconds.
    read_us: i64,
    roster: Roster,
}

/// The reads of a commit's callers, by token hash (one per known token).
type Reads = Vec<(TokenHash, Read)>;

/// A caller's session as read, and as the calls of a commit before its own
/// left it (its last sequence number and reply move on as they apply).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SessionRead {
    session_id: i64,
    /// The session's game (not necessarily the one the call names).
    game_id: i64,
    /// -1 once its lobby seat was given away.
    seat: i16,
    in_game: bool,
    last_seq: i64,
    last_kind: i16,
    last_outcome: i16,
    last_tick: i32,
}

/// The game a commit writes, as read.
struct GameRead {
    state: GameState,
    version: i64,
    now_tick: Tick,
    /// The database clock at the read, in microseconds.
    read_us: i64,
    roster: Roster,
}

/// The callers' sessions (by token hash) and their game (`None` if no
/// caller's session is in it), as one commit starts from.
struct CallersRead {
    game: Option<GameRead>,
    sessions: HashMap<TokenHash, SessionRead>,
    /// When the game's roster (its "connected" flags, which the database
    /// derives from its clock) was read from the database.
    roster_read_at: Instant,
    /// Taken from what this server knew of the game ([`Known`]), not read:
    /// only a write's compare-and-set can confirm it, so a commit that
    /// writes nothing (every call refused or a repeat) reads first.
    known: bool,
}

/// What this server knows of a game right after its own commit of it:
/// the state and version it wrote, the sessions of the game's players as
/// it read and wrote them, and the database clock. The next commit of the
/// game through this server (behind the game's gate) writes on it instead
/// of reading the game first: one statement instead of two. If anything
/// else wrote the game since (a call through another server, a join, the
/// clock ending the game in a read), the version no longer matches: the
/// write changes nothing and returns the read again in the same round
/// trip, as any write that lost its compare-and-set does. The tick is the
/// database's clock as last read plus the time since, never ahead of the
/// database (see [`clock_since`]); the write checks it against the
/// database's own clock (`cas_game!`).
#[derive(Clone, Debug)]
struct Known {
    version: i64,
    state: GameState,
    roster: Roster,
    /// The game's seated players' sessions, as after the commit.
    sessions: HashMap<TokenHash, SessionRead>,
    /// `games.created_at`, µs since the epoch: where the game's ticks count
    /// from.
    created_us: i64,
    /// The database clock (µs since the epoch) as the commit's write read
    /// it, and an instant of this process no earlier than that reading.
    clock_us: i64,
    clock_at: Instant,
    /// When the roster was last read from the database.
    roster_read_at: Instant,
}

/// How long what a server knows of a game stands in for reading it, after
/// the game's roster was last read: its "connected" flags of players
/// other than the writers go stale (the database derives them from its
/// clock), so they are read again within a tenth of the connected window.
const KNOWN_FOR: Duration = Duration::from_millis(300);

/// How many games a server keeps [`Known`]; past that it forgets them all
/// (each game's next commit reads it, and is known again).
const KNOWN_GAMES: usize = 1024;

/// The database clock `since` after a reading of `clock_us` (µs since the
/// epoch), and the tick of a game created at `created_us` at that clock,
/// as the database computes it (`now_tick!`). Never ahead of the
/// database's clock when `since` is measured from an instant after the
/// reading.
fn clock_since(created_us: i64, clock_us: i64, since: Duration) -> (i64, Tick) {
    let now_us = clock_us.saturating_add(i64::try_from(since.as_micros()).unwrap_or(i64::MAX));
    let tick_us = i64::from(TICK_MS) * 1000;
    (now_us, tick_from_db((now_us - created_us).max(0) / tick_us))
}

impl Known {
    /// The read a commit of the calls of `tokens` starts from at `now`, from
    /// what is known: `None` if a caller's session is not known, or the
    /// roster is too old (see [`KNOWN_FOR`]); then the commit reads.
    fn read_for(&self, tokens: &[&[u8]], now: Instant) -> Option<CallersRead> {
        if now.saturating_duration_since(self.roster_read_at) >= KNOWN_FOR {
            return None;
        }
        let mut sessions = HashMap::with_capacity(tokens.len());
        for &token in tokens {
            let token = TokenHash::try_from(token).ok()?;
            sessions.insert(token, *self.sessions.get(&token)?);
        }
        let (read_us, now_tick) = clock_since(
            self.created_us,
            self.clock_us,
            now.saturating_duration_since(self.clock_at),
        );
        Some(CallersRead {
            game: Some(GameRead {
                state: self.state.clone(),
                version: self.version,
                now_tick,
                read_us,
                roster: self.roster.clone(),
            }),
            sessions,
            roster_read_at: self.roster_read_at,
            known: true,
        })
    }

    /// What is known of game `game_id` after a commit: `known` holds the
    /// commit's callers' sessions; the game's other players' sessions are
    /// kept from `before` only if the commit read the very version they
    /// were known at (`read_version`: nobody wrote the game in between, so
    /// none of them changed). Only sessions seated in the game are kept.
    fn after(mut known: Known, game_id: u64, read_version: i64, before: Option<Known>) -> Known {
        if let Some(before) = before
            && before.version == read_version
        {
            for (token, session) in before.sessions {
                known.sessions.entry(token).or_insert(session);
            }
        }
        known
            .sessions
            .retain(|_, s| s.in_game && s.seat >= 0 && s.game_id as u64 == game_id);
        known
    }
}

/// The games this server knows after its own commits (see [`Known`]),
/// taken by the commit holding a game's gate and given back after its
/// write: a commit that fails or is dropped leaves nothing behind.
#[derive(Debug, Default)]
pub(crate) struct KnownGames(std::sync::Mutex<HashMap<u64, Known>>);

impl KnownGames {
    #[cfg(test)]
    fn contains_key(&self, game_id: &u64) -> bool {
        self.lock().contains_key(game_id)
    }

    fn take(&self, game_id: u64) -> Option<Known> {
        self.lock().remove(&game_id)
    }

    fn put(&self, game_id: u64, known: Known) {
        let mut games = self.lock();
        if games.len() >= KNOWN_GAMES {
            games.clear();
        }
        games.insert(game_id, known);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Known>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A commit written: each call's answer, and what is then known of the
/// game (see [`Known`]), with the version the commit had read.
struct Committed {
    answers: Vec<Result<Reply, Error>>,
    known: Option<(Known, i64)>,
}

/// The most calls one commit writes. The four players of a game, each
/// with a copy or two in flight (a hedge, a retry), fit; a game's queue
/// longer than that is a backlog, and its next calls go in the next commit.
const MAX_BATCH: usize = 16;

/// The longest the call holding a game's gate waits for the game's other
/// players due back (see [`gates`](super::gates)): about what a player's
/// next call takes to come back in a closed loop on one machine (the
/// network both ways and the client's turn, 1–3 ms on a busy machine: a
/// closed loop's commits held 2.2 calls with 1 ms, 2.6–3.1 with 2 ms), and
/// a twenty-fifth of a 20 Hz player's interval.
pub(crate) const LINGER: Duration = Duration::from_millis(2);

/// An Act or a Leave, as queued on its game's gate.
#[derive(Clone, Debug)]
pub(crate) enum Call {
    Act(ActCall),
    Leave(LeaveCall),
}

impl Call {
    fn game_id(&self) -> u64 {
        match self {
            Call::Act(call) => call.game_id,
            Call::Leave(call) => call.game_id,
        }
    }

    fn token_hash(&self) -> &TokenHash {
        match self {
            Call::Act(call) => &call.token_hash,
            Call::Leave(call) => &call.token_hash,
        }
    }

    /// Who sent it, for the gate: the first bytes of its token hash (a
    /// player's copies of a call share it).
    fn caller(&self) -> u64 {
        let token = self.token_hash();
        let mut first = [0u8; 8];
        let n = token.len().min(8);
        first[..n].copy_from_slice(&token[..n]);
        u64::from_le_bytes(first)
    }
}

/// What a [`Call`] is answered with.
#[derive(Clone, Debug)]
pub(crate) enum Reply {
    /// Boxed: it holds a whole game state.
    Acted(Box<Acted>),
    Left(Left),
}

/// The gates of the games written through one server, queuing [`Call`]s.
pub(crate) type CallGates = super::gates::Gates<Call, Result<Reply, Error>>;

/// What one commit writes besides the game row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Commit {
    /// The sessions it writes for, once each.
    writers: Vec<Writer>,
    /// Its action-log rows, in the order they were applied.
    rows: Vec<LogRow>,
}

/// A session a commit writes for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Writer {
    session_id: i64,
    seat: i16,
    /// It left the game.
    leaving: bool,
    /// It left while the game was waiting: its seat is free again.
    freed: bool,
}

/// One action-log row of a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LogRow {
    session_id: i64,
    seq: i64,
    seat: i16,
    action: i16,
    outcome: i16,
}

impl Commit {
    fn write_for(&mut self, session: &SessionRead, leaving: bool, freed: bool) {
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
enum Answer {
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
    fn into_reply(self, snapshot: &Snapshot) -> Reply {
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
struct Applied {
    /// The tick every input was applied at.
    tick: Tick,
    commit: Commit,
    /// Each call's answer, in the calls' order.
    answers: Vec<Result<Answer, Error>>,
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
fn apply_calls(
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
fn act_on(
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
fn leave_on(
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

/// Splits the callers' reads into the game `game_id` (`None` if no
/// caller's session is in it) and each caller's session. `None` if the
/// reads saw the game at different versions (a read again after a lost
/// write reads each caller apart): read them anew, in one snapshot.
fn split_reads(reads: Reads, game_id: u64) -> Option<CallersRead> {
    let roster_read_at = Instant::now();
    let mut game: Option<GameRead> = None;
    let mut sessions = HashMap::with_capacity(reads.len());
    for (token, read) in reads {
        sessions.insert(token, read.session);
        if read.session.game_id as u64 != game_id {
            continue;
        }
        match &game {
            Some(seen) if seen.version != read.version => return None,
            Some(_) => {}
            None => {
                game = Some(GameRead {
                    state: read.state,
                    version: read.version,
                    now_tick: read.now_tick,
                    read_us: read.read_us,
                    roster: read.roster,
                })
            }
        }
    }
    Some(CallersRead {
        game,
        sessions,
        roster_read_at,
        known: false,
    })
}

/// Why `call` is refused when no caller's session is in the game it names.
fn refusal_without_game(call: &Call, sessions: &HashMap<TokenHash, SessionRead>) -> Error {
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

impl Store {
    /// Seats the token's player: back in its running game (rejoin), else in
    /// the oldest waiting game (on `arena`, when the player asks for one)
    /// where its identity has no seat yet, else in a new one (on `arena`,
    /// else classic). A player taking a seat must own its name, or use one
    /// nobody owns (see [`Identity`]); a rejoin keeps the name it has.
    pub async fn join(
        &self,
        token_hash: &TokenHash,
        identity: &Identity,
        name: &str,
        arena: Option<Arena>,
    ) -> Result<Joined, Error> {
        self.join_if_room(token_hash, identity, name, arena, &Seats::open())
            .await
    }

    /// [`Store::join`], opening a new game only if `seats` says the running
    /// games leave room for it (see [`crate::seating`]); refused with
    /// [`Error::ServerFull`] otherwise. A rejoin, and a join that finds a
    /// waiting game with a seat for it, always go through.
    pub async fn join_if_room(
        &self,
        token_hash: &TokenHash,
        identity: &Identity,
        name: &str,
        arena: Option<Arena>,
        seats: &Seats,
    ) -> Result<Joined, Error> {
        self.retrying(|| self.join_once(token_hash, identity, name, arena, seats))
            .await
    }

    /// Applies one action at the current tick, exactly once per sequence
    /// number.
    pub async fn act(&self, call: &ActCall) -> Result<Acted, Error> {
        match self.write(Call::Act(call.clone())).await? {
            Reply::Acted(acted) => Ok(*acted),
            Reply::Left(_) => Err(Error::Internal("an Act was answered as a Leave".into())),
        }
    }

    /// Leaves the game (a forfeit while it runs), exactly once per sequence
    /// number.
    pub async fn leave(&self, call: &LeaveCall) -> Result<Left, Error> {
        match self.write(Call::Leave(call.clone())).await? {
            Reply::Left(left) => Ok(left),
            Reply::Acted(_) => Err(Error::Internal("a Leave was answered as an Act".into())),
        }
    }

    /// An Act or a Leave: queued on its game's gate, and written in one
    /// commit with the calls queued there with it, by whichever of them
    /// gets the gate (see [`gates`](super::gates)); answered with its own
    /// reply or error.
    async fn write(&self, call: Call) -> Result<Reply, Error> {
        let game_id = call.game_id();
        let deadline = tokio::time::Instant::now() + self.db_timeout;
        loop {
            let turn = self
                .gates
                .turn(game_id, call.caller(), call.clone(), MAX_BATCH);
            let Ok(turn) = tokio::time::timeout_at(deadline, turn).await else {
                return Err(self.timed_out());
            };
            match turn {
                Turn::Answered(answer) => return answer,
                // The call that took it was dropped: its outcome is
                // unknown, and the sequence numbers make writing it again
                // safe.
                Turn::Dropped => continue,
                Turn::Lead(batch) => {
                    let calls: Vec<Call> = batch.jobs().cloned().collect();
                    // Boxed: the commit's future (its statements' futures
                    // and arguments) is the largest part of a call's, and
                    // a call's future is moved several times before it
                    // runs (into the task that carries it out, among
                    // others); boxed, only the call that writes pays for
                    // it, once.
                    let commit = || Box::pin(self.commit_calls(game_id, &calls));
                    let answers = match self.retrying(commit).await {
                        Ok(answers) => answers,
                        Err(err) => vec![Err(err); calls.len()],
                    };
                    return batch.answer(answers).unwrap_or_else(|| {
                        Err(Error::Internal("a batch lost its caller's answer".into()))
                    });
                }
            }
        }
    }

    /// One attempt at `calls` (on game `game_id`, oldest first): one read of
    /// the callers' sessions and their game, then one compare-and-set write
    /// of all of them, read and applied again for as long as another
    /// server's call writes first (see [`Store::lost`]).
    async fn commit_calls(
        &self,
        game_id: u64,
        calls: &[Call],
    ) -> Result<Vec<Result<Reply, Error>>, Error> {
        let mut tokens: Vec<&[u8]> = Vec::with_capacity(calls.len());
        for call in calls {
            let token = &call.token_hash()[..];
            if !tokens.contains(&token) {
                tokens.push(token);
            }
        }
        // Taken: a commit that fails or is dropped leaves nothing known.
        let before = self.known.take(game_id);
        // A leased connection: if the deadline cuts this attempt (a commit
        // waiting for a synchronous standby that is gone), the connection
        // is dropped, never pooled, pinged or cancelled.
        let mut lease = self.lease().await?;
        let result = async {
            let conn = lease.conn();
            let mut next = before
                .as_ref()
                .and_then(|known| known.read_for(&tokens, Instant::now()));
            let mut retries = 0;
            loop {
                let read = match next.take() {
                    Some(read) => read,
                    None => match split_reads(load_callers(conn, &tokens).await?, game_id) {
                        Some(read) => read,
                        // One statement reads one snapshot.
                        None => return Err(Error::Internal("one read saw two versions".into())),
                    },
                };
                match self
                    .write_calls(conn, game_id, calls, &tokens, read)
                    .await?
                {
                    Written::Done(committed) => {
                        if let Some((known, read_version)) = committed.known {
                            let known = Known::after(known, game_id, read_version, before);
                            self.known.put(game_id, known);
                        }
                        return Ok(committed.answers);
                    }
                    Written::ReadFirst => next = None,
                    Written::Missed(again) => {
                        retries += 1;
                        let slept = self.lost(retries).await?;
                        // Two snapshots (a read again reads each caller
                        // apart): read anew.
                        next = match again {
                            Some(read) if !slept => split_reads(*read, game_id),
                            _ => None,
                        };
                    }
                }
            }
        }
        .await;
        lease.settle_commit(self, result)
    }

    /// The caller's game advanced to the current tick. A plain read; only
    /// when the clock alone finished the game is that committed (once,
    /// through the write path) so the rankings are recorded.
    pub async fn state(&self, token_hash: &TokenHash, game_id: u64) -> Result<Snapshot, Error> {
        self.retrying(|| self.cas(|| self.state_once(token_hash, game_id)))
            .await
    }

    /// The best players, at most `limit`.
    pub async fn rankings(&self, limit: u32) -> Result<Vec<Ranking>, Error> {
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let rows = sqlx::query_as::<_, (String, i32, i32, i32)>(RANKINGS)
                .bind(i64::from(limit))
                .fetch_all(lease.conn())
                .await;
            let rows = lease.settle(rows.map_err(Error::from))?;
            Ok(rows
                .into_iter()
                .map(|(name, games, wins, draws)| Ranking {
                    name,
                    games: games.max(0) as u32,
                    wins: wins.max(0) as u32,
                    draws: draws.max(0) as u32,
                })
                .collect())
        })
        .await
    }

    async fn join_once(
        &self,
        token_hash: &TokenHash,
        identity: &Identity,
        name: &str,
        arena: Option<Arena>,
        seats: &Seats,
    ) -> Result<Joined, Error> {
        if let Some(joined) = self.rejoin(token_hash).await? {
            return Ok(joined);
        }
        if seats.with(|s| s.full_without_looking(Instant::now())) {
            return Err(no_room());
        }
        self.check_name(identity, name).await?;
        let mut conn = TxConnection {
            conn: self.pool.acquire().await?,
            ended: false,
        };
        let joined = self
            .seat(&mut conn.conn, token_hash, identity, name, arena, seats)
            .await;
        conn.ended = true;
        joined
    }

    /// Seats the token's player, in one transaction on `conn`: under the
    /// session's lock, which also settles a join with the same token that
    /// seated it since [`Store::rejoin`] read it, and the lobby's. A new
    /// game is opened only if `seats` finds room for it among the running
    /// games, counted under the lobby's lock.
    async fn seat(
        &self,
        conn: &mut PgConnection,
        token_hash: &TokenHash,
        identity: &Identity,
        name: &str,
        arena: Option<Arena>,
        seats: &Seats,
    ) -> Result<Joined, Error> {
        let identity_hash = &identity.hash;
        let mut tx = sqlx::Connection::begin(conn).await?;
        let session: Option<(i64, i64, i16, bool, i16, i64)> = sqlx::query_as(LOAD_SESSION_LOCKED)
            .bind(&token_hash[..])
            .fetch_optional(&mut *tx)
            .await?;
        let last_seq = session.map_or(0, |s| s.5.max(0) as u64);
        let running = session.filter(|s| s.3 && s.4 != Phase::Finished.code());
        if let Some((_, game_id, seat, ..)) = running {
            let row = sqlx::query(READ_GAME)
                .bind(game_id)
                .bind(i64::from(TICK_MS))
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            let (_, snapshot) = game_row(&row, 0)?;
            return Ok(Joined {
                game_id: snapshot.game_id,
                seat: seat_index(seat)? as u8,
                rejoined: true,
                last_seq,
                snapshot,
            });
        }
        sqlx::query(LOCK_LOBBY).execute(&mut *tx).await?;
        let waiting = sqlx::query(LOAD_WAITING_LOCKED)
            .bind(i64::from(TICK_MS))
            .bind(self.lobby_seat_ttl_ms)
            .bind(arena.map(|a| i16::from(a.code())))
            .bind(&identity_hash[..])
            .fetch_optional(&mut *tx)
            .await?;
        let mut seated = None;
        // The seats freed and the tick the seat was taken at, for the log.
        let (mut freed, mut tick) = (Vec::new(), 0);
        if let Some(row) = waiting {
            let (now_tick, mut snapshot) = game_row(&row, 0)?;
            let silent: Vec<bool> = row.try_get(6)?;
            freed = free_silent_seats(&mut tx, &mut snapshot, &silent).await?;
            tick = snapshot.state.tick().max(now_tick);
            if let Some(seat) = snapshot.state.seat_player(tick) {
                seated = Some((seat, snapshot));
            }
        }
        let new_game = seated.is_none();
        if new_game && seats.with(|s| s.may_bind()) {
            let (live, shared): (i64, Option<i32>) = sqlx::query_as(COUNT_LIVE_GAMES)
                .bind(LIVE_WITHIN.as_millis() as i64)
                .bind(SHARED_WITHIN.as_millis() as i64)
                .fetch_one(&mut *tx)
                .await?;
            let live = u32::try_from(live).unwrap_or(u32::MAX);
            let shared = shared.map(|l| u32::try_from(l).unwrap_or(0));
            if seats.with(|s| s.open_game(Instant::now(), live, shared)) == Verdict::Full {
                // Dropped, the transaction rolls back: the seats freed
                // above stay their players'.
                return Err(no_room());
            }
        }
        let arena = arena.unwrap_or_default();
        let (seat, mut snapshot) = match seated {
            Some(seated) => seated,
            None => {
                (freed, tick) = (Vec::new(), 0);
                let mut state = GameState::on_arena(arena, rand::random(), tick, self.round_ticks);
                let seat = state
                    .seat_player(0)
                    .ok_or_else(|| Error::Internal("a new game has no free seat".into()))?;
                let snapshot = Snapshot {
                    game_id: 0,
                    version: 0,
                    state,
                    roster: Roster::default(),
                };
                (seat, snapshot)
            }
        };
        let sql = if new_game {
            WRITE_JOIN_NEW
        } else {
            WRITE_JOIN_WAITING
        };
        let mut query = sqlx::query(sql)
            .bind(&token_hash[..])
            .bind(name)
            .bind(i16::from(seat))
            .bind(session.is_some())
            .bind(Packed(&snapshot.state))
            .bind(snapshot.state.phase().code());
        query = if new_game {
            query.bind(i16::from(arena.code()))
        } else {
            query.bind(to_db_id(snapshot.game_id)?)
        };
        query = query.bind(&identity_hash[..]).bind(identity.claims_names);
        let Some(row) = query.fetch_optional(&mut *tx).await? else {
            return Err(Error::Transient(
                "another join with the same token won the race".into(),
            ));
        };
        let (game_id, version): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        sqlx::query(LOG_SEATS)
            .bind(game_id)
            .bind(version)
            .bind(tick as i32)
            .bind(&freed)
            .bind(i16::from(seat))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        snapshot.game_id = game_id as u64;
        snapshot.version = version as u64;
        snapshot.roster.names[usize::from(seat)] = name.to_string();
        snapshot.roster.connected[usize::from(seat)] = true;
        Ok(Joined {
            game_id: game_id as u64,
            seat,
            rejoined: false,
            last_seq,
            snapshot,
        })
    }

    /// A token whose session sits in a game that has not finished goes back
    /// to it: one read, no lock. `None`: there is no such session, and the
    /// join seats the player.
    async fn rejoin(&self, token_hash: &TokenHash) -> Result<Option<Joined>, Error> {
        let mut conn = self.pool.acquire().await?;
        let row = sqlx::query(READ_JOINER)
            .bind(&token_hash[..])
            .bind(i64::from(TICK_MS))
            .fetch_optional(&mut *conn)
            .await?;
        drop(conn);
        let Some(row) = row else {
            return Ok(None);
        };
        let (seat, in_game, last_seq): (i16, bool, i64) =
            (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        let (_, snapshot) = game_row(&row, 3)?;
        if !in_game || snapshot.state.phase() == Phase::Finished {
            return Ok(None);
        }
        Ok(Some(Joined {
            game_id: snapshot.game_id,
            seat: seat_index(seat)? as u8,
            rejoined: true,
            last_seq: last_seq.max(0) as u64,
            snapshot,
        }))
    }

    /// Applies `calls` on `read` (see [`apply_calls`]) and writes what they
    /// applied in one compare-and-set write; when none applied anything,
    /// only a game the clock ended is written. `Missed`: another call
    /// changed the game or a session since `read`, and nothing was written.
    async fn write_calls(
        &self,
        conn: &mut PgConnection,
        game_id: u64,
        calls: &[Call],
        tokens: &[&[u8]],
        read: CallersRead,
    ) -> Result<Written<Committed>, Error> {
        let CallersRead {
            mut game,
            mut sessions,
            roster_read_at,
            known: unconfirmed,
        } = read;
        let Some(game) = game.as_mut() else {
            // Nobody's session is in the game: every call is refused.
            let answers = calls
                .iter()
                .map(|call| Err(refusal_without_game(call, &sessions)))
                .collect();
            return Ok(Written::Done(Committed {
                answers,
                known: None,
            }));
        };
        let before = game.state.phase();
        let applied = apply_calls(calls, &mut sessions, &mut game.state, game.now_tick);
        let mut snapshot = Snapshot {
            game_id,
            version: game.version as u64,
            state: game.state.clone(),
            roster: game.roster.clone(),
        };
        let mut known = None;
        if applied.commit.rows.is_empty() {
            if unconfirmed {
                // Refusals and repeats decided on what this server knew,
                // which nothing confirms without a write: the game may
                // have moved on through another server.
                return Ok(Written::ReadFirst);
            }
            if let Some(before) = advance_to(&mut snapshot, game.now_tick)
                && !commit_clock(conn, &mut snapshot, before).await?
            {
                return Ok(Written::Missed(None));
            }
        } else {
            let commit = &applied.commit;
            let ending = finishing(before, &snapshot.state);
            let rows = sqlx::query(write_statement(commit, ending))
                .bind(Packed(&snapshot.state))
                .bind(snapshot.state.phase().code())
                .bind(to_db_id(game_id)?)
                .bind(game.version)
                .bind(game.read_us)
                .bind(self.max_write_lag_us)
                .bind(applied.tick as i32)
                .bind(winner_code(ending))
                .bind(ending == Some(Ending::Draw))
                .bind(ending.is_some())
                .bind(
                    commit
                        .writers
                        .iter()
                        .map(|w| w.session_id)
                        .collect::<Vec<_>>(),
                )
                .bind(commit.writers.iter().map(|w| w.seat).collect::<Vec<_>>())
                .bind(commit.writers.iter().map(|w| w.leaving).collect::<Vec<_>>())
                .bind(commit.writers.iter().map(|w| w.freed).collect::<Vec<_>>())
                .bind(commit.rows.iter().map(|r| r.session_id).collect::<Vec<_>>())
                .bind(commit.rows.iter().map(|r| r.seq).collect::<Vec<_>>())
                .bind(commit.rows.iter().map(|r| r.seat).collect::<Vec<_>>())
                .bind(commit.rows.iter().map(|r| r.action).collect::<Vec<_>>())
                .bind(commit.rows.iter().map(|r| r.outcome).collect::<Vec<_>>())
                .bind(tokens)
                .bind(i64::from(TICK_MS))
                .bind(i64::from(game.now_tick))
                .fetch_all(&mut *conn)
                .await?;
            let clock_at = Instant::now();
            let done = match written(rows)? {
                Written::Done(done) => done,
                Written::Missed(again) => return Ok(Written::Missed(again)),
                Written::ReadFirst => return Ok(Written::ReadFirst),
            };
            snapshot.version = done.version as u64;
            for writer in &commit.writers {
                let seat = seat_index(writer.seat)?;
                snapshot.roster.connected[seat] = !writer.leaving;
                if writer.freed {
                    snapshot.roster.names[seat].clear();
                }
            }
            if snapshot.state.phase() != Phase::Finished {
                known = Some((
                    Known {
                        version: done.version,
                        state: snapshot.state.clone(),
                        roster: snapshot.roster.clone(),
                        sessions,
                        created_us: done.created_us,
                        clock_us: done.clock_us,
                        clock_at,
                        roster_read_at,
                    },
                    game.version,
                ));
            }
        }
        let answers = applied
            .answers
            .into_iter()
            .map(|answer| answer.map(|a| a.into_reply(&snapshot)))
            .collect();
        Ok(Written::Done(Committed { answers, known }))
    }

    /// One read, and a compare-and-set write only when the clock alone
    /// finished the game. `None`: another call wrote the game first.
    async fn state_once(
        &self,
        token_hash: &TokenHash,
        game_id: u64,
    ) -> Result<Option<Snapshot>, Error> {
        // On an acquired connection rather than `&self.pool`: same query,
        // but the pool's executor boxes a much larger future per call.
        let mut conn = self.pool.acquire().await?;
        let row = sqlx::query(READ_STATE)
            .bind(&token_hash[..])
            .bind(i64::from(TICK_MS))
            .fetch_optional(&mut *conn)
            .await?
            .ok_or_else(unknown_token)?;
        let (now_tick, mut snapshot) = game_row(&row, 0)?;
        if row.try_get::<i16, _>(6)? < 0 {
            return Err(seat_freed(snapshot.game_id as i64));
        }
        if snapshot.game_id != game_id {
            return Err(Error::PermissionDenied(format!(
                "game {game_id} is not your game (yours is {})",
                snapshot.game_id
            )));
        }
        if let Some(before) = advance_to(&mut snapshot, now_tick) {
            let mut conn = self.pool.acquire().await?;
            if !commit_clock(&mut conn, &mut snapshot, before).await? {
                return Ok(None);
            }
        }
        Ok(Some(snapshot))
    }
}

/// A pooled connection that holds a transaction: closed, instead of
/// returned to the pool, if the call is dropped (its client went away, or
/// the store's deadline passed) before the transaction ended. sqlx's
/// `begin` dropped while its `BEGIN` is in flight leaves the connection in
/// a transaction sqlx does not know of; back in the pool, the autocommitted
/// statements of later calls on it (an Act's compare-and-set write) would
/// run inside that transaction, answered but never committed. Closing the
/// connection ends the transaction.
struct TxConnection {
    conn: PoolConnection<Postgres>,
    /// The transaction was committed or rolled back (or never began).
    ended: bool,
}

impl Drop for TxConnection {
    fn drop(&mut self) {
        if !self.ended {
            self.conn.close_on_drop();
        }
    }
}

/// Frees the seats of the locked waiting game `snapshot` whose players were
/// silent for the lobby seat TTL (`silent`, per seat), in the database and
/// in `snapshot`, so the joiner can take one. Returns the seats freed.
async fn free_silent_seats(
    tx: &mut Transaction<'_, Postgres>,
    snapshot: &mut Snapshot,
    silent: &[bool],
) -> Result<Vec<i16>, Error> {
    let candidates: Vec<i16> = (0..SEATS as u8)
        .filter(|&seat| silent.get(usize::from(seat)) == Some(&true))
        .filter(|&seat| snapshot.state.player(seat).is_some_and(|p| p.seated))
        .map(i16::from)
        .collect();
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let freed: Vec<i16> = sqlx::query_scalar(FREE_SILENT_SEATS)
        .bind(to_db_id(snapshot.game_id)?)
        .bind(&candidates)
        .fetch_all(&mut **tx)
        .await?;
    for &seat in &freed {
        let index = seat_index(seat)?;
        snapshot.state.unseat_player(index as u8);
        snapshot.roster.names[index].clear();
        snapshot.roster.connected[index] = false;
    }
    if !freed.is_empty() {
        tracing::info!(game_id = snapshot.game_id, seats = ?freed, "freed silent lobby seats");
    }
    Ok(freed)
}

/// Reads the callers' sessions (`tokens`) and their games in one
/// statement, without a lock; an unknown token has no read.
async fn load_callers(conn: &mut PgConnection, tokens: &[&[u8]]) -> Result<Reads, Error> {
    let rows = sqlx::query(LOAD_CALLERS)
        .bind(tokens)
        .bind(i64::from(TICK_MS))
        .fetch_all(&mut *conn)
        .await?;
    rows.iter().map(|row| caller_row(row, 0)).collect()
}

/// Parses [`LOAD_CALLERS`]'s columns, starting at column `at`.
fn caller_row(row: &PgRow, at: usize) -> Result<(TokenHash, Read), Error> {
    let token: &[u8] = row.try_get(at)?;
    let token = TokenHash::try_from(token)
        .map_err(|_| Error::Corrupt(format!("a stored token hash has {} bytes", token.len())))?;
    Ok((token, read_row(row, at + 1)?))
}

/// Parses `game_call_read`'s columns, starting at column `at`.
fn read_row(row: &PgRow, at: usize) -> Result<Read, Error> {
    let (now_tick, snapshot) = game_row(row, at + 7)?;
    Ok(Read {
        session: SessionRead {
            session_id: row.try_get(at)?,
            game_id: snapshot.game_id as i64,
            seat: row.try_get(at + 1)?,
            in_game: row.try_get(at + 2)?,
            last_seq: row.try_get(at + 3)?,
            last_kind: row.try_get(at + 4)?,
            last_outcome: row.try_get(at + 5)?,
            last_tick: row.try_get(at + 6)?,
        },
        state: snapshot.state,
        version: snapshot.version as i64,
        now_tick,
        read_us: row.try_get(at + 13)?,
        roster: snapshot.roster,
    })
}

/// A compare-and-set write of Acts and Leaves that matched.
struct WriteDone {
    /// The game's new version.
    version: i64,
    /// `games.created_at`, µs since the epoch.
    created_us: i64,
    /// The database clock at the write, µs since the epoch.
    clock_us: i64,
}

/// What a compare-and-set write of Acts and Leaves returned (see
/// `read_again!` in the queries): the new version (with the game's
/// creation and the database clock), or nothing written and the callers'
/// read done again after the commit it lost to.
fn written(rows: Vec<PgRow>) -> Result<Written<WriteDone>, Error> {
    let Some(first) = rows.first() else {
        return Ok(Written::Missed(None));
    };
    if let Some(version) = first.try_get::<Option<i64>, _>(0)? {
        return Ok(Written::Done(WriteDone {
            version,
            created_us: first.try_get(2)?,
            clock_us: first.try_get(15)?,
        }));
    }
    let again = rows
        .iter()
        .map(|row| caller_row(row, 1))
        .collect::<Result<Reads, Error>>()?;
    Ok(Written::Missed(Some(Box::new(again))))
}

/// Advances `snapshot` (as read) to the clock's `now_tick`. Returns the
/// phase it had if the clock alone changed it (the game just ended), which
/// is for [`commit_clock`] to record.
pub(super) fn advance_to(snapshot: &mut Snapshot, now_tick: Tick) -> Option<Phase> {
    let state = &mut snapshot.state;
    let before = state.phase();
    state.advance(state.tick().max(now_tick));
    (state.phase() != before).then_some(before)
}

/// Commits a game the clock alone moved on from phase `before` (see
/// [`advance_to`]), compare-and-set on the version read, so the rankings
/// are recorded once. `false`: another call wrote the game since the read;
/// nothing was written.
async fn commit_clock(
    conn: &mut PgConnection,
    snapshot: &mut Snapshot,
    before: Phase,
) -> Result<bool, Error> {
    let state = &snapshot.state;
    let ending = finishing(before, state);
    let row = sqlx::query(WRITE_ADVANCE)
        .bind(Packed(state))
        .bind(state.phase().code())
        .bind(to_db_id(snapshot.game_id)?)
        .bind(winner_code(ending))
        .bind(ending == Some(Ending::Draw))
        .bind(ending.is_some())
        .bind(to_db_id(snapshot.version)?)
        .fetch_optional(conn)
        .await?;
    let Some(row) = row else {
        return Ok(false);
    };
    snapshot.version = row.try_get::<i64, _>(0)? as u64;
    Ok(true)
}

/// A join refused because the running games are at the limit (see
/// [`crate::seating`]), with twice a refused join's pushback.
fn no_room() -> Error {
    // Twice a refused join's: room comes back only when a whole game ends.
    let pushback = pushback(Priority::Join, rand::random::<f64>()) * 2;
    Error::ServerFull {
        message: format!(
            "server full: the running games are all this cluster can serve now, and none \
             is waiting for players; try again in {} ms",
            pushback.as_millis()
        ),
        pushback,
    }
}

/// A session whose lobby seat went to another player (see the module doc).
fn seat_freed(game_id: i64) -> Error {
    Error::SeatGivenAway(format!(
        "your seat in game {game_id} was given to another player: you sent nothing \
         while the game was waiting for players; join again to play"
    ))
}

fn unknown_token() -> Error {
    Error::Unauthenticated("unknown session token; join a game first".into())
}

/// The request's game and seat must be the session's, and the session must
/// still hold its seat.
fn check_owner(read: &SessionRead, game_id: u64, seat: u8) -> Result<(), Error> {
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
enum Plan {
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
fn plan(inputs: &[Input], batch: bool, last_seq: i64, last_kind: i16) -> Result<Plan, Error> {
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
fn check_fresh(read: &SessionRead, seq: i64) -> Result<(), Error> {
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
fn check_in_game(read: &SessionRead) -> Result<(), Error> {
    if !read.in_game {
        return Err(Error::FailedPrecondition(format!(
            "you left game {}; join again to play",
            read.game_id
        )));
    }
    Ok(())
}

/// The statement that writes `commit` (`ending`: it finishes the game):
/// [`WRITE_ACTS`] for Acts only that do not finish the game, the hot path;
/// [`WRITE_CALLS`], with a leave's parts and the rankings, for any other.
/// Both take the same parameters, and on a commit of the first kind they
/// write the same rows.
fn write_statement(commit: &Commit, ending: Option<Ending>) -> &'static str {
    let leaves = commit.writers.iter().any(|w| w.leaving || w.freed);
    if leaves || ending.is_some() {
        WRITE_CALLS
    } else {
        WRITE_ACTS
    }
}

/// The ending, if this commit is the one that finishes the game.
fn finishing(before: Phase, state: &GameState) -> Option<Ending> {
    if before != Phase::Finished && state.phase() == Phase::Finished {
        state.ending()
    } else {
        None
    }
}

/// Parses the columns of `game_cols!` (`id, state, version, now_tick,
/// names, connected`) starting at column `at`; returns the clock's tick and
/// the snapshot.
pub(super) fn game_row(row: &PgRow, at: usize) -> Result<(Tick, Snapshot), Error> {
    let game_id: i64 = row.try_get(at)?;
    let state = GameState::decode(row.try_get::<&[u8], _>(at + 1)?)?;
    let version: i64 = row.try_get(at + 2)?;
    let now_tick = tick_from_db(row.try_get(at + 3)?);
    let names: Vec<String> = row.try_get(at + 4)?;
    let connected: Vec<bool> = row.try_get(at + 5)?;
    let mut roster = Roster::default();
    for (i, name) in names.into_iter().take(SEATS).enumerate() {
        roster.names[i] = name;
    }
    for (i, connected) in connected.into_iter().take(SEATS).enumerate() {
        roster.connected[i] = connected;
    }
    Ok((
        now_tick,
        Snapshot {
            game_id: game_id as u64,
            version: version as u64,
            state,
            roster,
        },
    ))
}

fn tick_from_db(ticks: i64) -> Tick {
    ticks.clamp(0, i64::from(Tick::MAX)) as Tick
}

/// A seat number read from the database as an index into the game's
/// seats; a number out of range is corrupt data, never seat 0 or 3.
fn seat_index(seat: i16) -> Result<usize, Error> {
    usize::try_from(seat)
        .ok()
        .filter(|&index| index < SEATS)
        .ok_or_else(|| {
            Error::Corrupt(format!(
                "stored seat {seat} is not a seat (0-{})",
                SEATS - 1
            ))
        })
}

fn to_db_id(id: u64) -> Result<i64, Error> {
    i64::try_from(id).map_err(|_| Error::Internal(format!("game id {id} out of range")))
}

fn to_db_seq(seq: u64) -> Result<i64, Error> {
    i64::try_from(seq)
        .map_err(|_| Error::InvalidArgument(format!("seq {seq} is too large (max {})", i64::MAX)))
}

/// An outcome code read from the action log; an unknown code is corrupt
/// data, never "no effect".
fn outcome_from_code(code: i16) -> Result<Outcome, Error> {
    Outcome::from_code(code)
        .ok_or_else(|| Error::Corrupt(format!("stored outcome code {code} is not an outcome")))
}

/// The winner's seat for the rankings, or -1.
fn winner_code(ending: Option<Ending>) -> i16 {
    match ending {
        Some(Ending::Winner(seat)) => i16::from(seat),
        _ => -1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

#[cfg(test)]
mod sql_tests {
    use super::*;
    use crate::store::StoreOptions;
    use borbaman_cluster::{LocalPostgres, PgOptions};
    use sqlx::Executor;
    use sqlx::postgres::PgArguments;

    /// What [`one_write`] writes.
    struct OneWrite<'a> {
        state: &'a GameState,
        phase: Phase,
        game: i64,
        session: i64,
        seat: i16,
        /// The log row: seq, action, outcome.
        row: (i64, i16, i16),
        leaving: bool,
        version: i64,
        read_us: i64,
        lag_us: i64,
        token: &'a [u8],
        /// Winner or -1, draw, finishing.
        ending: (i16, bool, bool),
        /// The game's tick the write takes for now.
        now_tick: i64,
    }

    /// `sql` ([`WRITE_CALLS`] or [`WRITE_ACTS`]) of one call of one session.
    fn one_write<'a>(
        sql: &'static str,
        w: &OneWrite<'a>,
    ) -> sqlx::query::Query<'a, Postgres, PgArguments> {
        sqlx::query(sql)
            .bind(Packed(w.state))
            .bind(w.phase.code())
            .bind(w.game)
            .bind(w.version)
            .bind(w.read_us)
            .bind(w.lag_us)
            .bind(0i32)
            .bind(w.ending.0)
            .bind(w.ending.1)
            .bind(w.ending.2)
            .bind(vec![w.session])
            .bind(vec![w.seat])
            .bind(vec![w.leaving])
            .bind(vec![false])
            .bind(vec![w.session])
            .bind(vec![w.row.0])
            .bind(vec![w.seat])
            .bind(vec![w.row.1])
            .bind(vec![w.row.2])
            .bind(vec![w.token])
            .bind(i64::from(TICK_MS))
            .bind(w.now_tick)
    }

    /// Calls queued behind a game's gate while another call holds it go
    /// to the database as one commit: the game's version advances by one,
    /// the log holds each applied input once, numbered in arrival order,
    /// and each call gets its own answer, the invalid one its own error.
    #[tokio::test]
    async fn calls_queued_behind_the_gate_commit_once_and_each_gets_its_own_answer() {
        use std::time::Duration;
        let (_pg, store) = crate::store::temp_store().await;
        let mut tokens = Vec::new();
        let mut game_id = 0;
        for i in 0..SEATS {
            let token = crate::token::hash(&crate::token::draw());
            let joined = store
                .join(
                    &token,
                    &Identity::session_only(&token),
                    &format!("p{i}"),
                    None,
                )
                .await
                .unwrap();
            assert_eq!(usize::from(joined.seat), i);
            game_id = joined.game_id;
            tokens.push(token);
        }
        let act = |seat: usize, seqs: &[u64]| ActCall {
            token_hash: tokens[seat],
            game_id,
            seat: seat as u8,
            inputs: seqs
                .iter()
                .map(|&seq| Input {
                    seq,
                    action: Action::Idle,
                })
                .collect(),
            batch: true,
        };
        let version: i64 = sqlx::query_scalar("SELECT version FROM games WHERE id = $1")
            .bind(game_id as i64)
            .fetch_one(store.pool())
            .await
            .unwrap();

        // Hold the game's gate, as a call writing it would.
        let Turn::Lead(held) = store
            .gates
            .turn(game_id, 0, Call::Act(act(0, &[99])), MAX_BATCH)
            .await
        else {
            panic!("nobody else holds the gate");
        };
        let calls = vec![
            Call::Act(act(0, &[1, 2])),
            // Seat 1's token naming seat 2: refused, alone.
            Call::Act(ActCall {
                seat: 2,
                ..act(1, &[1])
            }),
            Call::Act(act(2, &[1])),
            Call::Leave(LeaveCall {
                token_hash: tokens[3],
                game_id,
                seat: 3,
                seq: 1,
            }),
            // Player 0's next call, its unacknowledged inputs again.
            Call::Act(act(0, &[1, 2, 3])),
        ];
        let mut tasks = Vec::new();
        for (i, call) in calls.into_iter().enumerate() {
            let caller = store.clone();
            tasks.push(tokio::spawn(async move {
                match call {
                    Call::Act(call) => caller.act(&call).await.map(|a| Reply::Acted(Box::new(a))),
                    Call::Leave(call) => caller.leave(&call).await.map(Reply::Left),
                }
            }));
            // One at a time, so they queue in this order.
            let what = format!("call {i} queued behind the gate");
            borbaman_cluster::wait::until(&what, Duration::from_secs(10), || async {
                (store.gates.queued(game_id) == i + 1).then_some(())
            })
            .await;
        }
        let _ = held.answer([Err(Error::Internal("held for the test".into()))]);

        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.unwrap());
        }
        let acked = |answer: &Result<Reply, Error>| match answer {
            Ok(Reply::Acted(acted)) => (acted.ack, acted.applied, acted.snapshot.version),
            other => panic!("not an Act's reply: {other:?}"),
        };
        let next = (version + 1) as u64;
        assert_eq!(acked(&answers[0]), (2, 2, next));
        assert!(
            matches!(answers[1], Err(Error::PermissionDenied(_))),
            "{:?}",
            answers[1]
        );
        assert_eq!(acked(&answers[2]), (1, 1, next));
        assert!(matches!(answers[3], Ok(Reply::Left(Left { seq: 1 }))));
        assert_eq!(acked(&answers[4]), (3, 1, next));

        // One game write, and the log in arrival order.
        let log: Vec<(i16, i64, i16, i64, i32)> = sqlx::query_as(
            "SELECT seat, seq, action, version, ord FROM actions WHERE game_id = $1 ORDER BY ord",
        )
        .bind(game_id as i64)
        .fetch_all(store.pool())
        .await
        .unwrap();
        let (idle, leave) = (Action::Idle.code(), KIND_LEAVE);
        let v = version + 1;
        assert_eq!(
            log,
            vec![
                (0, 1, idle, v, 1),
                (0, 2, idle, v, 2),
                (2, 1, idle, v, 3),
                (3, 1, leave, v, 4),
                (0, 3, idle, v, 5)
            ]
        );
        let stored: i64 = sqlx::query_scalar("SELECT version FROM games WHERE id = $1")
            .bind(game_id as i64)
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(stored, v, "one write for the five calls");
        let audit = crate::store::audit::version_audit(store.pool(), &[game_id as i64])
            .await
            .unwrap();
        assert!(audit.is_clean(), "{audit:?}");
        store.close().await;
    }

    /// Every statement parses, type-checks and plans against the migrated
    /// schema (PREPARE), without needing the game core.
    #[tokio::test]
    async fn every_statement_prepares_against_the_schema() {
        let (_pg, store) = crate::store::temp_store().await;
        // Running the migrations again is a no-op.
        store.migrate().await.unwrap();
        let mut conn = store.pool().acquire().await.unwrap();
        for sql in super::super::queries::ALL
            .iter()
            .chain(super::super::retention::ALL)
            .chain(super::super::names::ALL)
            .chain(super::super::keys::ALL)
        {
            if let Err(e) = conn.prepare(sqlx::SqlSafeStr::into_sql_str(*sql)).await {
                panic!("{e}\n{sql}");
            }
        }
        assert!(store.rankings(10).await.unwrap().is_empty());

        // A state bound with `Packed` reaches the database as its encoding.
        let mut state = GameState::new(42, 0);
        for _ in 0..SEATS {
            state.seat_player(0);
        }
        state.apply(0, Action::Bomb, 3);
        let echoed: Vec<u8> = sqlx::query_scalar("SELECT $1::bytea")
            .bind(Packed(&state))
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(echoed, state.encode());
        assert_eq!(GameState::decode(&echoed).unwrap(), state);
    }

    /// A join asking for an arena takes a seat only in a waiting game on
    /// it, or opens one; a join asking for none takes the oldest waiting
    /// game, whatever its arena. The game's arena is in its row and state.
    #[tokio::test]
    async fn a_join_asking_for_an_arena_waits_in_a_game_on_it() {
        let (_pg, store) = crate::store::temp_store().await;
        let join = |name: &'static str, arena: Option<Arena>| {
            let store = store.clone();
            async move {
                let token = crate::token::hash(&crate::token::draw());
                store
                    .join(&token, &Identity::session_only(&token), name, arena)
                    .await
                    .unwrap()
            }
        };
        let open = join("a", Some(Arena::Open)).await;
        let corridors = join("b", Some(Arena::Corridors)).await;
        assert_ne!(open.game_id, corridors.game_id);
        assert_eq!(corridors.snapshot.state.arena(), Arena::Corridors);
        assert_eq!(join("c", None).await.game_id, open.game_id);
        assert_eq!(
            join("d", Some(Arena::Corridors)).await.game_id,
            corridors.game_id
        );
        let classic = join("e", Some(Arena::Classic)).await;
        assert_ne!(classic.game_id, open.game_id);
        assert_ne!(classic.game_id, corridors.game_id);
        let arenas: Vec<(i64, i16)> = sqlx::query_as("SELECT id, arena FROM games ORDER BY id")
            .fetch_all(store.pool())
            .await
            .unwrap();
        let ids = [open.game_id, corridors.game_id, classic.game_id].map(|id| id as i64);
        assert_eq!(arenas, vec![(ids[0], 1), (ids[1], 2), (ids[2], 0)]);
    }

    /// Everything a game call may write, as text.
    async fn dump(pool: &sqlx::PgPool, game: i64) -> String {
        sqlx::query_scalar(
            "SELECT concat_ws(' | ', \
               (SELECT row(g.*)::text FROM games g WHERE g.id = $1), \
               (SELECT string_agg(row(s.*)::text, ',' ORDER BY s.id) FROM sessions s), \
               (SELECT string_agg(row(st.*)::text, ',' ORDER BY st.seat) FROM seats st), \
               (SELECT count(*) FROM actions)::text, \
               (SELECT count(*) FROM rankings)::text)",
        )
        .bind(game)
        .fetch_one(pool)
        .await
        .unwrap()
    }

    /// A compare-and-set write that misses (the game moved on, the
    /// session is not seated there, the read is too old) writes nothing at
    /// all: no game, session, seat, log or rankings change. It returns the
    /// caller's read again instead, as [`LOAD`] reads it.
    #[tokio::test]
    async fn a_write_that_misses_writes_nothing() {
        let (_pg, store) = crate::store::temp_store().await;
        let mut game_id = 0;
        let mut tokens = Vec::new();
        for i in 0..SEATS {
            let token = crate::token::hash(&crate::token::draw());
            // Identified players: only their games are ranked.
            let identity = Identity {
                hash: crate::token::identity_hash(&token),
                claims_names: true,
            };
            game_id = store
                .join(&token, &identity, &format!("p{i}"), None)
                .await
                .unwrap()
                .game_id;
            tokens.push(token);
        }
        // The first joiner took seat 0.
        let token = &tokens[0][..];
        let tick_ms = i64::from(TICK_MS);
        let game = game_id as i64;
        let pool = store.pool();
        let (session, version, state, clock): (i64, i64, Vec<u8>, i64) = sqlx::query_as(
            "SELECT s.id, g.version, g.state, \
                    (extract(epoch FROM clock_timestamp()) * 1000000)::bigint \
             FROM sessions s JOIN games g ON g.id = s.game_id \
             WHERE s.game_id = $1 AND s.seat = 0",
        )
        .bind(game)
        .fetch_one(pool)
        .await
        .unwrap();
        let state = GameState::decode(&state).unwrap();
        let before = dump(pool, game).await;
        let lag_us = 10_000_000i64;
        let finishing_act = |version: i64, seat: i16, read_us: i64, lag_us: i64| OneWrite {
            state: &state,
            phase: Phase::Finished,
            game,
            session,
            seat,
            row: (1, Action::Bomb.code(), Outcome::NoEffect.code()),
            leaving: false,
            version,
            read_us,
            lag_us,
            token,
            ending: (0, false, true),
            now_tick: 0,
        };
        // A missed write's rows: no version, then the read again.
        let read_again = |rows: Vec<PgRow>| {
            assert_eq!(rows.len(), 1, "one caller, one read again");
            assert_eq!(rows[0].get::<Option<i64>, _>(0), None);
            let (hash, read) = caller_row(&rows[0], 1).unwrap();
            assert_eq!(&hash[..], token);
            (
                read.session.session_id,
                read.session.game_id,
                read.version,
                read.session.last_seq,
            )
        };
        // An Act that does not finish the game, as the hot path writes it.
        let plain_act = |version: i64, seat: i16, read_us: i64, lag_us: i64| OneWrite {
            phase: state.phase(),
            ending: (-1, false, false),
            ..finishing_act(version, seat, read_us, lag_us)
        };
        let missed = [
            (
                "an older version",
                WRITE_CALLS,
                finishing_act(version - 1, 0, clock, lag_us),
            ),
            (
                "another seat",
                WRITE_CALLS,
                finishing_act(version, 1, clock, lag_us),
            ),
            (
                "a read too old",
                WRITE_CALLS,
                finishing_act(version, 0, clock - 2 * lag_us, lag_us),
            ),
            (
                "a leave at an older version",
                WRITE_CALLS,
                OneWrite {
                    row: (1, KIND_LEAVE, Outcome::APPLIED_CODE),
                    leaving: true,
                    ending: (1, false, true),
                    ..finishing_act(version - 1, 0, clock, lag_us)
                },
            ),
            (
                "a tick the game's clock has not reached",
                WRITE_CALLS,
                OneWrite {
                    now_tick: 1_000_000,
                    ..finishing_act(version, 0, clock, lag_us)
                },
            ),
            (
                "acts only, a tick the game's clock has not reached",
                WRITE_ACTS,
                OneWrite {
                    now_tick: 1_000_000,
                    ..plain_act(version, 0, clock, lag_us)
                },
            ),
            (
                "acts only, an older version",
                WRITE_ACTS,
                plain_act(version - 1, 0, clock, lag_us),
            ),
            (
                "acts only, another seat",
                WRITE_ACTS,
                plain_act(version, 1, clock, lag_us),
            ),
            (
                "acts only, a read too old",
                WRITE_ACTS,
                plain_act(version, 0, clock - 2 * lag_us, lag_us),
            ),
            (
                "a leave given to the act statement",
                WRITE_ACTS,
                OneWrite {
                    leaving: true,
                    ..plain_act(version, 0, clock, lag_us)
                },
            ),
            (
                "a game's end given to the act statement",
                WRITE_ACTS,
                finishing_act(version, 0, clock, lag_us),
            ),
        ];
        for (why, sql, write) in missed {
            let rows = one_write(sql, &write).fetch_all(pool).await.unwrap();
            if sql == WRITE_ACTS {
                // The hot path's miss returns nothing: the caller reads again.
                assert!(rows.is_empty(), "{why}: {} rows", rows.len());
                assert!(matches!(written(rows), Ok(Written::Missed(None))), "{why}");
            } else {
                assert_eq!(read_again(rows), (session, game, version, 0), "{why}");
            }
            assert_eq!(dump(pool, game).await, before, "{why}");
        }
        let advance = sqlx::query(WRITE_ADVANCE)
            .bind(Packed(&state))
            .bind(Phase::Finished.code())
            .bind(game)
            .bind(0i16)
            .bind(false)
            .bind(true)
            .bind(version - 1)
            .fetch_optional(pool)
            .await
            .unwrap();
        assert!(advance.is_none());
        assert_eq!(dump(pool, game).await, before, "advance");

        // Acts only, current: the game (a new version, the seat active) and
        // its log row; no session, seat or ranking changes.
        let sessions_and_seats = |dump: &str| {
            let mut parts = dump.split(" | ");
            let _game = parts.next();
            parts.take(2).collect::<Vec<_>>().join(" | ")
        };
        let seat_0_active = || async {
            sqlx::query_scalar::<_, f64>(
                "SELECT extract(epoch FROM active_at[1])::float8 FROM games WHERE id = $1",
            )
            .bind(game)
            .fetch_one(pool)
            .await
            .unwrap()
        };
        let active_before = seat_0_active().await;
        let row = one_write(WRITE_ACTS, &plain_act(version, 0, clock, lag_us))
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(row.get::<i64, _>(0), version + 1);
        let after_act = dump(pool, game).await;
        assert_eq!(
            sessions_and_seats(&after_act),
            sessions_and_seats(&before),
            "an act leaves sessions and seats alone"
        );
        let act_row: (i64, i64, i32) = sqlx::query_as("SELECT seq, version, ord FROM actions")
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(act_row, (1, version + 1, 1));
        assert!(
            seat_0_active().await > active_before,
            "the act marks its seat active"
        );

        // A finishing write, current: the game, its log and the rankings.
        let row = one_write(
            WRITE_CALLS,
            &OneWrite {
                row: (2, Action::Bomb.code(), Outcome::NoEffect.code()),
                ..finishing_act(version + 1, 0, clock, lag_us)
            },
        )
        .fetch_one(pool)
        .await
        .unwrap();
        assert_eq!(row.get::<i64, _>(0), version + 2);
        let counts: (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM actions), (SELECT count(*) FROM rankings)",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        assert_eq!(counts, (2, SEATS as i64));

        // The function a missed write reads again with is LOAD_CALLERS,
        // column for column (but for the clock, read a moment later).
        let load = sqlx::query(LOAD_CALLERS)
            .bind(vec![token])
            .bind(tick_ms)
            .fetch_one(pool)
            .await
            .unwrap();
        let function = sqlx::query("SELECT * FROM game_call_read($1, $2)")
            .bind(token)
            .bind(tick_ms)
            .fetch_one(pool)
            .await
            .unwrap();
        let (load, function) = (
            caller_row(&load, 0).unwrap().1,
            read_row(&function, 0).unwrap(),
        );
        assert_eq!(function.session.last_seq, 2);
        let columns = |r: &Read| (r.session, r.version, (r.state.encode(), r.roster.clone()));
        assert_eq!(columns(&load), columns(&function));
        assert!(function.read_us >= load.read_us && function.now_tick >= load.now_tick);
        store.close().await;
    }

    /// A server writes on what it knows of a game after its own commit
    /// (no read); when another server wrote the game since, that write
    /// loses its compare-and-set, reads again in the same round trip and
    /// applies on the newer version: each input once, in sequence order,
    /// a copy of an input the other server applied answered as a repeat.
    #[tokio::test]
    async fn a_write_on_a_stale_known_version_loses_and_applies_nothing_twice() {
        let (pg, a) = crate::store::temp_store().await;
        let b = Store::connect(&pg.url(), &StoreOptions::default()).unwrap();
        let token = crate::token::hash(&crate::token::draw());
        let joined = a
            .join(&token, &Identity::session_only(&token), "p0", None)
            .await
            .unwrap();
        let act = |seq: u64| ActCall {
            token_hash: token,
            game_id: joined.game_id,
            seat: joined.seat,
            inputs: vec![Input {
                seq,
                action: Action::Idle,
            }],
            batch: true,
        };
        let applied = |acted: &Acted| (acted.seq, acted.applied, acted.replayed);
        assert_eq!(applied(&a.act(&act(1)).await.unwrap()), (1, 1, false));
        assert!(
            a.known.contains_key(&joined.game_id),
            "server a knows the game after its commit"
        );
        // Server b writes seq 2: what a knows is now one version behind.
        assert_eq!(applied(&b.act(&act(2)).await.unwrap()), (2, 1, false));
        let lost = a.cas_retries.load(std::sync::atomic::Ordering::Relaxed);
        // A copy of seq 2 through a: by what a knows, seq 2 is new.
        assert_eq!(
            applied(&a.act(&act(2)).await.unwrap()),
            (2, 0, true),
            "a repeat, not applied again"
        );
        assert_eq!(
            a.cas_retries.load(std::sync::atomic::Ordering::Relaxed),
            lost + 1,
            "a wrote on the version it knew, lost, and read again"
        );
        assert_eq!(applied(&a.act(&act(3)).await.unwrap()), (3, 1, false));
        // Server b writes seq 4 and 5; a knows 3 as the last applied.
        assert_eq!(applied(&b.act(&act(4)).await.unwrap()), (4, 1, false));
        assert_eq!(applied(&b.act(&act(5)).await.unwrap()), (5, 1, false));
        // By what a knows, a call starting at 6 skips 4 and 5, which a
        // refusal would say; a reads first, and applies it.
        assert_eq!(
            applied(&a.act(&act(6)).await.expect("not refused on what a knew")),
            (6, 1, false)
        );
        let log: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT a.seq, a.version FROM actions a JOIN sessions s ON s.id = a.session_id \
             WHERE s.token_hash = $1 ORDER BY a.seq",
        )
        .bind(&token[..])
        .fetch_all(a.pool())
        .await
        .unwrap();
        let seqs: Vec<i64> = log.iter().map(|&(seq, _)| seq).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6], "each input once");
        assert!(
            log.windows(2).all(|w| w[0].1 < w[1].1),
            "in sequence order, one version each: {log:?}"
        );
        a.close().await;
        b.close().await;
    }

    /// A write that lost to a commit made while it ran (it waited for the
    /// winner's row lock, its own snapshot older than that commit) reads
    /// again after that commit: the winner's version and log row.
    #[tokio::test]
    async fn a_missed_write_reads_again_after_the_commit_it_lost_to() {
        use std::time::Duration;
        let pg = LocalPostgres::start_temp(PgOptions {
            fsync: false,
            port: None,
        })
        .unwrap();
        let store = Store::connect(
            &pg.url(),
            &StoreOptions {
                // The winner's transaction idles while the loser waits.
                idle_txn_timeout: Duration::from_secs(60),
                db_timeout: Duration::from_secs(20),
                ..StoreOptions::default()
            },
        )
        .unwrap();
        store.migrate().await.unwrap();
        let token = crate::token::hash(&crate::token::draw());
        let joined = store
            .join(&token, &Identity::session_only(&token), "p0", None)
            .await
            .unwrap();
        let (game, version) = (joined.game_id as i64, joined.snapshot.version as i64);
        let pool = store.pool().clone();
        let (session, clock): (i64, i64) = sqlx::query_as(
            "SELECT id, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint \
             FROM sessions WHERE token_hash = $1",
        )
        .bind(&token[..])
        .fetch_one(&pool)
        .await
        .unwrap();

        // The winner: the game's next version and the session's seq 1,
        // not committed yet.
        let mut winner = pool.begin().await.unwrap();
        sqlx::query("UPDATE games SET version = version + 1 WHERE id = $1")
            .bind(game)
            .execute(&mut *winner)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO actions (session_id, seq, game_id, seat, tick, action, outcome, version) \
             VALUES ($1, 1, $2, 0, 0, 6, 1, $3)",
        )
        .bind(session)
        .bind(game)
        .bind(version + 1)
        .execute(&mut *winner)
        .await
        .unwrap();

        let state = joined.snapshot.state.clone();
        let loser = tokio::spawn(async move {
            one_write(
                WRITE_CALLS,
                &OneWrite {
                    state: &state,
                    phase: state.phase(),
                    game,
                    session,
                    seat: 0,
                    row: (1, Action::Idle.code(), Outcome::NoEffect.code()),
                    leaving: false,
                    version,
                    read_us: clock,
                    lag_us: 60_000_000,
                    token: &token[..],
                    ending: (-1, false, false),
                    now_tick: 0,
                },
            )
            .fetch_all(&pool)
            .await
            .unwrap()
        });
        // The loser starts, and waits for the winner's lock on the game.
        let waiting = async {
            loop {
                let waits: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                )
                .fetch_one(store.pool())
                .await
                .unwrap();
                if waits > 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the write waits for the winner's row lock");
        winner.commit().await.unwrap();

        let rows = loser.await.unwrap();
        assert_eq!(rows[0].get::<Option<i64>, _>(0), None, "nothing written");
        let again = caller_row(&rows[0], 1).unwrap().1;
        assert_eq!((again.version, again.session.last_seq), (version + 1, 1));
        assert_eq!(
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM actions")
                .fetch_one(store.pool())
                .await
                .unwrap(),
            1
        );
        store.close().await;
    }

    /// A join dropped at any point (its client went away) leaves no
    /// transaction open on a pooled connection: a later autocommitted
    /// write on the pool is committed, not swallowed by a transaction the
    /// join began. Sweeps the point of cancellation over every await of
    /// the join, the database answering between polls.
    #[tokio::test]
    async fn a_join_dropped_anywhere_leaves_no_transaction_open() {
        use std::future::Future;
        use std::task::Poll;
        use std::time::Duration;

        let pg = LocalPostgres::start_temp(PgOptions {
            fsync: false,
            port: None,
        })
        .unwrap();
        let store = Store::connect(
            &pg.url(),
            &StoreOptions {
                // One connection, reused by every call; a transaction left
                // open on it would stay open for the whole test.
                max_connections: 1,
                min_connections: 0,
                idle_txn_timeout: Duration::from_secs(60),
                db_timeout: Duration::from_secs(10),
                ..StoreOptions::default()
            },
        )
        .unwrap();
        store.migrate().await.unwrap();
        let check = sqlx::PgPool::connect(&pg.url()).await.unwrap();
        let mut completed = 0;
        for polls in 1..=40 {
            let token = crate::token::hash(&crate::token::draw());
            let identity = Identity::session_only(&token);
            let mut join = Box::pin(store.join(&token, &identity, "dropped", None));
            for _ in 0..polls {
                let ready =
                    std::future::poll_fn(|cx| Poll::Ready(join.as_mut().poll(cx).is_ready())).await;
                if ready {
                    completed += 1;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            drop(join);
            let name = format!("probe-{polls}");
            sqlx::query("INSERT INTO rankings (name, identity_hash) VALUES ($1, $2)")
                .bind(&name)
                .bind(&crate::token::draw()[..])
                .execute(store.pool())
                .await
                .unwrap();
            let committed: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM rankings WHERE name = $1)")
                    .bind(&name)
                    .fetch_one(&check)
                    .await
                    .unwrap();
            assert!(
                committed,
                "dropped after {polls} polls: a write was swallowed"
            );
        }
        assert!(completed > 0, "the sweep never reached the end of a join");
        store.close().await;
    }
}
