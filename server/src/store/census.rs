//! SQL of the census: how many games wait and run, and how many players
//! sit in them, for the metrics and `borbaman status`.
//!
//! One read, made only when someone asks (a scrape, a status call; at
//! most once a second per server), never on a game call's path. It scans
//! the waiting and running games (no index covers the running ones). A
//! seat counts while its player wrote in the last [`ACTIVE_S`] seconds, and
//! a game while one of its seats does, so lobbies and games that every
//! client left do not count forever.

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

/// A game counts while any seat was active lately (`active_at` holds each
/// seat's last write); its seated players are those seats.
const CENSUS: &str = "\
SELECT count(*) FILTER (WHERE phase = 1), count(*) FILTER (WHERE phase = 2), \
 coalesce(sum(active), 0)::bigint \
FROM (SELECT phase, \
       (SELECT count(*) FROM unnest(active_at) AS a \
        WHERE a > now() - $1 * interval '1 second') AS active \
      FROM games WHERE phase IN (1, 2)) AS live \
WHERE active > 0";

impl Store {
    /// Counts the active games and seated players.
    pub async fn census(&self) -> Result<Census, Error> {
        let mut total = self.census_here().await?;
        for store in self.other_clusters() {
            let more = store.census_here().await?;
            total.games_waiting += more.games_waiting;
            total.games_running += more.games_running;
            total.players_seated += more.players_seated;
        }
        Ok(total)
    }

    /// [`Store::census`] of this cluster only.
    async fn census_here(&self) -> Result<Census, Error> {
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
