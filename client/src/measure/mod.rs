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
//! - [`interrupt`]: Ctrl-C or SIGTERM stops a run and the cluster it started.
//! - [`workload`]: the headless clients.
//! - [`invariants`]: what must hold after every run.
//! - [`faults`]: the kinds of fault and the record of each injected one.
//! - [`distance`]: the figures of each emulated distance (`--wan`,
//!   `--wan-mix`) against the network's own round trip.

pub mod attribution;
pub mod capacity;
pub mod dbcost;
pub mod distance;
pub mod faults;
pub mod floors;
pub mod interrupt;
pub mod invariants;
pub mod machine;
pub mod pgview;
pub mod plot;
pub mod quota;
pub mod record;
pub mod report;
pub mod workload;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use borbaman_server::store::audit;
use indicatif::{ProgressBar, ProgressStyle};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::task::JoinHandle;

use crate::shutdown::{self, Shutdown};
use borbaman_client::pool::{PoolConfig, ServerPool};
use borbaman_cluster::local::{ClusterConfig, Database, LocalCluster};
use borbaman_cluster::{CpuQuotas, WanSpec};

use crate::args::DbKind;
use attribution::{Attribution, StallWindows};
use distance::{DistanceReport, link_of_client};
use faults::FaultEvent;
use floors::DbFloor;
use pgview::PostgresView;
use plot::{FaultMark, Reference};
use record::{Recorder, RunClock};
use report::{FloorRatios, SplitGames, Summary, Tail, floor_stats, measure};
use workload::{Progress, WorkloadConfig};

/// What a local cluster's database is: one PostgreSQL or the replicated
/// one, with or without fsync, and the CPU quotas of the database and the
/// servers.
#[derive(Clone, Copy, Debug)]
pub struct LocalSetup {
    pub db: DbKind,
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
    format!(
        "local cluster: database {} (pid {}); servers {} (pid {})",
        cluster.database_url(),
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
    /// How the clients reach the servers (TLS or not).
    pub pool: PoolConfig,
    /// The emulated distances (empty: none); client `c` is at
    /// `wan[c % wan.len()]`.
    pub wan: Vec<Distance>,
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

/// The most errors a closed-loop run may have, as a share of its calls,
/// for its goodput to stand as a capacity figure.
pub const MAX_CLOSED_LOOP_ERROR_SHARE: f64 = 0.01;

/// Why a run's figures do not stand, if they do not: a closed loop
/// (`interval_ms` 0) measures capacity, and one whose calls failed more
/// than [`MAX_CLOSED_LOOP_ERROR_SHARE`] measured its failures instead.
/// Refusals are not errors: they are the servers shedding load, and the
/// goodput already leaves them out.
pub fn too_many_errors(summary: &Summary) -> Option<String> {
    let share = summary.errors as f64 / summary.invocations.max(1) as f64;
    (summary.interval_ms == 0 && share > MAX_CLOSED_LOOP_ERROR_SHARE).then(|| {
        format!(
            "{} of {} calls ({:.1} %) failed with errors (more than {} %): this closed loop measured failures, not capacity; see errors_by_status in summary.json",
            summary.errors,
            summary.invocations,
            share * 100.0,
            MAX_CLOSED_LOOP_ERROR_SHARE * 100.0
        )
    })
}

/// The two phases of a closed loop's floor, for the closed-loop line:
/// each phase's median second and its slowest and fastest, so a reader
/// sees how steady the floor was.
fn floor_phases(floor: &capacity::CapacityFloor) -> String {
    let others = |cores: Option<f64>| match cores {
        Some(cores) => format!(", {cores:.2} cores to other processes"),
        None => String::new(),
    };
    let phase = |p: &capacity::PhaseRate| {
        format!(
            "{:.0}/s (seconds {:.0}–{:.0}{})",
            p.median_per_s,
            p.min_per_s,
            p.max_per_s,
            others(p.others_cores)
        )
    };
    format!(
        " (floor: median second before the run {}, after it {}; the run{})",
        phase(&floor.before),
        phase(&floor.after),
        match floor.run_others_cores {
            Some(_) => others(floor.run_others_cores),
            None => ": other processes not read".into(),
        }
    )
}

/// Prints the headline figures and fails, naming them, if invariants broke
/// or a closed loop had too many errors.
pub fn conclude(summary: &Summary, out: &Path) -> anyhow::Result<()> {
    print_throughput(summary);
    print_calls(summary);
    print_where_the_time_went(summary);
    print_costs(summary);
    print_faults_and_distances(summary);
    println!("report written to {}", out.display());
    for note in &summary.notes {
        println!("note: {note}");
    }
    if let Some(invariants) = &summary.invariants {
        for check in &invariants.checks {
            let verdict = if check.ok { "ok  " } else { "FAIL" };
            println!("{verdict} {}: {}", check.name, check.detail);
        }
        let failed = invariants.failed();
        anyhow::ensure!(failed.is_empty(), "invariant failed: {}", failed.join("; "));
    }
    if let Some(why) = too_many_errors(summary) {
        anyhow::bail!(why);
    }
    Ok(())
}

/// Goodput, and a closed loop's beside its same-run floor.
fn print_throughput(summary: &Summary) {
    println!(
        "goodput {:.1} answered calls/s of {:.1} calls/s sent; {} refused ({}), {} errors ({})",
        summary.goodput_per_s,
        summary.throughput_per_s,
        summary.refusals,
        counts(&summary.refusals_by_reason),
        summary.errors,
        counts(&summary.errors_by_status),
    );
    if summary.floor_txn_throughput_per_s > 0.0 {
        let phases = summary
            .floor_txn_throughput
            .as_ref()
            .map(floor_phases)
            .unwrap_or_default();
        let seconds = summary
            .goodput_seconds
            .as_ref()
            .map(|g| {
                format!(
                    "; goodput's median second {:.0}/s (seconds {:.0}–{:.0}), {}× the floor",
                    g.median_per_s,
                    g.min_per_s,
                    g.max_per_s,
                    summary.goodput_median_second_to_floor
                )
            })
            .unwrap_or_default();
        println!(
            "closed loop: goodput {:.0}/s against the same-run bare-transaction floor {:.0}/s: {}×{phases}{seconds}",
            summary.goodput_per_s, summary.floor_txn_throughput_per_s, summary.throughput_to_floor
        );
    }
}

/// The calls: RTT, jitter, floors, failovers and invariants' counts, the
/// inputs, the tail, and games split over servers.
fn print_calls(summary: &Summary) {
    println!(
        "{} invocations, {} errors; RTT p50 {} µs, p99 {} µs, p99.9 {} µs, max {} µs; \
         jitter max {} µs; floors p50: ping {} µs, transaction {} µs (act p50 {}× floor, p99 {}×); \
         {} faults, {} failovers (gap max {} ms), {} hedges ({:.2}%); \
         lost {}, duplicated {}, regressions {}",
        summary.invocations,
        summary.errors,
        summary.rtt_us.p50,
        summary.rtt_us.p99,
        summary.rtt_us.p999,
        summary.rtt_us.max,
        summary.jitter_us.max,
        summary.floor_ping_us.p50,
        summary.floor_db_txn_us.p50,
        summary.ratios.act_p50_to_floor,
        summary.ratios.act_p99_to_floor,
        summary.faults,
        summary.failovers,
        summary.failover_gap_ms.max,
        summary.hedges,
        summary.hedge_rate * 100.0,
        summary.lost_actions,
        summary.duplicate_actions,
        summary.state_regressions,
    );
    println!(
        "inputs: {} sent, {} applied; key to ack p50 {} µs, p99 {} µs, max {} µs{}",
        summary.inputs_sent,
        summary.inputs_applied,
        summary.input_to_apply_us.p50,
        summary.input_to_apply_us.p99,
        summary.input_to_apply_us.max,
        if summary.predicted {
            format!(
                "; predicted: {} mispredictions in {} reconciliations",
                summary.mispredictions, summary.reconciliations
            )
        } else {
            String::new()
        },
    );
    println!(
        "tail: RTT max {} µs beside the floor's max {} µs; {} calls ({:.3}%) slower than \
         the floor's p99.9 ({} µs)",
        summary.tail.rtt_max_us,
        summary.tail.floor_max_us,
        summary.tail.calls_over_floor_p999,
        summary.tail.fraction_over_floor_p999 * 100.0,
        summary.tail.floor_p999_us,
    );
    if summary.tail.stood_still_stretches > 0 {
        println!(
            "tail outside the machine's stops: RTT max {} µs in the calls in flight during none \
             of the {} stretches the machine stood still ({} calls were)",
            summary.tail.rtt_max_outside_stood_still_us,
            summary.tail.stood_still_stretches,
            summary.tail.calls_in_stood_still,
        );
    }
    if summary.split_games.windows > 0 {
        println!(
            "games split over servers (a game's acts answered by two in one 100 ms window): \
             {} of {} windows ({:.1}%){}",
            summary.split_games.split_windows,
            summary.split_games.windows,
            summary.split_games.split_share * 100.0,
            match summary.split_games.by_last_move.is_empty() {
                true => String::new(),
                false => format!(
                    "; split games' windows by their players' last move: {}",
                    summary
                        .split_games
                        .by_last_move
                        .iter()
                        .map(|(why, n)| format!("{why} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        );
    }
}

/// The slow calls by part, the stall windows, PostgreSQL and the machine.
fn print_where_the_time_went(summary: &Summary) {
    let a = &summary.attribution;
    println!(
        "slow calls (over {} µs): {} of {}; their time by part: {} (by main part: {}); \
         all calls: {}",
        a.slow_threshold_us,
        a.slow.calls,
        a.all.calls,
        a.slow.line(),
        counts(&a.slow.by_main_part),
        a.all.line(),
    );
    let w = &summary.stall_windows;
    println!(
        "stall windows: {} ({} ms in all), holding {} of {} slow calls{}",
        w.count,
        w.total_length_ms,
        w.slow_calls_in_windows,
        w.slow_calls,
        w.held_line(),
    );
    for window in w.windows.iter().take(PRINTED_WINDOWS) {
        println!("  {}", window_line(window));
    }
    if w.windows.len() > PRINTED_WINDOWS {
        println!(
            "  … {} more in summary.json (stall_windows)",
            w.windows.len() - PRINTED_WINDOWS
        );
    }
    if let Some(postgres) = &summary.postgres {
        println!("{}", postgres.line());
    }
    if let Some(machine) = &summary.machine {
        println!("{}", machine.line());
    }
}

/// What a call cost the database and the processes, and the CPU quotas.
fn print_costs(summary: &Summary) {
    if let Some(cost) = &summary.database_cost {
        println!(
            "database per call: {} B of WAL, {} writing transactions, {} of postgres CPU",
            cost.wal_bytes_per_call,
            cost.writing_transactions_per_call,
            cost.cpu_us_per_call
                .map_or("unknown".to_string(), |us| format!("{us} µs")),
        );
    }
    match (
        summary.bench_and_servers_cpu_us_per_call,
        summary.bench_cpu_us_per_call,
    ) {
        (Some(all), Some(bench)) => println!(
            "bench and servers per call: {all} µs of CPU (the bench {bench} µs, its servers {:.1} µs)",
            all - bench
        ),
        (Some(all), None) => println!("bench and servers per call: {all} µs of CPU"),
        _ => {}
    }
    for line in quota::describe(&summary.cpu_quotas) {
        println!("{line}");
    }
}

/// Recovery after faults, the tail by fault, and each distance.
fn print_faults_and_distances(summary: &Summary) {
    if summary.faults > 0 {
        println!(
            "recovery (every client's first good act after a fault): p50 {} ms, p99 {} ms, \
             max {} ms over {} faults; after promotion p99 {} ms, after the new \
             primary's first commit p50 {} ms, p99 {} ms",
            summary.recovery_ms.p50,
            summary.recovery_ms.p99,
            summary.recovery_ms.max,
            summary.recovery_ms.samples,
            summary.recovery_after_promotion_ms.p99,
            summary.recovery_after_commit_ms.p50,
            summary.recovery_after_commit_ms.p99,
        );
        println!(
            "tail by fault: RTT max {} µs in the {} calls started during a fault or within \
             {} s of its end, {} µs in the {} started elsewhere",
            summary.fault_tail.in_faults_max_us,
            summary.fault_tail.in_faults_calls,
            faults::AFTER_RESTORED.as_secs(),
            summary.fault_tail.elsewhere_max_us,
            summary.fault_tail.elsewhere_calls,
        );
    }
    for distance in &summary.distances {
        println!("{}", distance.line());
    }
}

/// Stall windows printed (the longest); `summary.json` lists more.
const PRINTED_WINDOWS: usize = 10;

/// One stall window, the floors and PostgreSQL beside it.
fn window_line(w: &attribution::StallWindow) -> String {
    let floor = |f: &attribution::FloorInWindow| match f.samples {
        0 => "no sample".to_string(),
        n => format!("max {} µs of {n}", f.max_us),
    };
    format!(
        "at {:.3} s for {} ms: {} slow ({} failed) of {} calls, {} games, {} servers, \
         max {} µs: {}; floor ping {}, transaction {}{}",
        w.start_us as f64 / 1e6,
        w.length_us / 1000,
        w.slow_calls,
        w.errors,
        w.calls,
        w.games,
        w.servers,
        w.max_rtt_us,
        w.parts.line(),
        floor(&w.floor_ping),
        floor(&w.floor_db_txn),
        match &w.postgres {
            Some(log) => format!("; postgres: {}", log.line()),
            None => String::new(),
        },
    ) + &match &w.machine {
        Some(m) => format!(
            "; machine: {}{}",
            m.line(),
            m.held_by(w.length_us)
                .map(|part| format!(" (held by the {part})"))
                .unwrap_or_default()
        ),
        None => String::new(),
    }
}

/// `a 3, b 1`, or `none`.
fn counts(by: &std::collections::BTreeMap<String, u64>) -> String {
    if by.is_empty() {
        return "none".into();
    }
    by.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One pool for the floors at each distance (through the same proxies as
/// the clients there), and one per client as every player has.
async fn connect_pools(
    plan: &RunPlan,
    target: &Target,
) -> anyhow::Result<(Vec<ServerPool>, Vec<ServerPool>)> {
    let links: Vec<Option<usize>> = match target.wan.len() {
        0 => vec![None],
        n => (0..n).map(Some).collect(),
    };
    // Which distance could not connect, when one cannot (a pool whose
    // health checks time out below the round trip).
    let at = |link: Option<usize>| match link.and_then(|l| target.wan.get(l)) {
        Some(distance) => format!(" at {} one way", distance.link),
        None => String::new(),
    };
    let mut floor_pools = Vec::new();
    for &link in &links {
        let pool = ServerPool::connect(&target.servers, target.pool_at(link))
            .await
            .with_context(|| format!("connecting the floor prober{}", at(link)))?;
        floor_pools.push(pool);
    }
    let mut pools = Vec::new();
    for client in 0..plan.workload.clients {
        let link = link_of_client(client, target.wan.len());
        // Every answer carries its server's timing, for the attribution.
        let config = PoolConfig {
            server_timing: true,
            ..target.pool_at(link)
        };
        let pool = ServerPool::connect(&target.servers, config)
            .await
            .with_context(|| format!("connecting client {client}{}", at(link)))?;
        pools.push(pool);
    }

    Ok((floor_pools, pools))
}

/// The transaction floor's connection, and both floors measured on the
/// idle cluster at each distance (the transaction floor once, with the
/// first distance's pings).
async fn idle_floors(
    plan: &RunPlan,
    target: &Target,
    floor_pools: &[ServerPool],
    notes: &mut Vec<String>,
) -> anyhow::Result<(Option<DbFloor>, Vec<floors::FloorSamples>)> {
    let mut db_floor = match &target.database_url {
        Some(url) => Some(
            DbFloor::open(url)
                .await
                .context("opening the transaction floor")?,
        ),
        None => {
            notes.push(
                "no database URL: no transaction floor and no invariant checks \
                 (pass --database-url)"
                    .into(),
            );
            None
        }
    };
    let mut idle = Vec::new();
    for (i, pool) in floor_pools.iter().enumerate() {
        // The transaction floor once, with the first distance's pings.
        let db = if i == 0 { db_floor.as_mut() } else { None };
        idle.push(
            floors::measure_idle(&pool.live_channels(), db, plan.floor_samples)
                .await
                .context("measuring the floors")?,
        );
    }

    Ok((db_floor, idle))
}

/// The inputs sent and applied, the predictions, the faults by kind and
/// the clients' recovery after them.
fn fill_inputs_and_recovery(
    summary: &mut Summary,
    plan: &RunPlan,
    logs: &[workload::ClientLog],
    faults: &[FaultEvent],
) {
    let sessions = || logs.iter().flat_map(|l| &l.sessions);
    summary.inputs_sent = sessions().map(|s| s.inputs_sent).sum();
    summary.inputs_applied = sessions().map(|s| s.inputs_applied).sum();
    summary.predicted = plan.workload.predict;
    summary.reconciliations = sessions().map(|s| s.reconciled).sum();
    summary.mispredictions = sessions().map(|s| s.mispredicted).sum();
    summary.input_to_apply_us = floor_stats(
        logs.iter()
            .flat_map(|l| l.input_to_apply_us.iter().copied()),
    );
    for fault in faults {
        *summary
            .faults_by_kind
            .entry(fault.kind.to_string())
            .or_default() += 1;
    }
    summary.recovery_ms = report::ms_stats(faults.iter().filter_map(|f| f.recovered_ms));
    summary.recovery_after_promotion_ms = report::ms_stats(
        faults
            .iter()
            .filter_map(|f| Some(f.recovered_ms? - f.promoted_ms?)),
    );
    summary.recovery_after_commit_ms = report::ms_stats(
        faults
            .iter()
            .filter_map(|f| Some((f.recovered_ms? - f.committing_ms?).max(0.0))),
    );
}

/// Each distance's calls beside its own floor.
fn distances(
    plan: &RunPlan,
    target: &Target,
    probed: &[floors::FloorSamples],
    records: &[record::Invocation],
    summary: &Summary,
) -> Vec<DistanceReport> {
    target
        .wan
        .iter()
        .zip(probed)
        .enumerate()
        .map(|(i, (distance, samples))| {
            let clients: Vec<u32> = (0..plan.workload.clients)
                .filter(|&c| link_of_client(c, target.wan.len()) == Some(i))
                .collect();
            DistanceReport::new(
                &distance.link,
                &clients,
                records,
                &samples.ping_us,
                &summary.floor_db_txn_us,
            )
        })
        .collect()
}

/// When the workload ran: its clock, how long (warm-up included) and the
/// warm-up's end.
#[derive(Clone, Copy)]
struct RunWindow {
    clock: RunClock,
    ran: Duration,
    warmup_us: u64,
}

/// One phase of the closed loop's floor: its rate, when it ran, and how
/// many cores other processes took meanwhile.
type FloorPhase = (capacity::PhaseRate, Instant, Instant, Option<f64>);

/// A closed loop's goodput beside the same-run bare-transaction floor,
/// measured before and after the workload.
fn fill_capacity(
    summary: &mut Summary,
    before: FloorPhase,
    after: FloorPhase,
    run_others_cores: Option<f64>,
    records: &[record::Invocation],
    run: RunWindow,
) {
    let phase = |(mut rate, from, to, others): FloorPhase| {
        rate.start_us = run.clock.offset_us(from);
        rate.end_us = run.clock.offset_us(to);
        rate.others_cores = others;
        rate
    };
    let mut floor = capacity::CapacityFloor::new(phase(before), phase(after));
    floor.run_others_cores = run_others_cores;
    summary.floor_txn_throughput_per_s = floor.floor_per_s;
    // Capacity is what was answered: refusals and errors are not.
    let to_floor =
        |rate: f64| (rate / floor.floor_per_s.max(f64::MIN_POSITIVE) * 1000.0).round() / 1000.0;
    summary.throughput_to_floor = to_floor(summary.goodput_per_s);
    let answered = records
        .iter()
        .filter(|r| !r.warmup && r.is_ok())
        .map(|r| r.end_us());
    let seconds = capacity::PhaseRate::from_slices(&capacity::slices_of(
        answered,
        run.warmup_us,
        run.clock.us(run.clock.started() + run.ran),
    ));
    summary.goodput_median_second_to_floor = to_floor(seconds.median_per_s);
    summary.goodput_seconds = Some(seconds);
    summary.floor_txn_throughput = Some(floor);
}

/// What a run's slow calls are read against: the calls, the floor
/// probers' samples, the machine's readings, PostgreSQL's statistics, and
/// when the run started and ended.
struct RunEvidence<'a> {
    records: &'a [record::Invocation],
    probed: &'a [floors::FloorSamples],
    readings: &'a [machine::Reading],
    stats_before: Option<&'a pgview::Snapshot>,
    stats_after: Option<&'a pgview::Snapshot>,
    run_started_unix_ms: i64,
    warmup_us: u64,
    run_end_us: u64,
}

/// The slow calls by part and the stall windows, each with the floors,
/// PostgreSQL's log and the machine beside it; keeps the database's logs,
/// the machine's readings and PostgreSQL's statistics in `OUT/logs/`.
fn attribute_stalls(
    summary: &mut Summary,
    plan: &RunPlan,
    target: &Target,
    ev: &RunEvidence,
) -> anyhow::Result<()> {
    let threshold_us =
        attribution::slow_threshold_us(summary.ratios.floor_p50_us, summary.ratios.floor_p99_us);
    let network_us = summary.floor_ping_us.p50;
    summary.attribution = Attribution::new(ev.records, threshold_us, network_us);
    let mut windows = attribution::stall_windows(
        ev.records,
        threshold_us,
        network_us,
        &ev.probed.iter().flat_map(|s| s.pings()).collect::<Vec<_>>(),
        &ev.probed
            .iter()
            .flat_map(|s| s.db_txns())
            .collect::<Vec<_>>(),
    );
    let log_dir = plan.out.join("logs");
    let database_logs = target.database_logs.as_ref().map(|logs| logs());
    let log = database_logs
        .filter(|f| !f.is_empty())
        .map(|files| keep_database_logs(&files, &log_dir, ev.run_started_unix_ms));
    if let Some((_, events)) = &log {
        if let Some(floor) = summary.floor_txn_throughput.as_mut() {
            for phase in [&mut floor.before, &mut floor.after] {
                phase.postgres = Some(pgview::LogCounts::within(
                    events,
                    phase.start_us,
                    phase.end_us,
                ));
            }
        }
        for window in &mut windows {
            window.postgres = Some(pgview::LogCounts::within(
                events,
                window.start_us as i64 - pgview::LEAD_US,
                window.end_us() as i64,
            ));
        }
    }
    for window in &mut windows {
        window.machine = Some(machine::MachineInWindow::within(
            ev.readings,
            window.start_us,
            window.end_us(),
        ));
    }
    summary.machine = Some(machine::MachineView::new(ev.readings, ev.warmup_us));
    std::fs::create_dir_all(&log_dir).ok();
    let machine_csv = log_dir.join("machine.csv");
    std::fs::write(&machine_csv, machine::csv(ev.readings))
        .with_context(|| format!("cannot write {}", machine_csv.display()))?;
    if let (Some(before), Some(after)) = (ev.stats_before, ev.stats_after) {
        let mut view = PostgresView::between(before, after);
        if let Some((copied, events)) = log {
            view.log = Some(pgview::LogCounts::within(
                &events,
                ev.warmup_us as i64,
                ev.run_end_us as i64,
            ));
            view.log_files = copied;
        }
        summary.postgres = Some(view);
    }
    for (name, stats) in [("before", ev.stats_before), ("after", ev.stats_after)] {
        if let Some(stats) = stats {
            std::fs::create_dir_all(&log_dir).ok();
            let path = log_dir.join(format!("pg_stat_{name}.json"));
            std::fs::write(&path, serde_json::to_string_pretty(stats)? + "\n")
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    let slow_calls = summary.attribution.slow.calls
        + ev.records
            .iter()
            .filter(|r| !r.warmup && r.is_error() && r.rtt_us > threshold_us)
            .count() as u64;
    summary.stall_windows = StallWindows::new(windows, slow_calls);
    Ok(())
}

/// The invariant checks, on the database's primary as the run ends (a
/// replicated database's primary may have moved); `None` without a
/// database.
async fn check_invariants(
    target: &Target,
    logs: &[workload::ClientLog],
) -> anyhow::Result<Option<invariants::InvariantReport>> {
    let final_url = match &target.final_database_url {
        Some(current) => {
            let current = current.clone();
            Some(tokio::task::spawn_blocking(move || current()).await?)
        }
        None => target.database_url.clone(),
    };
    Ok(match &final_url {
        Some(url) => {
            let db = PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(Duration::from_secs(10))
                .connect(url)
                .await
                .context("connecting to the database to check invariants")?;
            let report = invariants::check(&db, logs)
                .await
                .context("checking invariants")?;
            db.close().await;
            Some(report)
        }
        None => None,
    })
}

/// Lost, duplicated and regressed actions: from the invariant checks, or,
/// without a database, the regressions the clients saw.
fn fill_invariants(
    summary: &mut Summary,
    invariants: Option<invariants::InvariantReport>,
    logs: &[workload::ClientLog],
) {
    if let Some(report) = invariants {
        summary.lost_actions = report.actions.lost;
        summary.duplicate_actions = report.actions.duplicated;
        summary.state_regressions = report.state_regressions;
        summary.invariants_ok = report.failed().is_empty();
        summary.games_played = report.games;
        summary.invariants = Some(report);
    } else {
        summary.state_regressions = logs
            .iter()
            .flat_map(|l| &l.sessions)
            .map(|s| s.regressions)
            .sum();
    }
}

/// A running fault injector: its faults once the run ends.
type InjectorRun = JoinHandle<Result<Vec<FaultEvent>, tokio::task::JoinError>>;

/// Starts the fault injector, if any. With one, the run ends a calm after
/// its last fault is over (and no sooner than planned), not at a fixed
/// time: a fault that ran late still has its recovery measured, and a run
/// need not leave room for the slowest fault after each one. Returns its
/// task and when the clients stop.
fn start_injector(
    plan: &RunPlan,
    injector: Option<Injector>,
    clock: RunClock,
    stop: &Shutdown,
) -> (Option<InjectorRun>, Shutdown) {
    match injector {
        Some(start) => {
            let faults = start(clock, stop.clone());
            let planned_end = clock.started() + plan.workload.total;
            let tail = plan.tail_after_faults;
            let (ender, end) = shutdown::channel();
            let task = tokio::spawn(async move {
                let faults = faults.await;
                let end = run_end(planned_end, Instant::now(), tail);
                tokio::time::sleep_until(end.into()).await;
                ender.stop();
                faults
            });
            (Some(task), end)
        }
        // Without faults the clients stop at the planned end. (Not on a
        // stopper of their own: dropping it would stop them at once.)
        None => (None, stop.clone()),
    }
}

/// CPU readings around each phase and the workload: how many cores other
/// processes took meanwhile, the usual reason a floor moves.
fn cpu_now(target: &Target) -> machine::CpuReading {
    let database = target
        .database_pids
        .as_ref()
        .and_then(|pids| dbcost::cpu_of(&pids()));
    let ours = dbcost::cpu_of(&[std::process::id()]);
    machine::CpuReading::now(ours, database)
}

/// What the workload phase of a run leaves: its clock, the clients' logs
/// and calls, the faults, the floor probers' samples, the machine's
/// readings, and the database's cost and statistics around it.
struct Ran {
    clock: RunClock,
    run_started_unix_ms: i64,
    logs: Vec<workload::ClientLog>,
    records: Vec<record::Invocation>,
    faults: Vec<FaultEvent>,
    probed: Vec<floors::FloorSamples>,
    readings: Vec<machine::Reading>,
    run_end_us: u64,
    /// What the clients ran for, warm-up included.
    ran: Duration,
    table_rows: Vec<report::TableRows>,
    costs: (Option<dbcost::Reading>, Option<dbcost::Reading>),
    stats: (Option<pgview::Snapshot>, Option<pgview::Snapshot>),
    cpu_quotas: Vec<quota::QuotaUse>,
    bench_cpu: Option<Duration>,
    run_others_cores: Option<f64>,
    run_cpu: Option<Duration>,
}

/// The workload: the clients (and the injector, if any) beside a floor
/// prober per distance, the machine's sampler and the database's readings
/// around it.
async fn run_workload(
    plan: &RunPlan,
    target: &Target,
    floor_pools: &[ServerPool],
    pools: Vec<ServerPool>,
    db_floor: Option<DbFloor>,
    injector: Option<Injector>,
) -> anyhow::Result<Ran> {
    let clock = RunClock::start();
    let sampler = machine::MachineSampler::start(clock.started());
    let run_started_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let (stopper, stop) = shutdown::channel();
    let recorder = Recorder::new();
    let progress = Arc::new(Progress::default());
    // The probers measure the measured window only, beside the clients:
    // one per distance, the first with the transaction floor.
    let mut db_floor = db_floor;
    let probers: Vec<_> = floor_pools
        .iter()
        .map(|pool| {
            tokio::spawn(floors::probe(
                pool.clone(),
                db_floor.take(),
                clock,
                clock.started() + plan.workload.warmup,
                // A closed loop has no interval: probe at the game's 20 Hz.
                plan.workload.interval.max(Duration::from_millis(50)),
                stop.clone(),
            ))
        })
        .collect();
    let workload_config = WorkloadConfig {
        until_stopped: injector.is_some(),
        ..plan.workload.clone()
    };
    let (injector, end) = start_injector(plan, injector, clock, &stop);
    let bar = progress_bar(plan, clock, progress.clone(), stop.clone());

    let cost_db = match &target.database_url {
        Some(url) => PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await
            .ok(),
        None => None,
    };
    let database_pids = || target.database_pids.as_ref().map(|pids| pids());
    let cost_before = match &cost_db {
        Some(db) => dbcost::read(db, database_pids()).await.ok(),
        None => None,
    };
    let stats_before = match &cost_db {
        Some(db) => audit::stat_snapshot(db).await.ok().map(pgview::snapshot),
        None => None,
    };
    let census = cost_db
        .clone()
        .map(|db| tokio::spawn(count_rows(db, clock, stop.clone())));
    let groups = || target.cpu_groups.as_ref().map(|g| g()).unwrap_or_default();
    let groups_run = groups();
    let cpu_run = cpu_now(target);
    let bench_cpu_run = dbcost::cpu_of_process(std::process::id());
    let logs = workload::run(&workload_config, pools, clock, &recorder, &progress, end).await;
    let cpu_ran = cpu_now(target);
    let cpu_quotas = quota::between(&groups_run, &groups(), clock.started().elapsed());
    let bench_cpu = match (bench_cpu_run, dbcost::cpu_of_process(std::process::id())) {
        (Some(from), Some(to)) => Some(to.saturating_sub(from)),
        _ => None,
    };
    let run_others_cores = cpu_run.others_cores(&cpu_ran);
    let run_cpu = cpu_run.ours(&cpu_ran);
    stopper.stop();
    // What the clients ran for, warm-up included: the plan's total, or
    // more when the run was held open for a late fault.
    let ran = clock.started().elapsed().max(plan.workload.total);
    let table_rows = match census {
        Some(task) => task.await?,
        None => Vec::new(),
    };
    // A failed-over database answers on another member: no reading then.
    let cost_after = match &cost_db {
        Some(db) => dbcost::read(db, database_pids()).await.ok(),
        None => None,
    };
    let stats_after = match &cost_db {
        Some(db) => audit::stat_snapshot(db).await.ok().map(pgview::snapshot),
        None => None,
    };
    if let Some(db) = cost_db {
        db.close().await;
    }
    let run_end_us = clock.now_us();
    let readings = sampler.stop();
    let mut probed = Vec::new();
    let mut db_floor = None;
    for prober in probers {
        let (samples, db) = prober.await?;
        probed.push(samples);
        db_floor = db_floor.or(db);
    }
    let mut faults = match injector {
        Some(task) => task.await??,
        None => Vec::new(),
    };
    bar.await?;
    if let Some(db_floor) = db_floor {
        db_floor.close().await;
    }

    let records = recorder.snapshot();
    faults::fill_recovery(&mut faults, &records);
    Ok(Ran {
        clock,
        run_started_unix_ms,
        logs,
        records,
        faults,
        probed,
        readings,
        run_end_us,
        ran,
        table_rows,
        costs: (cost_before, cost_after),
        stats: (stats_before, stats_after),
        cpu_quotas,
        bench_cpu,
        run_others_cores,
        run_cpu,
    })
}

/// The RTT's ratios to the floors, the tail (outside the machine's stops
/// too), the tail by fault, and games split over servers.
fn fill_tail(
    summary: &mut Summary,
    records: &[record::Invocation],
    readings: &[machine::Reading],
    faults: &[FaultEvent],
) {
    summary.ratios = FloorRatios::new(
        &summary.rtt_us,
        &summary.act_rtt_us,
        &summary.floor_ping_us,
        &summary.floor_db_txn_us,
    );
    summary.tail = Tail::new(records, &summary.floor_ping_us, &summary.floor_db_txn_us);
    summary
        .tail
        .outside(records, &machine::stood_still_stretches(readings));
    summary.fault_tail = faults::FaultTail::new(faults, records);
    summary.split_games = SplitGames::new(records);
}

/// What a call cost the database (WAL, writing transactions, its CPU),
/// and the bench's and its servers' CPU per call; warm-up calls included,
/// as the readings bracket the whole workload.
fn fill_costs(
    summary: &mut Summary,
    records: &[record::Invocation],
    (cost_before, cost_after): (Option<dbcost::Reading>, Option<dbcost::Reading>),
    (run_cpu, bench_cpu): (Option<Duration>, Option<Duration>),
) {
    if let (Some(before), Some(after)) = (cost_before, cost_after) {
        // Warm-up calls included: the readings bracket the whole workload.
        summary.database_cost = Some(dbcost::DatabaseCost::between(
            &before,
            &after,
            records.len() as u64,
        ));
    }
    // Warm-up calls included, as the readings bracket the workload.
    let per_call =
        |cpu: Duration| (cpu.as_micros() as f64 / records.len() as f64 * 10.0).round() / 10.0;
    if !records.is_empty() {
        summary.bench_and_servers_cpu_us_per_call = run_cpu.map(per_call);
        summary.bench_cpu_us_per_call = bench_cpu.map(per_call);
    }
}

/// One measured run against `target`: floors on the idle cluster, then the
/// clients (and the injector, if any) beside a floor prober, then the
/// invariant checks; writes every output to `plan.out`.
pub async fn run_measured(
    plan: &RunPlan,
    target: &Target,
    injector: Option<Injector>,
) -> anyhow::Result<Summary> {
    std::fs::create_dir_all(&plan.out)
        .with_context(|| format!("cannot create {}", plan.out.display()))?;
    let started_at_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut notes = Vec::new();
    let load_before = load_average();
    let (floor_pools, pools) = connect_pools(plan, target).await?;

    let (db_floor, idle) = idle_floors(plan, target, &floor_pools, &mut notes).await?;

    // A closed loop's capacity floor, first phase: on the idle cluster
    // (see `capacity` for why it is short).
    let closed_loop_url = match (&target.database_url, plan.workload.interval.is_zero()) {
        (Some(url), true) => Some(url.clone()),
        _ => None,
    };
    let before_for = (plan.workload.total - plan.workload.warmup).min(capacity::BEFORE);
    // CPU readings around each phase and the workload: how many cores
    // other processes took meanwhile, the usual reason a floor moves.
    let cpu_now = || cpu_now(target);
    // One phase of the floor: its rate, when it ran, and how many cores
    // other processes took meanwhile.
    let floor_phase = |url: String, duration: Duration, when: &'static str| {
        let cpu_now = &cpu_now;
        let (clients, games) = (plan.workload.clients, plan.games);
        async move {
            let (from, cpu) = (Instant::now(), cpu_now());
            let rate = floors::txn_throughput(&url, clients, games, duration)
                .await
                .with_context(|| format!("measuring the bare-transaction throughput {when}"))?;
            anyhow::Ok((rate, from, Instant::now(), cpu.others_cores(&cpu_now())))
        }
    };
    let floor_before = match &closed_loop_url {
        Some(url) => Some(floor_phase(url.clone(), before_for, "before the run").await?),
        None => None,
    };

    let Ran {
        clock,
        run_started_unix_ms,
        logs,
        records,
        faults,
        probed,
        readings,
        run_end_us,
        ran,
        table_rows,
        costs: (cost_before, cost_after),
        stats: (stats_before, stats_after),
        cpu_quotas,
        bench_cpu,
        run_others_cores,
        run_cpu,
    } = run_workload(plan, target, &floor_pools, pools, db_floor, injector).await?;
    // The second phase, right after the workload, for as long as it ran.
    let floor_after = match &closed_loop_url {
        Some(url) => {
            Some(floor_phase(url.clone(), ran - plan.workload.warmup, "after the run").await?)
        }
        None => None,
    };
    let warmup_us = record::duration_us(plan.workload.warmup);
    let invariants = check_invariants(target, &logs).await?;

    // With several distances, the floors pool every distance's pings (the
    // clients are spread over them evenly); each distance has its own below.
    let all = |samples: &[floors::FloorSamples], of: fn(&floors::FloorSamples) -> &Vec<u64>| {
        floor_stats(samples.iter().flat_map(|s| of(s).iter().copied()))
    };
    let ping_failed: u64 = probed.iter().chain(&idle).map(|s| s.ping_failed).sum();
    if ping_failed > 0 {
        notes.push(format!(
            "{ping_failed} floor pings failed or went unanswered (a server down or hung) \
             and are left out of the floors"
        ));
    }
    let mut summary = Summary {
        faults: faults.len() as u64,
        floor_ping_us: all(&probed, |s| &s.ping_us),
        floor_db_txn_us: all(&probed, |s| &s.db_txn_us),
        floor_idle_ping_us: all(&idle, |s| &s.ping_us),
        floor_idle_db_txn_us: all(&idle, |s| &s.db_txn_us),
        warmup_s: plan.workload.warmup.as_secs_f64(),
        duration_s: (ran - plan.workload.warmup).as_secs_f64(),
        clients: plan.workload.clients,
        games: plan.games,
        games_finished: finished_games(&logs),
        pool_failovers: logs.iter().map(|l| l.pool_failovers).sum(),
        interval_ms: plan.workload.interval.as_millis() as u64,
        servers: target.servers.clone(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        git_head: git_head(),
        started_at_unix_s,
        run_started_unix_ms,
        load_average_1m: [load_before, load_average()],
        table_rows,
        ..Summary::default()
    }
    .with_measurements(measure(&records));
    fill_inputs_and_recovery(&mut summary, plan, &logs, &faults);
    if let (Some(before), Some(after)) = (floor_before, floor_after) {
        let run = RunWindow {
            clock,
            ran,
            warmup_us,
        };
        fill_capacity(&mut summary, before, after, run_others_cores, &records, run);
    }
    fill_tail(&mut summary, &records, &readings, &faults);
    let evidence = RunEvidence {
        records: &records,
        probed: &probed,
        readings: &readings,
        stats_before: stats_before.as_ref(),
        stats_after: stats_after.as_ref(),
        run_started_unix_ms,
        warmup_us,
        run_end_us,
    };
    attribute_stalls(&mut summary, plan, target, &evidence)?;
    summary.distances = distances(plan, target, &probed, &records, &summary);
    fill_costs(
        &mut summary,
        &records,
        (cost_before, cost_after),
        (run_cpu, bench_cpu),
    );
    summary.cpu_quotas = cpu_quotas;
    fill_invariants(&mut summary, invariants, &logs);
    notes.push(format!(
        "warm-up: calls started in the first {} s ({} calls) are in invocations.csv \
         (warmup=true) but in no figure",
        plan.workload.warmup.as_secs(),
        summary.warmup_invocations
    ));
    summary.notes = notes;

    write_outputs(&plan.out, &records, &summary, &faults, warmup_us)?;
    Ok(summary)
}

fn write_outputs(
    out: &Path,
    records: &[record::Invocation],
    summary: &Summary,
    faults: &[FaultEvent],
    warmup_us: u64,
) -> anyhow::Result<()> {
    record::write_csv(&out.join("invocations.csv"), records)?;
    let json = serde_json::to_string_pretty(summary)?;
    std::fs::write(out.join("summary.json"), json + "\n")
        .with_context(|| format!("cannot write {}", out.join("summary.json").display()))?;
    let references = [
        Reference {
            value_us: summary.floor_ping_us.p50,
            label: format!("ping floor p50 {} µs", summary.floor_ping_us.p50),
        },
        Reference {
            value_us: summary.floor_db_txn_us.p50,
            label: format!("transaction floor p50 {} µs", summary.floor_db_txn_us.p50),
        },
        Reference {
            value_us: summary.ratios.floor_p50_us,
            label: format!("ping + transaction p50 {} µs", summary.ratios.floor_p50_us),
        },
    ];
    let references: Vec<Reference> = references.into_iter().filter(|r| r.value_us > 0).collect();
    plot::write_ecdf_svg(&out.join("ecdf.svg"), records, &references)?;
    let marks: Vec<FaultMark> = faults
        .iter()
        .filter(|f| f.at_us >= warmup_us)
        .map(|f| FaultMark {
            at_us: f.at_us,
            label: f.kind.to_string(),
        })
        .collect();
    plot::write_rtt_svg(&out.join("rtt.svg"), records, &marks)?;
    if !faults.is_empty() {
        record::write_csv(&out.join("faults.csv"), faults)?;
    }
    Ok(())
}

/// Copies the database's log files into `log_dir` (those not already
/// there) and reads their events onto the run's clock. Returns the copies'
/// names and the events; a file that cannot be read is left out (and
/// said so in the log).
fn keep_database_logs(
    files: &[PathBuf],
    log_dir: &Path,
    run_started_unix_ms: i64,
) -> (Vec<String>, Vec<(i64, pgview::LogEvent)>) {
    let mut kept = Vec::new();
    let mut events = Vec::new();
    for file in files {
        let text = match std::fs::read(file) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => {
                tracing::warn!("cannot read PostgreSQL's log {}: {e}", file.display());
                continue;
            }
        };
        let inside = file.starts_with(log_dir);
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "postgres.log".into());
        let kept_at = if inside {
            file.clone()
        } else {
            let copy = log_dir.join(&name);
            if let Err(e) =
                std::fs::create_dir_all(log_dir).and_then(|_| std::fs::write(&copy, &text))
            {
                tracing::warn!("cannot copy PostgreSQL's log to {}: {e}", copy.display());
            }
            copy
        };
        kept.push(
            kept_at
                .strip_prefix(log_dir)
                .unwrap_or(&kept_at)
                .display()
                .to_string(),
        );
        events.extend(pgview::events(&text, run_started_unix_ms));
    }
    (kept, events)
}

/// When a run with faults ends: `tail` after its last fault was over
/// (`faults_over`), and never before the planned end.
pub fn run_end(planned: Instant, faults_over: Instant, tail: Duration) -> Instant {
    planned.max(faults_over + tail)
}

/// Shows elapsed seconds and live counters until `stop` turns true. Draws
/// nothing when stderr is not a terminal.
fn progress_bar(
    plan: &RunPlan,
    clock: RunClock,
    progress: Arc<Progress>,
    mut stop: Shutdown,
) -> JoinHandle<()> {
    let total = plan.workload.total;
    let warmup = plan.workload.warmup;
    let bar = ProgressBar::new(total.as_secs());
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>8} [{elapsed_precise}] {bar:30} {pos}/{len} s  {msg}",
        )
        .expect("valid template"),
    );
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stop.recv() => break,
            }
            let elapsed = clock.started().elapsed();
            bar.set_prefix(if elapsed < warmup {
                "warm-up"
            } else {
                "measure"
            });
            bar.set_position(elapsed.as_secs().min(total.as_secs()));
            bar.set_message(format!(
                "{} calls, {} refused, {} errors, {} failovers, {} games finished",
                progress.calls.load(Ordering::Relaxed),
                progress.refusals.load(Ordering::Relaxed),
                progress.errors.load(Ordering::Relaxed),
                progress.failovers.load(Ordering::Relaxed),
                progress.sessions_finished.load(Ordering::Relaxed) / 4,
            ));
        }
        bar.finish_and_clear();
    })
}

/// The 1-minute load average (0 where /proc/loadavg is missing): this
/// machine is shared, and a run beside someone's build says so here.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Games the clients saw finish with a winner or a draw.
fn finished_games(logs: &[workload::ClientLog]) -> u64 {
    let finished: std::collections::HashSet<u64> = logs
        .iter()
        .flat_map(|l| &l.sessions)
        .filter(|s| s.finished)
        .map(|s| s.game_id)
        .collect();
    finished.len() as u64
}

/// HEAD of the repository the command runs in, if any.
fn git_head() -> Option<String> {
    let output = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Logs warnings to stderr unless `RUST_LOG` says otherwise; a no-op when a
/// subscriber is already installed.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Every table's rows at the start, every minute, and once more when the
/// run stops (a failed read is left out: the database may be failing over).
async fn count_rows(db: PgPool, clock: RunClock, mut stop: Shutdown) -> Vec<report::TableRows> {
    let mut samples = Vec::new();
    let mut ticker = tokio::time::interval(Duration::from_secs(60));
    loop {
        let stopping = tokio::select! {
            _ = ticker.tick() => false,
            _ = stop.recv() => true,
        };
        if let Ok(rows) = audit::table_rows(&db).await {
            samples.push(report::TableRows {
                at_s: clock.started().elapsed().as_secs_f64(),
                rows: rows.into_iter().map(|(t, n)| (t.to_string(), n)).collect(),
            });
        }
        if stopping {
            return samples;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
