//! The measurement engine that `borbaman bench` and `borbaman chaos` drive:
//! headless clients play real games through the same `ServerPool` as
//! players, one invocation every interval, beside floor probes (and, in a
//! chaos run, a fault injector), and the run is written up in a directory:
//!
//! - `invocations.csv`: one row per call;
//! - `summary.json`: percentiles, jitter, failovers, floors and ratios,
//!   invariants;
//! - `ecdf.svg` and `rtt.svg`: the charts;
//! - `faults.csv` when faults were injected;
//! - `logs/`: the servers' logs and, for a local cluster, PostgreSQL's
//!   (`postgres.log`, or `ha/pgN.log`), with its statistics views read
//!   before and after (`pg_stat_before.json`, `pg_stat_after.json`),
//!   and the machine's pressure readings (`machine.csv`).
//!
//! [`run_measured`] is the run itself.
//!
//! - [`record`]: per-invocation records and CSV.
//! - [`attribution`]: slow calls by part, and the stall windows.
//! - [`pgview`]: PostgreSQL's statistics and log over the run.
//! - [`machine`]: the machine's CPU and disk pressure over the run and in
//!   each stall window.
//! - [`report`]: percentiles, jitter, failover gaps, time breakdown.
//! - [`plot`]: `ecdf.svg` and `rtt.svg`.
//! - [`floors`]: the bare gRPC ping and bare PostgreSQL transaction floors.
//! - [`growth`]: a run that adds database clusters and moves partitions to
//!   them while it plays (`bench --grow-at-s`); `goodput.svg`.
//! - [`interrupt`]: Ctrl-C or SIGTERM stops a run and the cluster it started.
//! - [`workload`]: the headless clients.
//! - [`invariants`]: what must hold after every run.
//! - [`faults`]: the kinds of fault and the record of each injected one.
//! - [`distance`]: the figures of each emulated distance (`--wan`,
//!   `--wan-mix`) against the network's own round trip.

pub mod attribution;
pub mod capacity;
pub mod clusters;
mod conclude;
pub mod dbcost;
mod dbs;
pub mod distance;
pub mod faults;
pub mod floors;
pub mod growth;
pub mod interrupt;
pub mod invariants;
pub mod machine;
pub mod pgview;
pub mod plot;
mod progress;
pub mod quota;
pub mod record;
pub mod report;
mod run;
pub mod stats;
pub mod workload;

pub use conclude::{MAX_CLOSED_LOOP_ERROR_SHARE, conclude, too_many_errors};
pub use run::{init_tracing, run_end, run_measured};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::task::JoinHandle;

use crate::shutdown::Shutdown;
use borbaman_client::pool::PoolConfig;
use borbaman_cluster::local::{ClusterConfig, Database, LocalCluster};
use borbaman_cluster::{CpuQuotas, WanSpec};

use crate::args::DbKind;
use faults::FaultEvent;
use record::RunClock;
use workload::WorkloadConfig;

/// What a local cluster's database is: one PostgreSQL or the replicated
/// one, with or without fsync, and the CPU quotas of the database and the
/// servers.
#[derive(Clone, Copy, Debug)]
pub struct LocalSetup {
    pub db: DbKind,
    /// Database clusters the games are partitioned over (`--db-clusters`).
    pub db_clusters: usize,
    /// The database clusters but home are spares, not given to the
    /// servers (`bench --grow-at-s` adds them mid-run).
    pub spare_db_clusters: bool,
    pub fsync: bool,
    pub cpu: CpuQuotas,
}

/// Starts a local cluster of `servers` servers of this binary on a
/// throwaway database of its own (as `setup` says), saying what it does. `server_args` are passed to every server. With
/// `database_proxy` each server reaches the database through a proxy of its
/// own, which a fault can cut ([`LocalCluster::partition_database`]).
/// The servers' logs (and the replicated database's) are kept in
/// `log_dir`, so a fault can be read about after the run. With `wan`, the
/// servers sit behind delay proxies at those distances
/// (`ClusterConfig::wan`).
pub fn start_cluster(
    servers: usize,
    setup: LocalSetup,
    server_args: &[String],
    database_proxy: bool,
    wan: Vec<WanSpec>,
    log_dir: &Path,
) -> anyhow::Result<LocalCluster> {
    let config = ClusterConfig {
        fsync: setup.fsync,
        cpu: setup.cpu,
        wan,
        log_dir: Some(log_dir.to_path_buf()),
        server_args: server_args.to_vec(),
        database_proxy,
        database: match setup.db {
            DbKind::Single => Database::Temporary,
            DbKind::Ha => Database::Replicated,
        },
        db_clusters: setup.db_clusters,
        spare_db_clusters: setup.spare_db_clusters,
        ..ClusterConfig::temporary(servers)
    };
    let cluster = LocalCluster::start(config, |step| eprintln!("{step}"))
        .context("starting a local cluster")?;
    eprintln!("{}", describe_cluster(&cluster));
    Ok(cluster)
}

/// What a local cluster runs, by address and PID: to look at it (psql, a
/// server's metrics) while a run goes on, or to find what is left of it.
fn describe_cluster(cluster: &LocalCluster) -> String {
    let pids = |pids: Vec<u32>| {
        pids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    };
    // With several database clusters, each one's URL after its name.
    let urls = cluster.database_urls();
    let databases = match urls.len() {
        1 => urls.join(""),
        _ => urls
            .iter()
            .enumerate()
            .map(|(k, url)| format!("{} {url}", borbaman_cluster::db_cluster_name(k)))
            .collect::<Vec<_>>()
            .join(", "),
    };
    format!(
        "local cluster: database {databases} (pid {}); servers {} (pid {})",
        pids(cluster.database_pids()),
        cluster.addresses().join(" "),
        pids(cluster.pids()),
    )
}

/// What a measured run does.
#[derive(Clone, Debug)]
pub struct RunPlan {
    pub workload: WorkloadConfig,
    pub games: u32,
    pub floor_samples: usize,
    pub out: PathBuf,
    /// With a fault injector: calm after its last fault is over (the
    /// server replaced, the database member back) before the run ends.
    /// The run lasts `workload.total` at least, and longer when the faults
    /// ran late, so that a late fault's recovery is still measured.
    pub tail_after_faults: Duration,
    /// Database clusters added, and partitions moved to them, while the
    /// run plays (`bench --grow-at-s`). Not with a fault injector.
    pub growth: Option<growth::GrowthPlan>,
}

impl RunPlan {
    /// Checks the numbers a user typed and builds the plan.
    pub fn new(
        clients: u32,
        games: Option<u32>,
        interval_ms: u64,
        warmup_s: u64,
        duration_s: u64,
        out: PathBuf,
    ) -> anyhow::Result<RunPlan> {
        anyhow::ensure!(
            clients >= 4 && clients.is_multiple_of(4),
            "--clients must be a multiple of 4 (four players a game), got {clients}"
        );
        let games = games.unwrap_or(clients / 4);
        anyhow::ensure!(
            games * 4 == clients,
            "--games must be --clients / 4 = {} (four players a game), got {games}",
            clients / 4
        );
        anyhow::ensure!(duration_s > 0, "--duration-s must be at least 1");
        Ok(RunPlan {
            workload: WorkloadConfig {
                clients,
                interval: Duration::from_millis(interval_ms),
                warmup: Duration::from_secs(warmup_s),
                total: Duration::from_secs(warmup_s + duration_s),
                name_prefix: "bench-".into(),
                predict: false,
                until_stopped: false,
            },
            games,
            floor_samples: 0,
            out,
            tail_after_faults: Duration::ZERO,
            growth: None,
        })
    }
}

/// Where to run: the servers' addresses and their database.
#[derive(Clone)]
pub struct Target {
    pub servers: Vec<String>,
    /// The database at the start (for the transaction floor).
    pub database_url: Option<String>,
    /// The database at the end, asked when the run is over: a replicated
    /// database's primary moves during a run, and the invariants are
    /// checked on whichever member is primary then. `None`: `database_url`.
    pub final_database_url: Option<Arc<dyn Fn() -> String + Send + Sync>>,
    /// The database's processes, when it runs on this machine (its CPU
    /// time is then part of what a call costs).
    pub database_pids: Option<Arc<dyn Fn() -> Vec<u32> + Send + Sync>>,
    /// The files the database logs to, when it runs on this machine
    /// (copied into `OUT/logs/` and read for the stall windows).
    pub database_logs: Option<Arc<dyn Fn() -> Vec<PathBuf> + Send + Sync>>,
    /// The local cluster's CPU quotas' counters, when it has any
    /// (`--db-cpu-quota`, `--server-cpu-quota`).
    pub cpu_groups: Option<Arc<dyn Fn() -> Vec<quota::GroupReading> + Send + Sync>>,
    /// A local cluster's database clusters as they are now, home first
    /// (a replicated one's primary moves). `None`: the clusters home
    /// lists, read through `database_url`.
    pub db_clusters: Option<Arc<dyn Fn() -> Vec<DbClusterNow> + Send + Sync>>,
    /// How the clients reach the servers (TLS or not).
    pub pool: PoolConfig,
    /// The emulated distances (empty: none); client `c` is at
    /// `wan[c % wan.len()]`.
    pub wan: Vec<Distance>,
}

/// One database cluster as a run reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbClusterNow {
    /// `home`, or the name servers were given it with (`c1`...).
    pub name: String,
    /// Where to read it now (a replicated cluster's current primary).
    pub url: String,
    /// Its processes, when it runs on this machine.
    pub pids: Option<Vec<u32>>,
}

/// One emulated distance of a local cluster, and how a client at it dials
/// the servers.
#[derive(Clone, Debug)]
pub struct Distance {
    pub link: WanSpec,
    /// For `PoolConfig::dial`: advertised address → this distance's proxy.
    pub dial: HashMap<String, String>,
}

impl Target {
    pub fn new(servers: Vec<String>, database_url: Option<String>) -> Target {
        Target {
            servers,
            database_url,
            final_database_url: None,
            database_pids: None,
            database_logs: None,
            cpu_groups: None,
            db_clusters: None,
            pool: PoolConfig::default(),
            wan: Vec::new(),
        }
    }

    /// How the clients at distance `link` (`None`: the only one) reach
    /// the servers.
    pub fn pool_at(&self, link: Option<usize>) -> PoolConfig {
        let mut pool = self.pool.clone();
        if let Some(distance) = link.and_then(|l| self.wan.get(l)) {
            pool.dial = distance.dial.clone();
        }
        pool
    }

    /// The servers and database of a local cluster.
    pub fn of_cluster(cluster: &Arc<std::sync::Mutex<LocalCluster>>) -> Target {
        let c = cluster.lock().unwrap_or_else(|e| e.into_inner());
        let current = cluster.clone();
        let processes = cluster.clone();
        let logs = cluster.clone();
        let groups = cluster.clone();
        let clusters = cluster.clone();
        Target {
            servers: c.addresses(),
            database_url: Some(c.database_url()),
            final_database_url: Some(Arc::new(move || {
                current
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .database_url()
            })),
            database_pids: Some(Arc::new(move || {
                processes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .database_pids()
            })),
            database_logs: Some(Arc::new(move || {
                logs.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .database_logs()
            })),
            cpu_groups: Some(Arc::new(move || {
                let cluster = groups.lock().unwrap_or_else(|e| e.into_inner());
                cluster
                    .cpu_groups()
                    .into_iter()
                    .map(|(name, group)| quota::GroupReading::of(name, group))
                    .collect()
            })),
            db_clusters: Some(Arc::new(move || {
                let cluster = clusters.lock().unwrap_or_else(|e| e.into_inner());
                cluster
                    .database_urls()
                    .into_iter()
                    .enumerate()
                    .map(|(k, url)| DbClusterNow {
                        name: borbaman_cluster::db_cluster_name(k),
                        url,
                        pids: Some(cluster.database_pids_of(k)),
                    })
                    .collect()
            })),
            pool: PoolConfig::default(),
            wan: c
                .wan()
                .into_iter()
                .enumerate()
                .map(|(i, link)| Distance {
                    link,
                    dial: c.wan_routes(i),
                })
                .collect(),
        }
    }
}

/// Starts the fault injector of a chaos run once the clock starts; its task
/// returns the faults it injected.
pub type Injector = Box<dyn FnOnce(RunClock, Shutdown) -> JoinHandle<Vec<FaultEvent>> + Send>;

/// CPU time this process has used, in milliseconds.
pub fn cpu_time_ms() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use report::Summary;
    use std::time::Instant;

    #[test]
    fn a_run_with_faults_ends_a_tail_after_the_last_one_and_never_early() {
        let start = Instant::now();
        let s = |secs| start + Duration::from_secs(secs);
        let tail = Duration::from_secs(2);
        // Faults over early: the planned end stands.
        assert_eq!(run_end(s(20), s(10), tail), s(20));
        // Over late: held open a tail after them.
        assert_eq!(run_end(s(20), s(25), tail), s(27));
        assert_eq!(run_end(s(20), s(19), tail), s(21));
    }

    #[test]
    fn a_closed_loop_with_more_than_one_percent_errors_does_not_stand() {
        let run = |interval_ms, invocations, errors, refusals| Summary {
            interval_ms,
            invocations,
            errors,
            refusals,
            ..Summary::default()
        };
        assert_eq!(
            too_many_errors(&run(0, 1000, 10, 0)),
            None,
            "1 % is allowed"
        );
        let why = too_many_errors(&run(0, 1000, 11, 0)).expect("1.1 % is not");
        assert!(why.contains("11 of 1000"), "{why}");
        assert_eq!(
            too_many_errors(&run(0, 1000, 0, 900)),
            None,
            "refusals are load shed, not errors"
        );
        assert_eq!(
            too_many_errors(&run(50, 1000, 500, 0)),
            None,
            "a paced run reports its errors but is not a capacity figure"
        );
        assert_eq!(too_many_errors(&run(0, 0, 0, 0)), None);
    }
}
