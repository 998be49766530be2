//! `borbaman bench`: a measured run of headless clients against a cluster
//! (a local one unless `--servers` is given, at a distance with `--wan` or
//! `--wan-mix`); see [`crate::measure`] for what it writes.

use std::path::PathBuf;

use std::sync::{Arc, Mutex};

use crate::args::{CpuQuotaArgs, DbArg, DbKind, DistanceArgs, ServersArg};
use crate::measure::growth::{GrowthPlan, SpareCluster};
use crate::measure::interrupt::Interrupt;
use crate::measure::plot::{self, SweepPoint};
use crate::measure::{self, RunPlan, Target};

/// Flags of `borbaman bench`.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchArgs {
    /// Headless clients, each a bot playing a real game (4 per game).
    #[arg(long, default_value_t = 16)]
    pub clients: u32,
    /// Games played at once; must be clients / 4 (default).
    #[arg(long)]
    pub games: Option<u32>,
    /// Time between two invocations of one client.
    #[arg(long, default_value_t = 50)]
    pub interval_ms: u64,
    /// Clients predict like the terminal: each draws (and its bot decides
    /// on) the server's newest state with its own unacknowledged inputs
    /// applied on top with the game core, and counts the corrections a
    /// newer state from the server forced (reported as mispredictions).
    #[arg(long)]
    pub predict: bool,
    /// Measured time, after the warm-up.
    #[arg(long, default_value_t = 60)]
    pub duration_s: u64,
    /// Warm-up: calls made in it are written to the CSV but left out of
    /// every figure.
    #[arg(long, default_value_t = 5)]
    pub warmup_s: u64,
    /// Directory for invocations.csv, summary.json, ecdf.svg, rtt.svg.
    #[arg(long)]
    pub out: PathBuf,
    /// Servers to measure (host:port,...; any live one will do). Without
    /// it, a local cluster is started and stopped.
    #[command(flatten)]
    pub servers: ServersArg,
    /// The servers' database, for the transaction floor and the invariant
    /// checks (with --servers; a local cluster has its own). The floor
    /// creates, fills and drops a table `bench_floor` there, so this is
    /// never taken from DATABASE_URL: name the database on purpose.
    #[arg(long)]
    pub database_url: Option<String>,
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub distance: DistanceArgs,
    #[command(flatten)]
    pub cpu: CpuQuotaArgs,
    /// A capacity sweep: one measured run per number of games (4 clients
    /// each, at --interval-ms), e.g. `1,2,4,8,16,32`, each written to
    /// `<out>/games-<n>/`; then `sweep.csv`, `sweep.json` and `sweep.svg`
    /// in --out, with the largest number of games whose RTT p99 stays
    /// within 3× the floor's, and each point's goodput (answered calls/s)
    /// against the sweep's peak: past capacity the servers refuse joins
    /// (server-full) and the goodput should hold, not collapse.
    /// --clients and --games are ignored.
    #[arg(long, value_delimiter = ',')]
    pub sweep_games: Vec<u32>,
    /// Grow the running system: the local cluster starts every database
    /// cluster of --db-clusters N (at least 2) but gives its servers home
    /// only, so all 64 partitions start on home; S seconds into the
    /// measured part the bench adds the others as an operator would
    /// (`borbaman db add-cluster`) and spreads the partitions over them
    /// (`borbaman db rebalance`, one move at a time). summary.json gains
    /// `growth` (each move and how long its partition was read-only, the
    /// goodput before the growth and after the last move, the errors
    /// during it) and goodput.svg draws answered calls per second with
    /// the moves marked. Moving 32 partitions takes a while (each waits
    /// 2 s before deleting its source's copy): when the moves end late,
    /// the run goes on 10 s after the last one.
    #[arg(long, value_name = "S")]
    pub grow_at_s: Option<u64>,
    /// Servers in the local cluster.
    #[arg(long, default_value_t = 3)]
    pub local_servers: usize,
    /// Samples of each floor taken on the idle cluster before the run.
    #[arg(long, default_value_t = 300)]
    pub floor_samples: usize,
    /// Run the local cluster's private PostgreSQL without fsync (faster,
    /// not durable; the floors are measured on the same database). Its
    /// data then lives in memory, under /dev/shm, when that has 1 GiB
    /// free.
    #[arg(long)]
    pub no_fsync: bool,
    /// An extra flag for every server of the local cluster, e.g.
    /// `--server-arg=--db-min-connections=0`; repeat for several.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
}

/// `borbaman bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    measure::init_tracing();
    let runtime = tokio::runtime::Runtime::new()?;
    let interrupt = Interrupt::watch(&runtime)?;
    let local = args.servers.servers.is_empty();
    args.distance.ensure_local(local)?;
    args.cpu.ensure_local(local)?;
    if !local {
        anyhow::ensure!(
            args.db.db == DbKind::Single,
            "--db chooses the database of a local cluster; with --servers, the servers' own \
             database is measured"
        );
        anyhow::ensure!(
            args.db.db_clusters == 1,
            "--db-clusters starts a local cluster's databases; with --servers, the clusters \
             their home (--database-url) lists are read"
        );
    }
    check_growth(&args, local)?;
    let cluster = match local {
        true => Some(Arc::new(Mutex::new(measure::start_cluster(
            args.local_servers,
            measure::LocalSetup {
                db: args.db.db,
                db_clusters: args.db.db_clusters,
                spare_db_clusters: args.grow_at_s.is_some(),
                fsync: !args.no_fsync,
                cpu: args.cpu.quotas(),
            },
            &args.server_args,
            false,
            args.distance.links(),
            &args.out.join("logs"),
        )?))),
        false => None,
    };
    interrupt.check()?;
    let target = match &cluster {
        // A local cluster started with --server-arg=--tls-cert=… is
        // reached over TLS too.
        Some(cluster) => Target {
            pool: args.servers.pool_config()?,
            ..Target::of_cluster(cluster)
        },
        None => Target {
            pool: args.servers.pool_config()?,
            ..Target::new(args.servers.servers.clone(), args.database_url.clone())
        },
    };
    let result = if args.sweep_games.is_empty() {
        let mut plan = RunPlan::new(
            args.clients,
            args.games,
            args.interval_ms,
            args.warmup_s,
            args.duration_s,
            args.out.clone(),
        )?;
        plan.floor_samples = args.floor_samples;
        plan.workload.predict = args.predict;
        if let (Some(grow_at_s), Some(cluster)) = (args.grow_at_s, &cluster) {
            plan.growth = Some(growth_plan(cluster, args.warmup_s + grow_at_s));
        }
        runtime
            .block_on(interrupt.or_signal(measure::run_measured(&plan, &target, None)))
            .and_then(|summary| measure::conclude(&summary, &plan.out))
    } else {
        sweep(&args, &runtime, &target, &interrupt)
    };
    drop(runtime);
    drop(cluster);
    result
}

/// Refuses `--grow-at-s` where it cannot grow anything.
fn check_growth(args: &BenchArgs, local: bool) -> anyhow::Result<()> {
    let Some(at_s) = args.grow_at_s else {
        return Ok(());
    };
    anyhow::ensure!(
        local,
        "--grow-at-s grows the local cluster it starts; with --servers, add a cluster to \
         your own with `borbaman db add-cluster` and `borbaman db rebalance`"
    );
    anyhow::ensure!(
        args.db.db_clusters >= 2,
        "--grow-at-s adds database clusters to a running game: give --db-clusters 2 or more \
         (home, which holds every partition at the start, and the clusters added mid-run)"
    );
    anyhow::ensure!(
        args.sweep_games.is_empty(),
        "--grow-at-s and --sweep-games do not go together: a sweep's points share one cluster"
    );
    anyhow::ensure!(
        at_s < args.duration_s,
        "--grow-at-s {at_s} is not within the measured part (--duration-s {}): grow before \
         it ends, and leave time for the moves",
        args.duration_s
    );
    Ok(())
}

/// What a local cluster started with spare database clusters grows by:
/// every cluster but home, `at_s` seconds after the run's start.
fn growth_plan(
    cluster: &Arc<Mutex<borbaman_cluster::local::LocalCluster>>,
    at_s: u64,
) -> GrowthPlan {
    let cluster = cluster.lock().unwrap_or_else(|e| e.into_inner());
    let urls = cluster.database_urls();
    let mut clusters = Vec::new();
    for (k, url) in urls.iter().enumerate().skip(1) {
        let patroni = match cluster.replicated_cluster(k) {
            Ok(group) => group.patroni_urls(),
            Err(_) => Vec::new(),
        };
        clusters.push(SpareCluster {
            name: borbaman_cluster::db_cluster_name(k),
            url: url.clone(),
            patroni,
        });
    }
    GrowthPlan {
        at: std::time::Duration::from_secs(at_s),
        home_url: urls[0].clone(),
        clusters,
    }
}

/// One point of `--sweep-games`, a row of `sweep.csv`.
#[derive(Clone, Debug, serde::Serialize)]
struct SweepRow {
    games: u32,
    clients: u32,
    /// Calls per second the clients would make if every call were answered
    /// at once (4 per game, one per interval each).
    offered_per_s: f64,
    throughput_per_s: f64,
    /// Answered calls per second.
    goodput_per_s: f64,
    /// `goodput_per_s` over the highest of the sweep.
    goodput_to_peak: f64,
    refusals: u64,
    /// RTT p99 of the joins refused server-full.
    refused_join_p99_us: u64,
    act_p99_to_floor: f64,
    rtt_p50_us: u64,
    rtt_p99_us: u64,
    rtt_max_us: u64,
    floor_p50_us: u64,
    floor_p99_us: u64,
    p99_to_floor: f64,
    hedge_rate: f64,
    errors: u64,
    load_average_1m: f64,
}

/// Calls per second `clients` make at one call per `interval_ms` each.
fn offered_per_s(clients: u32, interval_ms: u64) -> f64 {
    match interval_ms {
        0 => 0.0,
        ms => f64::from(clients) * 1000.0 / ms as f64,
    }
}

/// Runs the sweep's points one after another on the same cluster.
fn sweep(
    args: &BenchArgs,
    runtime: &tokio::runtime::Runtime,
    target: &Target,
    interrupt: &Interrupt,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let mut rows = Vec::new();
    for &games in &args.sweep_games {
        anyhow::ensure!(
            games > 0,
            "--sweep-games takes numbers of games, each at least 1"
        );
        let out = args.out.join(format!("games-{games}"));
        let mut plan = RunPlan::new(
            games * 4,
            Some(games),
            args.interval_ms,
            args.warmup_s,
            args.duration_s,
            out.clone(),
        )?;
        plan.floor_samples = args.floor_samples;
        eprintln!("sweep: {games} games ({} clients)…", games * 4);
        let summary =
            runtime.block_on(interrupt.or_signal(measure::run_measured(&plan, target, None)))?;
        measure::conclude(&summary, &out)?;
        rows.push(SweepRow {
            games,
            clients: games * 4,
            offered_per_s: offered_per_s(games * 4, args.interval_ms),
            throughput_per_s: summary.throughput_per_s,
            goodput_per_s: summary.goodput_per_s,
            goodput_to_peak: 0.0,
            refusals: summary.refusals,
            refused_join_p99_us: summary.refused_join_rtt_us.p99,
            act_p99_to_floor: summary.ratios.act_p99_to_floor,
            rtt_p50_us: summary.rtt_us.p50,
            rtt_p99_us: summary.rtt_us.p99,
            rtt_max_us: summary.rtt_us.max,
            floor_p50_us: summary.ratios.floor_p50_us,
            floor_p99_us: summary.ratios.floor_p99_us,
            p99_to_floor: summary.ratios.rtt_p99_to_floor,
            hedge_rate: summary.hedge_rate,
            errors: summary.errors,
            load_average_1m: summary.load_average_1m[1],
        });
    }
    let peak = rows.iter().map(|r| r.goodput_per_s).fold(0.0, f64::max);
    for row in &mut rows {
        row.goodput_to_peak = measure::report::ratio(row.goodput_per_s, peak);
    }
    let held = rows
        .iter()
        .filter(|r| r.errors == 0 && r.p99_to_floor <= 3.0)
        .map(|r| r.games)
        .max();
    let mut csv = csv::Writer::from_path(args.out.join("sweep.csv"))?;
    for row in &rows {
        csv.serialize(row)?;
    }
    csv.flush()?;
    let json = serde_json::json!({
        "points": rows,
        "interval_ms": args.interval_ms,
        "largest_games_with_p99_within_3x_floor": held,
        "peak_goodput_per_s": peak,
    });
    std::fs::write(
        args.out.join("sweep.json"),
        serde_json::to_string_pretty(&json)? + "\n",
    )?;
    let points: Vec<SweepPoint> = rows
        .iter()
        .map(|r| SweepPoint {
            games: r.games,
            rtt_p50_us: r.rtt_p50_us,
            rtt_p99_us: r.rtt_p99_us,
            floor_p99_us: r.floor_p99_us,
        })
        .collect();
    plot::write_sweep_svg(&args.out.join("sweep.svg"), &points)?;
    println!(
        "games  clients  offered/s  goodput/s  of peak  refused  errors  RTT p50/p99 µs  \
         floor p50/p99 µs  p99/floor  act p99/floor  hedges"
    );
    for r in &rows {
        println!(
            "{:>5}  {:>7}  {:>9.0}  {:>9.0}  {:>6.0}%  {:>7}  {:>6}  {:>6}/{:<7}  {:>6}/{:<8}  \
             {:>9.2}  {:>13.2}  {:>5.1}%",
            r.games,
            r.clients,
            r.offered_per_s,
            r.goodput_per_s,
            r.goodput_to_peak * 100.0,
            r.refusals,
            r.errors,
            r.rtt_p50_us,
            r.rtt_p99_us,
            r.floor_p50_us,
            r.floor_p99_us,
            r.p99_to_floor,
            r.act_p99_to_floor,
            r.hedge_rate * 100.0
        );
    }
    println!("peak goodput: {peak:.0} answered calls/s");
    match held {
        Some(games) => println!("largest number of 20 Hz games with RTT p99 ≤ 3× floor: {games}"),
        None => println!("no point kept RTT p99 within 3× the floor"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn bench(args: &[&str]) -> BenchArgs {
        use clap::Parser;
        let argv = ["bench", "--out", "out"].iter().chain(args);
        Cli::try_parse_from(argv).expect("the flags parse").bench
    }

    #[test]
    fn growing_is_refused_where_there_is_nothing_to_grow() {
        let why = |args: &[&str], local| {
            check_growth(&bench(args), local)
                .expect_err("refused")
                .to_string()
        };
        assert!(
            why(&["--grow-at-s", "5"], true).contains("--db-clusters 2 or more"),
            "one cluster has nothing to add"
        );
        assert!(
            why(&["--grow-at-s", "5", "--servers", "127.0.0.1:1"], false)
                .contains("borbaman db add-cluster")
        );
        assert!(
            why(
                &[
                    "--grow-at-s",
                    "60",
                    "--db-clusters",
                    "2",
                    "--duration-s",
                    "60"
                ],
                true
            )
            .contains("not within the measured part")
        );
        assert!(
            why(
                &[
                    "--grow-at-s",
                    "5",
                    "--db-clusters",
                    "2",
                    "--sweep-games",
                    "1,2"
                ],
                true
            )
            .contains("--sweep-games")
        );
        check_growth(&bench(&["--grow-at-s", "5", "--db-clusters", "2"]), true)
            .expect("two clusters grow");
        check_growth(&bench(&[]), true).expect("no growth asked for");
    }

    #[test]
    fn offered_load_is_one_call_per_interval_per_client() {
        assert_eq!(offered_per_s(4, 50), 80.0);
        assert_eq!(offered_per_s(256, 50), 5120.0);
        assert_eq!(
            offered_per_s(16, 0),
            0.0,
            "a closed loop offers no fixed load"
        );
    }
}
