//! Growing the clusters a running game is partitioned over, as an
//! operator does it: register one more cluster at home (`borbaman db
//! add-cluster`), then plan the moves that give it its share of the
//! partitions (`borbaman db rebalance`, which carries them out one at a
//! time with [`move_partition`](super::mover::move_partition)). The
//! command line and the growth bench (`bench --grow-at-s`) both call
//! these, so a bench grows a cluster exactly as an operator would.

use std::time::Duration;

use anyhow::Context;

use super::partitions::{ClusterRow, ClusterSpec};
use super::{Store, StoreOptions};

/// A store on `url` for an operator's command (a couple of connections,
/// patient deadlines), with the schema applied: a cluster from before a
/// migration gets it first.
pub async fn open(url: &str) -> anyhow::Result<Store> {
    let opts = StoreOptions {
        db_timeout: Duration::from_secs(10),
        acquire_timeout: Duration::from_secs(10),
        idle_txn_timeout: Duration::from_secs(10),
        min_connections: 0,
        max_connections: 2,
        ..StoreOptions::default()
    };
    let store = Store::connect(url, &opts)?;
    store
        .migrate()
        .await
        .with_context(|| format!("cannot reach the database at {url}"))?;
    Ok(store)
}

/// Registers cluster `spec` at home (`home_url`) and returns it as home
/// lists it. Its schema comes first, so that a cluster home lists is one
/// every server can open (they do within half a second, without a
/// restart); it holds no partition, and takes no write, until partitions
/// move to it.
pub async fn add_cluster(home_url: &str, spec: &ClusterSpec) -> anyhow::Result<ClusterRow> {
    let cluster = open(&spec.url)
        .await
        .with_context(|| format!("cannot prepare cluster {}", spec.name))?;
    cluster.set_fence(&[]).await?;
    cluster.close().await;
    let home = open(home_url).await.context("the home cluster")?;
    let registered = home
        .register_clusters(std::slice::from_ref(spec), false)
        .await;
    let rows = match registered {
        Ok(()) => home.clusters().await,
        Err(err) => Err(err),
    };
    home.close().await;
    rows?
        .into_iter()
        .find(|r| r.name == spec.name)
        .context("the cluster is not listed after registering it")
}

/// The moves (partition, target cluster) that spread the partitions
/// evenly over the clusters home lists now
/// ([`plan_rebalance`](super::mover::plan_rebalance)); none when they are
/// spread already.
pub async fn rebalance_plan(home_url: &str) -> anyhow::Result<Vec<(u16, String)>> {
    let home = open(home_url).await.context("the home cluster")?;
    let rows = home.clusters().await;
    home.close().await;
    Ok(super::mover::plan_rebalance(&rows?))
}
