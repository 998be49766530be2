//! SQL of the census: how many games wait and run, and how many players
//! sit in them, for the metrics and `borbaman status`.
//!
//! One read per database cluster, made only when someone asks (a scrape,
//! a status call; at most once a second per server), never on a game
//! call's path. It scans the waiting and running games (no index covers
//! the running ones). A seat counts while its player wrote in the last
//! [`ACTIVE_S`] seconds, and a game while one of its seats does, so
//! lobbies and games that every client left do not count forever.
//!
//! With games partitioned over several clusters each cluster is counted
//! on its own ([`Store::census_by_cluster`]), with its primary and the
//! partitions it holds, so `borbaman status` can show one line per
//! cluster and a cluster that does not answer leaves the others counted.

use std::time::Duration;

use tokio::task::JoinSet;

use super::Store;
use super::partitions::PARTITIONS;
use crate::error::Error;
use crate::patroni::PgAddress;

/// What counts as active: written this recently, in seconds.
pub const ACTIVE_S: i64 = 10;

/// Games and players the database holds now (the whole cluster's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    pub games_waiting: i64,
    pub games_running: i64,
    pub players_seated: i64,
}

impl std::ops::Add for Census {
    type Output = Census;

    fn add(self, more: Census) -> Census {
        Census {
            games_waiting: self.games_waiting + more.games_waiting,
            games_running: self.games_running + more.games_running,
            players_seated: self.players_seated + more.players_seated,
        }
    }
}

/// One database cluster as the census saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterCensus {
    /// `home`, or its name as home lists it.
    pub name: String,
    /// `host:port` of its primary: the member Patroni names when the
    /// cluster is followed (`None` until one is named), else the host and
    /// port of its URL.
    pub primary: Option<String>,
    /// How many partitions it holds.
    pub partitions: usize,
    /// Its games and players; `None` when it did not answer in time.
    pub census: Option<Census>,
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
    /// Every cluster this server holds, home first, with its primary and
    /// partitions as they are now (no census).
    pub fn clusters_now(&self) -> Vec<ClusterCensus> {
        let single = self.partitions.is_none();
        self.every_cluster()
            .iter()
            .map(|store| ClusterCensus {
                name: store.cluster.to_string(),
                primary: store.primary_address(),
                // One cluster holds every partition (its list is empty:
                // no map); with several, each holds those the map gives it.
                partitions: if single {
                    PARTITIONS as usize
                } else {
                    store.held.read().expect("held partitions").len()
                },
                census: None,
            })
            .collect()
    }

    /// Counts every cluster's active games and seated players at once,
    /// home first, each within `timeout`.
    pub async fn census_by_cluster(&self, timeout: Duration) -> Vec<ClusterCensus> {
        let mut shown = self.clusters_now();
        let mut counting = JoinSet::new();
        for (at, store) in self.every_cluster().into_iter().enumerate() {
            counting.spawn(async move {
                let counted = tokio::time::timeout(timeout, store.census_here()).await;
                (at, counted.ok().and_then(Result::ok))
            });
        }
        while let Some(joined) = counting.join_next().await {
            if let Ok((at, census)) = joined
                && let Some(shown) = shown.get_mut(at)
            {
                shown.census = census;
            }
        }
        shown
    }

    /// Where this cluster's primary listens, as [`ClusterCensus::primary`].
    pub fn primary_address(&self) -> Option<String> {
        match &self.follow {
            Some(_) => self.primary().map(|p| p.address.to_string()),
            None => Some(
                PgAddress {
                    host: self.plain.get_host().to_string(),
                    port: self.plain.get_port(),
                }
                .to_string(),
            ),
        }
    }

    /// The census of this cluster only.
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
