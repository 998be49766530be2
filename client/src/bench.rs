//! `borbaman bench`: a measured run of headless clients against a cluster
//! (a local one unless `--servers` is given); see [`crate::measure`] for
//! what it writes.

use std::path::PathBuf;

use std::sync::{Arc, Mutex};

use crate::args::{DbArg, DbKind, ServersArg};
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
    let mut plan = RunPlan::new(
        args.clients,
        args.games,
        args.interval_ms,
        args.warmup_s,
        args.duration_s,
        args.out.clone(),
    )?;
    plan.floor_samples = args.floor_samples;
    let runtime = tokio::runtime::Runtime::new()?;
    let summary = if args.servers.servers.is_empty() {
        let cluster = measure::start_cluster(
            args.local_servers,
            args.db.db,
            !args.no_fsync,
            &args.server_args,
            false,
        )?;
        let cluster = Arc::new(Mutex::new(cluster));
        let target = Target::of_cluster(&cluster);
        let summary = runtime.block_on(measure::run_measured(&plan, &target, None));
        drop(runtime);
        drop(cluster);
        summary?
    } else {
        anyhow::ensure!(
            args.db.db == DbKind::Single,
            "--db chooses the database of a local cluster; with --servers, the servers' own \
             database is measured"
        );
        let target = Target::new(args.servers.servers.clone(), args.database_url.clone());
        runtime.block_on(measure::run_measured(&plan, &target, None))?
    };
    measure::conclude(&summary, &plan.out)
}
