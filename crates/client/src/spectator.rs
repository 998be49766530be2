//! Watching a game without playing in it: [`Spectator`] follows one game by
//! its id through a [`ServerPool`] (so with the same failover as a player),
//! holds no seat and no token, and like a session never hands out a state
//! older than one it has shown. [`live_games`] lists the games there are to
//! watch.

use borbaman_proto::pb::{GameState, ListGamesRequest, LiveGame, WatchStateRequest};

use crate::pool::{CallInfo, PoolError, ServerPool};
use crate::wire_check::check_state;

/// Games waiting for players or running, newest first (at most `limit`;
/// 0: the servers' default).
pub async fn live_games(pool: &ServerPool, limit: u32) -> Result<Vec<LiveGame>, PoolError> {
    let (reply, _) = pool
        .call(|mut client| async move { client.list_games(ListGamesRequest { limit }).await })
        .await?;
    Ok(reply.games)
}

/// One spectator of one game.
pub struct Spectator {
    pool: ServerPool,
    game_id: u64,
    latest: Option<GameState>,
}

impl Spectator {
    /// Watches `game_id`; its calls go to the game's server, as its
    /// players' do.
    pub fn new(pool: ServerPool, game_id: u64) -> Spectator {
        pool.set_game(Some(game_id));
        Spectator {
            pool,
            game_id,
            latest: None,
        }
    }

    /// The game's state, advanced to the current tick by the server; never
    /// older than one returned before.
    pub async fn state(&mut self) -> Result<(GameState, CallInfo), PoolError> {
        let request = WatchStateRequest {
            game_id: self.game_id,
        };
        let (reply, info) = self
            .pool
            .call(|mut client| async move { client.watch_state(request).await })
            .await?;
        let state = reply
            .state
            .ok_or_else(|| PoolError::Status(tonic::Status::internal("server sent no state")))?;
        check_state(&state).map_err(PoolError::InvalidState)?;
        let newer = self
            .latest
            .as_ref()
            .is_none_or(|seen| (state.version, state.tick) >= (seen.version, seen.tick));
        if newer {
            self.latest = Some(state);
        }
        let latest = self.latest.clone().expect("a state was seen");
        Ok((latest, info))
    }

    /// Watches `game_id` on a pool that serves another game too (a waiting
    /// player's): its calls go wherever that pool's go.
    pub fn sharing(pool: ServerPool, game_id: u64) -> Spectator {
        Spectator {
            pool,
            game_id,
            latest: None,
        }
    }

    pub fn game_id(&self) -> u64 {
        self.game_id
    }

    /// The newest state seen.
    pub fn latest(&self) -> Option<&GameState> {
        self.latest.as_ref()
    }
}
