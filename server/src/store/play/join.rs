//! Joins: back into a running game (a read), else a seat in a waiting or
//! new game (one short transaction under the lobby's lock).

use sqlx::postgres::PgConnection;
use sqlx::{Postgres, Row, Transaction};
use tokio::time::Instant;

use super::*;
use crate::admission::{Priority, pushback};
use crate::error::Error;
use crate::seating::{LIVE_WITHIN, SHARED_WITHIN, Seats, Verdict};
use crate::store::Store;
use crate::store::queries::*;
use crate::token::TokenHash;
use borbaman_game::{Arena, GameState, Phase, SEATS, TICK_MS};

/// Frees the seats of the locked waiting game `snapshot` whose players were
/// silent for the lobby seat TTL (`silent`, per seat), in the database and
/// in `snapshot`, so the joiner can take one. Returns the seats freed.
pub(super) async fn free_silent_seats(
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

/// A join refused because the running games are at the limit (see
/// [`crate::seating`]), with twice a refused join's pushback.
pub(super) fn no_room() -> Error {
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
        // With several clusters, first where the join goes (see
        // [`partitions`](crate::store::partitions)); the name is checked at
        // home, the seat taken there.
        let target = self.place(token_hash).await?;
        let joined = target
            .retrying(|| target.join_once(self, token_hash, identity, name, arena, seats))
            .await;
        if joined.is_ok() {
            crate::store::partitions::crash_point("join-seated");
        }
        joined
    }

    pub(super) async fn join_once(
        &self,
        home: &Store,
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
        home.check_name(identity, name).await?;
        // Leased: a join cut anywhere in its transaction closes the
        // connection instead of pooling it (see [`Lease`]).
        let mut lease = self.lease().await?;
        let joined = self
            .seat(lease.conn(), token_hash, identity, name, arena, seats)
            .await;
        lease.settle(joined)
    }

    /// Seats the token's player, in one transaction on `conn`: under the
    /// lobby's lock, taken first, which also settles a join with the same
    /// token that seated it since [`Store::rejoin`] read it (a token has a
    /// session per partition, so only the lock keeps two joins of one
    /// token from seating it twice), and its session's. A new
    /// game is opened only if `seats` finds room for it among the running
    /// games, counted under the lobby's lock.
    pub(super) async fn seat(
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
        sqlx::query(LOCK_LOBBY).execute(&mut *tx).await?;
        let session: Option<(i64, i64, i16, bool, i16, i64)> = sqlx::query_as(LOAD_SESSION_LOCKED)
            .bind(&token_hash[..])
            .fetch_optional(&mut *tx)
            .await?;
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
                last_seq: session.map_or(0, |s| s.5.max(0) as u64),
                snapshot,
            });
        }
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
            .bind(Packed(&snapshot.state))
            .bind(snapshot.state.phase().code());
        query = if new_game {
            query.bind(i16::from(arena.code()))
        } else {
            query.bind(to_db_id(snapshot.game_id)?)
        };
        query = query.bind(&identity_hash[..]).bind(identity.claims_names);
        if new_game {
            query = query.bind(self.new_game_partitions());
        }
        let Some(row) = query.fetch_optional(&mut *tx).await? else {
            return Err(Error::Transient(
                "no partition of this cluster takes new games now (moving away)".into(),
            ));
        };
        let (game_id, version, last_seq): (i64, i64, i64) =
            (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        let last_seq = last_seq.max(0) as u64;
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
    pub(in crate::store) async fn rejoin(
        &self,
        token_hash: &TokenHash,
    ) -> Result<Option<Joined>, Error> {
        let mut lease = self.lease().await?;
        let row = sqlx::query(READ_JOINER)
            .bind(&token_hash[..])
            .bind(i64::from(TICK_MS))
            .fetch_optional(lease.conn())
            .await;
        let row = lease.settle(row.map_err(Error::from))?;
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
}
