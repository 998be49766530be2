//! `LocalHa`: a replicated PostgreSQL on this machine — three etcd members
//! and three Patroni members managing PostgreSQL — for failover tests and
//! chaos runs that need a database which survives the loss of its primary.
//!
//! [`LocalHa::start`] lays everything out in a fresh directory (under /tmp,
//! or in memory under /dev/shm without fsync, unless one is given), on free
//! loopback ports, starts one etcd cluster of three, then three Patroni
//! members that bootstrap and clone PostgreSQL, waits until there is one
//! leader and two streaming standbys (both synchronous) and creates the
//! `borbaman` database on the primary. As with
//! [`LocalPostgres`](crate::LocalPostgres), PostgreSQL refuses to run as
//! root, so when we are root Patroni and etcd run as the `postgres` user.
//! Every process is spawned from one long-lived thread with
//! `PR_SET_PDEATHSIG` and stopped by PID when the handle drops (Patroni
//! SIGKILLed first, then PostgreSQL's immediate shutdown and etcd
//! SIGKILLed; see `teardown`); nothing else on the machine is touched.
//!
//! Should this process be killed outright, the kernel sends Patroni and
//! etcd SIGTERM (Patroni then stops its PostgreSQL); the directory stays.
//! Ports come from below the kernel's ephemeral range, so no outgoing
//! connection takes a member's port between its restarts.
//!
//! Faults act on one member by index and return at once, leaving the
//! cluster to heal itself: [`LocalHa::kill_postmaster`],
//! [`LocalHa::host_loss`], [`LocalHa::switchover`], [`LocalHa::kill_etcd`].
//! [`LocalHa::wait_for_new_primary`] tells when another member took over;
//! [`LocalHa::restore`] starts again what was killed and waits until the
//! cluster is whole.
//!
//! The module is split by job: this file lays out and starts the cluster
//! (directories, ports, etcd and Patroni daemons); `config` writes each
//! member's Patroni configuration; `rest` talks to Patroni's REST API;
//! `psql` runs SQL on a member; `procfs` finds and signals processes;
//! `faults` injects the faults and restores; `teardown` stops it all.
//!
//! On a busy 2-core machine: start 11-16 s (11-12 s in /dev/shm; Patroni
//! itself waits 2 s before naming the synchronous standby); a new primary
//! 1.8-3.1 s after a postmaster kill, 5.0-5.6 s after a host loss (the
//! leader lease runs out), 0.9-1.7 s after a switchover request; `restore`
//! 4-6 s, 7-17 s after a host loss (crash recovery and pg_rewind of the old
//! primary); drop 0.5 s in /dev/shm (3 s under /tmp on ext4 with
//! `discard`: the deletion).
//!
//! # Settings and why
//!
//! Found on a 2-core machine like this one (a lab of the same shape,
//! ~50 failover trials without a lost or duplicated acknowledged commit):
//!
//! - `synchronous_mode` + `synchronous_mode_strict`, both standbys
//!   synchronous (`synchronous_node_count: 2`), `synchronous_commit: on`:
//!   an acknowledged commit is on all three members (on the two left while
//!   a standby is down: Patroni drops a standby that stopped streaming
//!   from the list within a loop), either standby may be promoted, and
//!   with no standby commits wait rather than silently turning
//!   asynchronous. Two rather than one so that a switchover need not name
//!   its candidate: the standby that loses the race for the leader key
//!   follows the winner at once, where one not allowed to race sleeps 2 s
//!   first (Patroni 3.0.2), and commits wait for a standby to stream from
//!   the new primary.
//! - `ttl: 5`, `loop_wait: 1`, `retry_timeout: 2`: a lost leader is
//!   replaced within ~5 s. Keep `loop_wait + 2 * retry_timeout <= ttl` with
//!   `retry_timeout >= 2`; 3/1/1 left the cluster leaderless.
//! - `primary_start_timeout: 0`: a crashed primary fails over instead of
//!   recovering in place.
//! - `wal_retrieve_retry_interval: 100ms` (default 5 s): after a failover
//!   the other standby retries the new primary every 5 s otherwise, and in
//!   strict mode every commit waits with it.
//! - `use_slots: false` with `wal_keep_size`: Patroni 3.0.2 creates member
//!   slots on a new primary only in its first leader loop, ~2 s after the
//!   promotion, which delays the standbys and so every commit.
//! - `use_pg_rewind` (needs `wal_log_hints`), and a data directory that
//!   cannot be rewound is cloned again: a failed old primary rejoins as a
//!   standby.
//! - etcd 3.4 has its v2 API off: Patroni's `etcd3` section.
//! - `max_connections: 200`, listening on 127.0.0.1 only, trust
//!   authentication on loopback (replication included); no watchdog.
//!
//! PostgreSQL's own log goes to each member's Patroni log, interleaved.
//!
//! # Patroni version
//!
//! Relied on: Patroni 3.0.x, as in Debian bookworm (3.0.2), with etcd 3.4.
//! From 3.1 on Patroni raises `ttl` to at least 20 s with only a warning in
//! its log, so host-loss failover would take ~20 s: [`LocalHa::start`]
//! refuses those versions.
//!
//! # Orphaned primary
//!
//! With Patroni dead and PostgreSQL alive nothing fences the old primary on
//! one machine (no watchdog device): it still serves reads, its commits wait
//! forever for a standby. Clients must find the primary by asking Patroni
//! (`GET /primary`), never PostgreSQL itself; [`LocalHa::restore`] stops
//! such a postmaster before restarting its Patroni.

use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::cgroup::CpuGroup;

use crate::ports::free_ports;
use crate::postgres::{
    DATABASE, MAX_SOCKET_DIR_BYTES, PgError, find_bin_dir, last_lines, postgres_user,
};
use crate::process::Spawner;

mod config;
mod faults;
mod procfs;
mod psql;
mod rest;
mod teardown;

use config::*;
use procfs::*;

/// Patroni (and PostgreSQL) members; etcd has as many.
pub const MEMBERS: usize = 3;

/// Patroni's cluster name of the home cluster (also PostgreSQL's
/// `cluster_name`), and the etcd namespace every group of a local cluster
/// shares: the servers follow home at `/borbaman/borbaman/` and cluster
/// `c1` at `/borbaman/c1/`.
pub const SCOPE: &str = "borbaman";
/// The etcd namespace (`/borbaman/`) every group lives under.
const NAMESPACE: &str = SCOPE;
/// What to install when Patroni or etcd is missing.
const INSTALL: &str = "apt-get install patroni etcd-server etcd-client";
/// Leader lease, HA loop period and DCS/PostgreSQL retry budget (seconds).
const TTL: u32 = 5;
const LOOP_WAIT: u32 = 1;
const RETRY_TIMEOUT: u32 = 2;
/// The longest a primary that lost its leader lock can stay primary before
/// another member takes over: the lease, one HA loop and the retry budget.
/// A check that "nothing failed over" must watch at least this long.
pub const LEADER_LEASE_WORST: Duration =
    Duration::from_secs((TTL + LOOP_WAIT + RETRY_TIMEOUT) as u64);
/// How long a postmaster may take to shut down on drop before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// One REST call to Patroni or etcd.
const REST_TIMEOUT: Duration = Duration::from_millis(500);
/// One `/primary` probe while waiting for a promotion.
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);
/// Period of the promotion probes.
const PROBE_PERIOD: Duration = Duration::from_millis(50);
/// Period of the health checks while waiting for the cluster.
const HEALTH_PERIOD: Duration = Duration::from_millis(100);
/// How long etcd may take to form its cluster.
const ETCD_TIMEOUT: Duration = Duration::from_secs(30);
/// One `psql` run.
const PSQL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a switchover request may take to be refused outright.
const SWITCHOVER_REFUSAL: Duration = Duration::from_millis(500);

/// How the replicated database runs.
#[derive(Clone, Debug)]
pub struct HaOptions {
    /// `false` turns off fsync on every member (commits stay synchronous
    /// between members): fine for faults that kill processes, since the
    /// kernel keeps what they wrote, unsafe if the machine itself crashes.
    pub fsync: bool,
    /// Where to lay out the members: an empty or missing directory, kept on
    /// drop. `None`: a fresh directory, deleted on drop, under /tmp (under
    /// /dev/shm, in memory, when `fsync` is off and it exists).
    pub dir: Option<PathBuf>,
    /// Where the etcd and Patroni logs go; `<dir>/logs` when `None`.
    pub log_dir: Option<PathBuf>,
    /// How long [`LocalHa::start`] may take until the cluster is healthy.
    pub start_timeout: Duration,
    /// How long [`LocalHa::restore`] may take until the cluster is healthy.
    pub heal_timeout: Duration,
    /// A CPU quota for the whole replicated cluster: every Patroni member
    /// (and the PostgreSQL it runs) starts in this group. etcd stays out.
    pub cpu_group: Option<Arc<CpuGroup>>,
    /// Patroni's scope (the group's name under the `/borbaman/`
    /// namespace): [`SCOPE`] for the home cluster, `c1`, `c2`... for the
    /// others.
    pub scope: String,
    /// The client URLs of an etcd another group started, to share it
    /// (`http://127.0.0.1:<port>`); empty: start three etcd members of
    /// its own.
    pub etcd: Vec<String>,
}

impl Default for HaOptions {
    fn default() -> Self {
        HaOptions {
            fsync: true,
            dir: None,
            log_dir: None,
            start_timeout: Duration::from_secs(120),
            heal_timeout: Duration::from_secs(90),
            cpu_group: None,
            scope: SCOPE.to_string(),
            etcd: Vec::new(),
        }
    }
}

/// Why the replicated database could not be started, faulted or healed.
#[derive(Debug, thiserror::Error)]
pub enum HaError {
    #[error(
        "{missing} not found; install Patroni and etcd with `{INSTALL}` \
         (Debian bookworm: Patroni 3.0.2, etcd 3.4)"
    )]
    NotInstalled { missing: String },
    #[error(
        "found Patroni {found}, but the replicated database needs Patroni older than 3.1: \
         from 3.1 on Patroni raises ttl to at least 20 s, so a lost primary would be \
         replaced only after ~20 s; Debian bookworm's patroni 3.0.2 accepts the ttl of \
         {TTL} s used here"
    )]
    PatroniVersion { found: String },
    #[error(transparent)]
    Postgres(#[from] PgError),
    #[error("cannot start {what}: {source}")]
    Spawn {
        what: String,
        source: std::io::Error,
    },
    #[error("{what} within {timeout:?}: {detail}; logs in {log_dir}{tail}")]
    NotReady {
        what: String,
        timeout: Duration,
        detail: String,
        log_dir: PathBuf,
        /// The last lines of each log.
        tail: String,
    },
    #[error("no member {0} (there are {MEMBERS})")]
    NoSuchMember(usize),
    #[error("no etcd member {0} (there are {MEMBERS})")]
    NoSuchEtcd(usize),
    #[error("no member is the primary")]
    NoPrimary,
    #[error("{0}")]
    Fault(String),
    #[error("{what} failed: {detail}")]
    Command { what: String, detail: String },
    #[error("{0} is not empty: give an empty or missing directory")]
    DirNotEmpty(PathBuf),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> HaError {
    let context = context.into();
    move |source| HaError::Io { context, source }
}

/// One member as Patroni's `GET /cluster` shows it, with its replication
/// state as the primary's `pg_stat_replication` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    /// Our index of the member (`None` for a name we did not start).
    pub index: Option<usize>,
    pub name: String,
    /// `leader`, `sync_standby` or `replica`.
    pub role: String,
    /// Patroni's state: `running`, `starting`, `stopped`, `creating replica`…
    /// (Patroni 3.0 says `running` for a standby, streaming or not.)
    pub state: String,
    pub timeline: Option<u64>,
    /// Bytes behind the leader; `None` for the leader or when unknown.
    pub lag: Option<u64>,
    /// `pg_stat_replication.state` on the primary (`streaming`…), `None`
    /// when the member is not connected to it.
    pub replication: Option<String>,
    /// `pg_stat_replication.sync_state` on the primary (`sync`, `async`).
    pub sync_state: Option<String>,
}

impl MemberStatus {
    pub fn is_leader(&self) -> bool {
        self.role == "leader"
    }

    /// A running standby whose WAL streams from the primary.
    pub fn is_streaming_standby(&self) -> bool {
        !self.is_leader()
            && self.state == "running"
            && self.replication.as_deref() == Some("streaming")
    }

    /// The synchronous standby, as both Patroni and PostgreSQL see it.
    pub fn is_sync_standby(&self) -> bool {
        self.role == "sync_standby"
            && self.is_streaming_standby()
            && self.sync_state.as_deref() == Some("sync")
    }
}

/// A planned switchover that Patroni accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switchover {
    pub from: usize,
    /// The synchronous standbys when it was asked for: one of them takes
    /// over (whichever wins the race for the leader key).
    pub candidates: Vec<usize>,
    pub from_name: String,
}

/// One Patroni member and the PostgreSQL it manages.
struct Member {
    name: String,
    /// Patroni's directory (owned by the postgres user): config, socket.
    dir: PathBuf,
    data_dir: PathBuf,
    config: PathBuf,
    log: PathBuf,
    pg_port: u16,
    rest_port: u16,
    patroni: Option<Child>,
}

/// One etcd member.
struct Etcd {
    name: String,
    data_dir: PathBuf,
    log: PathBuf,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

/// A running replicated database. Dropping it stops every process it
/// started.
pub struct LocalHa {
    bin_dir: PathBuf,
    patroni_bin: PathBuf,
    etcd_bin: PathBuf,
    patroni_version: String,
    /// `Some` when we are root: the uid/gid everything runs as.
    run_as: Option<(u32, u32)>,
    dir: PathBuf,
    log_dir: PathBuf,
    opts: HaOptions,
    cluster_token: String,
    members: Vec<Member>,
    /// The etcd members this group started: none when it shares another
    /// group's ([`HaOptions::etcd`]).
    etcds: Vec<Etcd>,
    /// `127.0.0.1:<port>` of every etcd member Patroni talks to (its own
    /// or the shared ones).
    etcd_hosts: Vec<String>,
    agent: ureq::Agent,
    spawner: Spawner,
    /// Held for a throwaway layout; dropping it deletes the directory.
    _temp: Option<tempfile::TempDir>,
}

impl LocalHa {
    /// Starts etcd and Patroni, waits until the cluster is healthy (one
    /// leader, two streaming standbys, both synchronous) and creates
    /// the `borbaman` database. Blocking.
    pub fn start(opts: HaOptions) -> Result<LocalHa, HaError> {
        let patroni_bin = which("patroni");
        let etcd_bin = which("etcd");
        let missing: Vec<&str> = [("patroni", &patroni_bin), ("etcd", &etcd_bin)]
            .into_iter()
            .filter(|(_, path)| path.is_none())
            .map(|(name, _)| name)
            .collect();
        let (Some(patroni_bin), Some(etcd_bin)) = (patroni_bin, etcd_bin) else {
            return Err(HaError::NotInstalled {
                missing: missing.join(" and "),
            });
        };
        let patroni_version = patroni_version(&patroni_bin)?;
        let bin_dir = find_bin_dir()?;
        let run_as = if unsafe { libc::geteuid() } == 0 {
            Some(postgres_user()?)
        } else {
            None
        };

        let (temp, dir) = match &opts.dir {
            Some(dir) => {
                let dir = std::path::absolute(dir)
                    .map_err(io_err(format!("resolving {}", dir.display())))?;
                if fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
                    return Err(HaError::DirNotEmpty(dir));
                }
                fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
                (None, dir)
            }
            None => {
                // Without fsync nothing of a throwaway layout is meant to
                // reach the disk: in memory, where there is a tmpfs, its
                // ~1000 files a member are also deleted in milliseconds
                // (seconds on ext4 with `discard`).
                let temp = crate::scratch::throwaway_dir("borbaman-ha-", opts.fsync)
                    .map_err(io_err("creating a temporary directory"))?;
                let dir = temp.path().to_path_buf();
                (Some(temp), dir)
            }
        };
        // The postgres user must be able to enter it.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
            .map_err(io_err(format!("chmod of {}", dir.display())))?;
        if run_as.is_some() && !others_can_enter(&dir) {
            return Err(PgError::Unreachable(dir).into());
        }
        let log_dir = opts.log_dir.clone().unwrap_or_else(|| dir.join("logs"));
        fs::create_dir_all(&log_dir).map_err(io_err(format!("creating {}", log_dir.display())))?;

        let ports = free_ports(4 * MEMBERS).map_err(io_err("finding free ports"))?;
        let own_etcd = opts.etcd.is_empty();
        let etcd_members = if own_etcd { MEMBERS } else { 0 };
        let etcd_hosts = if own_etcd {
            (0..MEMBERS)
                .map(|j| format!("127.0.0.1:{}", ports[j]))
                .collect()
        } else {
            opts.etcd
                .iter()
                .map(|url| url.trim_start_matches("http://").to_string())
                .collect()
        };
        let etcds = (0..etcd_members)
            .map(|j| Etcd {
                name: format!("etcd{j}"),
                data_dir: dir.join(format!("etcd{j}")),
                log: log_dir.join(format!("etcd{j}.log")),
                client_port: ports[j],
                peer_port: ports[MEMBERS + j],
                child: None,
            })
            .collect::<Vec<_>>();
        let members = (0..MEMBERS)
            .map(|i| {
                let member_dir = dir.join(format!("pg{i}"));
                Member {
                    name: member_name(i),
                    data_dir: member_dir.join("data"),
                    config: member_dir.join("patroni.yml"),
                    dir: member_dir,
                    log: log_dir.join(format!("pg{i}.log")),
                    pg_port: ports[2 * MEMBERS + i],
                    rest_port: ports[3 * MEMBERS + i],
                    patroni: None,
                }
            })
            .collect::<Vec<_>>();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .proxy(None)
            .http_status_as_error(false)
            .timeout_global(Some(REST_TIMEOUT))
            .build()
            .into();
        let spawner = Spawner::start("ha-spawner").map_err(|source| HaError::Spawn {
            what: "the spawner thread".into(),
            source,
        })?;
        let mut ha = LocalHa {
            bin_dir,
            patroni_bin,
            etcd_bin,
            patroni_version,
            run_as,
            cluster_token: format!("borbaman-ha-{}-{}", std::process::id(), ports[0]),
            dir,
            log_dir,
            opts,
            members,
            etcds,
            etcd_hosts,
            agent,
            spawner,
            _temp: temp,
        };
        // From here on, an error drops `ha`, which stops what was started.
        for j in 0..etcd_members {
            let data_dir = ha.etcds[j].data_dir.clone();
            ha.private_dir(&data_dir)?;
            ha.spawn_etcd(j, false)?;
        }
        if own_etcd {
            ha.wait_for_etcd()?;
        }
        for i in 0..MEMBERS {
            let member_dir = ha.members[i].dir.clone();
            ha.private_dir(&member_dir)?;
            ha.write_patroni_config(i)?;
        }
        // All at once: one wins the initialize key and bootstraps, the
        // others wait for it and clone it.
        for i in 0..MEMBERS {
            ha.spawn_patroni(i)?;
        }
        let timeout = ha.opts.start_timeout;
        let primary = ha.wait_healthy(timeout, "the cluster did not become healthy")?;
        ha.create_database(primary)?;
        Ok(ha)
    }

    /// `postgres://postgres@127.0.0.1:<port>/borbaman` on the current
    /// primary (member 0 when there is none): the credentials and database
    /// name; servers find the primary themselves through
    /// [`Self::patroni_urls`].
    pub fn database_url(&self) -> String {
        let port = self.members[self.primary().unwrap_or(0)].pg_port;
        format!("postgres://postgres@127.0.0.1:{port}/{DATABASE}")
    }

    /// Each member's Patroni REST API, `http://127.0.0.1:<port>`, by index.
    pub fn patroni_urls(&self) -> Vec<String> {
        (0..MEMBERS).map(|i| self.rest_url(i)).collect()
    }

    /// Each member's PostgreSQL port, by index.
    pub fn pg_ports(&self) -> Vec<u16> {
        self.members.iter().map(|m| m.pg_port).collect()
    }

    /// etcd's client URLs, by index (the shared etcd's, for a group
    /// started with [`HaOptions::etcd`]).
    pub fn etcd_urls(&self) -> Vec<String> {
        self.etcd_hosts
            .iter()
            .map(|host| format!("http://{host}"))
            .collect()
    }

    /// Patroni's scope of this group (`borbaman` for home, `c1`...).
    pub fn scope(&self) -> &str {
        &self.opts.scope
    }

    /// Member `i`'s name (`pg<i>`), as Patroni and `/cluster` know it.
    pub fn member_name(&self, i: usize) -> String {
        member_name(i)
    }

    /// The Patroni version found (`patroni --version`).
    pub fn patroni_version(&self) -> &str {
        &self.patroni_version
    }

    /// Where the etcd and Patroni logs (`etcd<j>.log`, `pg<i>.log`) are.
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// Each member's log (`pgN.log`: Patroni's and its PostgreSQL's).
    pub fn postgres_logs(&self) -> Vec<PathBuf> {
        self.members.iter().map(|m| m.log.clone()).collect()
    }

    /// The directory everything lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// PIDs of every process of the cluster still alive: Patroni, etcd,
    /// postmasters and their children.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .members
            .iter()
            .filter_map(|m| m.patroni.as_ref())
            .chain(self.etcds.iter().filter_map(|e| e.child.as_ref()))
            .map(Child::id)
            .filter(|&pid| alive(pid))
            .collect();
        for i in 0..MEMBERS {
            if let Some(pm) = self.postmaster(i) {
                pids.push(pm.pid);
                pids.extend(children_of(pm.pid).into_iter().map(|c| c.pid));
            }
        }
        pids
    }

    fn member(&self, i: usize) -> Result<&Member, HaError> {
        self.members.get(i).ok_or(HaError::NoSuchMember(i))
    }

    /// A daemon we started that exited by itself (nothing heals that).
    fn exited(&self) -> Option<String> {
        let gone = |child: &Option<Child>| child.as_ref().is_some_and(|c| !alive(c.id()));
        self.etcds
            .iter()
            .find(|e| gone(&e.child))
            .map(|e| format!("{} exited", e.name))
            .or_else(|| {
                self.members
                    .iter()
                    .find(|m| gone(&m.patroni))
                    .map(|m| format!("Patroni of {} exited", m.name))
            })
    }

    fn wait_for_etcd(&self) -> Result<(), HaError> {
        let deadline = Instant::now() + ETCD_TIMEOUT;
        loop {
            let mut why = None;
            for e in &self.etcds {
                if !e.child.as_ref().is_some_and(|c| alive(c.id())) {
                    why = Some(format!("{} exited", e.name));
                    break;
                }
                let url = format!("http://127.0.0.1:{}/health", e.client_port);
                match self.get(&url, REST_TIMEOUT) {
                    Ok((200, body)) if body.contains("true") => {}
                    other => {
                        why = Some(format!("{}: {other:?}", e.name));
                        break;
                    }
                }
            }
            let Some(why) = why else { return Ok(()) };
            if Instant::now() >= deadline {
                return Err(self.not_ready("etcd did not form a cluster", ETCD_TIMEOUT, why));
            }
            std::thread::sleep(HEALTH_PERIOD);
        }
    }

    fn not_ready(&self, what: &str, timeout: Duration, detail: String) -> HaError {
        let mut tail = String::new();
        let logs = self
            .etcds
            .iter()
            .map(|e| &e.log)
            .chain(self.members.iter().map(|m| &m.log));
        for log in logs {
            if let Ok(text) = fs::read_to_string(log) {
                let name = log.file_name().unwrap_or_default().to_string_lossy();
                tail.push_str(&format!("\n--- {name}\n{}", last_lines(&text, 8)));
            }
        }
        HaError::NotReady {
            what: what.into(),
            timeout,
            detail,
            log_dir: self.log_dir.clone(),
            tail,
        }
    }

    /// A directory owned by the user the daemons run as, mode 0700.
    fn private_dir(&self, dir: &Path) -> Result<(), HaError> {
        fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                .map_err(io_err(format!("chown of {}", dir.display())))?;
        }
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(io_err(format!("chmod of {}", dir.display())))
    }

    /// A command for a daemon: as the postgres user when root, output
    /// appended to `log`, no stray `PG*`/`PATRONI_*`/`ETCD_*` settings.
    fn daemon(&self, program: &Path, log: &Path, cwd: &Path) -> Result<Command, HaError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(io_err(format!("opening {}", log.display())))?;
        let err = file
            .try_clone()
            .map_err(io_err(format!("opening {}", log.display())))?;
        let mut cmd = Command::new(program);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err))
            .current_dir(cwd)
            .env("HOME", cwd)
            .env("LC_ALL", "C")
            .env("LANG", "C");
        for (key, _) in std::env::vars_os() {
            let key_str = key.to_string_lossy();
            if ["PG", "PATRONI_", "ETCD_", "ETCDCTL_"]
                .iter()
                .any(|prefix| key_str.starts_with(prefix))
            {
                cmd.env_remove(&key);
            }
        }
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        Ok(cmd)
    }

    fn spawn_etcd(&mut self, j: usize, existing: bool) -> Result<(), HaError> {
        let initial_cluster = self
            .etcds
            .iter()
            .map(|e| format!("{}=http://127.0.0.1:{}", e.name, e.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let e = &self.etcds[j];
        let client = format!("http://127.0.0.1:{}", e.client_port);
        let peer = format!("http://127.0.0.1:{}", e.peer_port);
        let mut cmd = self.daemon(&self.etcd_bin, &e.log, &self.dir)?;
        cmd.arg("--name")
            .arg(&e.name)
            .arg("--data-dir")
            .arg(&e.data_dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-token", &self.cluster_token])
            .args([
                "--initial-cluster-state",
                if existing { "existing" } else { "new" },
            ])
            .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
            .args(["--logger", "zap", "--log-level", "warn"]);
        let child = self.spawner.spawn(cmd).map_err(|source| HaError::Spawn {
            what: format!("{} ({})", e.name, self.etcd_bin.display()),
            source,
        })?;
        self.etcds[j].child = Some(child);
        Ok(())
    }

    fn spawn_patroni(&mut self, i: usize) -> Result<(), HaError> {
        let m = &self.members[i];
        let mut cmd = match config::patroni_python(&self.patroni_bin) {
            Some(python) => {
                let mut cmd = self.daemon(&python, &m.log, &m.dir)?;
                cmd.arg(m.dir.join(config::LAUNCHER));
                cmd
            }
            None => self.daemon(&self.patroni_bin, &m.log, &m.dir)?,
        };
        cmd.arg(&m.config);
        if let Some(group) = &self.opts.cpu_group {
            group.confine(&mut cmd);
        }
        let child = self.spawner.spawn(cmd).map_err(|source| HaError::Spawn {
            what: format!("Patroni of {} ({})", m.name, self.patroni_bin.display()),
            source,
        })?;
        self.members[i].patroni = Some(child);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patroni_is_started_through_the_python_its_script_names() {
        let dir = tempfile::tempdir().unwrap();
        let script = |name: &str, text: &str| {
            let path = dir.path().join(name);
            fs::write(&path, text).unwrap();
            path
        };
        let debian = script("patroni", "#!/usr/bin/python3\nimport sys\n");
        assert_eq!(
            config::patroni_python(&debian),
            Some(PathBuf::from("/usr/bin/python3"))
        );
        let binary = script("patroni-bin", "\x7fELF...");
        assert_eq!(config::patroni_python(&binary), None, "not a script");
        let shell = script("patroni-sh", "#!/bin/sh\nexec patroni \"$@\"\n");
        assert_eq!(config::patroni_python(&shell), None, "not Python");
        assert_eq!(config::patroni_python(&dir.path().join("none")), None);
        // The launcher sets the interval only where Patroni has it.
        assert!(config::LAUNCHER_PY.contains("STOP_POLLING_INTERVAL = 0.05"));
    }

    #[test]
    fn patroni_versions_from_3_1_on_are_refused() {
        assert_eq!(check_patroni_version("patroni 3.0.2\n").unwrap(), "3.0.2");
        assert_eq!(check_patroni_version("patroni 2.1.6").unwrap(), "2.1.6");
        for newer in ["patroni 3.1.0", "patroni 4.1.5"] {
            let err = check_patroni_version(newer).unwrap_err();
            assert!(
                matches!(err, HaError::PatroniVersion { .. }),
                "{newer}: {err}"
            );
            assert!(err.to_string().contains("20 s"), "{err}");
        }
        assert!(matches!(
            check_patroni_version("Traceback (most recent call last)"),
            Err(HaError::Command { .. })
        ));
    }

    #[test]
    fn yaml_quoting_doubles_single_quotes() {
        assert_eq!(yaml_quote("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(yaml_quote("/tmp/it's"), "'/tmp/it''s'");
    }

    #[test]
    fn member_names_round_trip() {
        for i in 0..MEMBERS {
            assert_eq!(member_index(&member_name(i)), Some(i));
        }
        assert_eq!(member_index("pg3"), None);
        assert_eq!(member_index("etcd0"), None);
    }

    #[test]
    fn the_dcs_settings_come_from_the_container_config_and_match_the_timings() {
        let dcs = dcs_settings();
        assert!(dcs.starts_with("  dcs:\n"), "{dcs}");
        for setting in [
            format!("    ttl: {TTL}\n"),
            format!("    loop_wait: {LOOP_WAIT}\n"),
            format!("    retry_timeout: {RETRY_TIMEOUT}\n"),
            "    synchronous_mode_strict: true\n".to_string(),
            "    synchronous_node_count: 2\n".to_string(),
            "        synchronous_commit: 'on'\n".to_string(),
        ] {
            assert!(dcs.contains(&setting), "{setting:?} not in\n{dcs}");
        }
        assert!(!dcs.contains("initdb"), "{dcs}");
    }

    #[test]
    fn own_process_is_alive_and_has_a_start_time() {
        let me = Proc::get(std::process::id()).unwrap();
        assert!(me.is_same_process());
        assert!(alive(me.pid));
    }

    #[test]
    fn status_roles() {
        let standby = MemberStatus {
            index: Some(1),
            name: "pg1".into(),
            role: "sync_standby".into(),
            state: "running".into(),
            timeline: Some(1),
            lag: Some(0),
            replication: Some("streaming".into()),
            sync_state: Some("sync".into()),
        };
        assert!(standby.is_streaming_standby() && standby.is_sync_standby());
        let lagging = MemberStatus {
            replication: None,
            ..standby.clone()
        };
        assert!(!lagging.is_streaming_standby());
    }
}
