//! SQL of the registry of live servers.
//!
//! Each server upserts its row on every heartbeat; a row whose heartbeat is
//! older than the TTL, judged by the database clock, is a dead server. No
//! single naming service: any server can answer the list.

use std::time::Duration;

use super::Store;
use crate::error::Error;

/// A server whose heartbeat is within the TTL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveServer {
    pub id: String,
    pub address: String,
    pub heartbeat_age_ms: u32,
}

/// What a heartbeat read of the cluster, for `crate::seating`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Beat {
    /// Games waiting or playing.
    pub live: u32,
    /// The smallest limit on them the other live servers learned.
    pub shared: Option<u32>,
}

/// Rows of servers silent this long are deleted (dead for good).
const FORGET_AFTER_S: i64 = 600;

impl Store {
    /// Records a heartbeat of server `id`, with its advertised address, the
    /// limit on running games it learned (see `crate::seating`) and the
    /// database clusters it has opened (see [`Store::opened_clusters`]); in the
    /// same statement, reads what joins are seated by: the running games
    /// (written within `live_within`) and the smallest limit the other
    /// servers heard from within `shared_within` learned.
    pub async fn heartbeat(
        &self,
        id: &str,
        address: &str,
        game_limit: Option<u32>,
        live_within: Duration,
        shared_within: Duration,
    ) -> Result<Beat, Error> {
        let clusters = self.opened_clusters();
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let done = sqlx::query_as::<_, (i64, Option<i32>)>(
                "WITH beat AS (INSERT INTO servers (id, address, game_limit, clusters) \
                 VALUES ($1, $2, $3, $6) \
                 ON CONFLICT (id) DO UPDATE SET address = excluded.address, \
                 game_limit = excluded.game_limit, clusters = excluded.clusters, \
                 heartbeat_at = now()) \
                 SELECT (SELECT count(*) FROM games WHERE phase IN (1, 2) \
                 AND updated_at > now() - $4::bigint * interval '1 millisecond'), \
                 (SELECT min(game_limit) FROM servers WHERE id <> $1 \
                 AND heartbeat_at > now() - $5::bigint * interval '1 millisecond')",
            )
            .bind(id)
            .bind(address)
            .bind(game_limit.map(|l| i32::try_from(l).unwrap_or(i32::MAX)))
            .bind(live_within.as_millis() as i64)
            .bind(shared_within.as_millis() as i64)
            .bind(clusters.clone())
            .fetch_one(lease.conn())
            .await;
            let (live, shared) = lease.settle_commit(self, done.map_err(Error::from))?;
            Ok(Beat {
                live: u32::try_from(live).unwrap_or(u32::MAX),
                shared: shared.map(|l| u32::try_from(l).unwrap_or(0)),
            })
        })
        .await
    }

    /// Removes server `id` from the registry (on shutdown), and forgets
    /// servers that have been silent for a long time.
    pub async fn deregister(&self, id: &str) -> Result<(), Error> {
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let done = sqlx::query(
                "DELETE FROM servers WHERE id = $1 \
                 OR heartbeat_at < now() - $2 * interval '1 second'",
            )
            .bind(id)
            .bind(FORGET_AFTER_S as f64)
            .execute(lease.conn())
            .await;
            lease.settle_commit(self, done.map_err(Error::from))?;
            Ok(())
        })
        .await
    }

    /// Servers whose last heartbeat is younger than `ttl`, oldest first.
    pub async fn live_servers(&self, ttl: Duration) -> Result<Vec<LiveServer>, Error> {
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let rows = sqlx::query_as::<_, (String, String, i64)>(
                "SELECT id, address, \
                        floor(extract(epoch FROM clock_timestamp() - heartbeat_at) * 1000)::bigint \
                 FROM servers \
                 WHERE heartbeat_at > clock_timestamp() - $1 * interval '1 millisecond' \
                 ORDER BY started_at, id",
            )
            .bind(ttl.as_millis() as f64)
            .fetch_all(lease.conn())
            .await;
            let rows = lease.settle(rows.map_err(Error::from))?;
            Ok(rows
                .into_iter()
                .map(|(id, address, age_ms)| LiveServer {
                    id,
                    address,
                    heartbeat_age_ms: age_ms.clamp(0, u32::MAX as i64) as u32,
                })
                .collect())
        })
        .await
    }
}
