//! `LocalCluster`: a PostgreSQL and N real game-server processes on this
//! machine, for `borbaman play` without `--servers`, for tests, bench and
//! chaos runs.
//!
//! The database is `DATABASE_URL` when set, else a private PostgreSQL
//! ([`LocalPostgres`]) in a given data directory or a throwaway one. Servers
//! are processes of this very binary (`borbaman server …`, via
//! `current_exe()`) or of a given binary, on OS-chosen ports; each one's
//! readiness is its single stdout line, a [`ReadyLine`]. Their logs go to
//! files in the log directory (`server-N.log`, one JSON object per line
//! unless the server arguments choose `--log-format`), never to the
//! terminal (the UI owns it). Everything started here is stopped by PID when
//! the cluster is dropped, and, should this process be killed outright, the
//! servers get SIGTERM from the kernel (`PR_SET_PDEATHSIG`) and exit too.
//!
//! Fault injection for chaos runs acts on single servers by index: `kill`
//! (SIGKILL), `hang`/`resume` (SIGSTOP/SIGCONT), `terminate` (SIGTERM, then
//! wait), `replace`, and `restart_database`. Two gray failures, where the
//! server still looks alive to its health checks:
//!
//! - `partition_database`/`heal_database`: with
//!   [`ClusterConfig::database_proxy`], each server slot reaches the
//!   database through a [`TcpProxy`] of its own, which the fault cuts (that
//!   one server loses its database, the others keep theirs);
//! - `slow`/`unslow`: SIGUSR1/SIGUSR2, which switch the server's slow mode
//!   on and off (every game call waits `--slow-mode-ms` first; see
//!   `borbaman-server --help`).
//!
//! Distance: with [`ClusterConfig::wan`], every server slot gets a delay
//! proxy ([`TcpProxy::with_wan`]) per link given, the server advertises the
//! first one's address in the registry (`--advertise`), and
//! [`LocalCluster::addresses`] names the proxies: every byte between a
//! client and a server crosses the emulated distance. A slot's proxies
//! stay when its server is replaced (they forward to the new one), as a
//! server's public address outlives its process. A client at another of
//! the distances dials the same servers through that link's proxies
//! ([`LocalCluster::wan_routes`], for `PoolConfig::dial`).
//!
//! Database clusters: with [`ClusterConfig::db_clusters`] N > 1 the games
//! are partitioned over N databases of the same kind. Cluster 0 is home
//! (the database above, given with `--database-url`); cluster k is `c<k>`
//! ([`db_cluster_name`]), given to every server with `--db-cluster
//! c<k>=URL`: another throwaway PostgreSQL, a kept one beside home's data
//! directory ([`persistent_dir`]), or a Patroni group of its own (scope
//! `c<k>`, namespace `/borbaman/`) sharing home's etcd, given with
//! `--db-cluster-patroni` too. Each has its own CPU group under a quota.
//! With [`ClusterConfig::spare_db_clusters`] the servers are given home
//! only, and the others wait to be added to the running game.
//! The replicated database's faults name their cluster
//! ([`LocalCluster::kill_database_primary`],
//! [`LocalCluster::switch_database_over`]).
//!
//! A server that dies by other hands (a crash, a `kill -9` from a shell) is
//! started again by [`LocalCluster::revive_exited`], as a supervisor would.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use crate::cgroup::CpuGroup;
use crate::ha::{HaError, HaOptions, LocalHa, Switchover};
use crate::postgres::{LocalPostgres, PgOptions};
use crate::process::{Spawner, signal, wait_or_kill, wait_stopped};
use crate::proxy::{self, TcpProxy};
use crate::wan::WanSpec;
use borbaman_proto::ready::ReadyLine;

mod config;
pub use config::*;
use config::{cpu_groups, json_logs_unless_set, log_dir};

/// The longest [`LocalCluster::hang`] waits for a SIGSTOPped server's
/// threads to stop (a few milliseconds, unless the host holds a core).
pub const HANG_TAKES_AT_MOST: Duration = Duration::from_secs(1);

/// Listen address of a new server: a free port on loopback.
const ANY_PORT: &str = "127.0.0.1:0";
/// How long a server may take to print its ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a SIGTERMed server may take to drain and exit before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(5);

/// One server process.
struct ServerProcess {
    child: Child,
    address: String,
    /// `host:port` of its `/metrics`, when started with `--metrics-listen`.
    metrics: Option<String>,
    /// `false` once killed, terminated or exited.
    running: bool,
    /// Where its log (stderr) goes.
    log: PathBuf,
}

/// A running local cluster. Dropping it stops every process it started.
pub struct LocalCluster {
    /// The private PostgreSQLs, by cluster (home first); empty for a URL
    /// or the replicated database.
    postgres: Vec<LocalPostgres>,
    /// The Patroni groups, by cluster (home first, which runs the etcd
    /// the others share); empty unless the database is replicated.
    /// Dropped last to first, after the servers.
    ha: Vec<LocalHa>,
    /// Each cluster's database URL, home first (for the replicated
    /// database, its primary's at the start).
    database_urls: Vec<String>,
    servers: Vec<ServerProcess>,
    /// By server slot, when the database is proxied, one proxy per
    /// database cluster (home first); else empty. Dropped after the
    /// servers are stopped.
    proxies: Vec<Vec<TcpProxy>>,
    /// With `ClusterConfig::wan`: by slot, a delay proxy per link in front
    /// of that slot's server; else empty.
    links: Vec<Vec<TcpProxy>>,
    program: PathBuf,
    program_args: Vec<String>,
    server_args: Vec<String>,
    /// The database clusters but home are not given to the servers
    /// ([`ClusterConfig::spare_db_clusters`]).
    spare_db_clusters: bool,
    log_dir: PathBuf,
    _temp_logs: Option<tempfile::TempDir>,
    started_servers: usize,
    spawner: Spawner,
    /// Every server runs in this group when the servers have a CPU quota.
    /// Last: removed after the servers and the database have stopped.
    server_group: Option<CpuGroup>,
    /// Each database cluster's group, by cluster, when the database has a
    /// CPU quota (the database holds them too, and stops before they are
    /// removed); else empty.
    db_groups: Vec<Arc<CpuGroup>>,
}

impl LocalCluster {
    /// Starts the database (unless given a URL) and `config.servers`
    /// servers, calling `progress` before each step ("starting database…").
    /// Blocking: call it from `spawn_blocking` in async code.
    pub fn start(
        config: ClusterConfig,
        mut progress: impl FnMut(&str),
    ) -> Result<LocalCluster, ClusterError> {
        let (temp_logs, log_dir) = log_dir(&config)?;
        let clusters = config.db_clusters;
        if clusters == 0 {
            return Err(ClusterError::NoDatabaseCluster(clusters));
        }
        if clusters > 1 && matches!(config.database, Database::Url(_)) {
            return Err(ClusterError::ClustersOnExternalDatabase(clusters));
        }
        let (db_groups, server_group) = cpu_groups(&config)?;
        let mut server_args = config.server_args.clone();
        let (postgres, ha, database_urls) = start_databases(
            &config,
            &db_groups,
            &log_dir,
            &mut server_args,
            &mut progress,
        )?;
        let proxies = if config.database_proxy {
            database_proxies(config.servers, &ha, &database_urls)?
        } else {
            Vec::new()
        };
        let links = delay_links(&config)?;
        let (program, program_args) = server_program(config.server_command)?;
        let mut cluster = LocalCluster {
            postgres,
            ha,
            database_urls,
            servers: Vec::new(),
            proxies,
            links,
            program,
            program_args,
            server_args,
            spare_db_clusters: config.spare_db_clusters,
            log_dir,
            _temp_logs: temp_logs,
            started_servers: 0,
            spawner: Spawner::start("server-spawner").map_err(|source| ClusterError::Io {
                context: "starting the server spawner thread".into(),
                source,
            })?,
            server_group,
            db_groups,
        };
        progress(&format!("starting {} servers…", config.servers));
        // Start them all, then wait for each: migrations run once, the
        // others find them applied.
        let pending: Vec<_> = (0..config.servers)
            .map(|slot| cluster.spawn(ANY_PORT, slot))
            .collect::<Result<_, _>>()?;
        for (slot, (child, log, index, ready)) in pending.into_iter().enumerate() {
            let server = cluster.await_ready(child, log, index, ready)?;
            cluster.servers.push(server);
            cluster.follow(slot)?;
        }
        Ok(cluster)
    }

    /// The control groups with a CPU quota, by what they hold (`database`
    /// for home's, `database-c1`... for the other database clusters',
    /// `servers`), for a run's report.
    pub fn cpu_groups(&self) -> Vec<(String, &CpuGroup)> {
        let db = self.db_groups.iter().enumerate().map(|(k, g)| {
            let name = match k {
                0 => "database".to_string(),
                k => format!("database-{}", db_cluster_name(k)),
            };
            (name, g.as_ref())
        });
        let servers = self
            .server_group
            .as_ref()
            .map(|g| ("servers".to_string(), g));
        db.chain(servers).collect()
    }

    /// Stops server `i` (SIGKILL if still running) and starts a new one in
    /// its place (a new port and id).
    pub fn replace(&mut self, i: usize) -> Result<(), ClusterError> {
        self.kill(i)?;
        let (child, log, index, ready) = self.spawn(ANY_PORT, i)?;
        let server = self.await_ready(child, log, index, ready)?;
        self.servers[i] = server;
        self.follow(i)
    }

    /// SIGTERM (the server drains and leaves the registry), then starts it
    /// again on the same address, as an operator restarting it would: clients
    /// that knew the address find it again.
    pub fn restart(&mut self, i: usize) -> Result<(), ClusterError> {
        self.terminate(i)?;
        let address = self.servers[i].address.clone();
        let (child, log, index, ready) = self.spawn(&address, i)?;
        let server = self.await_ready(child, log, index, ready)?;
        self.servers[i] = server;
        self.follow(i)
    }

    /// Starts again every server that exited without being told to here (it
    /// crashed, or was killed from outside), on its old address if that is
    /// still free, else on a new port; returns their indices. Clients find
    /// the new process through the registry either way.
    pub fn revive_exited(&mut self) -> Result<Vec<usize>, ClusterError> {
        let mut revived = Vec::new();
        for i in 0..self.servers.len() {
            let server = &mut self.servers[i];
            if !server.running || !matches!(server.child.try_wait(), Ok(Some(_))) {
                continue;
            }
            server.running = false;
            let address = server.address.clone();
            let (child, log, index, ready) = self.spawn(&address, i)?;
            let server = match self.await_ready(child, log, index, ready) {
                Ok(server) => server,
                Err(_) => {
                    let (child, log, index, ready) = self.spawn(ANY_PORT, i)?;
                    self.await_ready(child, log, index, ready)?
                }
            };
            self.servers[i] = server;
            self.follow(i)?;
            revived.push(i);
        }
        Ok(revived)
    }

    /// SIGKILL: the server dies mid-call, as in a crash.
    pub fn kill(&mut self, i: usize) -> Result<(), ClusterError> {
        let server = self.server_mut(i)?;
        if server.running {
            signal(&server.child, libc::SIGKILL);
            // Resume it too, in case it was stopped: a stopped process dies
            // on SIGKILL anyway, this only makes `wait` prompt.
            signal(&server.child, libc::SIGCONT);
            let _ = server.child.wait();
            server.running = false;
        }
        Ok(())
    }

    /// SIGSTOP: the server hangs, its connections stay open. Returns once
    /// every thread of it has stopped (at most [`HANG_TAKES_AT_MOST`]).
    pub fn hang(&mut self, i: usize) -> Result<(), ClusterError> {
        let server = self.server_mut(i)?;
        if server.running {
            signal(&server.child, libc::SIGSTOP);
            // Hung means answering nothing from here on: back once every
            // thread has stopped (a stop that takes longer than the limit
            // is left to finish by itself).
            wait_stopped(&server.child, HANG_TAKES_AT_MOST);
        }
        Ok(())
    }

    /// SIGCONT: a hung server carries on.
    pub fn resume(&mut self, i: usize) -> Result<(), ClusterError> {
        let server = self.server_mut(i)?;
        if server.running {
            signal(&server.child, libc::SIGCONT);
        }
        Ok(())
    }

    /// Slow mode on (SIGUSR1): the server waits `--slow-mode-ms` before
    /// each game call, while its health checks answer at once.
    pub fn slow(&mut self, i: usize) -> Result<(), ClusterError> {
        let server = self.server_mut(i)?;
        if server.running {
            signal(&server.child, libc::SIGUSR1);
        }
        Ok(())
    }

    /// Slow mode off (SIGUSR2).
    pub fn unslow(&mut self, i: usize) -> Result<(), ClusterError> {
        let server = self.server_mut(i)?;
        if server.running {
            signal(&server.child, libc::SIGUSR2);
        }
        Ok(())
    }

    /// The log file of the process now in slot `i` (tests wait for its
    /// lines: "slow mode on", "stopped").
    pub fn server_log(&self, i: usize) -> Result<&Path, ClusterError> {
        self.servers
            .get(i)
            .map(|server| server.log.as_path())
            .ok_or(ClusterError::NoSuchServer(i))
    }

    /// Cuts server `i` off the database (every database cluster): its
    /// proxies close every connection
    /// and resets new ones until [`Self::heal_database`]. The server keeps
    /// answering its clients (with "database unavailable"). A replacement
    /// started in slot `i` meanwhile would find no database either.
    pub fn partition_database(&mut self, i: usize) -> Result<(), ClusterError> {
        self.slot_proxies(i)?.iter().for_each(TcpProxy::cut);
        Ok(())
    }

    /// Lets server `i` reach the database again.
    pub fn heal_database(&mut self, i: usize) -> Result<(), ClusterError> {
        self.slot_proxies(i)?.iter().for_each(TcpProxy::heal);
        Ok(())
    }

    /// The proxy between server slot `i` and the (home) database.
    pub fn proxy(&self, i: usize) -> Result<&TcpProxy, ClusterError> {
        self.slot_proxies(i)?
            .first()
            .ok_or(ClusterError::NoProxy(i))
    }

    /// Server slot `i`'s proxies, one per database cluster.
    fn slot_proxies(&self, i: usize) -> Result<&[TcpProxy], ClusterError> {
        if i >= self.servers.len() {
            return Err(ClusterError::NoSuchServer(i));
        }
        self.proxies
            .get(i)
            .map(Vec::as_slice)
            .ok_or(ClusterError::NoProxy(i))
    }

    /// SIGTERM, then waits for the server to drain and exit (SIGKILL after a
    /// grace period).
    pub fn terminate(&mut self, i: usize) -> Result<(), ClusterError> {
        let server = self.server_mut(i)?;
        if server.running {
            signal(&server.child, libc::SIGCONT);
            signal(&server.child, libc::SIGTERM);
            wait_or_kill(&mut server.child, TERM_GRACE);
            server.running = false;
        }
        Ok(())
    }

    /// Stops the private PostgreSQL (fast shutdown: clients are cut off,
    /// committed data kept) and starts it again on the same port.
    pub fn restart_database(&mut self) -> Result<(), ClusterError> {
        self.restart_database_of(0)
    }

    /// [`Self::restart_database`] of database cluster `k` only.
    pub fn restart_database_of(&mut self, k: usize) -> Result<(), ClusterError> {
        self.check_db_cluster(k)?;
        let pg = self
            .postgres
            .get_mut(k)
            .ok_or(ClusterError::ExternalDatabase)?;
        pg.stop()?;
        pg.start()?;
        Ok(())
    }

    /// Stops the private PostgreSQL (for a fault that lasts a while).
    pub fn stop_database(&mut self) -> Result<(), ClusterError> {
        let pg = self
            .postgres
            .first_mut()
            .ok_or(ClusterError::ExternalDatabase)?;
        pg.stop()?;
        Ok(())
    }

    /// Starts the private PostgreSQL again after [`Self::stop_database`].
    pub fn start_database(&mut self) -> Result<(), ClusterError> {
        let pg = self
            .postgres
            .first_mut()
            .ok_or(ClusterError::ExternalDatabase)?;
        pg.start()?;
        Ok(())
    }

    /// `host:port` clients dial for every server slot, running or not:
    /// the server's own, or, at a distance, its first delay proxy's (what
    /// the registry hands out).
    pub fn addresses(&self) -> Vec<String> {
        (0..self.servers.len())
            .map(|i| self.advertised(i))
            .collect()
    }

    /// [`Self::addresses`] of the running servers only.
    pub fn running_addresses(&self) -> Vec<String> {
        (0..self.servers.len())
            .filter(|&i| self.servers[i].running)
            .map(|i| self.advertised(i))
            .collect()
    }

    /// `host:port` each server listens on, behind any delay proxy.
    pub fn listen_addresses(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.address.clone()).collect()
    }

    /// The distances emulated (`ClusterConfig::wan`); empty when none.
    pub fn wan(&self) -> Vec<WanSpec> {
        self.links
            .first()
            .map(|links| links.iter().filter_map(TcpProxy::wan).collect())
            .unwrap_or_default()
    }

    /// How a client at distance `link` (an index into
    /// `ClusterConfig::wan`) reaches every server: each advertised address
    /// mapped to that link's proxy, for `PoolConfig::dial`. Empty for the
    /// first link (the advertised one) and without distances.
    pub fn wan_routes(&self, link: usize) -> HashMap<String, String> {
        if link == 0 {
            return HashMap::new();
        }
        self.links
            .iter()
            .filter_map(|links| Some((links.first()?, links.get(link)?)))
            .map(|(advertised, route)| {
                (
                    advertised.address().to_string(),
                    route.address().to_string(),
                )
            })
            .collect()
    }

    /// `host:port` of each running server's `/metrics` (servers started
    /// with `--metrics-listen`), by server index.
    pub fn metrics_addresses(&self) -> Vec<Option<String>> {
        self.servers
            .iter()
            .map(|s| s.metrics.clone().filter(|_| s.running))
            .collect()
    }

    /// Process ids, by server index.
    pub fn pids(&self) -> Vec<u32> {
        self.servers.iter().map(|s| s.child.id()).collect()
    }

    /// Index of the server at `address`: its own, or any of its delay
    /// proxies'.
    pub fn index_of(&self, address: &str) -> Option<usize> {
        self.servers.iter().enumerate().position(|(i, s)| {
            s.address == address
                || self
                    .links
                    .get(i)
                    .is_some_and(|links| links.iter().any(|l| l.address().to_string() == address))
        })
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.servers.get(i).is_some_and(|s| s.running)
    }

    pub fn len(&self) -> usize {
        self.servers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The (home) database's URL; with the replicated database, the
    /// current primary's (it moves on a failover).
    pub fn database_url(&self) -> String {
        self.database_urls().swap_remove(0)
    }

    /// Every database cluster's URL, home first, in the order the servers
    /// are given them (`--database-url`, then each `--db-cluster`); with
    /// the replicated database, each group's current primary's.
    pub fn database_urls(&self) -> Vec<String> {
        if self.ha.is_empty() {
            return self.database_urls.clone();
        }
        self.ha.iter().map(LocalHa::database_url).collect()
    }

    /// How many database clusters the games are partitioned over.
    pub fn db_clusters(&self) -> usize {
        self.database_urls.len()
    }

    /// Process ids of the database the cluster started (none for a URL it
    /// was given): the postmaster of the single PostgreSQL, or every
    /// process of the replicated database (Patroni, etcd, postmasters and
    /// their children). For measuring what the database costs.
    /// Every database cluster's, home first.
    pub fn database_pids(&self) -> Vec<u32> {
        (0..self.db_clusters())
            .flat_map(|k| self.database_pids_of(k))
            .collect()
    }

    /// [`Self::database_pids`] of database cluster `k` only.
    pub fn database_pids_of(&self, k: usize) -> Vec<u32> {
        if let Some(ha) = self.ha.get(k) {
            return ha.pids();
        }
        let Some(pg) = self.postgres.get(k) else {
            return Vec::new();
        };
        std::fs::read_to_string(pg.data_dir().join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next()?.trim().parse().ok())
            .into_iter()
            .collect()
    }

    /// The files PostgreSQL logs to, when the cluster started it: the
    /// single PostgreSQL's `postgres.log` (in its data directory, which
    /// goes with it), or each Patroni member's `pgN.log` (PostgreSQL's
    /// log interleaved with Patroni's, already in the log directory).
    pub fn database_logs(&self) -> Vec<PathBuf> {
        if !self.ha.is_empty() {
            return self.ha.iter().flat_map(LocalHa::postgres_logs).collect();
        }
        self.postgres
            .iter()
            .map(|pg| pg.log_file().to_path_buf())
            .collect()
    }

    /// The replicated database (home's Patroni group), when the cluster
    /// runs one: for faults and their timing.
    pub fn replicated(&self) -> Option<&LocalHa> {
        self.ha.first()
    }

    pub fn replicated_mut(&mut self) -> Result<&mut LocalHa, ClusterError> {
        self.replicated_cluster_mut(0)
    }

    /// Database cluster `k`'s Patroni group (0 is home's).
    pub fn replicated_cluster(&self, k: usize) -> Result<&LocalHa, ClusterError> {
        self.check_db_cluster(k)?;
        self.ha.get(k).ok_or(ClusterError::NotReplicated)
    }

    pub fn replicated_cluster_mut(&mut self, k: usize) -> Result<&mut LocalHa, ClusterError> {
        self.check_db_cluster(k)?;
        self.ha.get_mut(k).ok_or(ClusterError::NotReplicated)
    }

    /// SIGKILLs database cluster `k`'s primary postmaster (its Patroni
    /// stays, and another member of that group takes over); returns the
    /// member killed and when. The other clusters are not touched.
    pub fn kill_database_primary(&mut self, k: usize) -> Result<(usize, Instant), ClusterError> {
        let ha = self.replicated_cluster_mut(k)?;
        let primary = ha.primary().ok_or(HaError::NoPrimary)?;
        let at = ha.kill_postmaster(primary)?;
        Ok((primary, at))
    }

    /// A planned switchover of database cluster `k`'s Patroni group.
    pub fn switch_database_over(&mut self, k: usize) -> Result<Switchover, ClusterError> {
        Ok(self.replicated_cluster(k)?.switchover()?)
    }

    fn check_db_cluster(&self, k: usize) -> Result<(), ClusterError> {
        let clusters = self.db_clusters();
        if k < clusters {
            Ok(())
        } else {
            Err(ClusterError::NoSuchDatabaseCluster {
                cluster: k,
                clusters,
            })
        }
    }

    /// The address server slot `i` is advertised at.
    fn advertised(&self, i: usize) -> String {
        match self.links.get(i).and_then(|links| links.first()) {
            Some(proxy) => proxy.address().to_string(),
            None => self.servers[i].address.clone(),
        }
    }

    /// Points slot `i`'s delay proxies at its (new) server.
    fn follow(&self, i: usize) -> Result<(), ClusterError> {
        let address = &self.servers[i].address;
        for proxy in self.links.get(i).into_iter().flatten() {
            proxy
                .set_upstream(address)
                .map_err(|source| ClusterError::Io {
                    context: format!("pointing a delay proxy at {address}"),
                    source,
                })?;
        }
        Ok(())
    }

    fn server_mut(&mut self, i: usize) -> Result<&mut ServerProcess, ClusterError> {
        self.servers.get_mut(i).ok_or(ClusterError::NoSuchServer(i))
    }

    /// The database URL server slot `slot` is given: its proxy's, when the
    /// database is proxied.
    fn server_database_url(&self, slot: usize) -> Result<String, ClusterError> {
        self.server_cluster_url(slot, 0)
    }

    /// Database cluster `k`'s URL as server slot `slot` is given it: its
    /// proxy's, when the database is proxied; with the replicated
    /// database, the primary's at the start (the server follows it).
    fn server_cluster_url(&self, slot: usize, k: usize) -> Result<String, ClusterError> {
        let url = &self.database_urls[k];
        match self.proxies.get(slot).and_then(|proxies| proxies.get(k)) {
            None => Ok(url.clone()),
            Some(proxy) => proxy::redirect_url(url, proxy.address()).ok_or_else(|| {
                ClusterError::Proxy(format!("cannot point the database URL {url:?} at a proxy"))
            }),
        }
    }

    /// `--db-cluster c<k>=URL` for every database cluster but home, as
    /// server slot `slot` reaches them; none when they are spares.
    fn db_cluster_args(&self, slot: usize) -> Result<Vec<String>, ClusterError> {
        let given = match self.spare_db_clusters {
            true => 1,
            false => self.database_urls.len(),
        };
        (1..given)
            .map(|k| {
                let url = self.server_cluster_url(slot, k)?;
                Ok(format!("--db-cluster={}={url}", db_cluster_name(k)))
            })
            .collect()
    }

    /// Spawns a server process for slot `slot`; a reader thread passes on
    /// its ready line.
    #[allow(clippy::type_complexity)]
    fn spawn(
        &mut self,
        listen: &str,
        slot: usize,
    ) -> Result<
        (
            Child,
            PathBuf,
            usize,
            mpsc::Receiver<Result<String, String>>,
        ),
        ClusterError,
    > {
        let database_url = self.server_database_url(slot)?;
        let db_clusters = self.db_cluster_args(slot)?;
        let index = self.started_servers;
        self.started_servers += 1;
        let log = self.log_dir.join(format!("server-{index}.log"));
        let log_file = File::create(&log).map_err(|source| ClusterError::Io {
            context: format!("creating {}", log.display()),
            source,
        })?;
        let mut command = Command::new(&self.program);
        command
            .args(&self.program_args)
            .args(["--listen", listen, "--database-url", &database_url])
            .args(&db_clusters)
            .args(
                self.links
                    .get(slot)
                    .and_then(|links| links.first())
                    .map(|proxy| format!("--advertise={}", proxy.address())),
            )
            .args(&self.server_args)
            .args(unlimited_unless_set(&self.server_args))
            .args(json_logs_unless_set(&self.server_args))
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file));
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", "info");
        }
        if let Some(group) = &self.server_group {
            group.confine(&mut command);
        }
        let mut child = self
            .spawner
            .spawn(command)
            .map_err(|source| ClusterError::Spawn {
                command: self.program.display().to_string(),
                source,
            })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (ready_tx, ready_rx) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("server-{index}-stdout"))
            .spawn(move || {
                let mut lines = BufReader::new(stdout).lines();
                let first = match lines.next() {
                    Some(Ok(line)) => Ok(line),
                    Some(Err(e)) => Err(e.to_string()),
                    None => Err("it exited before printing its ready line".to_string()),
                };
                let _ = ready_tx.send(first);
                // Keep draining so the server never blocks on a full pipe.
                for _ in lines {}
            })
            .map_err(|source| ClusterError::Io {
                context: "starting a reader thread".into(),
                source,
            })?;
        Ok((child, log, index, ready_rx))
    }

    fn await_ready(
        &self,
        mut child: Child,
        log: PathBuf,
        index: usize,
        ready: mpsc::Receiver<Result<String, String>>,
    ) -> Result<ServerProcess, ClusterError> {
        let fail = |child: &mut Child, reason: String| {
            signal(child, libc::SIGKILL);
            let _ = child.wait();
            ClusterError::NotReady {
                index,
                reason,
                log: log.clone(),
            }
        };
        let line = match ready.recv_timeout(READY_TIMEOUT) {
            Ok(Ok(line)) => line,
            Ok(Err(reason)) => return Err(fail(&mut child, reason)),
            Err(_) => {
                return Err(fail(
                    &mut child,
                    format!("no ready line within {READY_TIMEOUT:?}"),
                ));
            }
        };
        match ReadyLine::parse(&line) {
            Some(ReadyLine {
                address, metrics, ..
            }) => Ok(ServerProcess {
                child,
                address,
                metrics,
                running: true,
                log,
            }),
            None => Err(fail(&mut child, format!("unexpected first line {line:?}"))),
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        // SIGTERM all at once, then wait for each (they drain in parallel).
        for server in self.servers.iter().filter(|s| s.running) {
            signal(&server.child, libc::SIGCONT);
            signal(&server.child, libc::SIGTERM);
        }
        let deadline = Instant::now() + TERM_GRACE;
        for server in self.servers.iter_mut().filter(|s| s.running) {
            let left = deadline.saturating_duration_since(Instant::now());
            wait_or_kill(&mut server.child, left);
            server.running = false;
        }
        // The other clusters' Patroni groups before home's, whose etcd they
        // use; `postgres` and home's group drop after this.
        while self.ha.len() > 1 {
            drop(self.ha.pop());
        }
    }
}

/// Every database cluster of `config`, started (in its CPU group, if
/// any), and the flags that tell the servers of each: their PostgreSQLs,
/// their Patroni groups and the URLs the servers are given, home first.
#[allow(clippy::type_complexity)]
fn start_databases(
    config: &ClusterConfig,
    db_groups: &[Arc<CpuGroup>],
    log_dir: &Path,
    server_args: &mut Vec<String>,
    progress: &mut impl FnMut(&str),
) -> Result<(Vec<LocalPostgres>, Vec<LocalHa>, Vec<String>), ClusterError> {
    let clusters = config.db_clusters;
    let opts = PgOptions {
        fsync: config.fsync,
        port: None,
    };
    let group = |k: usize| db_groups.get(k).cloned();
    let step = |what: &str, k: usize| match clusters {
        1 => format!("starting {what}…"),
        n => format!(
            "starting {what} for database cluster {} ({}/{n})…",
            db_cluster_name(k),
            k + 1
        ),
    };
    let mut postgres = Vec::new();
    let mut ha: Vec<LocalHa> = Vec::new();
    let mut database_urls = Vec::new();
    match &config.database {
        Database::Url(url) => database_urls.push(url.clone()),
        Database::Persistent(dir) => {
            for k in 0..clusters {
                progress(&step("database", k));
                let pg = LocalPostgres::start_in_group(&persistent_dir(dir, k), opts, group(k))?;
                database_urls.push(pg.url());
                postgres.push(pg);
            }
        }
        Database::Temporary => {
            for k in 0..clusters {
                progress(&step("database", k));
                let pg = LocalPostgres::start_temp_in(opts, group(k))?;
                database_urls.push(pg.url());
                postgres.push(pg);
            }
        }
        Database::Replicated => {
            for k in 0..clusters {
                let what = if k == 0 {
                    "the replicated database (3 etcd, 3 Patroni members)"
                } else {
                    "3 Patroni members"
                };
                progress(&step(what, k));
                let etcd = ha.first().map(LocalHa::etcd_urls).unwrap_or_default();
                let (scope, logs) = match k {
                    0 => (crate::ha::SCOPE.to_string(), log_dir.join("ha")),
                    k => {
                        let name = db_cluster_name(k);
                        (name.clone(), log_dir.join(format!("ha-{name}")))
                    }
                };
                let group = LocalHa::start(HaOptions {
                    fsync: config.fsync,
                    log_dir: Some(logs),
                    cpu_group: group(k),
                    scope,
                    etcd,
                    ..HaOptions::default()
                })?;
                database_urls.push(group.database_url());
                if k == 0 {
                    server_args.push(format!("--patroni={}", group.patroni_urls().join(",")));
                    server_args.push(format!("--etcd={}", group.etcd_urls().join(",")));
                } else if !config.spare_db_clusters {
                    server_args.push(format!(
                        "--db-cluster-patroni={}={}",
                        db_cluster_name(k),
                        group.patroni_urls().join(",")
                    ));
                }
                ha.push(group);
            }
        }
    };
    Ok((postgres, ha, database_urls))
}

/// A proxy per server slot in front of each database cluster (see
/// [`ClusterConfig::database_proxy`]).
fn database_proxies(
    servers: usize,
    ha: &[LocalHa],
    database_urls: &[String],
) -> Result<Vec<Vec<TcpProxy>>, ClusterError> {
    if !ha.is_empty() {
        return Err(ClusterError::Proxy(
            "the replicated database is reached through Patroni, not one address".into(),
        ));
    }
    let upstreams = database_urls
        .iter()
        .map(|url| {
            proxy::url_host_port(url).ok_or_else(|| {
                ClusterError::Proxy(format!("no host:port in the database URL {url:?}"))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    (0..servers)
        .map(|_| {
            upstreams
                .iter()
                .map(|upstream| {
                    TcpProxy::start(upstream).map_err(|source| ClusterError::Io {
                        context: format!("starting a proxy to {upstream}"),
                        source,
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()
}

/// The delay proxies of each server slot, one per `config.wan` link.
fn delay_links(config: &ClusterConfig) -> Result<Vec<Vec<TcpProxy>>, ClusterError> {
    (0..config.servers)
        .map(|_| {
            config
                .wan
                .iter()
                .map(|wan| TcpProxy::with_wan(None, *wan))
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| ClusterError::Io {
            context: "starting a delay proxy".into(),
            source,
        })
}

/// The program servers are run from, with the arguments before their flags:
/// `server_command`, or this program's `server` subcommand.
fn server_program(
    server_command: Option<(PathBuf, Vec<String>)>,
) -> Result<(PathBuf, Vec<String>), ClusterError> {
    Ok(match server_command {
        Some(command) => command,
        None => {
            let exe = std::env::current_exe().map_err(|source| ClusterError::Io {
                context: "finding this program's path".into(),
                source,
            })?;
            (exe, vec!["server".to_string()])
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warm_up_pace_is_dropped_unless_the_args_set_one() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            no_warm_up_pace_unless_set(&args(&["--round-ms=1000"])),
            ["--db-warm-up-pace-ms=0"]
        );
        for set in [
            args(&["--db-warm-up-pace-ms=25"]),
            args(&["--db-warm-up-pace-ms", "25"]),
        ] {
            assert!(no_warm_up_pace_unless_set(&set).is_empty(), "{set:?}");
        }
    }
}
