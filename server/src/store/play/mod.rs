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
//!
//! The rooms: [`calls`] (requests and results), [`snapshot`] (a game as
//! the client sees it), [`reads`] and [`decode`] (what the statements
//! return), [`known`] (the per-game cache), [`apply`] (the pure decisions
//! of a commit), [`write`] (the compare-and-set write), [`join`] and
//! [`state`].

mod apply;
mod calls;
mod decode;
mod join;
mod known;
mod reads;
mod snapshot;
#[cfg(test)]
mod sql_tests;
mod state;
#[cfg(test)]
mod tests;
mod write;

use crate::store::tuning::*;

use crate::error::Error;
use crate::store::Store;
use crate::store::gates::Turn;
use crate::store::queries::*;

use self::apply::*;
use self::decode::*;
use self::known::*;
use self::reads::*;
use self::snapshot::*;
use self::state::*;

pub use self::calls::{ActCall, Acted, Identity, Input, Joined, LeaveCall, Left, Ranking};
pub(crate) use self::calls::{Call, CallGates, Reply};
pub(in crate::store) use self::decode::game_row;
pub(crate) use self::known::KnownGames;
pub use self::snapshot::{Roster, Snapshot};
pub(in crate::store) use self::state::advance_to;

impl Store {
    /// Applies one action at the current tick, exactly once per sequence
    /// number.
    pub async fn act(&self, call: &ActCall) -> Result<Acted, Error> {
        match self.write_routed(Call::Act(call.clone())).await? {
            Reply::Acted(acted) => Ok(*acted),
            Reply::Left(_) => Err(Error::Internal("an Act was answered as a Leave".into())),
        }
    }

    /// Leaves the game (a forfeit while it runs), exactly once per sequence
    /// number.
    pub async fn leave(&self, call: &LeaveCall) -> Result<Left, Error> {
        match self.write_routed(Call::Leave(call.clone())).await? {
            Reply::Left(left) => Ok(left),
            Reply::Acted(_) => Err(Error::Internal("a Leave was answered as an Act".into())),
        }
    }

    /// [`Store::write`] on the cluster of the call's game; where the
    /// game's partition is moving or moved ([`Error::Moved`]), again on
    /// the cluster the map names once it names another (see
    /// [`moves`](crate::store::moves)).
    async fn write_routed(&self, call: Call) -> Result<Reply, Error> {
        let game_id = call.game_id();
        let deadline = tokio::time::Instant::now() + self.db_timeout;
        loop {
            let store = self.route(game_id)?;
            match store.write(call.clone()).await {
                Err(Error::Moved(why)) => {
                    tracing::debug!(game_id, %why, "the game's partition moves: waiting for the map");
                    self.await_move(game_id, &store, deadline).await?;
                }
                other => return other,
            }
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
}
