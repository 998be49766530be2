//! The lobby that never makes you wait: in a local game (`play` without
//! `--servers`: its cluster and 3 bots), `r` after dying, or after the game
//! ends, brings the bots along into the player's next game, which then
//! runs with all four. The player is driven through `play`'s own network
//! task, with commands as its keys would send them.

mod common;

use std::time::{Duration, Instant};

use borbaman::play::{Seat, play_on};
use borbaman::shutdown;
use borbaman::ui::input::Command;
use borbaman::ui::{View, out_of_game};
use borbaman_client::pool::PoolConfig;
use borbaman_client::state_dir::StateDir;
use borbaman_proto::pb::Phase;
use tokio::sync::{mpsc, watch};

/// A running game other than `not`, with four players seated.
fn running_with_four(view: &View, not: u64) -> bool {
    view.state
        .as_ref()
        .is_some_and(|s| s.game_id != not && s.phase() == Phase::Playing && s.seated == 4)
}

/// What "at once" means here: the bots leave their game and join the
/// player's next one in a few calls (a few hundred ms on an idle machine).
/// Generous for a loaded machine, and far below what a bot that did not
/// follow would take: its old game runs on for its 3-minute round, or the
/// bot waits out its join retries.
const AT_ONCE: Duration = Duration::from_secs(5);

/// Presses `r` and measures how long until the next game runs with four;
/// fails unless that is [`AT_ONCE`].
async fn next_game(
    commands: &mpsc::Sender<Command>,
    view: &watch::Receiver<View>,
    from: u64,
) -> (u64, Duration) {
    let pressed = Instant::now();
    commands.send(Command::PlayAgain).await.unwrap();
    let (running, _) = common::until_view(
        view,
        "the next game runs",
        Duration::from_secs(15),
        |v, _| running_with_four(v, from),
    )
    .await;
    let state = running.state.unwrap();
    let names: Vec<&str> = state.players.iter().map(|p| p.name.as_str()).collect();
    assert!(names.contains(&"human"), "{names:?}");
    assert_eq!(
        names.iter().filter(|n| n.starts_with("bot-")).count(),
        3,
        "the three bots followed: {names:?}"
    );
    let waited = pressed.elapsed();
    assert!(
        waited <= AT_ONCE,
        "the next game ran with four only {waited:?} after r (at once is {AT_ONCE:?})"
    );
    (state.game_id, waited)
}

/// Stops `play`'s network task and checks it ended of itself, without an
/// error.
async fn stop_play(stopper: shutdown::Stopper, game: tokio::task::JoinHandle<Result<(), String>>) {
    stopper.stop();
    tokio::time::timeout(Duration::from_secs(10), game)
        .await
        .expect("play's network task stops within 10 s of being told")
        .expect("play's network task panicked")
        .expect("play's network task ends without an error");
}

/// `play`'s network task, running: its view, its keys, what stops it.
struct Playing {
    view: watch::Receiver<View>,
    commands: mpsc::Sender<Command>,
    stopper: shutdown::Stopper,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

/// Starts `play`'s network task for "human" on `cluster`, as `play` does
/// once its local cluster is up (with the 3 bots).
fn start_play(cluster: &borbaman_cluster::local::LocalCluster, home: &std::path::Path) -> Playing {
    let servers = cluster.addresses();
    let (view_tx, view_rx) = watch::channel(View::default());
    let (command_tx, command_rx) = mpsc::channel(16);
    let (stopper, quit) = shutdown::channel();
    let seat = Seat {
        name: "human".into(),
        map: String::new(),
        bots: Default::default(),
        state_dir: StateDir::at(home),
        pool: PoolConfig::default(),
    };
    let game =
        tokio::spawn(
            async move { play_on(&servers, true, seat, &view_tx, command_rx, quit).await },
        );
    Playing {
        view: view_rx,
        commands: command_tx,
        stopper,
        task: game,
    }
}

/// The first game, running with the player and its 3 bots.
async fn first_game(view: &watch::Receiver<View>) -> u64 {
    let (first, _) = common::until_view(
        view,
        "the first game runs",
        Duration::from_secs(30),
        |v, _| running_with_four(v, 0),
    )
    .await;
    first.state.unwrap().game_id
}

/// With the default 3-minute round, the bots' old game would run on for
/// minutes: they are in the next one at once only because they follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_after_dying_starts_the_next_game_with_the_bots_at_once() {
    let cluster = common::cluster(3);
    let home = tempfile::tempdir().unwrap();
    let Playing {
        view,
        commands,
        stopper,
        task: game,
    } = start_play(&cluster, home.path());
    let first = first_game(&view).await;

    // The player bombs its own cell and stays there: out, the game runs on.
    commands.send(Command::Bomb).await.unwrap();
    common::until_view(
        &view,
        "the player is out",
        Duration::from_secs(15),
        |v, _| {
            let (Some(state), Some(seat)) = (&v.state, v.seat) else {
                return false;
            };
            out_of_game(state, seat)
        },
    )
    .await;
    let (_, waited) = next_game(&commands, &view, first).await;
    println!(
        "r after dying to the next game running with 4 players: {} ms",
        waited.as_millis()
    );
    stop_play(stopper, game).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_after_a_game_starts_the_next_game_with_the_bots_at_once() {
    let cluster = common::cluster_with(3, &["--round-ms=1000"]);
    let home = tempfile::tempdir().unwrap();
    let Playing {
        view,
        commands,
        stopper,
        task: game,
    } = start_play(&cluster, home.path());
    let first = first_game(&view).await;

    // The player does nothing; a 1-second round, then the arena closes.
    common::until_view(&view, "the game ends", Duration::from_secs(120), |v, _| {
        v.state
            .as_ref()
            .is_some_and(|s| s.game_id == first && s.phase() == Phase::Finished)
    })
    .await;
    let (_, waited) = next_game(&commands, &view, first).await;
    println!(
        "r after game over to the next game running with 4 players: {} ms",
        waited.as_millis()
    );
    stop_play(stopper, game).await;
}
