//! Reads for spectators: any game's state by its id, and the games a
//! spectator may pick from. No session, no lock, and never a write: the
//! clock's advance is computed in memory (as [`Store::state`] does) but not
//! committed, so spectators add no write to any game, however many watch.

use super::Store;
use super::play::{Snapshot, advance_to, game_row};
use super::queries::{LIVE_GAMES, WATCH_GAME};
use crate::error::Error;
use borbaman_game::{Phase, TICK_MS};

impl Store {
    /// Game `game_id` advanced to the current tick; `FailedPrecondition`
    /// for an unknown game. Read on the cluster of the game's partition;
    /// where it is moving or moved, on the one the map names next (see
    /// [`moves`](crate::store::moves)).
    pub async fn watch(&self, game_id: u64) -> Result<Snapshot, Error> {
        let id = i64::try_from(game_id)
            .map_err(|_| Error::InvalidArgument(format!("game id {game_id} is out of range")))?;
        let deadline = tokio::time::Instant::now() + self.db_timeout;
        loop {
            let store = self.route(game_id)?;
            match store.watch_here(id).await {
                Err(Error::Moved(_)) => self.await_move(game_id, &store, deadline).await?,
                other => return other,
            }
        }
    }

    async fn watch_here(&self, id: i64) -> Result<Snapshot, Error> {
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let result = async {
                let conn = lease.conn();
                let row = sqlx::query(WATCH_GAME)
                    .bind(id)
                    .bind(i64::from(TICK_MS))
                    .fetch_optional(&mut *conn)
                    .await?;
                let Some(row) = row else {
                    // Not here: moved away (this server's map is stale), or unknown.
                    crate::store::moves::refuse_if_fenced(conn, id as u64).await?;
                    let here: bool =
                        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM games WHERE id = $1)")
                            .bind(id)
                            .fetch_one(&mut *conn)
                            .await?;
                    if here {
                        // The read met the fence of a move's copy, lifted since.
                        return Err(crate::store::moves::fence_lifted(id as u64));
                    }
                    return Err(Error::FailedPrecondition(format!(
                        "there is no game {id}; `borbaman watch` without an id lists the live ones"
                    )));
                };
                let (now_tick, mut snapshot) = game_row(&row, 0)?;
                advance_to(&mut snapshot, now_tick);
                Ok(snapshot)
            }
            .await;
            lease.settle(result)
        })
        .await
    }

    /// Games waiting for players or running at the current tick, newest
    /// first, at most `limit`.
    pub async fn live_games(&self, limit: u32) -> Result<Vec<Snapshot>, Error> {
        let others = self.other_clusters();
        if !others.is_empty() {
            let mut games = self.live_games_here(limit).await?;
            for store in others {
                games.extend(store.live_games_here(limit).await?);
            }
            games.sort_by_key(|g| std::cmp::Reverse(g.game_id));
            games.truncate(limit as usize);
            return Ok(games);
        }
        self.live_games_here(limit).await
    }

    /// [`Store::live_games`] of this cluster only.
    async fn live_games_here(&self, limit: u32) -> Result<Vec<Snapshot>, Error> {
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let rows = sqlx::query(LIVE_GAMES)
                .bind(i64::from(limit))
                .bind(i64::from(TICK_MS))
                .fetch_all(lease.conn())
                .await;
            let rows = lease.settle(rows.map_err(Error::from))?;
            let mut games = Vec::with_capacity(rows.len());
            for row in &rows {
                let (now_tick, mut snapshot) = game_row(row, 0)?;
                advance_to(&mut snapshot, now_tick);
                let seated = (0..borbaman_game::SEATS as u8)
                    .any(|seat| snapshot.state.player(seat).is_some_and(|p| p.seated));
                // A game the clock finished is no longer live, and a lobby
                // everyone left has nothing to watch.
                if snapshot.state.phase() != Phase::Finished && seated {
                    games.push(snapshot);
                }
            }
            Ok(games)
        })
        .await
    }
}
