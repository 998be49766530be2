//! `borbaman bench`: a measured run of headless clients against a cluster
//! (a local one unless `--servers` is given); see [`crate::measure`] for
//! what it writes.

use std::path::PathBuf;

use std::sync::{Arc, Mutex};

use crate::args::{DbArg, DbKind, ServersArg};
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
    /// A capacity sweep: one measured run per number of games (4 clients
    /// each, at --interval-ms), e.g. `1,2,4,8,16,32`, each written to
    /// `<out>/games-<n>/`; then `sweep.csv`, `sweep.json` and `sweep.svg`
    /// in --out, with the largest number of games whose RTT p99 stays
    /// within 3× the floor's. --clients and --games are ignored.
    #[arg(long, value_delimiter = ',')]
    pub sweep_games: Vec<u32>,
    /// Servers in the local cluster.
    #[arg(long, default_value_t = 3)]
    pub local_servers: usize,
    /// Samples of each floor taken on the idle cluster before the run.
    #[arg(long, default_value_t = 300)]
    pub floor_samples: usize,
    /// Run the local cluster's private PostgreSQL without fsync (faster,
    /// not durable; the floors are measured on the same database).
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
    let local = args.servers.servers.is_empty();
    if !local {
        anyhow::ensure!(
            args.db.db == DbKind::Single,
            "--db chooses the database of a local cluster; with --servers, the servers' own \
             database is measured"
        );
    }
    let cluster = match local {
        true => Some(Arc::new(Mutex::new(measure::start_cluster(
            args.local_servers,
            args.db.db,
            !args.no_fsync,
            &args.server_args,
            false,
            &args.out.join("logs"),
        )?))),
        false => None,
    };
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
        runtime
            .block_on(measure::run_measured(&plan, &target, None))
            .and_then(|summary| measure::conclude(&summary, &plan.out))
    } else {
        sweep(&args, &runtime, &target)
    };
    drop(runtime);
    drop(cluster);
    result
}

/// One point of `--sweep-games`, a row of `sweep.csv`.
#[derive(Clone, Debug, serde::Serialize)]
struct SweepRow {
    games: u32,
    clients: u32,
    throughput_per_s: f64,
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

/// Runs the sweep's points one after another on the same cluster.
fn sweep(
    args: &BenchArgs,
    runtime: &tokio::runtime::Runtime,
    target: &Target,
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
        let summary = runtime.block_on(measure::run_measured(&plan, target, None))?;
        measure::conclude(&summary, &out)?;
        rows.push(SweepRow {
            games,
            clients: games * 4,
            throughput_per_s: summary.throughput_per_s,
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
    println!("games  clients  calls/s  RTT p50/p99 µs  floor p50/p99 µs  p99/floor  hedges");
    for r in &rows {
        println!(
            "{:>5}  {:>7}  {:>7.0}  {:>6}/{:<7}  {:>6}/{:<8}  {:>9.2}  {:>5.1}%",
            r.games,
            r.clients,
            r.throughput_per_s,
            r.rtt_p50_us,
            r.rtt_p99_us,
            r.floor_p50_us,
            r.floor_p99_us,
            r.p99_to_floor,
            r.hedge_rate * 100.0
        );
    }
    match held {
        Some(games) => println!("largest number of 20 Hz games with RTT p99 ≤ 3× floor: {games}"),
        None => println!("no point kept RTT p99 within 3× the floor"),
    }
    Ok(())
}
