//! What a [`LocalCluster`](super::LocalCluster) starts, its errors, the
//! names and directories of its database clusters, and the server flags
//! it fills in unless given.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use crate::cgroup::{CgroupError, CpuGroup, CpuQuotas};
use crate::ha::HaError;
use crate::postgres::PgError;
use crate::wan::WanSpec;

/// Where the database comes from.
#[derive(Clone, Debug)]
pub enum Database {
    /// An existing database.
    Url(String),
    /// A private PostgreSQL kept in this directory across runs.
    Persistent(PathBuf),
    /// A throwaway PostgreSQL, deleted on drop.
    Temporary,
    /// A throwaway replicated PostgreSQL ([`LocalHa`]: 3 etcd + 3 Patroni
    /// members, synchronous), deleted on drop. Servers are given the
    /// Patroni members (`--patroni`) and etcd (`--etcd`, to watch the
    /// leader key) and follow the primary themselves.
    Replicated,
}

impl Database {
    /// `DATABASE_URL` if set, else `fallback`.
    pub fn from_env_or(fallback: Database) -> Database {
        match std::env::var("DATABASE_URL") {
            Ok(url) if !url.trim().is_empty() => Database::Url(url),
            _ => fallback,
        }
    }
}

/// What to start.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub servers: usize,
    pub database: Database,
    /// fsync on for a kept database, off for throwaway ones by default.
    pub fsync: bool,
    /// The binary to run servers from, with the arguments that precede the
    /// server flags: `current_exe() server` by default.
    pub server_command: Option<(PathBuf, Vec<String>)>,
    /// Extra flags for every server (e.g. a shorter round for tests).
    pub server_args: Vec<String>,
    /// Where server logs go; a temporary directory when `None`.
    pub log_dir: Option<PathBuf>,
    /// Give each server slot a [`TcpProxy`] to the database, so that
    /// [`LocalCluster::partition_database`] can cut one server off it. Off
    /// by default: the proxy adds two thread wake-ups to every database
    /// round trip. A single database only (a URL with its host and port):
    /// servers on the replicated database find the primary through Patroni
    /// and would go around the proxy.
    pub database_proxy: bool,
    /// Put the servers at a distance from their clients: each server slot
    /// gets a delay proxy per link here, and the registry hands out the
    /// first link's proxy addresses. Empty (the default): clients reach
    /// the servers directly.
    pub wan: Vec<WanSpec>,
    /// CPU quotas for the database and the servers (see [`crate::cgroup`]);
    /// uncapped by default.
    pub cpu: CpuQuotas,
    /// Database clusters the games are partitioned over (at least 1, the
    /// default). Cluster 0 is home (the database above, as with one);
    /// each other one is a database of the same kind (a throwaway
    /// PostgreSQL, one beside a kept one, or a Patroni group sharing the
    /// replicated database's etcd), named `c1`, `c2`... and given to every
    /// server with `--db-cluster` (and `--db-cluster-patroni`). An
    /// existing database ([`Database::Url`]) is one cluster only.
    pub db_clusters: usize,
    /// Start the database clusters other than home as spares: running
    /// (each in its CPU group) but not given to the servers, so every
    /// partition stays on home until an operator adds them to the running
    /// game (`borbaman db add-cluster`, then `db rebalance`). Off by
    /// default.
    pub spare_db_clusters: bool,
}

impl ClusterConfig {
    /// `servers` servers of this binary on a throwaway database of their
    /// own (never `DATABASE_URL`: tests and measurements must not touch a
    /// database someone keeps).
    pub fn temporary(servers: usize) -> ClusterConfig {
        ClusterConfig {
            servers,
            database: Database::Temporary,
            fsync: false,
            server_command: None,
            server_args: Vec::new(),
            log_dir: None,
            database_proxy: false,
            wan: Vec::new(),
            cpu: CpuQuotas::default(),
            db_clusters: 1,
            spare_db_clusters: false,
        }
    }

    /// Runs servers from `binary` (a `borbaman` binary: the `server`
    /// subcommand is added).
    pub fn with_binary(mut self, binary: impl Into<PathBuf>) -> ClusterConfig {
        self.server_command = Some((binary.into(), vec!["server".into()]));
        self
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Postgres(#[from] PgError),
    #[error(transparent)]
    Replicated(#[from] HaError),
    #[error("cannot start a server ({command}): {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("server {index} did not become ready: {reason}; see its log {log}")]
    NotReady {
        index: usize,
        reason: String,
        log: PathBuf,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("no server at index {0}")]
    NoSuchServer(usize),
    #[error("the database is not a single PostgreSQL of ours (an external or a replicated one)")]
    ExternalDatabase,
    #[error("the database is not replicated (start the cluster with the replicated database)")]
    NotReplicated,
    #[error(
        "server {0} reaches the database directly: start the cluster with a database proxy \
         (ClusterConfig::database_proxy)"
    )]
    NoProxy(usize),
    #[error("cannot put a proxy in front of the database: {0}")]
    Proxy(String),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error("a CPU quota for the database needs a database of ours, not {0}")]
    QuotaOnExternalDatabase(String),
    #[error("the games need at least one database cluster (asked for {0})")]
    NoDatabaseCluster(usize),
    #[error(
        "an existing database (DATABASE_URL) is one cluster: {0} database clusters need \
         databases of ours (unset DATABASE_URL)"
    )]
    ClustersOnExternalDatabase(usize),
    #[error(
        "no database cluster {cluster} (there are {clusters}: 0 is home, 1..{clusters} the others)"
    )]
    NoSuchDatabaseCluster { cluster: usize, clusters: usize },
}

/// The name of database cluster `k` of a local cluster: `home` for 0 (the
/// `--database-url` servers are given), `c1`, `c2`... for the others (as
/// given with `--db-cluster`, and Patroni's scope of their group).
pub fn db_cluster_name(k: usize) -> String {
    if k == 0 {
        "home".to_string()
    } else {
        format!("c{k}")
    }
}

/// Where kept database cluster `k` lives beside home's data directory
/// `home`: home itself for 0, else `<home>-c<k>` (for
/// `~/.local/share/borbaman/postgres`, `postgres-c1` beside it).
pub fn persistent_dir(home: &Path, k: usize) -> PathBuf {
    if k == 0 {
        return home.to_path_buf();
    }
    let mut name = home.file_name().unwrap_or_default().to_os_string();
    name.push(format!("-{}", db_cluster_name(k)));
    home.with_file_name(name)
}

/// `--log-format=json` unless `args` chooses a format: logs in a cluster's
/// log directory are read by machines more often than by people.
pub(super) fn json_logs_unless_set(args: &[String]) -> Option<&'static str> {
    (!sets(args, "--log-format")).then_some("--log-format=json")
}

/// Whether `args` gives `flag` (as `--flag value` or `--flag=value`).
fn sets(args: &[String], flag: &str) -> bool {
    args.iter().any(|a| {
        a.strip_prefix(flag)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
    })
}

/// `--db-warm-up-pace-ms=0` unless `args` sets the pace: for the servers of
/// the end-to-end tests. The pace spreads a starting server's standing
/// connections over ~0.2 s so that the calls of the servers already
/// running (what a benchmark or a chaos run measures while it replaces a
/// server) do not wait on their start-up; a test's servers start before
/// its calls, and ~0.2 s a start adds up over the suite's few hundred
/// starts. The connections are opened and planned all the same.
pub fn no_warm_up_pace_unless_set(args: &[String]) -> Vec<String> {
    const PACE: &str = "--db-warm-up-pace-ms";
    if sets(args, PACE) {
        Vec::new()
    } else {
        vec![format!("{PACE}=0")]
    }
}

/// The server flags that lift the rate and connection limits, less those
/// `args` sets itself. Every client of a local cluster comes from one
/// address (loopback), and bench and chaos drive closed loops far above a
/// player's rate: the limits are for open networks, and a test of them
/// sets them.
pub fn unlimited_unless_set(args: &[String]) -> Vec<String> {
    const LIMITS: [&str; 5] = [
        "--max-acts-per-s",
        "--max-joins-per-ip-per-min",
        "--max-reads-per-ip-per-s",
        "--max-connections-per-ip",
        "--max-connections",
    ];
    LIMITS
        .iter()
        .filter(|flag| !sets(args, flag))
        .map(|flag| format!("{flag}=0"))
        .collect()
}

/// Where the servers' and databases' logs go: `config.log_dir`, or a
/// temporary directory kept as long as the cluster.
pub(super) fn log_dir(
    config: &ClusterConfig,
) -> Result<(Option<tempfile::TempDir>, PathBuf), ClusterError> {
    let (temp_logs, log_dir) = match &config.log_dir {
        Some(dir) => (None, dir.clone()),
        None => {
            let temp = tempfile::Builder::new()
                .prefix("borbaman-logs-")
                .tempdir()
                .map_err(|source| ClusterError::Io {
                    context: "creating a log directory".into(),
                    source,
                })?;
            let path = temp.path().to_path_buf();
            (Some(temp), path)
        }
    };
    std::fs::create_dir_all(&log_dir).map_err(|source| ClusterError::Io {
        context: format!("creating {}", log_dir.display()),
        source,
    })?;
    Ok((temp_logs, log_dir))
}

/// The CPU groups of `config.cpu`: one per database cluster, and the
/// servers'.
pub(super) fn cpu_groups(
    config: &ClusterConfig,
) -> Result<(Vec<Arc<CpuGroup>>, Option<CpuGroup>), ClusterError> {
    let db_groups = match config.cpu.database {
        None => Vec::new(),
        Some(_) if matches!(config.database, Database::Url(_)) => {
            return Err(ClusterError::QuotaOnExternalDatabase(
                "an existing database (DATABASE_URL)".into(),
            ));
        }
        Some(cores) => (0..config.db_clusters)
            .map(|k| CpuGroup::create(&format!("db{k}"), cores).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let server_group = match config.cpu.servers {
        Some(cores) => Some(CpuGroup::create("servers", cores)?),
        None => None,
    };
    Ok((db_groups, server_group))
}
