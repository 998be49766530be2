//! The terminal's part of `play`, `watch` and `rankings`: the UI thread
//! draws the latest [`View`] at a steady rate and forwards key presses,
//! until something ends it. Each end is a stop of [`crate::shutdown`]:
//! - the caller's `quit`, stopped by q (or Esc), Ctrl-C or SIGTERM, or by
//!   the caller; the loop returns and the terminal is restored;
//! - `panicked`, stopped by the panic hook when any thread panics (a
//!   network task): the loop fails with an internal error and the terminal
//!   is restored (a panic in the UI thread itself unwinds through it, and
//!   ratatui's hook restores the terminal);
//! - `hung_up`, stopped on SIGHUP (the terminal was closed): the game is not
//!   left, so that running the command again rejoins it, but what was
//!   started here stops and the process ends (see [`on_hangup`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use borbaman_client::pool::ServerPool;
use borbaman_cluster::local::LocalCluster;
use crossterm::event::{self, Event};
use tokio::sync::{mpsc, watch};

use crate::args::ServersArg;
use crate::shutdown::{self, Stopper};
use crate::ui::input::{Command, command_for};
use crate::ui::{ColorMode, View, draw};

/// Frames drawn per second.
const FPS: u32 = 30;

/// Where `play` keeps its local cluster (none for `watch` and `rankings`):
/// a closed terminal stops it before the process ends.
pub(crate) type ClusterSlot = Arc<Mutex<Option<LocalCluster>>>;

/// The runtime and the pool a screen of its own (`watch`, `rankings`) runs
/// on, connected to `servers`.
pub(crate) fn runtime_and_pool(
    servers: &ServersArg,
) -> anyhow::Result<(tokio::runtime::Runtime, ServerPool)> {
    let pool_config = servers.pool_config()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let pool = runtime
        .block_on(ServerPool::connect(&servers.servers, pool_config))
        .context("connecting to the servers")?;
    Ok((runtime, pool))
}

/// Takes the terminal, draws `view` and forwards keys as `commands` until
/// the player quits or `quit` stops (Ctrl-C and SIGTERM stop it), or a
/// panic in any thread ends the loop; then restores the terminal. After a
/// SIGHUP it never returns: the process ends once the cluster in
/// `cluster_slot` (if any) is stopped.
pub(crate) fn run(
    runtime: &tokio::runtime::Runtime,
    view: watch::Receiver<View>,
    commands: mpsc::Sender<Command>,
    quit: &Stopper,
    cluster_slot: ClusterSlot,
) -> anyhow::Result<()> {
    let signal_quit = quit.clone();
    runtime.spawn(async move {
        shutdown::signal().await;
        signal_quit.stop();
    });
    // Held here as well: the hangup task may end early (no SIGHUP handler)
    // without that counting as a hangup.
    let (hung_up, _) = shutdown::channel();
    runtime.spawn(on_hangup(cluster_slot, hung_up.clone()));
    run_terminal(view, commands, quit, &hung_up)
}

/// `watch` and `rankings`: [`run`], then every task stopped and the
/// runtime shut down; the error shown on screen, if any, is the command's.
pub(crate) fn run_alone(
    runtime: tokio::runtime::Runtime,
    view: watch::Receiver<View>,
    commands: mpsc::Sender<Command>,
    quit: Stopper,
) -> anyhow::Result<()> {
    let result = run(&runtime, view.clone(), commands, &quit, Default::default());
    quit.stop();
    runtime.shutdown_timeout(Duration::from_secs(1));
    result?;
    match view.borrow().error.clone() {
        Some(message) => Err(anyhow::anyhow!(message)),
        None => Ok(()),
    }
}

/// On SIGHUP (the terminal is gone): stops `hung_up` and the local cluster
/// (if any) and exits at once, without leaving the game, as a crash would
/// but tidily: the saved sessions bring the player and its bots back to it
/// on the next start.
async fn on_hangup(cluster_slot: ClusterSlot, hung_up: Stopper) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        return;
    };
    hangup.recv().await;
    hung_up.stop();
    tracing::info!("the terminal was closed; stopping, the game can be rejoined");
    let _ = tokio::task::spawn_blocking(move || {
        drop(
            cluster_slot
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
        std::process::exit(129);
    })
    .await;
}

/// The UI thread's part of [`run`].
fn run_terminal(
    view: watch::Receiver<View>,
    commands: mpsc::Sender<Command>,
    quit: &Stopper,
    hung_up: &Stopper,
) -> anyhow::Result<()> {
    let terminal = ratatui::try_init().context("setting up the terminal")?;
    // ratatui's hook restores the terminal on a panic; ours also stops the
    // UI loop when the panic happened in another thread (a network task).
    let (panicked, _) = shutdown::channel();
    let restore_and_report = std::panic::take_hook();
    let panic_stops = panicked.clone();
    std::panic::set_hook(Box::new(move |info| {
        panic_stops.stop();
        restore_and_report(info);
    }));
    let ui_result = ui_loop(terminal, view, commands, quit, hung_up, &panicked);
    if ui_result.is_err() {
        // A closed terminal fails the UI a moment before SIGHUP arrives.
        std::thread::sleep(Duration::from_millis(200));
    }
    if hung_up.is_stopped() {
        // `on_hangup` stops the cluster and ends the process.
        loop {
            std::thread::park();
        }
    }
    ratatui::restore();
    ui_result
}

/// Draws at a steady rate and forwards key presses; returns when the player
/// quits (or a signal asks to), fails once `panicked` stops.
fn ui_loop(
    mut terminal: ratatui::DefaultTerminal,
    view: watch::Receiver<View>,
    commands: mpsc::Sender<Command>,
    quit: &Stopper,
    hung_up: &Stopper,
    panicked: &Stopper,
) -> anyhow::Result<()> {
    let colors = ColorMode::detect();
    let frame_time = Duration::from_secs(1) / FPS;
    let mut next_frame = Instant::now();
    loop {
        if quit.is_stopped() || hung_up.is_stopped() {
            return Ok(());
        }
        if panicked.is_stopped() {
            anyhow::bail!("internal error (see the message above); the game stopped");
        }
        let snapshot = view.borrow().clone();
        terminal.draw(|frame| draw::draw(frame, &snapshot, colors))?;
        next_frame += frame_time;
        let now = Instant::now();
        if next_frame < now {
            next_frame = now;
        }
        // Handle input until the next frame is due.
        while let Some(wait) = next_frame.checked_duration_since(Instant::now()) {
            if !event::poll(wait)? {
                break;
            }
            let Event::Key(key) = event::read()? else {
                continue;
            };
            let Some(command) = command_for(key) else {
                continue;
            };
            // Never wait on the network: a full queue drops the key.
            let _ = commands.try_send(command);
            if command == Command::Quit {
                quit.stop();
                return Ok(());
            }
        }
    }
}
