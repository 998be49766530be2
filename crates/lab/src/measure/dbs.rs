//! The run's database readings, on every database cluster: which
//! clusters there are, their partition map, their counters, statistics
//! views and row counts.

use std::time::Duration;

use borbaman_server::store::audit;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use super::record::RunClock;
use super::*;
use crate::shutdown::Shutdown;

/// One connection to `url`, for readings and checks.
pub(super) async fn connect_one(url: &str) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
}

/// The database clusters as they are now, home first: a local cluster's
/// own; else home (`database_url`) and the others it lists; none without
/// a database.
pub(super) async fn db_clusters_now(target: &Target) -> Vec<DbClusterNow> {
    if let Some(now) = &target.db_clusters {
        let now = now.clone();
        if let Ok(clusters) = tokio::task::spawn_blocking(move || now()).await {
            return clusters;
        }
    }
    let Some(home) = target.database_url.clone() else {
        return Vec::new();
    };
    let pids = target.database_pids.as_ref().map(|pids| pids());
    let mut clusters = vec![DbClusterNow {
        name: borbaman_cluster::db_cluster_name(0),
        url: home.clone(),
        pids,
    }];
    // A database from before partitions lists none: home alone.
    if let Ok(listed) = clusters::listing(&home).await {
        clusters.extend(listed.into_iter().filter_map(|(name, url, _)| {
            Some(DbClusterNow {
                name,
                url: url?,
                pids: None,
            })
        }));
    }
    clusters
}

/// Which cluster holds each partition, from home's map at the end of the
/// run (the rule servers spread a fresh install's partitions by, when it
/// cannot be read).
pub(super) async fn partition_map(clusters: &[DbClusterNow]) -> clusters::PartitionMap {
    let names = || clusters.iter().map(|c| c.name.clone()).collect();
    let Some(home) = clusters.first() else {
        return clusters::PartitionMap::spread(names());
    };
    match clusters::listing(&home.url).await {
        Ok(listed) if listed.len() == clusters.len() => clusters::PartitionMap::from_listing(
            &listed
                .into_iter()
                .map(|(name, _, partitions)| (name, partitions))
                .collect::<Vec<_>>(),
        ),
        _ => clusters::PartitionMap::spread(names()),
    }
}

/// Each cluster's database counters (and CPU, when its processes are
/// known) on the connections `dbs`, by cluster.
pub(super) async fn read_costs(
    dbs: &[Option<PgPool>],
    clusters: &[DbClusterNow],
) -> Vec<Option<dbcost::Reading>> {
    let mut readings = Vec::new();
    for (k, db) in dbs.iter().enumerate() {
        let pids = clusters.get(k).and_then(|c| c.pids.clone());
        readings.push(match db {
            Some(db) => dbcost::read(db, pids).await.ok(),
            None => None,
        });
    }
    readings
}

/// Every cluster's statistics views as one snapshot; `None` when one
/// cannot be read.
pub(super) async fn read_stats(dbs: &[Option<PgPool>]) -> Option<pgview::Snapshot> {
    let mut snapshots = Vec::new();
    for db in dbs {
        let views = audit::stat_snapshot(db.as_ref()?).await.ok()?;
        snapshots.push(pgview::snapshot(views));
    }
    pgview::merge(snapshots)
}

/// The clusters' readings as one: `None` unless every cluster was read.
pub(super) fn total_cost(readings: &[Option<dbcost::Reading>]) -> Option<dbcost::Reading> {
    let all: Option<Vec<dbcost::Reading>> = readings.iter().copied().collect();
    dbcost::Reading::sum(&all?)
}

/// Every table's rows at the start, every minute, and once more when the
/// run stops (a failed read is left out: the database may be failing over).
pub(super) async fn count_rows(
    dbs: Vec<PgPool>,
    clock: RunClock,
    mut stop: Shutdown,
) -> Vec<report::TableRows> {
    let mut samples = Vec::new();
    let mut ticker = tokio::time::interval(Duration::from_secs(60));
    loop {
        let stopping = tokio::select! {
            _ = ticker.tick() => false,
            _ = stop.recv() => true,
        };
        // Each table's rows on every cluster added up (a game's rows are
        // on one cluster; the global tables are home's, empty elsewhere).
        let mut rows = std::collections::BTreeMap::new();
        let mut read = true;
        for db in &dbs {
            match audit::table_rows(db).await {
                Ok(counts) => {
                    for (table, n) in counts {
                        *rows.entry(table.to_string()).or_insert(0) += n;
                    }
                }
                Err(_) => read = false,
            }
        }
        if read {
            samples.push(report::TableRows {
                at_s: clock.started().elapsed().as_secs_f64(),
                rows,
            });
        }
        if stopping {
            return samples;
        }
    }
}
