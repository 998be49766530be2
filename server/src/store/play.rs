//! The game transactions: join, act, leave, state and rankings.
//!
//! Every mutating call has the shape of the bare floor transaction:
//! `BEGIN`; one `SELECT ... FOR UPDATE` that loads the caller's session, its
//! newest action-log row (its last sequence number and reply) and its game;
//! the game core computes the new state in memory; one statement writes the
//! game row and the action-log row (data-modifying CTEs; also the rankings
//! when this commit finishes the game); `COMMIT`. A join that seats a
//! player also locks the single `lobby` row first, so simultaneous joiners
//! fill one game instead of each opening their own. The game clock is the
//! database's: tick = floor((clock - games.created_at) / tick), and the
//! state's tick never goes backwards. Reading the state takes no lock and
//! never waits for writers.
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
//! Exactly once: the action log's primary key is (session, seq). A call
//! that raced a copy of itself (a client retrying on another server) loses
//! on that key, is retried, and then finds its sequence number applied and
//! answers with the stored reply.

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgConnection, PgRow, PgTypeInfo};
use sqlx::{Connection, Postgres, Row, Transaction};

use super::Store;
use super::queries::*;
use crate::error::Error;
use crate::token::TokenHash;
use borbaman_game::{
    Action, Ending, GameState, MAX_ENCODED_BYTES, Outcome, Phase, SEATS, TICK_MS, Tick,
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

/// An Act request, validated.
#[derive(Clone, Debug)]
pub struct ActCall {
    pub token_hash: TokenHash,
    pub game_id: u64,
    pub seat: u8,
    pub seq: u64,
    pub action: Action,
}

/// Result of an Act.
#[derive(Clone, Debug)]
pub struct Acted {
    pub seq: u64,
    pub outcome: Outcome,
    pub applied_tick: Tick,
    /// A repeat of an applied request: the original outcome and tick, the
    /// current state.
    pub replayed: bool,
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

/// One line of the rankings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ranking {
    pub name: String,
    pub games: u32,
    pub wins: u32,
    pub draws: u32,
}

/// The caller's session and game, locked.
struct Locked {
    session_id: i64,
    game_id: i64,
    seat: i16,
    in_game: bool,
    last_seq: i64,
    last_kind: i16,
    last_outcome: i16,
    last_tick: i32,
    state: GameState,
    version: i64,
    now_tick: Tick,
    roster: Roster,
}

impl Store {
    /// Seats the token's player: back in its running game (rejoin), else in
    /// the oldest waiting game, else in a new one.
    pub async fn join(&self, token_hash: &TokenHash, name: &str) -> Result<Joined, Error> {
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let result = self.join_once(lease.conn(), token_hash, name).await;
            lease.settle_commit(self, result)
        })
        .await
    }

    /// Applies one action at the current tick, exactly once per sequence
    /// number.
    pub async fn act(&self, call: &ActCall) -> Result<Acted, Error> {
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let result = self.act_once(lease.conn(), call).await;
            lease.settle_commit(self, result)
        })
        .await
    }

    /// Leaves the game (a forfeit while it runs), exactly once per sequence
    /// number.
    pub async fn leave(&self, call: &LeaveCall) -> Result<Left, Error> {
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let result = self.leave_once(lease.conn(), call).await;
            lease.settle_commit(self, result)
        })
        .await
    }

    /// The caller's game advanced to the current tick. A plain read; only
    /// when the clock alone finished the game is that committed (once,
    /// through the write path) so the rankings are recorded.
    pub async fn state(&self, token_hash: &TokenHash, game_id: u64) -> Result<Snapshot, Error> {
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let result = self.state_once(lease.conn(), token_hash, game_id).await;
            lease.settle(result)
        })
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
        conn: &mut PgConnection,
        token_hash: &TokenHash,
        name: &str,
    ) -> Result<Joined, Error> {
        let mut tx = conn.begin().await?;
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
                seat: seat_index(seat) as u8,
                rejoined: true,
                last_seq,
                snapshot,
            });
        }
        sqlx::query(LOCK_LOBBY).execute(&mut *tx).await?;
        let waiting = sqlx::query(LOAD_WAITING_LOCKED)
            .bind(i64::from(TICK_MS))
            .bind(self.lobby_seat_ttl_ms)
            .fetch_optional(&mut *tx)
            .await?;
        let mut seated = None;
        if let Some(row) = waiting {
            let (now_tick, mut snapshot) = game_row(&row, 0)?;
            let silent: Vec<bool> = row.try_get(6)?;
            free_silent_seats(&mut tx, &mut snapshot, &silent).await?;
            let tick = snapshot.state.tick().max(now_tick);
            if let Some(seat) = snapshot.state.seat_player(tick) {
                seated = Some((seat, snapshot));
            }
        }
        let new_game = seated.is_none();
        let (seat, mut snapshot) = match seated {
            Some(seated) => seated,
            None => {
                let mut state = GameState::with_round(rand::random(), 0, self.round_ticks);
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
        if !new_game {
            query = query.bind(to_db_id(snapshot.game_id)?);
        }
        let Some(row) = query.fetch_optional(&mut *tx).await? else {
            return Err(Error::Transient(
                "another join with the same token won the race".into(),
            ));
        };
        let (game_id, version): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
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

    async fn act_once(&self, conn: &mut PgConnection, call: &ActCall) -> Result<Acted, Error> {
        let mut tx = conn.begin().await?;
        let mut locked = load_locked(&mut tx, &call.token_hash).await?;
        check_owner(&locked, call.game_id, call.seat)?;
        let kind = call.action.code();
        let seq = to_db_seq(call.seq)?;
        if seq == locked.last_seq && locked.last_kind == kind {
            let outcome = outcome_from_code(locked.last_outcome);
            let applied_tick = locked.last_tick.max(0) as Tick;
            return Ok(Acted {
                seq: call.seq,
                outcome,
                applied_tick,
                replayed: true,
                snapshot: commit_advance(tx, locked).await?,
            });
        }
        check_fresh(&locked, seq)?;
        let state = &mut locked.state;
        let before = state.phase();
        let tick = state.tick().max(locked.now_tick);
        let outcome = state.apply(call.seat, call.action, tick);
        let ending = finishing(before, state);
        let sql = if ending.is_some() {
            WRITE_ACT_FINISHING
        } else {
            WRITE_ACT
        };
        let mut query = sqlx::query(sql)
            .bind(Packed(state))
            .bind(state.phase().code())
            .bind(locked.game_id)
            .bind(locked.session_id)
            .bind(seq)
            .bind(kind)
            .bind(tick as i32)
            .bind(locked.seat)
            .bind(outcome.code());
        if ending.is_some() {
            query = query
                .bind(winner_code(ending))
                .bind(ending == Some(Ending::Draw));
        }
        let version: i64 = query.fetch_one(&mut *tx).await?.try_get(0)?;
        tx.commit().await?;
        locked.roster.connected[seat_index(locked.seat)] = true;
        Ok(Acted {
            seq: call.seq,
            outcome,
            applied_tick: tick,
            replayed: false,
            snapshot: locked.into_snapshot(version),
        })
    }

    async fn leave_once(&self, conn: &mut PgConnection, call: &LeaveCall) -> Result<Left, Error> {
        let mut tx = conn.begin().await?;
        let mut locked = load_locked(&mut tx, &call.token_hash).await?;
        check_owner(&locked, call.game_id, call.seat)?;
        let seq = to_db_seq(call.seq)?;
        if seq == locked.last_seq && locked.last_kind == KIND_LEAVE {
            tx.commit().await?;
            return Ok(Left { seq: call.seq });
        }
        check_fresh(&locked, seq)?;
        let state = &mut locked.state;
        let before = state.phase();
        let tick = state.tick().max(locked.now_tick);
        state.advance(tick);
        let waiting = state.phase() == Phase::Waiting;
        match state.phase() {
            Phase::Waiting => state.unseat_player(call.seat),
            Phase::Playing => state.forfeit(call.seat, tick),
            Phase::Finished => {}
        }
        let ending = finishing(before, state);
        sqlx::query(WRITE_LEAVE)
            .bind(Packed(state))
            .bind(state.phase().code())
            .bind(locked.game_id)
            .bind(locked.session_id)
            .bind(seq)
            .bind(tick as i32)
            .bind(locked.seat)
            .bind(waiting)
            .bind(winner_code(ending))
            .bind(ending == Some(Ending::Draw))
            .bind(ending.is_some())
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Left { seq: call.seq })
    }

    async fn state_once(
        &self,
        conn: &mut PgConnection,
        token_hash: &TokenHash,
        game_id: u64,
    ) -> Result<Snapshot, Error> {
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
        let before = snapshot.state.phase();
        let tick = snapshot.state.tick().max(now_tick);
        snapshot.state.advance(tick);
        if snapshot.state.phase() == before {
            return Ok(snapshot);
        }
        // The clock alone changed the phase (the game just ended): commit
        // it so the rankings are recorded exactly once.
        let own_game = to_db_id(game_id)?;
        let mut tx = conn.begin().await?;
        let row = sqlx::query(LOAD_GAME_LOCKED)
            .bind(own_game)
            .bind(i64::from(TICK_MS))
            .fetch_one(&mut *tx)
            .await?;
        let (now_tick, mut snapshot) = game_row(&row, 0)?;
        let before = snapshot.state.phase();
        let tick = snapshot.state.tick().max(now_tick);
        snapshot.state.advance(tick);
        if snapshot.state.phase() != before {
            snapshot.version = write_advance(&mut tx, own_game, before, &snapshot.state).await?;
        }
        tx.commit().await?;
        Ok(snapshot)
    }
}

/// Frees the seats of the locked waiting game `snapshot` whose players were
/// silent for the lobby seat TTL (`silent`, per seat), in the database and
/// in `snapshot`, so the joiner can take one.
async fn free_silent_seats(
    tx: &mut Transaction<'_, Postgres>,
    snapshot: &mut Snapshot,
    silent: &[bool],
) -> Result<(), Error> {
    let candidates: Vec<i16> = (0..SEATS as u8)
        .filter(|&seat| silent.get(usize::from(seat)) == Some(&true))
        .filter(|&seat| snapshot.state.player(seat).is_some_and(|p| p.seated))
        .map(i16::from)
        .collect();
    if candidates.is_empty() {
        return Ok(());
    }
    let freed: Vec<i16> = sqlx::query_scalar(FREE_SILENT_SEATS)
        .bind(to_db_id(snapshot.game_id)?)
        .bind(&candidates)
        .fetch_all(&mut **tx)
        .await?;
    for &seat in &freed {
        let index = seat_index(seat);
        snapshot.state.unseat_player(index as u8);
        snapshot.roster.names[index].clear();
        snapshot.roster.connected[index] = false;
    }
    if !freed.is_empty() {
        tracing::info!(game_id = snapshot.game_id, seats = ?freed, "freed silent lobby seats");
    }
    Ok(())
}

/// Loads and locks the caller's session and game; an unknown token is
/// `UNAUTHENTICATED`.
async fn load_locked(
    tx: &mut Transaction<'_, Postgres>,
    token_hash: &TokenHash,
) -> Result<Locked, Error> {
    let row = sqlx::query(LOAD_LOCKED)
        .bind(&token_hash[..])
        .bind(i64::from(TICK_MS))
        .fetch_optional(&mut **tx)
        .await?
        .ok_or_else(unknown_token)?;
    let (now_tick, snapshot) = game_row(&row, 7)?;
    Ok(Locked {
        session_id: row.try_get(0)?,
        seat: row.try_get(1)?,
        in_game: row.try_get(2)?,
        last_seq: row.try_get(3)?,
        last_kind: row.try_get(4)?,
        last_outcome: row.try_get(5)?,
        last_tick: row.try_get(6)?,
        game_id: snapshot.game_id as i64,
        state: snapshot.state,
        version: snapshot.version as i64,
        now_tick,
        roster: snapshot.roster,
    })
}

/// A replay returns the game as it is now: advanced in memory, and, if the
/// clock alone finished it, committed (we hold the lock already).
async fn commit_advance(
    mut tx: Transaction<'_, Postgres>,
    locked: Locked,
) -> Result<Snapshot, Error> {
    let mut state = locked.state;
    let before = state.phase();
    state.advance(state.tick().max(locked.now_tick));
    let mut version = locked.version as u64;
    if state.phase() != before {
        version = write_advance(&mut tx, locked.game_id, before, &state).await?;
    }
    tx.commit().await?;
    Ok(Snapshot {
        game_id: locked.game_id as u64,
        version,
        state,
        roster: locked.roster,
    })
}

/// Writes a state advanced by the clock alone; returns the new version.
async fn write_advance(
    conn: &mut PgConnection,
    game_id: i64,
    before: Phase,
    state: &GameState,
) -> Result<u64, Error> {
    let ending = finishing(before, state);
    let row = sqlx::query(WRITE_ADVANCE)
        .bind(Packed(state))
        .bind(state.phase().code())
        .bind(game_id)
        .bind(winner_code(ending))
        .bind(ending == Some(Ending::Draw))
        .bind(ending.is_some())
        .fetch_one(conn)
        .await?;
    Ok(row.try_get::<i64, _>(0)? as u64)
}

impl Locked {
    fn into_snapshot(self, version: i64) -> Snapshot {
        Snapshot {
            game_id: self.game_id as u64,
            version: version as u64,
            state: self.state,
            roster: self.roster,
        }
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
fn check_owner(locked: &Locked, game_id: u64, seat: u8) -> Result<(), Error> {
    if locked.seat < 0 {
        return Err(seat_freed(locked.game_id));
    }
    if Some(locked.game_id) != i64::try_from(game_id).ok() {
        return Err(Error::PermissionDenied(format!(
            "game {game_id} is not your game (yours is {})",
            locked.game_id
        )));
    }
    if i16::from(seat) != locked.seat {
        return Err(Error::PermissionDenied(format!(
            "seat {seat} is not your seat (yours is {})",
            locked.seat
        )));
    }
    Ok(())
}

/// A new call needs a newer sequence number and a session still in its
/// game.
fn check_fresh(locked: &Locked, seq: i64) -> Result<(), Error> {
    if seq == locked.last_seq {
        return Err(Error::FailedPrecondition(format!(
            "sequence number {seq} was already used by a different call"
        )));
    }
    if seq < locked.last_seq {
        return Err(Error::FailedPrecondition(format!(
            "sequence number {seq} is older than the last applied ({})",
            locked.last_seq
        )));
    }
    if !locked.in_game {
        return Err(Error::FailedPrecondition(format!(
            "you left game {}; join again to play",
            locked.game_id
        )));
    }
    Ok(())
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
fn game_row(row: &PgRow, at: usize) -> Result<(Tick, Snapshot), Error> {
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

fn seat_index(seat: i16) -> usize {
    usize::try_from(seat).unwrap_or(0).min(SEATS - 1)
}

fn to_db_id(id: u64) -> Result<i64, Error> {
    i64::try_from(id).map_err(|_| Error::Internal(format!("game id {id} out of range")))
}

fn to_db_seq(seq: u64) -> Result<i64, Error> {
    i64::try_from(seq)
        .map_err(|_| Error::InvalidArgument(format!("seq {seq} is too large (max {})", i64::MAX)))
}

fn outcome_from_code(code: i16) -> Outcome {
    Outcome::from_code(code).unwrap_or(Outcome::NoEffect)
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

    #[test]
    fn winner_codes() {
        assert_eq!(winner_code(Some(Ending::Winner(2))), 2);
        assert_eq!(winner_code(Some(Ending::Draw)), -1);
    }
}

#[cfg(test)]
mod sql_tests {
    use super::*;
    use crate::store::StoreOptions;
    use borbaman_cluster::{LocalPostgres, PgOptions};
    use sqlx::Executor;

    /// Every statement parses, type-checks and plans against the migrated
    /// schema (PREPARE), without needing the game core.
    #[tokio::test]
    async fn every_statement_prepares_against_the_schema() {
        let pg = LocalPostgres::start_temp(PgOptions {
            fsync: false,
            port: None,
        })
        .unwrap();
        let store = Store::connect(&pg.url(), &StoreOptions::default()).unwrap();
        store.migrate().await.unwrap();
        // Running the migrations again is a no-op.
        store.migrate().await.unwrap();
        let mut conn = store.pool().acquire().await.unwrap();
        for sql in super::super::queries::ALL {
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
}
