//! `borbaman replay --verify`: re-simulates finished games from their seed
//! and logged changes and compares each with its stored final state, byte
//! for byte (the reads are the store's, the re-simulation the core's).

use std::time::Instant;

use anyhow::{Context, bail};
use borbaman_server::store::replay::{self, ReplayAudit};
use sqlx::PgPool;

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The finished game to check.
    #[arg(value_name = "GAME_ID", required_unless_present = "all")]
    pub game_id: Option<i64>,
    /// Re-simulate the games from their seed and log and compare them with
    /// their stored final state, byte for byte; exits non-zero naming every
    /// game that differs.
    #[arg(long)]
    pub verify: bool,
    /// Every finished game in the database.
    #[arg(long, conflicts_with = "game_id")]
    pub all: bool,
    /// The game database, e.g. postgres://user@127.0.0.1:5432/borbaman.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
}

pub fn run(args: ReplayArgs) -> anyhow::Result<()> {
    if !args.verify {
        bail!(
            "watching a replay in the terminal is not available yet; \
             check games with `borbaman replay --verify GAME_ID` or `--verify --all`"
        );
    }
    let Some(url) = args.database_url.as_deref() else {
        bail!("--verify reads the game database: give --database-url URL (or DATABASE_URL)");
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let db = PgPool::connect(url)
            .await
            .with_context(|| format!("cannot connect to the database at {url}"))?;
        let ids = args.game_id.map(|id| vec![id]);
        let read_at = Instant::now();
        let games = replay::finished_games(&db, ids.as_deref()).await?;
        let read_ms = read_at.elapsed().as_secs_f64() * 1e3;
        if let Some(id) = args.game_id
            && games.is_empty()
        {
            bail!("game {id} is not a finished game in this database");
        }
        let cpu_before = cpu_time_ms();
        let verified_at = Instant::now();
        let audit = ReplayAudit::of(&games);
        let verify_ms = verified_at.elapsed().as_secs_f64() * 1e3;
        let cpu_ms = cpu_time_ms() - cpu_before;
        println!(
            "verified {} finished games by re-simulation in {verify_ms:.1} ms \
             ({cpu_ms:.1} ms CPU; reading them took {read_ms:.1} ms)",
            audit.checked
        );
        if audit.not_logged > 0 {
            println!(
                "skipped {} finished games created before joins were logged",
                audit.not_logged
            );
        }
        for (id, why) in &audit.differing {
            eprintln!("game {id} differs from its replay: {why}");
        }
        if !audit.differing.is_empty() {
            let ids: Vec<String> = audit
                .differing
                .iter()
                .map(|(id, _)| id.to_string())
                .collect();
            bail!(
                "{} of {} games differ from their replay: game {}",
                ids.len(),
                audit.checked,
                ids.join(", game ")
            );
        }
        Ok(())
    })
}

/// CPU time this process has used, in milliseconds.
pub fn cpu_time_ms() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}
