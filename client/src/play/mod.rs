//! `borbaman play`: the terminal game.
//!
//! This module holds the command line and the start-up; [`player`] is the
//! player's game loop, [`local`] the local cluster, its supervision and its
//! bots. At run time three parts each own one thing:
//! - the *network task* owns the [`GameSession`]: it joins (rejoining with
//!   the saved token after a crash), polls the state about 20 times a second,
//!   sends the player's actions from a channel, and publishes a [`View`] on a
//!   watch channel;
//! - a *status task* copies the pool's status (current server, failovers,
//!   "waiting for a server") into the view every 100 ms, so the HUD shows it
//!   even while a call is waiting;
//! - the *UI thread* (the main thread, [`terminal`]) draws the latest view
//!   at a steady 30 frames per second and turns key presses into commands;
//!   it never waits on a call.
//!
//! Without `--servers` it first starts a [`LocalCluster`] (PostgreSQL and 3
//! servers) and 3 in-process bots, showing progress while they start; all of
//! it stops when the game is left. Meanwhile a supervisor task starts again
//! any of those servers that dies, and the bots keep their sessions in the
//! state directory beside the player's: a `play` restarted after a crash
//! puts the player and its bots back in their running game.
//!
//! A player who is out of a running game may press `r` to leave it and join
//! the next one, as from the game-over screen. Local bots follow the player:
//! when it joins another game than theirs, they leave theirs (forfeiting it
//! if it still runs) and join again, which seats them in the player's
//! waiting game (the oldest one), so the next game starts at once.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::{mpsc, watch};

mod local;
pub(crate) mod player;
pub(crate) mod terminal;

use borbaman_client::pool::{PoolConfig, ServerPool};
use borbaman_client::state_dir::StateDir;

use crate::args::{DbArg, ServersArg};
use crate::shutdown::{self, Shutdown};
use crate::ui::View;
use crate::ui::input::Command;
use player::Player;
use terminal::ClusterSlot;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Keys: arrows or WASD move, space plants a bomb, e or Enter sets off your bombs \
once you hold the remote control (walking into a bomb kicks it once you hold \
the kick), r plays again once a game is over or you are out of it, q (or Esc, \
Ctrl-C) quits. While your game waits for players, ↑↓ and Enter watch one of the \
live games until it starts, and k shows the rankings (←→ turn their pages).

Without --servers: the database is DATABASE_URL if set, else a private \
PostgreSQL kept under your data directory (~/.local/share/borbaman, or \
/var/lib/borbaman when run as root); logs go to ~/.local/share/borbaman/logs. \
If the game is interrupted (a crash, a closed terminal), run the same \
command again within the round to get back into it.")]
pub struct PlayArgs {
    /// Your name in the game (1-16 visible characters, at most 16 columns
    /// wide). Defaults to your login name.
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub servers: ServersArg,
    /// Without --servers: `single` keeps your games in one private
    /// PostgreSQL under your data directory; `ha` starts a throwaway
    /// replicated one (3 etcd + 3 Patroni members; needs Debian's patroni,
    /// etcd-server and etcd-client packages) that survives its primary's
    /// death.
    #[command(flatten)]
    pub db: DbArg,
    /// The arena to play on: classic (a grid of pillars), open (no inner
    /// pillars) or corridors (long corridors). Without it, any waiting game
    /// will do (a new one is classic). A game's arena is settled when it is
    /// created.
    #[arg(long, value_name = "NAME", value_parser = crate::args::map_name)]
    pub map: Option<String>,
    /// Without --servers: play as if the local servers were far away.
    /// Every byte between this terminal (and the bots) and the servers
    /// waits DELAY each way, give or take JITTER (a duration, or a share
    /// of the delay such as 10%), and with probability P a chunk is held a
    /// further round trip + 200 ms, as a lost TCP segment is. A bare
    /// number is milliseconds. E.g. `--wan 100ms` (a 200 ms round trip,
    /// Europe to the US west coast) or `--wan 50ms,5ms,stall=0.001`; see
    /// docs/internet.md.
    #[arg(long, value_name = "DELAY[,JITTER][,stall=P]", value_parser = crate::args::wan_spec)]
    pub wan: Option<borbaman_cluster::WanSpec>,
    /// Without --servers: how well the 3 local bots play: easy (they
    /// wander and bomb rarely), normal, or hard (they hunt, kick bombs at
    /// you and hold remote bombs until you are in their blast).
    #[arg(long, value_name = "LEVEL")]
    pub bots: Option<crate::brain::Level>,
}

/// The network task of `borbaman play` on its own (no terminal, no local
/// cluster, no bots): the player `name` joins through `pool`, plays from
/// `commands` and publishes what to draw on `view` until `quit` or a quit
/// command; the HUD names `distance` (the emulated one, if any). The
/// terminal runs the same player loop beside its UI thread; tests drive it
/// with commands and draw its view on a test backend.
pub async fn network_task(
    pool: ServerPool,
    name: String,
    state_dir: StateDir,
    view: watch::Sender<View>,
    commands: mpsc::Receiver<Command>,
    quit: Shutdown,
    distance: Option<String>,
) {
    Player::new(pool, name, state_dir, "test".into(), view, commands, quit)
        .at_distance(distance)
        .play()
        .await;
}

pub fn run(args: PlayArgs) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    anyhow::ensure!(
        std::io::stdin().is_terminal() && std::io::stdout().is_terminal(),
        "borbaman play needs an interactive terminal; to run players without one, use `borbaman bot`"
    );
    anyhow::ensure!(
        args.wan.is_none() || args.servers.servers.is_empty(),
        "--wan puts the servers of the local cluster at a distance; with --servers the \
         network between you and them is the real one (leave --servers out to emulate one)"
    );
    anyhow::ensure!(
        args.bots.is_none() || args.servers.servers.is_empty(),
        "--bots sets how well the local bots play, and with --servers none are started; \
         to add bots to a cluster, run `borbaman bot --bots LEVEL --servers …`"
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
    let cluster_slot: ClusterSlot = Arc::default();
    let (stopper, quit) = shutdown::channel();

    let setup = Setup {
        name,
        pool: args.servers.pool_config()?,
        servers: args.servers.servers,
        db: args.db.clone(),
        wan: args.wan,
        map: args.map.unwrap_or_default(),
        bots: args.bots.unwrap_or_default(),
        data_dir,
        log_dir,
        state_dir,
    };
    let network = runtime.spawn(network(
        setup,
        view_tx,
        command_rx,
        cluster_slot.clone(),
        quit,
    ));
    let ui_result = terminal::run(
        &runtime,
        view_rx.clone(),
        command_tx,
        &stopper,
        cluster_slot.clone(),
    );
    // A failure shown on screen is also left in the shell, and the exit
    // status says so.
    let failure = view_rx.borrow().error.clone();

    stopper.stop();
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

struct Setup {
    name: String,
    servers: Vec<String>,
    /// How to reach `servers` (TLS or not); a local cluster is plaintext.
    pool: PoolConfig,
    db: DbArg,
    /// The distance the local cluster's servers are put at, if any.
    wan: Option<borbaman_cluster::WanSpec>,
    /// The arena asked for (empty: any).
    map: String,
    /// How well the local bots play.
    bots: crate::brain::Level,
    data_dir: PathBuf,
    log_dir: PathBuf,
    state_dir: StateDir,
}

/// The network task: start-up, then games until the player quits.
async fn network(
    setup: Setup,
    view: watch::Sender<View>,
    commands: mpsc::Receiver<Command>,
    cluster_slot: ClusterSlot,
    quit: Shutdown,
) {
    let fail = |message: String| view.send_modify(|v| v.error = Some(message));
    let (servers, local) = if setup.servers.is_empty() {
        match local::start(&setup, &view, &cluster_slot, &quit).await {
            Ok(addresses) => (addresses, true),
            Err(e) => return fail(format!("{e:#}")),
        }
    } else {
        (setup.servers.clone(), false)
    };
    if quit.is_shutdown() {
        return;
    }
    if local {
        tokio::spawn(local::supervise(cluster_slot.clone(), quit.clone()));
    }
    // The HUD names the emulated distance beside the measured RTT.
    let distance = setup.wan.as_ref().map(|wan| format!("{wan} one way"));
    view.send_modify(|v| v.net.distance = distance);
    let seat = Seat {
        name: setup.name,
        map: setup.map,
        bots: setup.bots,
        state_dir: setup.state_dir,
        pool: if local {
            PoolConfig::default()
        } else {
            setup.pool
        },
    };
    if let Err(message) = play_on(&servers, local, seat, &view, commands, quit).await {
        fail(message);
    }
}

/// Who plays, and how to reach the servers.
pub struct Seat {
    pub name: String,
    /// The arena asked for (empty: any).
    pub map: String,
    /// How well the local bots play (with `local`).
    pub bots: crate::brain::Level,
    pub state_dir: StateDir,
    pub pool: PoolConfig,
}

/// Games on `servers` until the player quits, driven by `commands` and
/// shown in `view`. With `local`, 3 bots play too and follow the player:
/// each time it joins a game (`r` after a game, or once out of one), they
/// leave theirs and join it, so the next game starts at once.
pub async fn play_on(
    servers: &[String],
    local: bool,
    seat: Seat,
    view: &watch::Sender<View>,
    commands: mpsc::Receiver<Command>,
    quit: Shutdown,
) -> Result<(), String> {
    progress(view, "connecting to the servers…");
    let pool = ServerPool::connect(servers, seat.pool.clone())
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(player::publish_status(
        pool.clone(),
        view.clone(),
        quit.clone(),
    ));
    let (follow_tx, follow_rx) = watch::channel(0u64);
    let bots = if local {
        progress(view, "starting 3 bots…");
        let bots = local::start_bots(&seat, servers, quit.clone(), follow_rx)
            .await
            .map_err(|e| format!("starting the bots: {e}"))?;
        Some(bots)
    } else {
        None
    };
    // The saved session remembers where it was played: a local game is
    // rejoined through whatever local cluster runs next time.
    let servers_key = if local {
        "local".into()
    } else {
        servers.join(",")
    };
    let mut player = Player::new(
        pool,
        seat.name,
        seat.state_dir,
        servers_key,
        view.clone(),
        commands,
        quit,
    )
    .asking_for_map(seat.map);
    if local {
        player = player.leading(follow_tx);
    }
    player.play().await;
    if let Some(bots) = bots {
        // They saw the quit too: let them leave their games and forget
        // their sessions, or the next start would put them back there.
        let _ = tokio::time::timeout(Duration::from_secs(2), bots.join_all()).await;
    }
    Ok(())
}

fn progress(view: &watch::Sender<View>, step: &str) {
    view.send_modify(|v| v.progress.push(step.to_string()));
}

/// The login name, or "player".
pub(crate) fn login_name() -> String {
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

/// The server's own rule for names (1-16 visible characters, no control
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
