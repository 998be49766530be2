//! `borbaman db`: the database clusters the games are partitioned over
//! (see docs/scaling.md): list them, register one more, move partitions
//! between them while their games play.

use anyhow::Context;
use borbaman_server::store::Store;
use borbaman_server::store::partitions::{ClusterRow, ClusterSpec, check_name};
use borbaman_server::store::{grow, mover};
use clap::{Args, Subcommand};
use serde::Serialize;
use sqlx::PgPool;

#[derive(Debug, Args)]
pub struct DbArgs {
    #[command(subcommand)]
    pub command: DbCommand,
}

#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// The clusters, each with its partitions, its primary and its games.
    Clusters(ClustersArgs),
    /// Register one more cluster at home. It gets the schema now; running
    /// servers open it within half a second (give servers started later
    /// --db-cluster NAME=URL too). It holds no partition, so it serves no
    /// game until partitions move to it (db move, db rebalance).
    AddCluster(AddClusterArgs),
    /// Move a partition to another cluster while its games play: its rows
    /// are copied by PostgreSQL's logical replication, then the partition
    /// is read-only for a moment while the target catches up, and the
    /// servers send its games to the target. Prints each step and how
    /// long the partition was read-only. Running it again finishes a move
    /// that was cut short (the move's state is kept at home). Needs
    /// `wal_level = logical` on the source, and every server to have the
    /// target open (--db-cluster).
    Move(MoveArgs),
    /// Spread the partitions evenly over the clusters, one move at a time
    /// (each as `db move`). A cluster added with `db add-cluster` takes its
    /// share.
    Rebalance(RebalanceArgs),
}

#[derive(Debug, Args)]
pub struct MoveArgs {
    /// The partition (0 to 63): a game's is its id modulo 64.
    pub partition: u16,
    /// The cluster it goes to (a name `db clusters` lists).
    #[arg(long, value_name = "CLUSTER")]
    pub to: String,
    /// The home cluster.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// One JSON document (the move's report) instead of the steps.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RebalanceArgs {
    /// The home cluster.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// One JSON document (each move's report) instead of the steps.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ClustersArgs {
    /// The home cluster: the database the servers are given with
    /// --database-url.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// One JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct AddClusterArgs {
    /// Its name: a lower-case letter, then up to 31 lower-case letters,
    /// digits, '-' or '_' (with Patroni, also the group's etcd scope).
    pub name: String,
    /// Its PostgreSQL URL, e.g. postgres://borbaman@10.0.0.7:5432/borbaman.
    #[arg(long)]
    pub url: String,
    /// Its Patroni members' REST APIs, comma-separated, for a replicated
    /// cluster (servers follow its primary).
    #[arg(long, value_delimiter = ',', value_name = "URLS")]
    pub patroni: Vec<String>,
    /// The home cluster.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// One JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// A cluster as `db clusters` shows it.
#[derive(Debug, Serialize)]
struct Shown {
    #[serde(flatten)]
    row: ClusterRow,
    /// `host:port` of the server that answered (the primary).
    primary: Option<String>,
    /// Why none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    games_waiting: Option<i64>,
    games_running: Option<i64>,
    games_stored: Option<i64>,
}

pub fn run(args: DbArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match args.command {
            DbCommand::Clusters(args) => clusters(args).await,
            DbCommand::AddCluster(args) => add_cluster(args).await,
            DbCommand::Move(args) => move_partition(args).await,
            DbCommand::Rebalance(args) => rebalance(args).await,
        }
    })
}

async fn home(url: &str) -> anyhow::Result<Store> {
    grow::open(url)
        .await
        .with_context(|| format!("cannot reach the home cluster at {url}"))
}

async fn clusters(args: ClustersArgs) -> anyhow::Result<()> {
    let store = home(&args.database_url).await?;
    let rows = store.clusters().await?;
    let mut shown = Vec::new();
    for row in rows {
        let url = row.url.clone().unwrap_or_else(|| args.database_url.clone());
        let (primary, error, games) = match look(&url).await {
            Ok((primary, games)) => (Some(primary), None, Some(games)),
            Err(err) => (None, Some(format!("{err:#}")), None),
        };
        shown.push(Shown {
            row,
            primary,
            error,
            games_waiting: games.map(|g| g.0),
            games_running: games.map(|g| g.1),
            games_stored: games.map(|g| g.2),
        });
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "clusters": shown }))?
        );
        return Ok(());
    }
    println!(
        "{:<10} {:>3} {:>10}  {:<22} {:>7} {:>7} {:>8}  url",
        "cluster", "#", "partitions", "primary", "waiting", "running", "stored"
    );
    for s in &shown {
        let count = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
        println!(
            "{:<10} {:>3} {:>10}  {:<22} {:>7} {:>7} {:>8}  {}",
            s.row.name,
            s.row.number,
            s.row.partitions.len(),
            s.primary.as_deref().unwrap_or("unreachable"),
            count(s.games_waiting),
            count(s.games_running),
            count(s.games_stored),
            s.row.url.as_deref().unwrap_or("(home: --database-url)")
        );
        if let Some(why) = &s.error {
            println!("{:>14} {why}", "");
        }
    }
    Ok(())
}

/// The address of the server answering at `url` and its games: waiting,
/// running, stored.
async fn look(url: &str) -> anyhow::Result<(String, (i64, i64, i64))> {
    let pool = tokio::time::timeout(std::time::Duration::from_secs(5), PgPool::connect(url))
        .await
        .context("no answer within 5 s")??;
    let row: (Option<String>, i32, i64, i64, i64) = sqlx::query_as(
        "SELECT host(inet_server_addr()), inet_server_port(), \
                count(*) FILTER (WHERE phase = 1), count(*) FILTER (WHERE phase = 2), count(*) \
         FROM games",
    )
    .fetch_one(&pool)
    .await?;
    pool.close().await;
    let host = row.0.unwrap_or_else(|| "local socket".into());
    Ok((format!("{host}:{}", row.1), (row.2, row.3, row.4)))
}

async fn add_cluster(args: AddClusterArgs) -> anyhow::Result<()> {
    check_name(&args.name).map_err(anyhow::Error::msg)?;
    let spec = format!("{}={}", args.name, args.url)
        .parse::<ClusterSpec>()
        .and_then(|spec| spec.with_patroni(&args.patroni))
        .map_err(anyhow::Error::msg)?;
    let added = grow::add_cluster(&args.database_url, &spec).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&added)?);
    } else {
        println!(
            "cluster {} registered as number {} ({} partitions); running servers open it \
             now; start new ones with --db-cluster {}={}; move partitions to it with \
             `borbaman db rebalance`",
            added.name,
            added.number,
            added.partitions.len(),
            added.name,
            args.url
        );
    }
    Ok(())
}

/// Prints a move's steps as they go (to stderr with `--json`, so stdout
/// holds only the document).
fn teller(json: bool) -> impl FnMut(String) + Send {
    move |line: String| {
        if json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
}

async fn move_partition(args: MoveArgs) -> anyhow::Result<()> {
    // The schema first: a home from before moves gets their tables.
    home(&args.database_url).await?.close().await;
    let mut say = teller(args.json);
    let report = mover::move_partition(&args.database_url, args.partition, &args.to, &mut say)
        .await
        .with_context(|| format!("moving partition {}", args.partition))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if !report.already_there {
        println!(
            "partition {} moved from {} to {} in {:.0} ms; read-only for {:.1} ms",
            report.partition,
            report.source,
            report.target,
            report.total_ms,
            report.read_only_ms.unwrap_or(0.0)
        );
    }
    Ok(())
}

async fn rebalance(args: RebalanceArgs) -> anyhow::Result<()> {
    let moves = grow::rebalance_plan(&args.database_url).await?;
    let mut say = teller(args.json);
    if moves.is_empty() {
        say("the partitions are spread evenly already".to_string());
    }
    let mut reports = Vec::new();
    for (i, (partition, to)) in moves.iter().enumerate() {
        say(format!(
            "move {} of {}: partition {partition} to {to}",
            i + 1,
            moves.len()
        ));
        let report = mover::move_partition(&args.database_url, *partition, to, &mut say)
            .await
            .with_context(|| format!("moving partition {partition} to {to}"))?;
        reports.push(report);
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "moves": reports }))?
        );
    } else if !reports.is_empty() {
        let worst = reports
            .iter()
            .filter_map(|r| r.read_only_ms)
            .fold(0.0, f64::max);
        println!(
            "{} partitions moved; the longest read-only moment {worst:.1} ms",
            reports.len()
        );
    }
    Ok(())
}
