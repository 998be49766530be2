//! `borbaman watch [GAME_ID]`: a live game drawn as `play` draws it, with
//! no seat. Without an id it lists the live games (id, map, players, time
//! left) to pick one from.
//!
//! Spectating needs no session or token: `ListGames` and `WatchState` are
//! read-only calls any server answers, and never write, so spectators count
//! as no player and cost the game nothing but reads. A game's board is no
//! secret from anyone who can reach the servers (its players see it all),
//! so there is nothing to authorise; what a server refuses a player (rate
//! and connection limits, TLS) applies to spectators alike.
//!
//! The parts are those of `play`: a network task owns the [`Spectator`]
//! (through a [`ServerPool`], so failover is the same), polls about 20
//! times a second and publishes a [`View`]; the main thread runs `play`'s
//! terminal loop, which draws it at 30 frames per second, forwards keys,
//! and stops on a panic in any task or a closed terminal.

use std::time::{Duration, Instant};

use borbaman_client::pool::ServerPool;
use borbaman_client::spectator::{Spectator, live_games};
use tokio::sync::{mpsc, watch};

use crate::args::ServersArg;
use crate::play::player::publish_status;
use crate::shutdown::{self, Shutdown};
use crate::ui::View;
use crate::ui::input::Command;

/// How often the watched game is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How often the list of live games is fetched again.
const LIST_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Keys: ↑↓ choose a game and Enter watches it; q (or Esc, Ctrl-C) quits.")]
pub struct WatchArgs {
    /// The game to watch. Without it, the live games are listed to pick
    /// one from.
    #[arg(value_name = "GAME_ID")]
    pub game_id: Option<u64>,
    #[command(flatten)]
    pub servers: ServersArg,
}

pub fn run(args: WatchArgs) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    anyhow::ensure!(
        !args.servers.servers.is_empty(),
        "borbaman watch needs the servers of the game: give --servers host:port (or BORBAMAN_SERVERS)"
    );
    anyhow::ensure!(
        std::io::stdout().is_terminal(),
        "borbaman watch needs an interactive terminal"
    );
    let (runtime, pool) = crate::play::terminal::runtime_and_pool(&args.servers)?;
    let (view_tx, view_rx) = watch::channel(View {
        progress: vec!["fetching the game…".into()],
        watching: true,
        ..View::default()
    });
    let (command_tx, command_rx) = mpsc::channel::<Command>(64);
    let (stopper, quit) = shutdown::channel();
    runtime.spawn(publish_status(pool.clone(), view_tx.clone(), quit.clone()));
    runtime.spawn(network(pool, args.game_id, view_tx, command_rx, quit));
    // The terminal as `play` runs it: a panic in the network task ends the
    // loop and restores the terminal; a closed terminal (SIGHUP) ends the
    // process.
    crate::play::terminal::run_alone(runtime, view_rx, command_tx, stopper)
}

/// The network task: the list to pick from (without an id), then the game.
async fn network(
    pool: ServerPool,
    game_id: Option<u64>,
    view: watch::Sender<View>,
    mut commands: mpsc::Receiver<Command>,
    quit: Shutdown,
) {
    let game_id = match game_id {
        Some(id) => id,
        None => match pick(&pool, &view, &mut commands, quit.clone()).await {
            Some(id) => id,
            None => return,
        },
    };
    view.send_modify(|v| v.live_games = None);
    follow_game(pool, game_id, view, quit).await;
}

/// Lists the live games until one is picked (`None`: the viewer quit).
async fn pick(
    pool: &ServerPool,
    view: &watch::Sender<View>,
    commands: &mut mpsc::Receiver<Command>,
    mut quit: Shutdown,
) -> Option<u64> {
    let mut next_list = Instant::now();
    loop {
        if Instant::now() >= next_list {
            next_list = Instant::now() + LIST_INTERVAL;
            match live_games(pool, 0).await {
                Ok(games) => view.send_modify(|v| {
                    v.picked = v.picked.min(games.len().saturating_sub(1));
                    v.live_games = Some(games);
                    v.net.last_error = None;
                }),
                Err(e) => view.send_modify(|v| v.net.last_error = Some(e.to_string())),
            }
        }
        let wait = next_list.saturating_duration_since(Instant::now());
        let command = tokio::select! {
            _ = tokio::time::sleep(wait) => continue,
            _ = quit.recv() => return None,
            command = commands.recv() => command.unwrap_or(Command::Quit),
        };
        if command == Command::Quit {
            return None;
        }
        if let Some(game_id) = steer_pick(view, command) {
            return Some(game_id);
        }
    }
}

/// The list of live games steered by a key, in `watch` and in `play`'s
/// lobby: ↑↓ move the choice; Enter gives the game chosen, if any.
pub(crate) fn steer_pick(view: &watch::Sender<View>, command: Command) -> Option<u64> {
    match command {
        Command::Up => view.send_modify(|v| v.picked = v.picked.saturating_sub(1)),
        Command::Down => view.send_modify(|v| {
            let last = v
                .live_games
                .as_ref()
                .map_or(0, |g| g.len().saturating_sub(1));
            v.picked = (v.picked + 1).min(last);
        }),
        Command::Select => {
            let view = view.borrow();
            let games = view.live_games.as_deref().unwrap_or_default();
            return games.get(view.picked).map(|g| g.game_id);
        }
        _ => {}
    }
    None
}

/// Polls game `game_id` as a spectator and publishes it in `view` (with
/// the call's RTT and server), until `quit`. Failed calls are shown and
/// tried again: the pool has already moved to another server.
pub async fn follow_game(
    pool: ServerPool,
    game_id: u64,
    view: watch::Sender<View>,
    mut quit: Shutdown,
) {
    let mut spectator = Spectator::new(pool, game_id);
    let mut ticker = tokio::time::interval(POLL_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    view.send_modify(|v| {
        v.watching = true;
        v.seat = None;
    });
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = quit.recv() => return,
        }
        match spectator.state().await {
            Ok((state, info)) => view.send_modify(|v| {
                v.net.rtt_last = Some(info.rtt);
                v.net.server = Some(info.server.clone());
                v.net.last_error = None;
                v.state = Some(state);
            }),
            Err(e) => {
                let refused = e
                    .status()
                    .is_some_and(|s| s.code() == tonic::Code::FailedPrecondition);
                let message = e.to_string();
                view.send_modify(|v| {
                    if refused {
                        v.error = Some(format!("cannot watch game {game_id}: {message}"));
                    } else {
                        v.net.last_error = Some(message);
                    }
                });
                if refused {
                    return;
                }
            }
        }
    }
}
