//! Reads for spectators: any game's state by its id, and the games a
//! spectator may pick from. No session, no lock, and never a write: the
//! clock's advance is computed in memory (as [`Store::state`] does) but not
//! committed, so spectators add no write to any game, however many watch.

use super::Store;
use super::play::{Snapshot, advance_to, game_row};
use super::queries::{LIVE_GAMES, READ_GAME};
use crate::error::Error;
use borbaman_game::{Phase, TICK_MS};

impl Store {
    /// Game `game_id` advanced to the current tick; `FailedPrecondition`
    /// for an unknown game.
    pub async fn watch(&self, game_id: u64) -> Result<Snapshot, Error> {
        let id = i64::try_from(game_id)
            .map_err(|_| Error::InvalidArgument(format!("game id {game_id} is out of range")))?;
        if let super::partitions::Routed::Other(store) = self.route(game_id) {
            return Box::pin(store.watch(game_id)).await;
        }
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let row = sqlx::query(READ_GAME)
                .bind(id)
                .bind(i64::from(TICK_MS))
                .fetch_optional(lease.conn())
                .await;
            let row = lease.settle(row.map_err(Error::from))?.ok_or_else(|| {
                Error::FailedPrecondition(format!(
                    "there is no game {game_id}; `borbaman watch` without an id lists the live ones"
                ))
            })?;
            let (now_tick, mut snapshot) = game_row(&row, 0)?;
            advance_to(&mut snapshot, now_tick);
            Ok(snapshot)
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
