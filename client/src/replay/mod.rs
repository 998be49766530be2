//! `borbaman replay`: a finished game played back in the terminal, fetched
//! through the servers (a read-only call) and re-simulated by the game core
//! ([`playback`]); and `--verify`, which re-simulates finished games from
//! their seed and logged changes and compares each with its stored final
//! state, byte for byte (the reads are the store's, the re-simulation the
//! core's).

pub mod playback;

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use borbaman_client::pool::{PoolConfig, ServerPool};
use borbaman_game::{GameState, SEATS};
use borbaman_lab::measure::cpu_time_ms;
use borbaman_proto::pb;
use borbaman_server::store::partitions;
use borbaman_server::store::replay::{self, ReplayAudit};
use borbaman_server::wire::event_from_wire;
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use sqlx::PgPool;

use crate::args::ServersArg;
use crate::ui::{ColorMode, draw};
use playback::{Control, Playback};

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The finished game to play back (or, with --verify, to check).
    #[arg(value_name = "GAME_ID", required_unless_present = "all")]
    pub game_id: Option<i64>,
    /// The servers to fetch the game from (with GAME_ID, without --verify).
    #[command(flatten)]
    pub servers: ServersArg,
    /// Re-simulate the games from their seed and log and compare them with
    /// their stored final state, byte for byte; exits non-zero naming every
    /// game that differs.
    #[arg(long)]
    pub verify: bool,
    /// Every finished game in the database.
    #[arg(long, conflicts_with = "game_id")]
    pub all: bool,
    /// The game database (with --verify), e.g.
    /// postgres://user@127.0.0.1:5432/borbaman.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
}

pub fn run(args: ReplayArgs) -> anyhow::Result<()> {
    if !args.verify {
        return watch(args);
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
        // Every cluster's games: home lists the others (docs/scaling.md).
        let mut games = replay::finished_games(&db, ids.as_deref()).await?;
        for other in partitions::other_cluster_urls(&db).await? {
            let pool = PgPool::connect(&other)
                .await
                .with_context(|| format!("cannot connect to the database cluster at {other}"))?;
            games.extend(replay::finished_games(&pool, ids.as_deref()).await?);
            pool.close().await;
        }
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
            "re-simulated {} finished games in {verify_ms:.1} ms ({cpu_ms:.1} ms CPU; \
             reading them took {read_ms:.1} ms): {} equal to their stored state, {} differ",
            audit.checked,
            audit.checked - audit.differing.len(),
            audit.differing.len()
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

/// Fetches finished game `game_id` through the servers and makes its
/// playback.
pub async fn fetch(pool: &ServerPool, game_id: u64) -> anyhow::Result<Playback> {
    let (reply, _) = pool
        .call(|mut client| async move { client.get_replay(pb::ReplayRequest { game_id }).await })
        .await
        .with_context(|| format!("fetching game {game_id}"))?;
    let end = GameState::decode(&reply.final_state)
        .context("the servers sent a game state this build cannot read; upgrade borbaman")?;
    let events = reply
        .events
        .iter()
        .map(|e| event_from_wire(e).context("the servers sent a change this build does not know"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut names: [String; SEATS] = Default::default();
    for (slot, name) in names.iter_mut().zip(reply.names) {
        *slot = name;
    }
    Ok(Playback::new(game_id, end, events, names)?)
}

/// The control a key stands for.
pub fn control_for(key: KeyEvent) -> Option<Control> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    Some(match key.code {
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Control::Quit,
        KeyCode::Char('q') | KeyCode::Esc => Control::Quit,
        KeyCode::Char(' ') | KeyCode::Char('p') => Control::TogglePause,
        KeyCode::Right | KeyCode::Char('.') | KeyCode::Char('n') => Control::Step,
        KeyCode::Char('+') | KeyCode::Char('=') | KeyCode::Up => Control::Faster,
        KeyCode::Char('-') | KeyCode::Down => Control::Slower,
        KeyCode::Char('e') | KeyCode::End => Control::JumpToEnd,
        _ => return None,
    })
}

/// `borbaman replay GAME_ID --servers …`: the game played back in this
/// terminal.
fn watch(args: ReplayArgs) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let Some(game_id) = args.game_id else {
        bail!("give the GAME_ID of the finished game to play back");
    };
    let game_id = u64::try_from(game_id).context("GAME_ID is a positive number")?;
    if args.servers.servers.is_empty() {
        bail!("give --servers host:port (any live server of the cluster that played the game)");
    }
    anyhow::ensure!(
        std::io::stdin().is_terminal() && std::io::stdout().is_terminal(),
        "borbaman replay needs an interactive terminal; `--verify` checks games without one"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut playback = runtime.block_on(async {
        let pool = ServerPool::connect(&args.servers.servers, PoolConfig::default())
            .await
            .context("connecting to the servers")?;
        fetch(&pool, game_id).await
    })?;
    let colors = ColorMode::detect();
    let mut terminal = ratatui::try_init().context("setting up the terminal")?;
    let result = (|| -> anyhow::Result<()> {
        loop {
            let view = playback.view();
            terminal.draw(|frame| draw::draw(frame, &view, colors))?;
            if crossterm::event::poll(Duration::from_millis(u64::from(borbaman_game::TICK_MS)))?
                && let crossterm::event::Event::Key(key) = crossterm::event::read()?
                && let Some(control) = control_for(key)
            {
                if !playback.control(control)? {
                    return Ok(());
                }
                continue;
            }
            playback.frame()?;
        }
    })();
    ratatui::restore();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn keys_pause_step_change_speed_jump_to_the_end_and_quit() {
        assert_eq!(
            control_for(key(KeyCode::Char(' '))),
            Some(Control::TogglePause)
        );
        assert_eq!(control_for(key(KeyCode::Right)), Some(Control::Step));
        assert_eq!(control_for(key(KeyCode::Char('+'))), Some(Control::Faster));
        assert_eq!(control_for(key(KeyCode::Char('-'))), Some(Control::Slower));
        assert_eq!(
            control_for(key(KeyCode::Char('e'))),
            Some(Control::JumpToEnd)
        );
        assert_eq!(control_for(key(KeyCode::Char('q'))), Some(Control::Quit));
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(control_for(ctrl_c), Some(Control::Quit));
        assert_eq!(control_for(key(KeyCode::Char('x'))), None);
    }
}
