//! `borbaman chaos`: the bench workload on a local cluster, plus faults
//! injected on a schedule — after the warm-up, one every
//! `--fault-interval-s`, kinds mixed at random when several are given (or
//! taken in the order given with `--faults-in-order`):
//!
//! - `kill`: SIGKILL a random server, then (after `--replace-after-ms`, as
//!   a supervisor would) start a replacement so the cluster keeps its size;
//! - `hang`: SIGSTOP a random server for `--hang-ms`, then SIGCONT;
//! - `restart`: SIGTERM a random server (it drains and deregisters), then
//!   start it again;
//! - `db-restart`: restart PostgreSQL (fast shutdown) and bring it back;
//!   with `--db-clusters N`, cluster `--fault-cluster`'s;
//!
//! two gray failures, where a server still passes its health checks:
//!
//! - `db-partition` (`--db single`): cut a random server off the database
//!   for `--partition-ms` (its proxy to PostgreSQL closes every connection
//!   and resets new ones), then heal it; the server answers "database
//!   unavailable" meanwhile, and its callers must move to servers that can
//!   commit;
//! - `slow`: a random server answers every game call `--slow-ms` late for
//!   `--slow-for-ms` (its slow mode), and hedged calls must keep the tail;
//!
//! and with `--db ha` (3 etcd + 3 Patroni members, synchronous), faults on
//! the database, each followed by the wait for a new primary
//! (`promoted_ms`) and, after `--replace-after-ms`, the killed member
//! brought back as a standby before the next fault:
//!
//! - `db-kill`: SIGKILL the primary's postmaster (Patroni stays);
//! - `db-host-loss`: SIGKILL the primary's Patroni, postmaster and backends
//!   at once;
//! - `db-switchover`: a planned switchover through Patroni's REST API;
//! - `etcd-kill`: SIGKILL one etcd member (the primary should not move).
//!
//! With `--db-clusters N` (2 or more) there is one more fault:
//!
//! - `partition-move`: the partition of a game in play (one at random)
//!   moves to the next database cluster (`borbaman db move`, see
//!   docs/scaling.md); `faults.csv` has how long it was read-only
//!   (`read_only_ms`). Faults after it move partitions back and forth.
//!
//! With `--db-clusters N` the database faults act on one cluster,
//! `--fault-cluster K` (0, home, by default): only that cluster's Patroni
//! group fails over (`etcd-kill` hits the one etcd they share), and the
//! summary's `clusters` says how each cluster's games fared.
//!
//! With `--wan` or `--wan-mix` the servers sit behind delay proxies, at a
//! distance from the clients (see docs/internet.md): a killed server's
//! reset reaches its clients one delay later, and its replacement is
//! found behind the same proxy address.
//!
//! The run ends `--tail-s` after the last fault is over (its server
//! replaced, its member back), or after the last interval if that is
//! later: a fault that ran late still has its recovery measured.
//!
//! Besides the bench outputs it writes `faults.csv` (time, kind, target,
//! `promoted_ms`, `recovered_ms` — until every client had a good `Act`
//! after the fault — and `restored_ms`),
//! and like bench it exits non-zero, naming the invariant, when one fails.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;

use crate::measure::clusters::fault_target;
use crate::measure::faults::{FaultEvent, FaultKind};
use crate::measure::interrupt::Interrupt;
use crate::measure::record::{RunClock, duration_us};
use crate::measure::{self, Injector, RunPlan, Target};
use crate::shutdown::Shutdown;
use borbaman_cluster::HaError;
use borbaman_cluster::local::{ClusterError, LocalCluster};

use crate::args::{CpuQuotaArgs, DbArg, DbKind, DistanceArgs};

/// Flags of `borbaman chaos`.
#[derive(Clone, Debug, clap::Args)]
pub struct ChaosArgs {
    /// Servers in the local cluster (kept at this size).
    #[arg(long, default_value_t = 3)]
    pub servers: usize,
    /// Faults to inject.
    #[arg(long, default_value_t = 16)]
    pub faults: u32,
    /// Seconds between two faults. A fault on the replicated database
    /// (`--db ha`) waits besides until the one before is over (its member
    /// back) and the cluster has been whole for 3 s.
    #[arg(long, default_value_t = 3)]
    pub fault_interval_s: u64,
    /// Kinds of fault, mixed at random when several.
    #[arg(long, value_delimiter = ',', default_value = "kill")]
    pub fault: Vec<FaultKind>,
    /// Take the kinds of `--fault` in the order given, starting again from
    /// the first after the last, instead of at random: e.g. `--fault
    /// db-kill,db-switchover --faults 2` kills the primary, then switches
    /// over, on one cluster.
    #[arg(long)]
    pub faults_in_order: bool,
    /// How long a hung server stays stopped.
    #[arg(long, default_value_t = 2000)]
    pub hang_ms: u64,
    /// How long a server stays cut off the database (`db-partition`).
    #[arg(long, default_value_t = 2000)]
    pub partition_ms: u64,
    /// How late a slow server answers each game call (`slow`; the servers'
    /// `--slow-mode-ms`).
    #[arg(long, default_value_t = 200)]
    pub slow_ms: u64,
    /// How long a server stays slow (`slow`).
    #[arg(long, default_value_t = 2000)]
    pub slow_for_ms: u64,
    /// Delay between a kill (or a restart's exit) and the start of the
    /// replacement. Starting a server costs a burst of CPU; on a small
    /// machine, doing it at the very moment of the kill would be measured
    /// as part of the failover.
    #[arg(long, default_value_t = 1000)]
    pub replace_after_ms: u64,
    /// Headless clients (4 per game).
    #[arg(long, default_value_t = 16)]
    pub clients: u32,
    /// Time between two invocations of one client.
    #[arg(long, default_value_t = 50)]
    pub interval_ms: u64,
    /// Clients predict like the terminal: each draws (and its bot decides
    /// on) the server's newest state with its own unacknowledged inputs
    /// applied on top with the game core, and counts the corrections a
    /// newer state from the server forced (reported as mispredictions).
    #[arg(long)]
    pub predict: bool,
    /// Warm-up before the first fault; left out of every figure.
    #[arg(long, default_value_t = 5)]
    pub warmup_s: u64,
    /// Calm after the last fault before the run ends: after the last
    /// interval, or after the last fault is over (its server replaced, its
    /// database member back) if that is later.
    #[arg(long, default_value_t = 3)]
    pub tail_s: u64,
    /// Directory for the bench outputs and faults.csv.
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of the fault schedule's choices (kind, target).
    #[arg(long, default_value_t = 749)]
    pub seed: u64,
    /// Samples of each floor taken before the run.
    #[arg(long, default_value_t = 300)]
    pub floor_samples: usize,
    /// Run the private PostgreSQL without fsync, its data in memory under
    /// /dev/shm when that has 1 GiB free.
    #[arg(long)]
    pub no_fsync: bool,
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub cpu: CpuQuotaArgs,
    #[command(flatten)]
    pub distance: DistanceArgs,
    /// The database cluster the database faults act on, with
    /// `--db-clusters N`: 0 (home, the default) to N-1. `db-kill`,
    /// `db-host-loss` and `db-switchover` (`--db ha`) fail over only that
    /// cluster's Patroni group; `db-restart` restarts only its PostgreSQL.
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub fault_cluster: usize,
    /// Longest wait for a new primary after a database fault (`--db ha`).
    #[arg(long, default_value_t = 30)]
    pub promotion_timeout_s: u64,
    /// Put a proxy between each server and the database even when no
    /// `db-partition` fault needs it, to measure what the proxy costs the
    /// other faults.
    #[arg(long)]
    pub database_proxy: bool,
    /// An extra flag for every server, replacements included, e.g.
    /// `--server-arg=--db-min-connections=0`; repeat for several.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
}

/// When each fault of a run is due, since the start of the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub at: Vec<Duration>,
    /// Total run time, warm-up included.
    pub total: Duration,
}

impl Schedule {
    /// One fault every `interval` after the warm-up, the first half an
    /// interval in; then `tail` of calm.
    pub fn new(warmup: Duration, faults: u32, interval: Duration, tail: Duration) -> Schedule {
        let at: Vec<Duration> = (0..faults)
            .map(|i| warmup + interval / 2 + interval * i)
            .collect();
        Schedule {
            at,
            total: warmup + interval * faults + tail,
        }
    }
}

/// `borbaman chaos`.
pub fn run(args: ChaosArgs) -> anyhow::Result<()> {
    measure::init_tracing();
    anyhow::ensure!(
        args.servers >= 2,
        "--servers must be at least 2 to survive a fault"
    );
    anyhow::ensure!(!args.fault.is_empty(), "--fault needs at least one kind");
    if let Some(kind) = args.fault.iter().find(|k| k.needs_ha()) {
        anyhow::ensure!(
            args.db.db == DbKind::Ha,
            "--fault {kind} acts on the replicated database: add --db ha"
        );
    }
    if args.db.db == DbKind::Ha
        && (args.database_proxy || args.fault.contains(&FaultKind::DbPartition))
    {
        // The servers find the primary through Patroni, by its own address:
        // a proxy per server would have to stand in front of every member
        // and every Patroni REST API.
        anyhow::bail!(
            "--fault db-partition and --database-proxy need --db single (one proxied PostgreSQL)"
        );
    }
    if args.db.db == DbKind::Ha && args.fault.contains(&FaultKind::DbRestart) {
        anyhow::bail!(
            "--fault db-restart restarts the single PostgreSQL; with --db ha use db-kill, \
             db-host-loss or db-switchover"
        );
    }
    check_fault_cluster(args.fault_cluster, args.db.db_clusters, &args.fault)?;
    anyhow::ensure!(
        args.db.db_clusters >= 2 || !args.fault.contains(&FaultKind::PartitionMove),
        "--fault partition-move moves a partition between database clusters: add \
         --db-clusters 2 (or more)"
    );
    anyhow::ensure!(
        args.fault_interval_s > 0,
        "--fault-interval-s must be at least 1"
    );
    let interval = Duration::from_secs(args.fault_interval_s);
    let schedule = Schedule::new(
        Duration::from_secs(args.warmup_s),
        args.faults,
        interval,
        Duration::from_secs(args.tail_s),
    );
    let timing = FaultTiming {
        hang: Duration::from_millis(args.hang_ms),
        partition: Duration::from_millis(args.partition_ms),
        slow_for: Duration::from_millis(args.slow_for_ms),
        replace_after: Duration::from_millis(args.replace_after_ms),
        promotion_timeout: Duration::from_secs(args.promotion_timeout_s),
        db_cluster: args.fault_cluster,
    };
    anyhow::ensure!(
        timing.hang < interval
            && timing.replace_after < interval
            && timing.partition < interval
            && timing.slow_for < interval,
        "--hang-ms, --partition-ms, --slow-for-ms and --replace-after-ms must be shorter \
         than --fault-interval-s"
    );
    let measured_s = (schedule.total - Duration::from_secs(args.warmup_s)).as_secs();
    let mut plan = RunPlan::new(
        args.clients,
        None,
        args.interval_ms,
        args.warmup_s,
        measured_s,
        args.out.clone(),
    )?;
    plan.workload.name_prefix = "chaos-".into();
    plan.workload.predict = args.predict;
    plan.floor_samples = args.floor_samples;
    plan.tail_after_faults = Duration::from_secs(args.tail_s);

    let mut server_args = args.server_args.clone();
    if args.fault.contains(&FaultKind::Slow)
        && !server_args.iter().any(|a| a.starts_with("--slow-mode-ms"))
    {
        // Unless given with --server-arg (a server refuses the flag twice).
        server_args.push(format!("--slow-mode-ms={}", args.slow_ms));
    }
    let database_proxy = args.database_proxy || args.fault.iter().any(|k| k.needs_database_proxy());
    let runtime = tokio::runtime::Runtime::new()?;
    let interrupt = Interrupt::watch(&runtime)?;
    let cluster = measure::start_cluster(
        args.servers,
        measure::LocalSetup {
            db: args.db.db,
            db_clusters: args.db.db_clusters,
            spare_db_clusters: false,
            fsync: !args.no_fsync,
            cpu: args.cpu.quotas(),
        },
        &server_args,
        database_proxy,
        args.distance.links(),
        &args.out.join("logs"),
    )?;
    interrupt.check()?;
    let cluster = Arc::new(Mutex::new(cluster));
    let target = Target::of_cluster(&cluster);
    let injector: Injector = {
        let cluster = cluster.clone();
        let kinds = KindOrder {
            kinds: args.fault.clone(),
            in_order: args.faults_in_order,
        };
        let seed = args.seed;
        Box::new(move |clock, stop| {
            tokio::spawn(inject(cluster, schedule, kinds, timing, seed, clock, stop))
        })
    };
    let summary = runtime.block_on(interrupt.or_signal(measure::run_measured(
        &plan,
        &target,
        Some(injector),
    )));
    drop(runtime);
    drop(cluster);
    let summary = summary?;
    measure::conclude(&summary, &args.out)
}

/// Which kind of fault comes next: at random among `kinds`, or `kinds` in
/// turn.
#[derive(Clone, Debug)]
struct KindOrder {
    /// Never empty (`run` refuses an empty `--fault`).
    kinds: Vec<FaultKind>,
    in_order: bool,
}

impl KindOrder {
    /// The kind of the `n`th fault (from 0). Draws from `rng` either way,
    /// so that the targets chosen after it do not depend on the order.
    fn pick(&self, n: usize, rng: &mut impl Rng) -> FaultKind {
        let drawn = rng.random_range(0..self.kinds.len());
        if self.in_order {
            self.kinds[n % self.kinds.len()]
        } else {
            self.kinds[drawn]
        }
    }
}

/// How long faults last.
#[derive(Clone, Copy, Debug)]
struct FaultTiming {
    hang: Duration,
    /// How long a `db-partition` lasts.
    partition: Duration,
    /// How long a `slow` fault lasts.
    slow_for: Duration,
    /// Also the wait before a killed database member is brought back.
    replace_after: Duration,
    promotion_timeout: Duration,
    /// The database cluster the database faults act on
    /// (`--fault-cluster`).
    db_cluster: usize,
}

/// Refuses a `--fault-cluster` outside the clusters, or given where no
/// fault acts on one.
fn check_fault_cluster(cluster: usize, clusters: usize, kinds: &[FaultKind]) -> anyhow::Result<()> {
    anyhow::ensure!(
        cluster < clusters,
        "--fault-cluster {cluster}: there are {clusters} database clusters (--db-clusters \
         {clusters}), numbered 0 (home) to {}",
        clusters - 1
    );
    let on_a_cluster = |k: &FaultKind| k.is_database() && *k != FaultKind::EtcdKill;
    anyhow::ensure!(
        cluster == 0 || kinds.iter().any(on_a_cluster),
        "--fault-cluster chooses the database cluster of db-kill, db-host-loss, \
         db-switchover (--db ha) or db-restart; --fault {} acts on none",
        kinds
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    Ok(())
}

/// Injects the faults of `schedule` until it is done or `stop` turns true.
async fn inject(
    cluster: Arc<Mutex<LocalCluster>>,
    schedule: Schedule,
    kinds: KindOrder,
    timing: FaultTiming,
    seed: u64,
    clock: RunClock,
    mut stop: Shutdown,
) -> Vec<FaultEvent> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut events = Vec::new();
    let mut calm_until = tokio::time::Instant::now();
    for (n, due) in schedule.at.iter().enumerate() {
        let at = tokio::time::Instant::from_std(clock.started() + *due).max(calm_until);
        tokio::select! {
            _ = tokio::time::sleep_until(at) => {}
            _ = stop.recv() => break,
        }
        let kind = kinds.pick(n, &mut rng);
        let servers = cluster.lock().unwrap().len();
        let index = rng.random_range(0..servers);
        let event = inject_one(&cluster, kind, index, timing, clock).await;
        if kind.needs_ha() {
            calm_until = tokio::time::Instant::now() + SETTLE_AFTER_RESTORE;
        }
        match &event.error[..] {
            "" => tracing::info!(%kind, target = %event.target, "fault injected"),
            error => tracing::warn!(%kind, target = %event.target, "fault: {error}"),
        }
        events.push(event);
    }
    events
}

async fn inject_one(
    cluster: &Arc<Mutex<LocalCluster>>,
    kind: FaultKind,
    index: usize,
    timing: FaultTiming,
    clock: RunClock,
) -> FaultEvent {
    let injected = Instant::now();
    let mut event = FaultEvent {
        time_s: (clock.us(injected) as f64 / 1e6 * 1000.0).round() / 1000.0,
        at_us: clock.us(injected),
        kind,
        target: String::new(),
        promoted_ms: None,
        committing_ms: None,
        recovered_ms: None,
        restored_ms: 0.0,
        error: String::new(),
        read_only_ms: None,
    };
    let result = if kind == FaultKind::PartitionMove {
        partition_move(cluster, &mut event).await
    } else if kind.needs_ha() {
        database_fault(cluster, kind, index, timing, &mut event).await
    } else {
        server_fault(cluster, kind, index, timing, &mut event).await
    };
    event.restored_ms = ms_since(injected);
    event.error = result.err().unwrap_or_default();
    event
}

/// A fault on server `index` (or the single database), then the cluster
/// brought back to full strength.
async fn server_fault(
    cluster: &Arc<Mutex<LocalCluster>>,
    kind: FaultKind,
    index: usize,
    timing: FaultTiming,
    event: &mut FaultEvent,
) -> Result<(), String> {
    let db_cluster = timing.db_cluster;
    event.target = match kind {
        FaultKind::DbRestart => match db_cluster {
            0 => "database".to_string(),
            k => format!("{}/database", borbaman_cluster::db_cluster_name(k)),
        },
        _ => cluster.lock().unwrap().addresses()[index].clone(),
    };
    // The second half of a fault: bring the cluster back to full strength.
    let replace = async || {
        tokio::time::sleep(timing.replace_after).await;
        blocking(cluster, move |c| c.replace(index)).await
    };
    match kind {
        FaultKind::Kill => {
            blocking(cluster, move |c| c.kill(index)).await?;
            replace().await
        }
        FaultKind::Restart => {
            blocking(cluster, move |c| c.terminate(index)).await?;
            replace().await
        }
        FaultKind::Hang => {
            blocking(cluster, move |c| c.hang(index)).await?;
            tokio::time::sleep(timing.hang).await;
            blocking(cluster, move |c| c.resume(index)).await
        }
        FaultKind::DbPartition => {
            blocking(cluster, move |c| c.partition_database(index)).await?;
            tokio::time::sleep(timing.partition).await;
            blocking(cluster, move |c| c.heal_database(index)).await
        }
        FaultKind::Slow => {
            blocking(cluster, move |c| c.slow(index)).await?;
            tokio::time::sleep(timing.slow_for).await;
            blocking(cluster, move |c| c.unslow(index)).await
        }
        FaultKind::DbRestart => blocking(cluster, move |c| c.restart_database_of(db_cluster)).await,
        other => Err(format!("{other} is not a server fault")),
    }
}

/// Moves the partition of a game in play (one at random; any partition if
/// none plays) to the next database cluster, as `borbaman db move` does.
async fn partition_move(
    cluster: &Arc<Mutex<LocalCluster>>,
    event: &mut FaultEvent,
) -> Result<(), String> {
    let urls = cluster.lock().unwrap().database_urls();
    let home = sqlx::PgPool::connect(&urls[0])
        .await
        .map_err(|e| format!("home cluster: {e}"))?;
    let mut playing: Vec<i32> = Vec::new();
    for url in &urls {
        let pool = sqlx::PgPool::connect(url)
            .await
            .map_err(|e| format!("a database cluster: {e}"))?;
        let found: Vec<i32> = sqlx::query_scalar(
            "SELECT DISTINCT (g.id % 64)::int FROM games g \
             JOIN partition_fence f ON f.partition = g.partition AND f.writable \
             WHERE g.phase = 2",
        )
        .fetch_all(&pool)
        .await
        .map_err(|e| e.to_string())?;
        playing.extend(found);
        pool.close().await;
    }
    let partition = match playing.len() {
        0 => rand::random_range(0..64u16),
        n => playing[rand::random_range(0..n)] as u16,
    };
    let clusters: Vec<(String, i32)> =
        sqlx::query_as("SELECT name, number FROM db_clusters ORDER BY number")
            .fetch_all(&home)
            .await
            .map_err(|e| e.to_string())?;
    let owner: String =
        sqlx::query_scalar("SELECT cluster FROM partition_map WHERE partition = $1")
            .bind(partition as i16)
            .fetch_one(&home)
            .await
            .map_err(|e| e.to_string())?;
    home.close().await;
    let at = clusters
        .iter()
        .position(|(name, _)| *name == owner)
        .unwrap_or(0);
    let to = clusters[(at + 1) % clusters.len()].0.clone();
    event.target = format!("partition {partition} {owner}->{to}");
    let report =
        borbaman_server::store::mover::move_partition(&urls[0], partition, &to, &mut |line| {
            tracing::info!("{line}")
        })
        .await
        .map_err(|e| format!("{e:#}"))?;
    event.read_only_ms = report.read_only_ms.map(|ms| (ms * 10.0).round() / 10.0);
    Ok(())
}

/// A fault on the replicated database: on its primary (or one etcd member),
/// then the time until a new primary answers, then every killed member
/// brought back (the old primary rejoins as a standby) before the next
/// fault.
async fn database_fault(
    cluster: &Arc<Mutex<LocalCluster>>,
    kind: FaultKind,
    index: usize,
    timing: FaultTiming,
    event: &mut FaultEvent,
) -> Result<(), String> {
    let injected = Instant::now();
    // etcd is home's group's, shared by every cluster.
    let k = match kind {
        FaultKind::EtcdKill => 0,
        _ => timing.db_cluster,
    };
    let on_cluster = move |member: String| match kind {
        FaultKind::EtcdKill => member,
        _ => fault_target(&borbaman_cluster::db_cluster_name(k), k, &member),
    };
    let (old, target) = blocking(cluster, move |c| {
        let ha = c.replicated_cluster_mut(k)?;
        // A loaded machine can miss one round of Patroni's answers: ask for
        // a moment before calling the cluster leaderless.
        let primary = (0..40)
            .find_map(|_| {
                ha.primary().or_else(|| {
                    std::thread::sleep(Duration::from_millis(50));
                    None
                })
            })
            .ok_or(HaError::NoPrimary)?;
        let target = match kind {
            FaultKind::DbKill => {
                ha.kill_postmaster(primary)?;
                ha.member_name(primary)
            }
            FaultKind::DbHostLoss => {
                ha.host_loss(primary)?;
                ha.member_name(primary)
            }
            FaultKind::DbSwitchover => {
                // Named in full once the new primary is known.
                let switched = ha.switchover()?;
                format!("{}->", switched.from_name)
            }
            FaultKind::EtcdKill => {
                let member = index % borbaman_cluster::ha::MEMBERS;
                ha.kill_etcd(member)?;
                format!("etcd{}", member + 1)
            }
            other => return Err(HaError::Fault(format!("{other} is not a database fault")).into()),
        };
        Ok((primary, target))
    })
    .await?;
    event.target = on_cluster(target);
    if kind != FaultKind::EtcdKill {
        let timeout = timing.promotion_timeout;
        let promoted = blocking(cluster, move |c| {
            let ha = c.replicated_cluster_mut(k)?;
            Ok(ha.wait_for_new_primary(old, timeout))
        })
        .await?;
        let new = match promoted {
            Some((new, at)) => {
                event.promoted_ms = Some(round_ms(at.saturating_duration_since(injected)));
                if kind == FaultKind::DbSwitchover {
                    event.target.push_str(&format!("pg{new}"));
                }
                new
            }
            None => return Err(format!("no new primary within {timeout:?}")),
        };
        let committing = blocking(cluster, move |c| {
            let ha = c.replicated_cluster_mut(k)?;
            Ok(ha.wait_until_committing(new, COMMIT_ATTEMPT, timeout))
        })
        .await?;
        event.committing_ms = committing.map(|at| round_ms(at.saturating_duration_since(injected)));
    }
    tokio::time::sleep(timing.replace_after).await;
    blocking(cluster, move |c| {
        c.replicated_cluster_mut(k)?
            .restore()
            .map(|_| ())
            .map_err(Into::into)
    })
    .await
}

/// How long one probe commit on a new primary may wait (for its
/// synchronous standby) before it is dropped and tried again.
const COMMIT_ATTEMPT: Duration = Duration::from_millis(200);

/// After the cluster is whole again, calm before the next database fault:
/// a member that has just rejoined is not yet the synchronous standby, and
/// a fault at that moment measures two failovers as one.
const SETTLE_AFTER_RESTORE: Duration = Duration::from_secs(3);

fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0 * 10.0).round() / 10.0
}

fn ms_since(at: Instant) -> f64 {
    (duration_us(at.elapsed()) as f64 / 1000.0).round()
}

/// Runs a blocking cluster operation off the async threads.
async fn blocking<T: Send + 'static>(
    cluster: &Arc<Mutex<LocalCluster>>,
    op: impl FnOnce(&mut LocalCluster) -> Result<T, ClusterError> + Send + 'static,
) -> Result<T, String> {
    let cluster = cluster.clone();
    let task: JoinHandle<Result<T, ClusterError>> =
        tokio::task::spawn_blocking(move || op(&mut cluster.lock().unwrap()));
    match task.await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(e) => Err(format!("fault task failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_spread_after_the_warmup() {
        let s = Schedule::new(
            Duration::from_secs(5),
            3,
            Duration::from_secs(4),
            Duration::from_secs(2),
        );
        let secs: Vec<f64> = s.at.iter().map(|d| d.as_secs_f64()).collect();
        assert_eq!(secs, [7.0, 11.0, 15.0]);
        assert_eq!(s.total, Duration::from_secs(19));
    }

    #[test]
    fn a_fault_cluster_must_be_one_of_the_clusters_and_take_a_database_fault() {
        use FaultKind::{DbKill, DbRestart, EtcdKill, Kill};
        assert!(check_fault_cluster(0, 1, &[Kill]).is_ok(), "the default");
        assert!(check_fault_cluster(1, 2, &[DbKill]).is_ok());
        assert!(check_fault_cluster(1, 2, &[DbRestart]).is_ok());
        let outside = check_fault_cluster(2, 2, &[DbKill])
            .unwrap_err()
            .to_string();
        assert!(outside.contains("numbered 0 (home) to 1"), "{outside}");
        let none = check_fault_cluster(1, 2, &[Kill, EtcdKill])
            .unwrap_err()
            .to_string();
        assert!(
            none.contains("--fault kill,etcd-kill acts on none"),
            "{none}"
        );
    }

    #[test]
    fn kinds_in_order_cycle_and_at_random_mix() {
        use FaultKind::{DbKill, DbSwitchover};
        let in_order = KindOrder {
            kinds: vec![DbKill, DbSwitchover],
            in_order: true,
        };
        let mut rng = StdRng::seed_from_u64(749);
        let picked: Vec<FaultKind> = (0..5).map(|n| in_order.pick(n, &mut rng)).collect();
        assert_eq!(picked, [DbKill, DbSwitchover, DbKill, DbSwitchover, DbKill]);

        let at_random = KindOrder {
            in_order: false,
            ..in_order
        };
        let mut rng = StdRng::seed_from_u64(749);
        let picked: Vec<FaultKind> = (0..64).map(|n| at_random.pick(n, &mut rng)).collect();
        assert!(picked.contains(&DbKill) && picked.contains(&DbSwitchover));
        assert!(
            picked.windows(2).any(|w| w[0] == w[1]),
            "at random, not in turn: {picked:?}"
        );
    }
}
