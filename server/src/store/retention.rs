//! Retention: deleting what no one will read again, so the tables stay
//! bounded however long the servers run.
//!
//! - A finished game goes a retention window after it finished, whole:
//!   its row, seats and the sessions whose last game it was in one
//!   statement, then its action log and seat log in small batches. The
//!   replay check reads a game and its logs in one snapshot, so it sees a
//!   game with its whole log or no game at all; the ids whose logs are
//!   still being deleted wait in `purged_games`, so a server that stops
//!   half-way leaves the rest to the next pass.
//! - A waiting game in which no seated player has been heard from for
//!   [`ABANDONED_TTLS`] lobby seat TTLs goes the same way.
//! - A session freed from its lobby seat (seat -1) and not seated again
//!   within the window goes (its log rows stay with their game).
//! - A name no one joined with for [`RetentionOptions::names_unused`] goes,
//!   and so does a name released longer ago than that: anyone may take it.
//!
//! The job runs on one server at a time: the one whose dedicated
//! connection holds a PostgreSQL advisory lock ([`LOCK_KEY`]). The lock
//! goes with the connection, so when that server dies another one takes
//! the job over at its next try. Every statement touches at most a small
//! batch of rows and skips rows a call has locked, with a short pause
//! between batches, so no call waits behind the job.

use crate::store::tuning::*;
use std::time::Duration;

use borbaman_shutdown::Shutdown;
use sqlx::postgres::PgConnection;

use super::Store;
use crate::error::Error;

/// The advisory lock that elects the server running the job.
pub const LOCK_KEY: i64 = 0x626f_7262_616d_616e; // "borbaman"

/// A waiting game is abandoned when no seated player has been heard from
/// for this many lobby seat TTLs.
pub const ABANDONED_TTLS: i64 = 10;

/// What the job deletes and how often it looks.
#[derive(Clone, Debug)]
pub struct RetentionOptions {
    /// How long a finished game is kept.
    pub window: Duration,
    /// How often a pass runs (and a server not running the job tries to
    /// take it over).
    pub every: Duration,
    /// A name no one joined with for this long is released (see
    /// [`super::names`]).
    pub names_unused: Duration,
}

/// The default of [`RetentionOptions::names_unused`]: half a year.
pub const DEFAULT_NAMES_UNUSED: Duration = Duration::from_secs(180 * 24 * 3600);

impl RetentionOptions {
    /// Passes every tenth of the window, between 1 s and 1 min.
    pub fn new(window: Duration) -> RetentionOptions {
        RetentionOptions {
            window,
            every: (window / 10).clamp(Duration::from_secs(1), Duration::from_secs(60)),
            names_unused: DEFAULT_NAMES_UNUSED,
        }
    }
}

/// Rows one pass deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Deleted {
    pub finished_games: i64,
    pub abandoned_games: i64,
    pub sessions: i64,
    pub seats: i64,
    pub actions: i64,
    pub seat_log: i64,
    pub names: i64,
    /// Joins' placements and folded games' marks at home (with several
    /// database clusters, see [`super::partitions`]).
    pub placements: i64,
}

impl Deleted {
    fn any(&self) -> bool {
        *self != Deleted::default()
    }

    /// The rows by kind, as the metrics label them.
    fn by_kind(&self) -> [(&'static str, i64); 7] {
        [
            ("placements", self.placements),
            ("finished_games", self.finished_games),
            ("abandoned_games", self.abandoned_games),
            ("sessions", self.sessions),
            ("seats", self.seats),
            ("actions", self.actions),
            ("seat_log", self.seat_log),
        ]
    }
}

/// Deletes the games `$1` selects (locked, skipping games a call holds),
/// their seats and the sessions whose last game they were, and queues
/// their logs in `purged_games`. Returns games, seats, sessions.
macro_rules! delete_games {
    ($doomed:literal) => {
        concat!(
            "WITH doomed AS (",
            $doomed,
            " LIMIT $2::bigint FOR UPDATE SKIP LOCKED), \
             st AS (DELETE FROM seats WHERE game_id IN (SELECT id FROM doomed) RETURNING 1), \
             se AS (DELETE FROM sessions WHERE game_id IN (SELECT id FROM doomed) RETURNING 1), \
             p AS (INSERT INTO purged_games SELECT id FROM doomed ON CONFLICT DO NOTHING), \
             g AS (DELETE FROM games WHERE id IN (SELECT id FROM doomed) RETURNING 1) \
             SELECT (SELECT count(*) FROM g), (SELECT count(*) FROM st), (SELECT count(*) FROM se)"
        )
    };
}

/// Finished games that finished more than `$1` ms ago.
const DELETE_FINISHED: &str = delete_games!(
    "SELECT id FROM games WHERE phase = 3 \
     AND finished_at < now() - $1::bigint * interval '1 millisecond' ORDER BY finished_at"
);

/// Waiting games in which no seat has been active for `$1` ms.
const DELETE_ABANDONED: &str = delete_games!(
    "SELECT id FROM games g WHERE phase = 1 \
     AND updated_at < now() - $1::bigint * interval '1 millisecond' \
     AND NOT EXISTS (SELECT 1 FROM unnest(g.active_at) a \
                     WHERE a > now() - $1::bigint * interval '1 millisecond') ORDER BY id"
);

/// One batch of the action log of deleted games.
const DELETE_ACTIONS: &str = "DELETE FROM actions a USING ( \
       SELECT session_id, seq FROM actions \
       WHERE game_id IN (SELECT game_id FROM purged_games) LIMIT $1::bigint) d \
     WHERE a.session_id = d.session_id AND a.seq = d.seq";

/// One batch of the seat log of deleted games.
const DELETE_SEAT_LOG: &str = "DELETE FROM seat_log WHERE (game_id, version, kind, seat) IN ( \
       SELECT game_id, version, kind, seat FROM seat_log \
       WHERE game_id IN (SELECT game_id FROM purged_games) LIMIT $1::bigint)";

/// Deleted games whose logs are gone.
const FORGET_PURGED: &str = "DELETE FROM purged_games p \
     WHERE NOT EXISTS (SELECT 1 FROM actions a WHERE a.game_id = p.game_id) \
       AND NOT EXISTS (SELECT 1 FROM seat_log l WHERE l.game_id = p.game_id)";

/// One batch of sessions freed from a lobby seat more than `$1` ms ago
/// and not seated since (sessions freed before `freed_at` was kept count
/// from their creation).
const DELETE_UNUSED_SESSIONS: &str = "DELETE FROM sessions WHERE id IN ( \
       SELECT id FROM sessions WHERE seat = -1 AND NOT in_game \
       AND coalesce(freed_at, created_at) < now() - $1::bigint * interval '1 millisecond' \
       LIMIT $2::bigint FOR UPDATE SKIP LOCKED)";

/// One batch of names not used for `$1` ms (released or not).
const DELETE_UNUSED_NAMES: &str = "DELETE FROM names WHERE owner_key IN ( \
       SELECT owner_key FROM names \
       WHERE used_at < now() - $1::bigint * interval '1 millisecond' \
       LIMIT $2::bigint FOR UPDATE SKIP LOCKED)";

/// One batch of joins' placements older than `$1` ms (a placement only
/// sends a token's joins back to its cluster while its game runs).
const DELETE_OLD_PLACEMENTS: &str = "DELETE FROM placements WHERE token_hash IN ( \
       SELECT token_hash FROM placements \
       WHERE placed_at < now() - $1::bigint * interval '1 millisecond' \
       LIMIT $2::bigint FOR UPDATE SKIP LOCKED)";

/// One batch of folded games' marks older than `$1` ms: their results
/// left the outbox long ago.
const DELETE_OLD_FOLDS: &str = "DELETE FROM folded_games WHERE game_id IN ( \
       SELECT game_id FROM folded_games \
       WHERE folded_at < now() - $1::bigint * interval '1 millisecond' \
       LIMIT $2::bigint FOR UPDATE SKIP LOCKED)";

/// Every statement, for the schema test.
#[cfg(test)]
pub const ALL: &[&str] = &[
    DELETE_OLD_PLACEMENTS,
    DELETE_OLD_FOLDS,
    DELETE_UNUSED_NAMES,
    DELETE_FINISHED,
    DELETE_ABANDONED,
    DELETE_ACTIONS,
    DELETE_SEAT_LOG,
    FORGET_PURGED,
    DELETE_UNUSED_SESSIONS,
];

impl Store {
    /// Runs the retention job until `shutdown`: every `opts.every`, if this
    /// server holds (or can take) the job's lock, one pass.
    pub async fn retention_task(self, opts: RetentionOptions, mut shutdown: Shutdown) {
        let mut ticker = tokio::time::interval(opts.every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The connection holding the lock, while this server runs the job.
        let mut holder: Option<PgConnection> = None;
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = shutdown.recv() => return,
            }
            if holder.is_none() {
                holder = match self.take_retention_lock().await {
                    Ok(Some(conn)) => {
                        tracing::info!("retention: this server runs the retention job");
                        Some(conn)
                    }
                    Ok(None) => None,
                    Err(err) => {
                        tracing::debug!(error = %err, "retention: cannot try the lock");
                        None
                    }
                };
            }
            let Some(conn) = holder.as_mut() else {
                continue;
            };
            let pass = self.retention_pass(conn, &opts, &shutdown).await;
            match &pass {
                Ok(deleted) => self.metrics().retention_deleted(&deleted.by_kind()),
                Err(_) => self.metrics().retention_failed(),
            }
            match pass {
                Ok(deleted) if deleted.any() => tracing::info!(
                    finished_games = deleted.finished_games,
                    abandoned_games = deleted.abandoned_games,
                    sessions = deleted.sessions,
                    seats = deleted.seats,
                    actions = deleted.actions,
                    seat_log = deleted.seat_log,
                    names = deleted.names,
                    "retention: deleted"
                ),
                Ok(_) => {}
                Err(err) => {
                    // The lock may be gone with the connection: let go, and
                    // try again (this server or another) at the next tick.
                    tracing::warn!(error = %err, "retention: pass failed; letting the job go");
                    holder = None;
                }
            }
        }
    }

    /// A connection of its own holding the job's lock, or `None` if
    /// another server holds it.
    async fn take_retention_lock(&self) -> Result<Option<PgConnection>, Error> {
        let mut conn = self.pool.acquire().await?.detach();
        let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(LOCK_KEY)
            .fetch_one(&mut conn)
            .await?;
        Ok(taken.then_some(conn))
    }

    /// One pass, in batches, on the lock's connection.
    async fn retention_pass(
        &self,
        conn: &mut PgConnection,
        opts: &RetentionOptions,
        shutdown: &Shutdown,
    ) -> Result<Deleted, Error> {
        let window_ms = i64::try_from(opts.window.as_millis()).unwrap_or(i64::MAX);
        let abandoned_ms = self.lobby_seat_ttl_ms.saturating_mul(ABANDONED_TTLS);
        let mut deleted = Deleted::default();
        for (sql, after_ms, abandoned) in [
            (DELETE_FINISHED, window_ms, false),
            (DELETE_ABANDONED, abandoned_ms, true),
        ] {
            loop {
                let (games, seats, sessions): (i64, i64, i64) = sqlx::query_as(sql)
                    .bind(after_ms)
                    .bind(GAMES_PER_BATCH)
                    .fetch_one(&mut *conn)
                    .await?;
                if abandoned {
                    deleted.abandoned_games += games;
                } else {
                    deleted.finished_games += games;
                }
                deleted.seats += seats;
                deleted.sessions += sessions;
                if games < GAMES_PER_BATCH || shutdown.is_shutdown() {
                    break;
                }
                tokio::time::sleep(BATCH_PAUSE).await;
            }
        }
        deleted.actions = batches(conn, DELETE_ACTIONS, None, shutdown).await?;
        deleted.seat_log = batches(conn, DELETE_SEAT_LOG, None, shutdown).await?;
        sqlx::query(FORGET_PURGED).execute(&mut *conn).await?;
        deleted.sessions +=
            batches(conn, DELETE_UNUSED_SESSIONS, Some(window_ms), shutdown).await?;
        let names_ms = i64::try_from(opts.names_unused.as_millis()).unwrap_or(i64::MAX);
        deleted.names = batches(conn, DELETE_UNUSED_NAMES, Some(names_ms), shutdown).await?;
        deleted.placements = batches(conn, DELETE_OLD_PLACEMENTS, Some(window_ms), shutdown)
            .await?
            + batches(conn, DELETE_OLD_FOLDS, Some(window_ms), shutdown).await?;
        Ok(deleted)
    }
}

/// Runs `sql` (`$1` batch size, or `$1` `arg` and `$2` batch size) until
/// it deletes less than a batch; the rows deleted.
async fn batches(
    conn: &mut PgConnection,
    sql: &'static str,
    arg: Option<i64>,
    shutdown: &Shutdown,
) -> Result<i64, Error> {
    let mut total = 0;
    loop {
        let query = sqlx::query(sql);
        let query = match arg {
            Some(arg) => query.bind(arg),
            None => query,
        };
        let rows = query
            .bind(ROWS_PER_BATCH)
            .execute(&mut *conn)
            .await?
            .rows_affected() as i64;
        total += rows;
        if rows < ROWS_PER_BATCH || shutdown.is_shutdown() {
            return Ok(total);
        }
        tokio::time::sleep(BATCH_PAUSE).await;
    }
}
