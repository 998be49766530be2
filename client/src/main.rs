//! `borbaman`: play in a terminal, run bots, benchmarks and fault-injection
//! runs. `borbaman server` runs a game server (the same as `borbaman-server`),
//! so one binary is enough to start a local cluster.

use clap::{Parser, Subcommand};

/// mimalloc rather than glibc's malloc: a game call allocates and frees
/// many small buffers (HTTP/2 frames, protobuf messages, sqlx rows) across
/// threads, and with glibc's allocator 10–16 % of the servers' and the
/// bench's CPU went to malloc and free (docs/results.md, "Closed loop:
/// the floor, measured steadily").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "borbaman",
    version,
    about = "Fault-tolerant four-player bomb game in a terminal"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Play a game in this terminal. Without --servers, starts a local
    /// cluster (PostgreSQL, 3 servers) and 3 bots to play against.
    Play(borbaman::play::PlayArgs),
    /// Watch a live game without playing in it (without GAME_ID: pick one
    /// from the live games).
    Watch(borbaman::watch::WatchArgs),
    /// Run headless AI players.
    Bot(borbaman::bot::BotArgs),
    /// The top players: games, wins, draws and win rate, a page at a time,
    /// your own line highlighted.
    Rankings(borbaman::rankings::RankingsArgs),
    /// Run a game server (same as the `borbaman-server` binary).
    Server(Box<borbaman_server::cli::ServerArgs>),
    /// Measure RTT and jitter: headless bots play real games; writes
    /// invocations.csv, summary.json, ecdf.svg and rtt.svg to --out.
    Bench(borbaman::bench::BenchArgs),
    /// The bench workload on a local cluster while servers are killed,
    /// hung or restarted; checks that no action was lost or duplicated.
    Chaos(borbaman::chaos::ChaosArgs),
    /// Check finished games: `--verify --all --database-url URL`
    /// re-simulates every finished game from its seed and log and compares
    /// it with its stored final state, byte for byte.
    Replay(borbaman::replay::ReplayArgs),
    /// The cluster on one screen: each live server's uptime, calls/s,
    /// p99 and database member, the games waiting and running, and the
    /// refusals of the last minute (--json for machines).
    Status(borbaman::status::StatusArgs),
    /// The database clusters the games are partitioned over: `db clusters`
    /// lists them with their partitions, primaries and games; `db
    /// add-cluster` registers one more.
    Db(borbaman::db::DbArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Play(args) => borbaman::play::run(args),
        Command::Watch(args) => borbaman::watch::run(args),
        Command::Bot(args) => borbaman::bot::run(args),
        Command::Rankings(args) => borbaman::rankings::run(args),
        Command::Server(args) => borbaman_server::cli::run(*args),
        Command::Bench(args) => borbaman::bench::run(args),
        Command::Chaos(args) => borbaman::chaos::run(args),
        Command::Replay(args) => borbaman::replay::run(args),
        Command::Db(args) => borbaman::db::run(args),
        Command::Status(args) => borbaman::status::run(args),
    }
}
