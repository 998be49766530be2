//! The `borbaman-server` command line: flags, runtime, logging, signals.
//!
//! Shared by the `borbaman-server` binary and `borbaman server`. Once ready
//! it prints exactly one line to stdout, a [`ReadyLine`], for launchers to
//! wait on; all logs go to stderr.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use borbaman_proto::ready::ReadyLine;
use tracing_subscriber::EnvFilter;

use crate::admission::AdmissionLimits;
use crate::etcd::{self, Endpoint};
use crate::incoming::{
    self, ConnectionLimits, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_STREAMS, DEFAULT_WRITE_STALL_TIMEOUT,
};
use crate::limits::{CallLimits, DEFAULT_READS_PER_IP_PER_S};
use crate::patroni::Member;
use crate::seating::SeatingLimits;
use crate::server::{self, ServerConfig, TlsFiles};
use crate::slow::SlowMode;
use crate::status::OperatorToken;
use crate::store::partitions::ClusterSpec;
use crate::store::retention::RetentionOptions;
use crate::store::{FollowOptions, StoreOptions};

/// Flags of `borbaman-server` (and `borbaman server`).
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// Address to listen on; port 0 picks a free port (printed when ready).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Address clients should dial, recorded in the registry (host:port).
    /// Defaults to the actual listen address.
    #[arg(long)]
    pub advertise: Option<String>,
    /// PostgreSQL URL, e.g. postgres://user@host:5432/borbaman. With
    /// --patroni its host and port are only the first guess; user,
    /// password, database and the other parameters still apply.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// A database cluster holding partitions of the games besides home
    /// (--database-url), as NAME=URL; repeat for each (see
    /// docs/scaling.md). Registered at home at start; on a fresh install
    /// the partitions are spread evenly over home and these. Give every
    /// server the same list.
    #[arg(long = "db-cluster", value_name = "NAME=URL")]
    pub db_clusters: Vec<ClusterSpec>,
    /// The Patroni members of a --db-cluster, as NAME=URL[,URL...]: the
    /// server follows that cluster's primary as it follows home's (with
    /// --etcd, at the etcd scope NAME beside home's). Repeat per cluster.
    #[arg(long = "db-cluster-patroni", value_name = "NAME=URLS")]
    pub db_cluster_patroni: Vec<String>,
    /// Follow the primary of a Patroni cluster: every member's REST API,
    /// comma-separated (http://host:port,...). Each member is asked
    /// `GET /primary` every --patroni-interval-ms and at once after a
    /// database error; transactions go to the member holding the leader
    /// lock, without a restart.
    #[arg(
        long,
        env = "BORBAMAN_PATRONI",
        value_delimiter = ',',
        value_name = "URLS"
    )]
    pub patroni: Vec<Member>,
    /// Period of the Patroni `/primary` probes (a database error also
    /// starts one at once): bounds how long a server keeps sending to a
    /// primary that quietly stopped being one.
    #[arg(long, default_value_t = 100)]
    pub patroni_interval_ms: u64,
    /// Timeout of one Patroni REST request.
    #[arg(long, default_value_t = 100)]
    pub patroni_timeout_ms: u64,
    /// With --patroni: etcd's client URLs (http://host:port,...), to
    /// watch Patroni's leader key and follow a new primary the moment
    /// Patroni writes it. While the watch is live the `/primary` probes
    /// only back it up (every --patroni-backstop-ms, and after database
    /// errors).
    #[arg(
        long,
        env = "BORBAMAN_ETCD",
        value_delimiter = ',',
        value_name = "URLS",
        requires = "patroni"
    )]
    pub etcd: Vec<Endpoint>,
    /// Patroni's key prefix in etcd: its `namespace` then `scope`, then /.
    #[arg(long, default_value = etcd::DEFAULT_PREFIX)]
    pub etcd_prefix: String,
    /// Period of the `/primary` probes while the etcd watch is live.
    #[arg(long, default_value_t = 1000)]
    pub patroni_backstop_ms: u64,
    /// Id of this server in the registry (default: a random UUID).
    #[arg(long)]
    pub id: Option<String>,
    /// Interval between registry heartbeats.
    #[arg(long, default_value_t = 250)]
    pub heartbeat_ms: u64,
    /// A server without a heartbeat for this long is no longer listed.
    #[arg(long, default_value_t = 1000)]
    pub server_ttl_ms: u64,
    /// Deadline of one database call (retries included); past it the call
    /// fails with UNAVAILABLE.
    #[arg(long, default_value_t = 500)]
    pub db_timeout_ms: u64,
    /// Longest wait for a database connection: how fast calls fail while
    /// the database is down.
    #[arg(long, default_value_t = 250)]
    pub db_acquire_timeout_ms: u64,
    /// The database ends a transaction idle this long (a hung server's
    /// join), releasing the lobby it locked; also the longest a game write
    /// may land after its read (a server stalled longer reads again).
    #[arg(long, default_value_t = 50)]
    pub idle_txn_timeout_ms: u64,
    /// Database connections in the pool. Each is a PostgreSQL backend
    /// process: opening one costs the database a process start and the
    /// first plans of the game calls' statements, and when this server
    /// dies or is cut off from the database every one of them exits at
    /// once, CPU the other servers' calls wait for. A few per server keep
    /// a small database busy (docs/results.md, "Fewer database
    /// connections per server").
    #[arg(long, default_value_t = 6)]
    pub db_connections: u32,
    /// Database connections opened at start-up and kept open, ready for
    /// the clients of a server that dies; reopened as soon as a heartbeat
    /// commits again after this server lost its database. Default: all of
    /// --db-connections, so no call waits for a connection to open (a
    /// pool that grows opens them in bursts, on the path of the calls
    /// that found every connection busy, and keeps them).
    #[arg(long)]
    pub db_min_connections: Option<u32>,
    /// Pause between opening two of those at start-up: each is a process
    /// start in PostgreSQL and the first plans of the game calls'
    /// statements, CPU the running servers' calls would wait for if a new
    /// server opened them all at once. 0 opens them back to back.
    #[arg(long, default_value_t = 25)]
    pub db_warm_up_pace_ms: u64,
    /// A player seated in a waiting game who sends nothing for this long
    /// loses the seat to the next player who joins.
    #[arg(long, default_value_t = 3000)]
    pub lobby_seat_ttl_ms: u64,
    /// How long finished games are kept, with their seats, sessions and
    /// logs (and how long a session freed from a lobby seat is kept):
    /// a number and a unit, ms, s, m, h or d (e.g. 3d, 60s). One server
    /// at a time deletes what is older, in small batches.
    #[arg(long, default_value = "3d", value_parser = parse_duration)]
    pub retention: Duration,
    /// A player identity holds one name at a time: how long a name it let
    /// go of (by joining with another) stays its own before anyone may take
    /// it (a duration, as --retention).
    #[arg(long, default_value = "1d", value_parser = parse_duration)]
    pub name_hold: Duration,
    /// A name no one joined with for this long is released by retention,
    /// for anyone to take (a duration, as --retention).
    #[arg(long, default_value = "180d", value_parser = parse_duration)]
    pub name_retention: Duration,
    /// Normal play before sudden death in the games this server creates,
    /// in milliseconds (3 minutes; a short round plays a whole game in
    /// seconds, for tests and demonstrations).
    #[arg(long, default_value_t = 180_000)]
    pub round_ms: u64,
    /// How long start-up waits for the database.
    #[arg(long, default_value_t = 30)]
    pub startup_timeout_s: u64,
    /// Fault injection: the delay of slow mode, which SIGUSR1 switches on
    /// and SIGUSR2 off. While on, every game call waits this long before
    /// it is handled; health checks, the registry and Ping do not.
    #[arg(long, default_value_t = 200)]
    pub slow_mode_ms: u64,
    /// Acts one session may send to this server per second (bursts of up
    /// to as many); more get RESOURCE_EXHAUSTED. A client polls at 20 Hz.
    /// Counted per server. 0: no limit.
    #[arg(long, default_value_t = 40)]
    pub max_acts_per_s: u32,
    /// Joins one peer address may make on this server per minute; more get
    /// RESOURCE_EXHAUSTED. 0: no limit.
    #[arg(long, default_value_t = 60)]
    pub max_joins_per_ip_per_min: u32,
    /// Admission control: game calls this server runs against the
    /// database at once, the calls on one game counting as one (they
    /// take turns at the game's gate anyway). Past it, a seated player's
    /// call waits in line up to --admission-queue-ms and a join up to
    /// --join-queue-ms, then is refused with RESOURCE_EXHAUSTED, reason
    /// server-full and a retry pushback, before it reaches the database.
    /// Joins may use half of the bound and spectators a quarter, so
    /// running games are served first. Calls admitted past
    /// --db-connections wait for a connection in turn (a join mostly waits
    /// for the lobby's lock anyway, so a burst of joins is not refused
    /// while the server has room); 0: no bound.
    #[arg(long, default_value_t = 16)]
    pub max_db_concurrency: usize,
    /// How long a seated player's call (or a spectator's) waits for a
    /// place within --max-db-concurrency before it is refused.
    #[arg(long, default_value_t = 50)]
    pub admission_queue_ms: u64,
    /// How long a join waits for a place within --max-db-concurrency
    /// before it is refused (the client is told when to try again). Keep
    /// it under the clients' call deadline (150 ms), or they give up on
    /// the server and ask another.
    #[arg(long, default_value_t = 100)]
    pub join_queue_ms: u64,
    /// Join admission by whole games: a join that would open a new game
    /// (none is waiting for players) is refused with RESOURCE_EXHAUSTED,
    /// reason server-full and a retry pushback while the cluster's running
    /// games are at a limit this server learns. Each half second the 90th
    /// percentile of its seated players' calls' time in the server
    /// (admission's wait included) is compared with this target: after 2 s
    /// over it, the limit becomes 0.9 of the games running (at least 4);
    /// after 1 s within it, while the limit binds, it grows by an eighth.
    /// Joins that fill a waiting game always enter, so games are seated
    /// whole. 0 (the default): the time is not judged (the limit is
    /// learned from refusals, --seat-refused-percent); on a machine shared
    /// with other work the calls' time in the server rises with the neighbours'
    /// load, not only with the games', and a target of 50 ms held the
    /// cluster to a few games (docs/scaling.md). Try 50 on a machine of
    /// the cluster's own.
    #[arg(long, default_value_t = 0)]
    pub seat_latency_target_ms: u64,
    /// Join admission by whole games, learned from this server's own
    /// excess: each half second, if more than this percentage of its
    /// seated players' calls were refused by admission (no place for them
    /// within --admission-queue-ms), the window is over; after 2 s of
    /// such windows the limit on running games becomes 0.9 of those
    /// running (at least 4), and grows by an eighth after 1 s without.
    /// Refusals appear only where the database's work already waits past
    /// a call's place in line, so the limit settles near the throughput
    /// peak, whatever else the machine runs. Each server shares what it
    /// learned with its heartbeat; joins are held to the smallest limit.
    /// 0: not counted.
    #[arg(long, default_value_t = 2.0, value_parser = percent)]
    pub seat_refused_percent: f64,
    /// Running games (waiting or playing) at most across the cluster, as
    /// this server counts them when a join would open a new game, whatever
    /// --seat-latency-target-ms learns: the capacity a `borbaman bench
    /// --sweep-games` run measured. Joins that fill a waiting game always
    /// enter. 0: no cap.
    #[arg(long, default_value_t = 0)]
    pub max_games: u32,
    /// Sessionless reads one peer address may make on this server per
    /// second, in units: WatchState and Rankings 1, ListGames 5, GetReplay
    /// 10 (a spectator polling at 20 Hz spends 20); more get
    /// RESOURCE_EXHAUSTED. A session's own GetState is limited with its
    /// acts, at --max-acts-per-s. 0: no limit.
    #[arg(long, default_value_t = DEFAULT_READS_PER_IP_PER_S)]
    pub max_reads_per_ip_per_s: u32,
    /// Connections open at once from one peer address; more are closed as
    /// soon as they are accepted. 0: no limit.
    #[arg(long, default_value_t = 64)]
    pub max_connections_per_ip: usize,
    /// Connections open at once in total. 0: no limit.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// A connection that sends nothing for this long after it is accepted
    /// is closed; with TLS, so is one that has not finished its handshake
    /// by then. 0: no timeout.
    #[arg(long, default_value_t = 5000)]
    pub first_bytes_timeout_ms: u64,
    /// A connection with no call open for this long is closed (clients
    /// health-check their connections every 500 ms, and reconnect by
    /// themselves). When --max-connections are open, a newcomer is let in
    /// by closing an idle one, from the address holding the most. 0: no
    /// timeout.
    #[arg(long, default_value_t = DEFAULT_IDLE_TIMEOUT.as_millis() as u64)]
    pub idle_connection_timeout_ms: u64,
    /// The server sends an HTTP/2 PING on every connection this often, and
    /// closes the connection if the answer does not come within
    /// --keepalive-timeout-ms: it finds dead peers. 0: no PINGs.
    #[arg(long, default_value_t = 10_000)]
    pub keepalive_interval_ms: u64,
    /// How long the server waits for the answer to a keepalive PING before
    /// it closes the connection.
    #[arg(long, default_value_t = 5_000)]
    pub keepalive_timeout_ms: u64,
    /// The longest a call may take, receiving its request included; a call
    /// past it is cancelled. 0: no limit.
    #[arg(long, default_value_t = 10_000)]
    pub call_timeout_ms: u64,
    /// Calls (HTTP/2 streams) open at once on one connection, announced to
    /// clients in HTTP/2 SETTINGS; a stream past it is refused
    /// (REFUSED_STREAM). A player keeps at most 8 calls in flight, so the
    /// default is never reached by a real client; it bounds the memory one
    /// connection holds (docs/security.md). 0: no limit.
    #[arg(long, default_value_t = DEFAULT_MAX_STREAMS)]
    pub max_streams_per_connection: u32,
    /// A connection whose writes make no progress for this long is closed:
    /// a peer that makes the server write (PINGs, calls) and never reads
    /// holds its connection and what is queued for it no longer. 0: no
    /// timeout.
    #[arg(long, default_value_t = DEFAULT_WRITE_STALL_TIMEOUT.as_millis() as u64)]
    pub write_stall_timeout_ms: u64,
    /// Serve TLS only, with this PEM certificate chain (and --tls-key).
    /// Without it the server speaks plaintext.
    #[arg(
        long,
        value_name = "PEM",
        env = "BORBAMAN_TLS_CERT",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(
        long,
        value_name = "PEM",
        env = "BORBAMAN_TLS_KEY",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (port 0 picks a
    /// free port, named in the ready line). Off by default: the metrics
    /// show the server's load and its database's address, which strangers
    /// need not see; give an address only your Prometheus reaches (e.g.
    /// 127.0.0.1:9464, or an internal network's).
    #[arg(long, value_name = "ADDR", env = "BORBAMAN_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// The token `borbaman status` must give to read this server's
    /// `Status` (load, build, the database's address), at least 16
    /// printable characters, e.g. `openssl rand -hex 16`; set the same one
    /// on every server. Prefer the environment variable: a flag shows in
    /// the process list. Without it `Status` answers no one
    /// (PERMISSION_DENIED); the game, health and the server list stay open.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "BORBAMAN_OPERATOR_TOKEN",
        hide_env_values = true
    )]
    pub operator_token: Option<OperatorToken>,
    /// Format of the log on stderr: text for people, or json (one object
    /// per line) for a log collector. Each call logs one event at debug
    /// level (method, game, duration, outcome):
    /// RUST_LOG=info,borbaman_server::calls=debug shows them.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "BORBAMAN_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Threads that serve calls (default: one per core). One per core
    /// served more calls a second than one a server even with three
    /// servers and PostgreSQL sharing two cores (`docs/scaling.md`).
    #[arg(
        long,
        value_name = "N",
        env = "BORBAMAN_WORKER_THREADS",
        value_parser = clap::value_parser!(u16).range(1..=1024)
    )]
    pub worker_threads: Option<u16>,
}

/// How the server writes its log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl ServerArgs {
    /// The --db-cluster list with each cluster's --db-cluster-patroni.
    fn db_clusters(&self) -> Result<Vec<ClusterSpec>, String> {
        let mut specs = self.db_clusters.clone();
        for given in &self.db_cluster_patroni {
            let (name, urls) = given.split_once('=').ok_or_else(|| {
                format!("--db-cluster-patroni: expected NAME=URLS, got {given:?}")
            })?;
            let spec = specs.iter_mut().find(|s| s.name == name).ok_or_else(|| {
                format!("--db-cluster-patroni names {name}, which no --db-cluster gives")
            })?;
            let urls: Vec<String> = urls.split(',').map(str::to_string).collect();
            *spec = spec.clone().with_patroni(&urls)?;
        }
        for (i, spec) in specs.iter().enumerate() {
            if specs[..i].iter().any(|s| s.name == spec.name) {
                return Err(format!("--db-cluster {} is given twice", spec.name));
            }
        }
        Ok(specs)
    }

    fn config(&self) -> ServerConfig {
        ServerConfig {
            listen: self.listen,
            advertise: self.advertise.clone(),
            database_url: self.database_url.clone(),
            server_id: self.id.clone(),
            db_clusters: self.db_clusters().unwrap_or_default(),
            store: StoreOptions {
                db_timeout: Duration::from_millis(self.db_timeout_ms),
                acquire_timeout: Duration::from_millis(self.db_acquire_timeout_ms),
                idle_txn_timeout: Duration::from_millis(self.idle_txn_timeout_ms),
                max_connections: self.db_connections,
                min_connections: self.db_min_connections.unwrap_or(self.db_connections),
                warm_up_pace: Duration::from_millis(self.db_warm_up_pace_ms),
                lobby_seat_ttl: Duration::from_millis(self.lobby_seat_ttl_ms),
                round: Duration::from_millis(self.round_ms),
                follow: (!self.patroni.is_empty()).then(|| FollowOptions {
                    members: self.patroni.clone(),
                    interval: Duration::from_millis(self.patroni_interval_ms.max(1)),
                    request_timeout: Duration::from_millis(self.patroni_timeout_ms.max(1)),
                    etcd: self.etcd.clone(),
                    etcd_prefix: self.etcd_prefix.clone(),
                    backstop: Duration::from_millis(self.patroni_backstop_ms.max(1)),
                }),
                name_hold: self.name_hold,
            },
            heartbeat: Duration::from_millis(self.heartbeat_ms),
            server_ttl: Duration::from_millis(self.server_ttl_ms),
            startup_timeout: Duration::from_secs(self.startup_timeout_s),
            slow: Arc::new(SlowMode::new(Duration::from_millis(self.slow_mode_ms))),
            call_limits: CallLimits {
                acts_per_s: nonzero(self.max_acts_per_s),
                joins_per_ip_per_min: nonzero(self.max_joins_per_ip_per_min),
                reads_per_ip_per_s: nonzero(self.max_reads_per_ip_per_s),
            },
            admission: AdmissionLimits {
                max_in_flight: nonzero(self.max_db_concurrency),
                queue_timeout: Duration::from_millis(self.admission_queue_ms),
                join_queue_timeout: Duration::from_millis(self.join_queue_ms),
            },
            seating: SeatingLimits {
                target: nonzero(self.seat_latency_target_ms).map(Duration::from_millis),
                refused_share_bp: nonzero((self.seat_refused_percent * 100.0).round() as u32),
                max_games: nonzero(self.max_games),
            },
            connection_limits: ConnectionLimits {
                per_ip: nonzero(self.max_connections_per_ip),
                total: nonzero(self.max_connections),
                first_bytes_timeout: nonzero(self.first_bytes_timeout_ms)
                    .map(Duration::from_millis),
                idle_timeout: nonzero(self.idle_connection_timeout_ms).map(Duration::from_millis),
                keepalive: nonzero(self.keepalive_interval_ms).map(|every| {
                    (
                        Duration::from_millis(every),
                        Duration::from_millis(self.keepalive_timeout_ms.max(1)),
                    )
                }),
                call_timeout: nonzero(self.call_timeout_ms).map(Duration::from_millis),
                max_streams: nonzero(self.max_streams_per_connection),
                write_stall_timeout: nonzero(self.write_stall_timeout_ms)
                    .map(Duration::from_millis),
            },
            tls: self
                .tls_cert
                .clone()
                .zip(self.tls_key.clone())
                .map(|(cert, key)| TlsFiles { cert, key }),
            retention: RetentionOptions {
                names_unused: self.name_retention,
                ..RetentionOptions::new(self.retention)
            },
            metrics_listen: self.metrics_listen,
            operator_token: self.operator_token.clone(),
        }
    }
}

/// A percentage from 0 to 100, as `--seat-refused-percent` takes it.
fn percent(text: &str) -> Result<f64, String> {
    let p: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number (a percentage, e.g. 2 or 0.5)"))?;
    if (0.0..=100.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not a percentage from 0 to 100"))
    }
}

/// `None` for 0 (no limit).
fn nonzero<T: Default + PartialEq>(n: T) -> Option<T> {
    (n != T::default()).then_some(n)
}

/// Runs a server until SIGTERM or Ctrl-C, then drains and returns. SIGUSR1
/// and SIGUSR2 switch slow mode on and off (see [`crate::slow`]).
pub fn run(args: ServerArgs) -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    let _ = match args.log_format {
        LogFormat::Text => logs.try_init(),
        LogFormat::Json => logs.json().flatten_event(true).try_init(),
    };
    match incoming::raise_open_files_limit() {
        Ok(limit) => tracing::info!(open_files = limit, "open files limit"),
        Err(err) => tracing::warn!(error = %err, "cannot raise the open files limit"),
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.worker_threads {
        runtime.worker_threads(usize::from(threads));
    }
    let runtime = runtime.enable_all().build()?;
    args.db_clusters().map_err(anyhow::Error::msg)?;
    runtime.block_on(async {
        let config = args.config();
        // Before the ready line: a launcher may signal as soon as it reads
        // it, and an unhandled SIGUSR1 would end the process.
        slow_mode_signals(config.slow.clone())?;
        let running = server::start(config).await?;
        {
            let mut out = std::io::stdout().lock();
            let ready = ReadyLine {
                address: running.addr.to_string(),
                id: running.server_id.to_string(),
                metrics: running.metrics_addr.map(|a| a.to_string()),
            };
            writeln!(out, "{ready}")?;
            out.flush()?;
        }
        shutdown_signal().await?;
        running.shutdown().await
    })
}

/// Switches `slow` on at each SIGUSR1 and off at each SIGUSR2, for the
/// life of the runtime.
fn slow_mode_signals(slow: Arc<SlowMode>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut on = signal(SignalKind::user_defined1())?;
    let mut off = signal(SignalKind::user_defined2())?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(()) = on.recv() => slow.set(true),
                Some(()) = off.recv() => slow.set(false),
                else => return,
            }
        }
    });
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
    }
    Ok(())
}

/// A duration as a number and a unit: `500ms`, `60s`, `10m`, `12h`, `3d`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| {
        format!("{text:?} is not a duration: expected e.g. 500ms, 60s, 10m, 12h, 3d")
    })?;
    let unit_ms = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "{text:?} has no known unit: use ms, s, m, h or d (e.g. 60s, 3d)"
            ));
        }
    };
    n.checked_mul(unit_ms)
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is out of range: it must be positive"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: ServerArgs,
    }

    fn parse(extra: &[&str]) -> Result<ServerArgs, clap::Error> {
        let mut argv = vec![
            "borbaman-server",
            "--database-url",
            "postgres://p@db:5432/b",
        ];
        argv.extend_from_slice(extra);
        Cmd::try_parse_from(argv).map(|c| c.args)
    }

    #[test]
    fn patroni_members_are_a_comma_separated_list() {
        let args = parse(&[
            "--patroni",
            "http://127.0.0.1:18008,http://127.0.0.1:18009/,http://pg-c",
            "--patroni-interval-ms",
            "150",
        ])
        .unwrap();
        let members: Vec<String> = args.patroni.iter().map(|m| m.to_string()).collect();
        assert_eq!(
            members,
            [
                "http://127.0.0.1:18008",
                "http://127.0.0.1:18009",
                "http://pg-c:8008"
            ]
        );
        let follow = args.config().store.follow.expect("following Patroni");
        assert_eq!(follow.members.len(), 3);
        assert_eq!(follow.interval, Duration::from_millis(150));
        assert_eq!(follow.request_timeout, Duration::from_millis(100));
        assert!(follow.etcd.is_empty(), "no watch unless asked");
        let args = parse(&[
            "--patroni",
            "http://127.0.0.1:18008",
            "--etcd",
            "http://127.0.0.1:2379,http://etcd-b",
        ])
        .unwrap();
        let follow = args.config().store.follow.expect("following Patroni");
        let etcd: Vec<String> = follow.etcd.iter().map(|e| e.to_string()).collect();
        assert_eq!(etcd, ["http://127.0.0.1:2379", "http://etcd-b:2379"]);
        assert_eq!(follow.etcd_prefix, "/borbaman/borbaman/");
        assert_eq!(follow.backstop, Duration::from_secs(1));
    }

    #[test]
    fn metrics_and_json_logs_are_off_unless_asked() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.metrics_listen, None);
        assert_eq!(args.log_format, LogFormat::Text);
        let args = parse(&["--metrics-listen", "127.0.0.1:9464", "--log-format", "json"]).unwrap();
        assert_eq!(
            args.config().metrics_listen,
            Some("127.0.0.1:9464".parse().unwrap())
        );
        assert_eq!(args.log_format, LogFormat::Json);
    }

    #[test]
    fn streams_and_write_stalls_are_bounded_by_default() {
        let limits = parse(&[]).unwrap().config().connection_limits;
        assert_eq!(limits.max_streams, Some(DEFAULT_MAX_STREAMS));
        assert_eq!(limits.write_stall_timeout, Some(Duration::from_secs(20)));
        let args = parse(&[
            "--max-streams-per-connection",
            "0",
            "--write-stall-timeout-ms",
            "0",
        ])
        .unwrap();
        let limits = args.config().connection_limits;
        assert_eq!(
            (limits.max_streams, limits.write_stall_timeout),
            (None, None)
        );
    }

    #[test]
    fn status_is_for_no_one_without_an_operator_token() {
        assert!(parse(&[]).unwrap().config().operator_token.is_none());
        let args = parse(&["--operator-token", "0123456789abcdef"]).unwrap();
        assert!(args.config().operator_token.is_some());
        let err = parse(&["--operator-token", "secret"]).unwrap_err();
        assert!(err.to_string().contains("at least 16"), "{err}");
    }

    #[test]
    fn worker_threads_are_tokios_default_unless_a_count_is_given() {
        assert_eq!(parse(&[]).unwrap().worker_threads, None);
        assert_eq!(
            parse(&["--worker-threads", "1"]).unwrap().worker_threads,
            Some(1)
        );
        assert!(parse(&["--worker-threads", "0"]).is_err());
    }

    #[test]
    fn without_patroni_the_url_is_the_database() {
        let args = parse(&[]).unwrap();
        assert!(args.patroni.is_empty());
        assert!(args.config().store.follow.is_none());
    }

    #[test]
    fn a_bad_patroni_url_is_refused_at_start() {
        let err = parse(&[
            "--patroni",
            "http://127.0.0.1:18008,https://127.0.0.1:18009",
        ])
        .expect_err("https is refused");
        assert!(err.to_string().contains("https"), "{err}");
    }

    #[test]
    fn retention_takes_a_unit() {
        assert_eq!(
            parse(&[]).unwrap().retention,
            Duration::from_secs(3 * 86_400)
        );
        let args = parse(&["--retention", "60s"]).unwrap();
        assert_eq!(args.retention, Duration::from_secs(60));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("3").unwrap_err().contains("unit"));
        assert!(parse_duration("0s").is_err());
        assert!(parse(&["--retention", "soon"]).is_err());
    }
}
