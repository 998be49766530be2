//! What a server does about partitions moving between clusters (the move
//! itself is [`mover`](super::mover)).
//!
//! Every statement that writes a game checks that the game's partition is
//! writable on its cluster (`partition_fence`, see `writable!` in the
//! queries). A write that finds it fenced writes nothing and the call
//! learns why ([`refuse_if_fenced`], on the rare path of a write that
//! matched nothing twice in a row, or found no session): [`Error::Moved`]. The store then reads the map from
//! home until it names another cluster for the partition (at once when
//! this server's map was stale; within the move's read-only moment when
//! the partition is being cut over), and the call runs there.

use std::time::Duration;

use sqlx::postgres::PgConnection;
use tokio::time::Instant;

use super::Store;
use super::partitions::partition_of;
use crate::error::Error;

/// How often a call held by a partition's move asks home for the map.
pub const MOVED_POLL: Duration = Duration::from_millis(5);

const WRITABLE: &str = "SELECT writable FROM partition_fence WHERE partition = $1";

/// `Err(Moved)` if game `game_id`'s partition is not writable on the
/// cluster of `conn`: what a write that matched nothing checks, so a
/// fenced partition is not taken for a lost compare-and-set and read and
/// written again.
pub(crate) async fn refuse_if_fenced(conn: &mut PgConnection, game_id: u64) -> Result<(), Error> {
    let partition = partition_of(game_id);
    let writable: Option<bool> = sqlx::query_scalar(WRITABLE)
        .bind(partition as i16)
        .fetch_optional(conn)
        .await?;
    if writable == Some(false) {
        return Err(moved(game_id));
    }
    Ok(())
}

/// The read of game `game_id`'s call met its partition fenced, and the
/// fence had lifted by the time it was checked: the call runs again.
pub(crate) fn fence_lifted(game_id: u64) -> Error {
    Error::Moved(format!(
        "game {game_id}'s partition {} was not readable on this cluster for a moment",
        partition_of(game_id)
    ))
}

fn moved(game_id: u64) -> Error {
    Error::Moved(format!(
        "game {game_id}'s partition {} is not writable on this cluster",
        partition_of(game_id)
    ))
}

impl Store {
    /// Waits, until `deadline`, for the map to send game `game_id` to a
    /// cluster other than `from` (the one that answered
    /// [`Error::Moved`]), or for `from` to take the partition's writes
    /// again (a move fences its source for a moment before its copy, to
    /// read the partition whole: see [`mover`](super::mover)), reading the
    /// map from home every [`MOVED_POLL`].
    pub(crate) async fn await_move(
        &self,
        game_id: u64,
        from: &Store,
        deadline: Instant,
    ) -> Result<(), Error> {
        loop {
            if self.route(game_id)?.cluster != from.cluster {
                return Ok(());
            }
            if Instant::now() + MOVED_POLL >= deadline {
                return Err(moved(game_id));
            }
            tokio::time::sleep(MOVED_POLL).await;
            self.reload_map().await?;
            if self.route(game_id)?.cluster == from.cluster && from.writable(game_id).await? {
                return Ok(());
            }
        }
    }

    /// Whether game `game_id`'s partition is writable on this cluster.
    async fn writable(&self, game_id: u64) -> Result<bool, Error> {
        let writable: Option<bool> = sqlx::query_scalar(WRITABLE)
            .bind(partition_of(game_id) as i16)
            .fetch_optional(&self.pool)
            .await?;
        Ok(writable != Some(false))
    }
}
