//! `borbaman chaos`: the bench workload on a local cluster, plus faults
//! injected on a schedule — after the warm-up, one every
//! `--fault-interval-s`, kinds mixed at random when several are given:
//!
//! - `kill`: SIGKILL a random server, then (after `--replace-after-ms`, as
//!   a supervisor would) start a replacement so the cluster keeps its size;
//! - `hang`: SIGSTOP a random server for `--hang-ms`, then SIGCONT;
//! - `restart`: SIGTERM a random server (it drains and deregisters), then
//!   start it again;
//! - `db-restart`: restart PostgreSQL (fast shutdown) and bring it back.
//!
//! Besides the bench outputs it writes `faults.csv` (time, kind, target),
//! and like bench it exits non-zero, naming the invariant, when one fails.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;

use crate::measure::faults::{FaultEvent, FaultKind};
use crate::measure::record::{RunClock, duration_us};
use crate::measure::{self, Injector, RunPlan, Target};
use crate::shutdown::Shutdown;
use borbaman_cluster::local::{ClusterError, LocalCluster};

/// Flags of `borbaman chaos`.
#[derive(Clone, Debug, clap::Args)]
pub struct ChaosArgs {
    /// Servers in the local cluster (kept at this size).
    #[arg(long, default_value_t = 3)]
    pub servers: usize,
    /// Faults to inject.
    #[arg(long, default_value_t = 16)]
    pub faults: u32,
    /// Seconds between two faults.
    #[arg(long, default_value_t = 3)]
    pub fault_interval_s: u64,
    /// Kinds of fault, mixed at random when several.
    #[arg(long, value_delimiter = ',', default_value = "kill")]
    pub fault: Vec<FaultKind>,
    /// How long a hung server stays stopped.
    #[arg(long, default_value_t = 2000)]
    pub hang_ms: u64,
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
    /// Warm-up before the first fault; left out of every figure.
    #[arg(long, default_value_t = 5)]
    pub warmup_s: u64,
    /// Calm after the last fault before the run ends.
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
    /// Run the private PostgreSQL without fsync.
    #[arg(long)]
    pub no_fsync: bool,
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
        replace_after: Duration::from_millis(args.replace_after_ms),
    };
    anyhow::ensure!(
        timing.hang < interval && timing.replace_after < interval,
        "--hang-ms and --replace-after-ms must be shorter than --fault-interval-s"
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
    plan.floor_samples = args.floor_samples;

    let cluster = measure::start_cluster(args.servers, !args.no_fsync, &args.server_args)?;
    let target = Target {
        servers: cluster.addresses(),
        database_url: Some(cluster.database_url().to_string()),
    };
    let cluster = Arc::new(Mutex::new(cluster));
    let injector: Injector = {
        let cluster = cluster.clone();
        let kinds = args.fault.clone();
        let seed = args.seed;
        Box::new(move |clock, stop| {
            tokio::spawn(inject(cluster, schedule, kinds, timing, seed, clock, stop))
        })
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let summary = runtime.block_on(measure::run_measured(&plan, &target, Some(injector)));
    drop(runtime);
    drop(cluster);
    let summary = summary?;
    measure::conclude(&summary, &args.out)
}

/// How long faults last.
#[derive(Clone, Copy, Debug)]
struct FaultTiming {
    hang: Duration,
    replace_after: Duration,
}

/// Injects the faults of `schedule` until it is done or `stop` turns true.
async fn inject(
    cluster: Arc<Mutex<LocalCluster>>,
    schedule: Schedule,
    kinds: Vec<FaultKind>,
    timing: FaultTiming,
    seed: u64,
    clock: RunClock,
    mut stop: Shutdown,
) -> Vec<FaultEvent> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut events = Vec::new();
    for due in &schedule.at {
        let at = tokio::time::Instant::from_std(clock.started() + *due);
        tokio::select! {
            _ = tokio::time::sleep_until(at) => {}
            _ = stop.recv() => break,
        }
        let kind = kinds[rng.random_range(0..kinds.len())];
        let servers = cluster.lock().unwrap().len();
        let index = rng.random_range(0..servers);
        let event = inject_one(&cluster, kind, index, timing, clock).await;
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
    let target = match kind {
        FaultKind::DbRestart => "database".to_string(),
        _ => cluster.lock().unwrap().addresses()[index].clone(),
    };
    // The second half of a fault: bring the cluster back to full strength.
    let replace = async || {
        tokio::time::sleep(timing.replace_after).await;
        blocking(cluster, move |c| c.replace(index)).await
    };
    let result = match kind {
        FaultKind::Kill => match blocking(cluster, move |c| c.kill(index)).await {
            Ok(()) => replace().await,
            Err(e) => Err(e),
        },
        FaultKind::Restart => match blocking(cluster, move |c| c.terminate(index)).await {
            Ok(()) => replace().await,
            Err(e) => Err(e),
        },
        FaultKind::Hang => match blocking(cluster, move |c| c.hang(index)).await {
            Ok(()) => {
                tokio::time::sleep(timing.hang).await;
                blocking(cluster, move |c| c.resume(index)).await
            }
            Err(e) => Err(e),
        },
        FaultKind::DbRestart => blocking(cluster, |c| c.restart_database()).await,
        kind => Err(format!("{kind} needs the replicated database (--db ha)")),
    };
    FaultEvent {
        time_s: (clock.us(injected) as f64 / 1e6 * 1000.0).round() / 1000.0,
        at_us: clock.us(injected),
        kind,
        target,
        promoted_ms: None,
        recovered_ms: None,
        restored_ms: (duration_us(injected.elapsed()) as f64 / 1000.0).round(),
        error: result.err().unwrap_or_default(),
    }
}

/// Runs a blocking cluster operation off the async threads.
async fn blocking(
    cluster: &Arc<Mutex<LocalCluster>>,
    op: impl FnOnce(&mut LocalCluster) -> Result<(), ClusterError> + Send + 'static,
) -> Result<(), String> {
    let cluster = cluster.clone();
    let task: JoinHandle<Result<(), ClusterError>> =
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
}
