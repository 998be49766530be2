//! `borbaman watch` against real servers: the live games are listed, and a
//! watched game is drawn on ratatui's test backend, seatless, while the
//! server the spectator is on is killed: the screen keeps updating (the
//! tick it shows advances, on another server) and still says watching.

mod common;

use std::time::{Duration, Instant};

use borbaman::shutdown;
use borbaman::ui::View;
use borbaman::watch::follow_game;
use borbaman_client::pool::{PoolConfig, ServerPool};
use borbaman_client::spectator::live_games;
use borbaman_proto::pb::Phase;
use tokio::sync::watch;

/// The screen as text, one line per row.
fn screen(view: &View) -> String {
    common::screen_rows(view).join("\n")
}

/// The tick the HUD shows ("Tick   N").
fn shown_tick(screen: &str) -> Option<u32> {
    let at = screen.find("Tick   ")? + "Tick   ".len();
    let digits: String = screen[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Waits until the drawn screen shows a tick above `above`, from a server
/// other than `not_on` if given; returns the screen and its tick.
async fn screen_past(
    view: &watch::Receiver<View>,
    above: u32,
    not_on: Option<&str>,
) -> (String, u32) {
    let what = format!("the watched game updating past tick {above}");
    let (_, rows) = common::until_view(view, &what, Duration::from_secs(15), |v, rows| {
        let elsewhere = not_on.is_none_or(|s| v.net.server.as_deref() != Some(s));
        shown_tick(&rows.join("\n")).is_some_and(|tick| tick > above) && elsewhere
    })
    .await;
    let text = rows.join("\n");
    let tick = shown_tick(&text).expect("a tick shown");
    (text, tick)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_game_keeps_updating_while_its_server_is_killed() {
    let mut cluster = common::cluster(3);
    let (pool, players) = common::pool_and_game(&cluster, "seen").await;
    let game_id = players[0].game_id();

    // The list offers the game, running with its four players.
    let listed = live_games(&pool, 0).await.expect("list the live games");
    let game = listed
        .iter()
        .find(|g| g.game_id == game_id)
        .unwrap_or_else(|| panic!("game {game_id} is not listed: {listed:?}"));
    assert_eq!(
        (game.phase(), game.seated, game.alive),
        (Phase::Playing, 4, 4)
    );
    assert_eq!(game.names, ["seen1", "seen2", "seen3", "seen4"]);

    let spectator_pool = ServerPool::connect(&cluster.addresses(), PoolConfig::default())
        .await
        .unwrap();
    let (view_tx, view_rx) = watch::channel(View::default());
    let (stopper, quit) = shutdown::channel();
    let watcher = tokio::spawn(follow_game(spectator_pool, game_id, view_tx, quit));

    let (before, tick_before) = screen_past(&view_rx, 0, None).await;
    assert!(before.contains("Watching"), "{before}");
    assert!(before.contains(&format!("game {game_id}")), "{before}");
    assert!(
        !before.contains("You "),
        "a spectator has no seat:\n{before}"
    );
    let server = view_rx
        .borrow()
        .net
        .server
        .clone()
        .expect("a server answered");

    let index = cluster.index_of(&server).expect("the spectator's server");
    common::blocking(|| cluster.kill(index)).unwrap();
    let killed_at = Instant::now();

    let (after, tick_after) = screen_past(&view_rx, tick_before, Some(&server)).await;
    println!(
        "watch: server {server} killed at tick {tick_before}; the screen showed tick \
         {tick_after} from {:?} {} ms later",
        view_rx.borrow().net.server,
        killed_at.elapsed().as_millis()
    );
    assert!(after.contains("Watching"), "{after}");
    assert!(view_rx.borrow().error.is_none());

    // Spectating took no seat: the game still has its four players only.
    let (state, _) = {
        let mut player = players.into_iter().next().unwrap();
        player.state().await.expect("a player's state")
    };
    assert_eq!(state.seated, 4);
    stopper.stop();
    watcher.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_an_unknown_game_says_so() {
    let cluster = common::cluster(1);
    let pool = ServerPool::connect(&cluster.addresses(), PoolConfig::default())
        .await
        .unwrap();
    let (view_tx, view_rx) = watch::channel(View::default());
    let (_stopper, quit) = shutdown::channel();
    tokio::time::timeout(
        Duration::from_secs(15),
        follow_game(pool, 999_999, view_tx, quit),
    )
    .await
    .expect("a refused watch ends");
    let error = view_rx.borrow().error.clone().expect("an error shown");
    assert!(error.contains("no game 999999"), "{error}");
}

/// A player waiting in a shared cluster sees the live games in its lobby,
/// watches one (Enter), and is taken back to its own game when it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_player_watches_another_game_until_its_own_starts() {
    use borbaman::play::{Seat, play_on};
    use borbaman::ui::input::Command;
    use borbaman_client::session::{GameSession, new_token};
    use borbaman_client::state_dir::StateDir;
    use tokio::sync::mpsc;

    let cluster = common::cluster(2);
    let (pool, running) = common::pool_and_game(&cluster, "live").await;
    let watched = running[0].game_id();

    let home = tempfile::tempdir().unwrap();
    let servers = cluster.addresses();
    let (view_tx, view) = watch::channel(View::default());
    let (commands, command_rx) = mpsc::channel(16);
    let (stopper, quit) = shutdown::channel();
    let seat = Seat {
        name: "waiter".into(),
        map: String::new(),
        bots: Default::default(),
        state_dir: StateDir::at(home.path()),
        pool: PoolConfig::default(),
    };
    let player =
        tokio::spawn(
            async move { play_on(&servers, false, seat, &view_tx, command_rx, quit).await },
        );
    let (lobby, _) = common::until_view(
        &view,
        "the lobby lists the running game",
        Duration::from_secs(15),
        |v, _| {
            v.state
                .as_ref()
                .is_some_and(|s| s.phase() == Phase::Waiting)
                && v.live_games
                    .as_ref()
                    .is_some_and(|g| g.iter().any(|g| g.game_id == watched))
        },
    )
    .await;
    let own = lobby.state.as_ref().unwrap().game_id;
    let text = screen(&lobby);
    assert!(text.contains(&format!("game {watched}")), "{text}");
    assert!(text.contains("Enter watches"), "{text}");

    commands.send(Command::Select).await.unwrap();
    let (watching, _) = common::until_view(
        &view,
        "the picked game is watched",
        Duration::from_secs(15),
        |v, _| {
            v.watching && v.note.is_some() && v.state.as_ref().is_some_and(|s| s.game_id == watched)
        },
    )
    .await;
    let text = screen(&watching);
    assert!(text.contains("Watching"), "{text}");
    assert!(
        text.contains(&format!("Your game {own}: waiting 1/4")),
        "{text}"
    );

    // Three more players fill the waiting player's game.
    let mut others = Vec::new();
    for n in 1..=3 {
        let (session, _) = GameSession::join(&pool, &format!("new{n}"), new_token())
            .await
            .expect("join");
        assert_eq!(session.game_id(), own);
        others.push(session);
    }
    let (back, _) = common::until_view(
        &view,
        "the player is back in its own game",
        Duration::from_secs(15),
        |v, _| {
            !v.watching
                && v.seat.is_some()
                && v.state
                    .as_ref()
                    .is_some_and(|s| s.game_id == own && s.phase() == Phase::Playing)
        },
    )
    .await;
    let text = screen(&back);
    assert!(!text.contains("Watching"), "{text}");
    assert!(text.contains("waiter"), "{text}");
    stopper.stop();
    let _ = tokio::time::timeout(Duration::from_secs(10), player).await;
}
