//! `borbaman play`: the terminal game.
//!
//! Three parts, each owning one thing:
//! - the *network task* owns the [`GameSession`]: it joins (rejoining with
//!   the saved token after a crash), polls the state about 20 times a second,
//!   sends the player's actions from a channel, and publishes a [`View`] on a
//!   watch channel;
//! - a *status task* copies the pool's status (current server, failovers,
//!   "waiting for a server") into the view every 100 ms, so the HUD shows it
//!   even while a call is waiting;
//! - the *UI thread* (the main thread) draws the latest view at a steady
//!   30 frames per second and turns key presses into commands; it never waits
//!   on a call.
//!
//! Without `--servers` it first starts a [`LocalCluster`] (PostgreSQL and 3
//! servers) and 3 in-process bots, showing progress while they start; all of
//! it stops when the game is left. Meanwhile a supervisor task starts again
//! any of those servers that dies, and the bots keep their sessions in the
//! state directory beside the player's: a `play` restarted after a crash
//! puts the player and its bots back in their running game.
//!
//! A player who is out of a running game may press `r` to leave it and join
//! the next one, as from the game-over screen. Local bots play their own
//! game to its end and then join the next waiting game, so they fill the
//! player's new lobby once that game is over.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use borbaman_proto::pb::{self, Phase};
use crossterm::event::{self, Event};
use hdrhistogram::Histogram;
use tokio::sync::{mpsc, watch};

use crate::bot;
use crate::ui::input::{Command, command_for};
use crate::ui::{ColorMode, NetStats, View, draw, out_of_game};
use borbaman_client::pool::{CallInfo, PoolConfig, PoolError, ServerPool};
use borbaman_client::session::{self, GameSession, new_token};
use borbaman_client::state_dir::{SavedSession, StateDir};
use borbaman_cluster::local::{ClusterConfig, ClusterError, Database, LocalCluster};

/// Frames drawn per second.
const FPS: u32 = 30;
/// How often the state is polled while nothing is being sent.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Bots started with a local cluster.
const LOCAL_BOTS: usize = 3;
const LOCAL_SERVERS: usize = 3;
/// How often the supervisor looks for dead local servers.
const SUPERVISE_INTERVAL: Duration = Duration::from_millis(250);
/// A player who only watches still acts (idle) this often, so the others
/// see them as connected.
const PRESENCE_INTERVAL: Duration = Duration::from_secs(2);

/// Set by the panic hook: a panic anywhere ends the UI loop.
static PANICKED: AtomicBool = AtomicBool::new(false);
/// Set on SIGHUP (the terminal was closed): the game is not left, so that
/// running the command again rejoins it, but what was started here stops.
static HUNG_UP: AtomicBool = AtomicBool::new(false);

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Keys: arrows or WASD move, space plants a bomb, r plays again once a game is \
over or you are out of it, q (or Esc, Ctrl-C) quits.

Without --servers: the database is DATABASE_URL if set, else a private \
PostgreSQL kept under your data directory (~/.local/share/borbaman, or \
/var/lib/borbaman when run as root); logs go to ~/.local/share/borbaman/logs. \
If the game is interrupted (a crash, a closed terminal), run the same \
command again within the round to get back into it.")]
pub struct PlayArgs {
    /// Your name in the game (1-16 printable characters). Defaults to your
    /// login name.
    #[arg(long)]
    pub name: Option<String>,
    /// Servers to bootstrap from (any live one will do), comma-separated
    /// host:port. Without it, a local cluster and 3 bots are started.
    #[arg(long, value_delimiter = ',', env = "BORBAMAN_SERVERS", value_parser = server_address)]
    pub servers: Vec<String>,
}

/// A `--servers` entry: `host:port`, as a server's ready line prints it.
pub fn server_address(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.contains("://") {
        return Err("write host:port without a scheme, e.g. 127.0.0.1:50051".into());
    }
    let (host, port) = text
        .rsplit_once(':')
        .ok_or("expected host:port, e.g. 127.0.0.1:50051")?;
    let host_ok = !host.is_empty() && !host.contains(|c: char| c.is_whitespace() || c == '/');
    if !host_ok {
        return Err(format!("{host:?} is not a host name or IP address"));
    }
    match port.parse::<u16>() {
        Ok(port) if port > 0 => Ok(text.to_string()),
        _ => Err(format!("{port:?} is not a port number (1-65535)")),
    }
}

pub fn run(args: PlayArgs) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    anyhow::ensure!(
        std::io::stdin().is_terminal() && std::io::stdout().is_terminal(),
        "borbaman play needs an interactive terminal; to run players without one, use `borbaman bot`"
    );
    let name = match args.name {
        Some(name) => name,
        None => login_name(),
    };
    validate_name(&name).map_err(|reason| {
        anyhow::anyhow!("invalid player name {name:?}: {reason}; choose another with --name")
    })?;
    let data_dir = dirs::data_dir()
        .or_else(dirs::data_local_dir)
        .context("no data directory for this user (is HOME set?)")?
        .join("borbaman");
    let log_dir = data_dir.join("logs");
    init_file_logging(&log_dir);
    let state_dir = StateDir::for_user()?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (view_tx, view_rx) = watch::channel(View {
        name: name.clone(),
        progress: vec!["starting…".to_string()],
        ..View::default()
    });
    let (command_tx, command_rx) = mpsc::channel::<Command>(64);
    // The cluster is dropped on this thread, after the terminal is restored
    // (or while unwinding from a panic): its servers stop by PID.
    let cluster_slot: Arc<Mutex<Option<LocalCluster>>> = Arc::default();
    let (quit_tx, quit_rx) = watch::channel(false);

    let setup = Setup {
        name,
        servers: args.servers,
        data_dir,
        log_dir,
        state_dir,
    };
    let network = runtime.spawn(network(
        setup,
        view_tx,
        command_rx,
        cluster_slot.clone(),
        quit_rx,
    ));
    let signal_quit = quit_tx.clone();
    runtime.spawn(async move {
        bot::shutdown_signal().await;
        let _ = signal_quit.send(true);
    });
    runtime.spawn(on_hangup(cluster_slot.clone()));

    let terminal = ratatui::try_init().context("setting up the terminal")?;
    // ratatui's hook restores the terminal on a panic; ours also stops the
    // UI loop when the panic happened in another thread (a network task).
    let restore_and_report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICKED.store(true, Ordering::SeqCst);
        restore_and_report(info);
    }));
    let ui_result = ui_loop(terminal, view_rx.clone(), command_tx, &quit_tx);
    if ui_result.is_err() {
        // A closed terminal fails the UI a moment before SIGHUP arrives.
        std::thread::sleep(Duration::from_millis(200));
    }
    if HUNG_UP.load(Ordering::SeqCst) {
        // `on_hangup` stops the cluster and ends the process.
        loop {
            std::thread::park();
        }
    }
    ratatui::restore();
    // A failure shown on screen is also left in the shell, and the exit
    // status says so.
    let failure = view_rx.borrow().error.clone();

    let _ = quit_tx.send(true);
    // Give the network task a moment to leave the game cleanly.
    let _ = runtime.block_on(async { tokio::time::timeout(Duration::from_secs(3), network).await });
    runtime.shutdown_timeout(Duration::from_secs(1));
    let cluster = cluster_slot
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if cluster.is_some() {
        eprintln!("stopping the local cluster…");
    }
    drop(cluster);
    ui_result?;
    match failure {
        Some(message) => Err(anyhow::anyhow!(message)),
        None => Ok(()),
    }
}

/// On SIGHUP (the terminal is gone): stops the local cluster and exits at
/// once, without leaving the game, as a crash would but tidily: the saved
/// sessions bring the player and its bots back to it on the next start.
async fn on_hangup(cluster_slot: Arc<Mutex<Option<LocalCluster>>>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        return;
    };
    hangup.recv().await;
    HUNG_UP.store(true, Ordering::SeqCst);
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

/// Draws at a steady rate and forwards key presses; returns when the player
/// quits (or a signal asks to).
fn ui_loop(
    mut terminal: ratatui::DefaultTerminal,
    view: watch::Receiver<View>,
    commands: mpsc::Sender<Command>,
    quit: &watch::Sender<bool>,
) -> anyhow::Result<()> {
    let colors = ColorMode::detect();
    let frame_time = Duration::from_secs(1) / FPS;
    let mut next_frame = Instant::now();
    loop {
        if *quit.borrow() || HUNG_UP.load(Ordering::SeqCst) {
            return Ok(());
        }
        if PANICKED.load(Ordering::SeqCst) {
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
                let _ = quit.send(true);
                return Ok(());
            }
        }
    }
}

struct Setup {
    name: String,
    servers: Vec<String>,
    data_dir: PathBuf,
    log_dir: PathBuf,
    state_dir: StateDir,
}

/// The network task: start-up, then games until the player quits.
async fn network(
    setup: Setup,
    view: watch::Sender<View>,
    commands: mpsc::Receiver<Command>,
    cluster_slot: Arc<Mutex<Option<LocalCluster>>>,
    quit: watch::Receiver<bool>,
) {
    let fail = |message: String| view.send_modify(|v| v.error = Some(message));
    let (servers, local) = if setup.servers.is_empty() {
        match start_local(&setup, &view, &cluster_slot, &quit).await {
            Ok(addresses) => (addresses, true),
            Err(e) => return fail(format!("{e:#}")),
        }
    } else {
        (setup.servers.clone(), false)
    };
    if *quit.borrow() {
        return;
    }
    progress(&view, "connecting to the servers…");
    let pool = match ServerPool::connect(&servers, PoolConfig::default()).await {
        Ok(pool) => pool,
        Err(e) => return fail(e.to_string()),
    };
    tokio::spawn(publish_status(pool.clone(), view.clone(), quit.clone()));
    let bots = if local {
        tokio::spawn(supervise(cluster_slot.clone(), quit.clone()));
        progress(&view, "starting 3 bots…");
        let sessions = setup.state_dir.local_bots();
        if setup.state_dir.load(&setup.name).is_none() {
            // No game to go back to: neither have the bots.
            sessions.clear_all();
        }
        let team = bot::BotTeam {
            sessions: Some(sessions),
            ..bot::BotTeam::new(LOCAL_BOTS)
        };
        let (outcomes, _) = mpsc::unbounded_channel();
        match bot::spawn_bots(
            &servers,
            PoolConfig::default(),
            &team,
            quit.clone(),
            outcomes,
        )
        .await
        {
            Ok(bots) => Some(bots),
            Err(e) => return fail(format!("starting the bots: {e}")),
        }
    } else {
        None
    };
    let player = Player {
        pool,
        name: setup.name,
        state_dir: setup.state_dir,
        servers_key: if local {
            "local".into()
        } else {
            servers.join(",")
        },
        view,
        commands,
        quit,
        rtt: Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds"),
    };
    player.play().await;
    if let Some(bots) = bots {
        // They saw the quit too: let them leave their games and forget
        // their sessions, or the next start would put them back there.
        let _ = tokio::time::timeout(Duration::from_secs(2), bots.join_all()).await;
    }
}

/// Starts again any local server that died (killed from a shell, crashed),
/// as a supervisor would, until the player quits.
async fn supervise(slot: Arc<Mutex<Option<LocalCluster>>>, mut quit: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(SUPERVISE_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = quit.changed() => return,
        }
        let slot = slot.clone();
        let revived = tokio::task::spawn_blocking(move || {
            let mut cluster = slot.lock().unwrap_or_else(|e| e.into_inner());
            cluster.as_mut().map(LocalCluster::revive_exited)
        })
        .await;
        match revived {
            Ok(Some(Ok(revived))) if !revived.is_empty() => {
                tracing::info!(?revived, "restarted local servers that had died");
            }
            Ok(Some(Err(e))) => tracing::warn!(error = %e, "cannot restart a local server"),
            _ => {}
        }
    }
}

fn progress(view: &watch::Sender<View>, step: &str) {
    view.send_modify(|v| v.progress.push(step.to_string()));
}

/// Starts the local cluster in a blocking thread, showing its progress.
async fn start_local(
    setup: &Setup,
    view: &watch::Sender<View>,
    slot: &Arc<Mutex<Option<LocalCluster>>>,
    quit: &watch::Receiver<bool>,
) -> anyhow::Result<Vec<String>> {
    let pg_dir = postgres_dir(&setup.data_dir);
    let config = ClusterConfig {
        servers: LOCAL_SERVERS,
        database: Database::from_env_or(Database::Persistent(pg_dir)),
        fsync: true,
        server_command: None,
        server_args: Vec::new(),
        log_dir: Some(setup.log_dir.clone()),
    };
    let steps = view.clone();
    let slot = slot.clone();
    let quit = quit.clone();
    tokio::task::spawn_blocking(move || {
        let cluster =
            LocalCluster::start(config, |step| progress(&steps, step)).map_err(explain)?;
        let addresses = cluster.addresses();
        if !*quit.borrow() {
            *slot.lock().unwrap() = Some(cluster);
        }
        Ok(addresses)
    })
    .await
    .context("the start-up thread failed")?
}

/// Adds what to do next to a cluster start-up failure.
fn explain(error: ClusterError) -> anyhow::Error {
    match error {
        ClusterError::Postgres(e) => anyhow::anyhow!("cannot start PostgreSQL: {e}"),
        other => anyhow::anyhow!("cannot start the local cluster: {other}"),
    }
}

/// Where the private PostgreSQL keeps its data: under the user's data dir,
/// except for root, whose home the `postgres` user cannot enter.
fn postgres_dir(data_dir: &std::path::Path) -> PathBuf {
    let is_root = unsafe { libc::geteuid() } == 0;
    if is_root && data_dir.starts_with("/root") {
        PathBuf::from("/var/lib/borbaman/postgres")
    } else {
        data_dir.join("postgres")
    }
}

/// Copies the pool's status into the view.
async fn publish_status(
    pool: ServerPool,
    view: watch::Sender<View>,
    mut quit: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = quit.changed() => return,
        }
        let status = pool.status();
        view.send_if_modified(|v| {
            let net = NetStats {
                server: status.current.clone().or(v.net.server.clone()),
                live_servers: status.live.len(),
                failovers: status.failovers,
                waiting_for_server: status.waiting_for_server,
                database_unavailable: status.database_unavailable,
                ..v.net.clone()
            };
            let changed = net != v.net;
            v.net = net;
            changed
        });
    }
}

/// The human player's side of the network task.
struct Player {
    pool: ServerPool,
    name: String,
    state_dir: StateDir,
    servers_key: String,
    view: watch::Sender<View>,
    commands: mpsc::Receiver<Command>,
    quit: watch::Receiver<bool>,
    rtt: Histogram<u64>,
}

/// What the player wants once a game is over (or once out of it).
enum Next {
    PlayAgain,
    /// The session lost its seat (see [`session::seat_lost`]).
    JoinAgain,
    Quit,
}

impl Player {
    async fn play(mut self) {
        loop {
            let Some(mut session) = self.join().await else {
                return;
            };
            match self.play_game(&mut session).await {
                Next::PlayAgain => {
                    self.view.send_modify(|v| {
                        v.state = None;
                        v.rankings.clear();
                        v.progress = vec!["joining a new game…".into()];
                    });
                }
                Next::JoinAgain => {}
                Next::Quit => return,
            }
        }
    }

    /// Joins a game, rejoining the saved one if there is one. Retries until
    /// it works or the player quits.
    async fn join(&mut self) -> Option<GameSession> {
        loop {
            let saved = self.state_dir.load(&self.name);
            let token = saved
                .as_ref()
                .and_then(SavedSession::token)
                .unwrap_or_else(new_token);
            match GameSession::join(&self.pool, &self.name, token).await {
                Ok((session, info)) => {
                    self.record(&info, None);
                    let saved = SavedSession {
                        name: self.name.clone(),
                        token_hex: hex::encode(session.token()),
                        game_id: session.game_id(),
                        seat: session.seat(),
                        servers: self.servers_key.clone(),
                    };
                    if let Err(e) = self.state_dir.save(&saved) {
                        tracing::warn!(error = %e, "cannot save the session; a restart will not rejoin");
                    }
                    let state = session.latest().cloned();
                    let seat = session.seat();
                    self.view.send_modify(|v| {
                        v.seat = Some(seat);
                        v.state = state;
                    });
                    return Some(session);
                }
                Err(PoolError::Status(status)) if saved.is_some() => {
                    // The saved session is not usable any more: start afresh.
                    tracing::info!(%status, "saved session refused; joining with a new token");
                    self.state_dir.clear(&self.name);
                }
                Err(PoolError::Status(status)) if status.code() == tonic::Code::InvalidArgument => {
                    self.view.send_modify(|v| {
                        v.error = Some(format!(
                            "the server refused to seat you: {}",
                            status.message()
                        ))
                    });
                    return None;
                }
                Err(e) => {
                    self.record_error(&e);
                    if self.wait_or_quit(Duration::from_millis(500)).await {
                        return None;
                    }
                }
            }
        }
    }

    /// Plays one game: polls, sends actions, shows the result.
    async fn play_game(&mut self, session: &mut GameSession) -> Next {
        let mut ticker = tokio::time::interval(POLL_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut quit = self.quit.clone();
        let mut last_act = Instant::now();
        loop {
            let finished = session
                .latest()
                .is_some_and(|s| s.phase() == Phase::Finished);
            if finished {
                return self.game_over(session).await;
            }
            let action = tokio::select! {
                _ = ticker.tick() => None,
                _ = quit.changed() => Some(Command::Quit),
                command = self.commands.recv() => Some(command.unwrap_or(Command::Quit)),
            };
            let result = match action {
                Some(Command::Quit) => {
                    self.leave(session).await;
                    return Next::Quit;
                }
                Some(Command::PlayAgain) if is_out(session) => {
                    // Leaving forfeits, which changes nothing for a player
                    // already out; then on as from the game-over screen.
                    self.leave(session).await;
                    return Next::PlayAgain;
                }
                Some(command) => match command.action() {
                    Some(action) => {
                        last_act = Instant::now();
                        session.act(action).await.map(|(_, info)| info)
                    }
                    None => continue,
                },
                None if session.lobby_idle_due()
                    || (last_act.elapsed() >= PRESENCE_INTERVAL && playing(session)) =>
                {
                    last_act = Instant::now();
                    session.act(pb::Action::Idle).await.map(|(_, info)| info)
                }
                None => session.state().await.map(|(_, info)| info),
            };
            match result {
                Ok(info) => {
                    let state = session.latest().cloned();
                    self.record(&info, state);
                }
                Err(e) if session::seat_lost(&e) => {
                    // Seated again with the same token, in a waiting game.
                    tracing::info!(error = %e, "seat lost; joining again");
                    self.record_error(&e);
                    return Next::JoinAgain;
                }
                Err(e) => self.record_error(&e),
            }
        }
    }

    /// Shows the game-over screen with the rankings; waits for r or q.
    async fn game_over(&mut self, session: &mut GameSession) -> Next {
        self.state_dir.clear(&self.name);
        let state = session.latest().cloned();
        self.view.send_modify(|v| v.state = state);
        match session::rankings(&self.pool, 10).await {
            Ok(rankings) => self.view.send_modify(|v| v.rankings = rankings),
            Err(e) => self.record_error(&e),
        }
        let mut quit = self.quit.clone();
        loop {
            let command = tokio::select! {
                command = self.commands.recv() => command.unwrap_or(Command::Quit),
                _ = quit.changed() => Command::Quit,
            };
            match command {
                Command::PlayAgain => return Next::PlayAgain,
                Command::Quit => return Next::Quit,
                _ => {}
            }
        }
    }

    /// Leaves a running game (the player forfeits) and forgets the session.
    async fn leave(&mut self, session: &mut GameSession) {
        let running = session
            .latest()
            .is_some_and(|s| s.phase() != Phase::Finished);
        if running {
            let _ = tokio::time::timeout(Duration::from_secs(2), session.leave()).await;
        }
        self.state_dir.clear(&self.name);
    }

    fn record(&mut self, info: &CallInfo, state: Option<pb::GameState>) {
        let rtt_us = info.rtt.as_micros().max(1) as u64;
        let _ = self.rtt.record(rtt_us.min(60_000_000));
        let p99 = Duration::from_micros(self.rtt.value_at_quantile(0.99));
        self.view.send_modify(|v| {
            v.net.rtt_last = Some(info.rtt);
            v.net.rtt_p99 = Some(p99);
            v.net.server = Some(info.server.clone());
            v.net.last_error = None;
            if state.is_some() {
                v.state = state;
            }
        });
    }

    fn record_error(&mut self, error: &PoolError) {
        let message = error.to_string();
        self.view.send_modify(|v| v.net.last_error = Some(message));
    }

    /// Sleeps; true if the player quit meanwhile.
    async fn wait_or_quit(&mut self, duration: Duration) -> bool {
        let mut quit = self.quit.clone();
        tokio::select! {
            _ = tokio::time::sleep(duration) => false,
            _ = quit.changed() => true,
            command = self.commands.recv() => matches!(command, None | Some(Command::Quit)),
        }
    }
}

/// True when the player is out of its running game (see [`out_of_game`]).
fn is_out(session: &GameSession) -> bool {
    session
        .latest()
        .is_some_and(|s| out_of_game(s, session.seat()))
}

fn playing(session: &GameSession) -> bool {
    session
        .latest()
        .is_some_and(|s| s.phase() == Phase::Playing)
}

/// The login name, or "player".
fn login_name() -> String {
    let name = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_default();
    let name: String = name.chars().filter(|c| !c.is_control()).take(16).collect();
    if name.is_empty() {
        "player".into()
    } else {
        name
    }
}

/// The server's own rule for names (1-16 printable characters, no control
/// or invisible characters: names are drawn in other players' terminals),
/// checked before anything starts.
pub fn validate_name(name: &str) -> Result<(), String> {
    borbaman_game::names::check(name)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Logs go to a file: the terminal belongs to the game.
fn init_file_logging(log_dir: &std::path::Path) {
    if std::fs::create_dir_all(log_dir).is_err() {
        return;
    }
    let Ok(file) = std::fs::File::create(log_dir.join("client.log")) else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(false)
        .with_writer(Mutex::new(file))
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_are_host_and_port() {
        assert_eq!(
            server_address(" 127.0.0.1:50051 "),
            Ok("127.0.0.1:50051".into())
        );
        assert!(server_address("game.example.org:443").is_ok());
        assert!(server_address("[::1]:7000").is_ok());
        for bad in [
            "nonsense",
            "",
            "127.0.0.1",
            "127.0.0.1:0",
            "host:http",
            ":80",
        ] {
            assert!(server_address(bad).is_err(), "{bad:?}");
        }
        let scheme = server_address("http://127.0.0.1:1").unwrap_err();
        assert!(scheme.contains("without a scheme"), "{scheme}");
    }

    #[test]
    fn names_follow_the_server_rule() {
        assert!(validate_name("ann").is_ok());
        assert!(validate_name("Ünïcödé ok").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("seventeen chars!!").is_err());
        assert!(validate_name("evil\x1b[2J").is_err());
        assert!(validate_name("   ").is_err());
        assert!(validate_name("right\u{202E}to-left").is_err());
    }
}
