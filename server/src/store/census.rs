//! SQL of the census: how many games wait and run, and how many players
//! sit in them, for the metrics and `borbaman status`.
//!
//! One short read, made only when someone asks (a scrape, a status call),
//! never on a game call's path. A game or a player counts while it was
//! written in the last [`ACTIVE_S`] seconds, so lobbies and games that
//! every client left do not count forever.

use super::Store;
use crate::error::Error;

/// What counts as active: written this recently, in seconds.
pub const ACTIVE_S: i64 = 10;

/// Games and players the database holds now (the whole cluster's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    pub games_waiting: i64,
    pub games_running: i64,
    pub players_seated: i64,
}

const CENSUS: &str = "\
SELECT count(*) FILTER (WHERE phase = 1), count(*) FILTER (WHERE phase = 2), \
 (SELECT count(*) FROM sessions s JOIN games sg ON sg.id = s.game_id \
  WHERE s.in_game AND sg.phase IN (1, 2) \
  AND s.last_active_at > now() - $1 * interval '1 second') \
FROM games WHERE phase IN (1, 2) AND updated_at > now() - $1 * interval '1 second'";

impl Store {
    /// Counts the active games and seated players.
    pub async fn census(&self) -> Result<Census, Error> {
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let row: Result<(i64, i64, i64), _> = sqlx::query_as(CENSUS)
                .bind(ACTIVE_S as f64)
                .fetch_one(lease.conn())
                .await;
            let (games_waiting, games_running, players_seated) =
                lease.settle(row.map_err(Error::from))?;
            Ok(Census {
                games_waiting,
                games_running,
                players_seated,
            })
        })
        .await
    }
}
