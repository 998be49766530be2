//! The local cluster `borbaman play` starts without `--servers`: the
//! database and servers (started in a blocking thread while the screen
//! shows progress), a supervisor that starts again any server that dies, and
//! the bots that fill the player's game.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use borbaman_client::pool::{PoolConfig, PoolError};
use borbaman_cluster::local::{ClusterConfig, ClusterError, Database, LocalCluster};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::terminal::ClusterSlot;
use super::{Seat, Setup, progress};
use crate::args::DbKind;
use crate::bot;
use crate::shutdown::Shutdown;
use crate::ui::View;

/// Bots started with a local cluster.
const LOCAL_BOTS: usize = 3;
const LOCAL_SERVERS: usize = 3;
/// How often the supervisor looks for dead local servers.
const SUPERVISE_INTERVAL: Duration = Duration::from_millis(250);

/// Starts the local cluster in a blocking thread, showing its progress.
pub(super) async fn start(
    setup: &Setup,
    view: &watch::Sender<View>,
    slot: &ClusterSlot,
    quit: &Shutdown,
) -> anyhow::Result<Vec<String>> {
    let pg_dir = postgres_dir(&setup.data_dir);
    let config = ClusterConfig {
        servers: LOCAL_SERVERS,
        database: match setup.db.db {
            DbKind::Single => Database::from_env_or(Database::Persistent(pg_dir)),
            DbKind::Ha => Database::Replicated,
        },
        fsync: true,
        server_command: None,
        server_args: Vec::new(),
        log_dir: Some(setup.log_dir.clone()),
        database_proxy: false,
        wan: setup.wan.into_iter().collect(),
        cpu: Default::default(),
        db_clusters: setup.db.db_clusters,
        spare_db_clusters: false,
    };
    let steps = view.clone();
    let slot = slot.clone();
    let quit = quit.clone();
    tokio::task::spawn_blocking(move || {
        let cluster =
            LocalCluster::start(config, |step| progress(&steps, step)).map_err(explain)?;
        let addresses = cluster.addresses();
        if !quit.is_shutdown() {
            *slot.lock().unwrap() = Some(cluster);
        }
        Ok(addresses)
    })
    .await
    .context("the start-up thread failed")?
}

/// Adds what to do next to a cluster start-up failure.
fn explain(error: ClusterError) -> anyhow::Error {
    match error {
        ClusterError::Postgres(e) => anyhow::anyhow!("cannot start PostgreSQL: {e}"),
        ClusterError::Replicated(e) => {
            anyhow::anyhow!("cannot start the replicated database (--db ha): {e}")
        }
        other => anyhow::anyhow!("cannot start the local cluster: {other}"),
    }
}

/// Where the private PostgreSQL keeps its data: under the user's data dir,
/// except for root, whose home the `postgres` user cannot enter.
fn postgres_dir(data_dir: &std::path::Path) -> PathBuf {
    let is_root = unsafe { libc::geteuid() } == 0;
    if is_root && data_dir.starts_with("/root") {
        PathBuf::from("/var/lib/borbaman/postgres")
    } else {
        data_dir.join("postgres")
    }
}

/// Starts again any local server that died (killed from a shell, crashed),
/// as a supervisor would, until the player quits.
pub(super) async fn supervise(slot: ClusterSlot, mut quit: Shutdown) {
    let mut ticker = tokio::time::interval(SUPERVISE_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = quit.recv() => return,
        }
        let slot = slot.clone();
        let revived = tokio::task::spawn_blocking(move || {
            let mut cluster = slot.lock().unwrap_or_else(|e| e.into_inner());
            cluster.as_mut().map(LocalCluster::revive_exited)
        })
        .await;
        match revived {
            Ok(Some(Ok(revived))) if !revived.is_empty() => {
                tracing::info!(?revived, "restarted local servers that had died");
            }
            Ok(Some(Err(e))) => tracing::warn!(error = %e, "cannot restart a local server"),
            _ => {}
        }
    }
}

/// Starts the bots that fill a local game. They keep their sessions beside
/// the player's, so a restarted `play` brings them back into its game.
pub(super) async fn start_bots(
    seat: &Seat,
    servers: &[String],
    quit: Shutdown,
    follow: watch::Receiver<u64>,
) -> Result<JoinSet<()>, PoolError> {
    let sessions = seat.state_dir.local_bots();
    if seat.state_dir.load(&seat.name).is_none() {
        // No game to go back to: neither have the bots.
        sessions.clear_all();
    }
    let team = bot::BotTeam {
        sessions: Some(sessions),
        map: seat.map.clone(),
        level: seat.bots,
        follow: Some(follow),
        ..bot::BotTeam::new(LOCAL_BOTS)
    };
    let (outcomes, _) = tokio::sync::mpsc::unbounded_channel();
    bot::spawn_bots(servers, PoolConfig::default(), &team, quit, outcomes).await
}
