//! Waiting in the lobby: a client that only has the state to read still
//! keeps its seat (it acts idle when `lobby_idle_due` says so, as bots and
//! `play` do), while one that falls silent loses it to the next joiner and
//! is told so.

mod common;

use std::time::{Duration, Instant};

use borbaman::bot::{BotTeam, spawn_bots};
use borbaman_client::pool::{PoolConfig, ServerPool};
use borbaman_client::session::{GameSession, new_token, seat_lost};
use borbaman_client::spectator::live_games;
use borbaman_cluster::local::LocalCluster;
use borbaman_cluster::wait;
use borbaman_proto::pb::{Action, Phase};
use tokio::sync::mpsc;

/// The servers' lobby seat TTL here: twice the clients' idle interval.
const TTL: Duration = Duration::from_millis(2000);

fn cluster() -> LocalCluster {
    let ttl = TTL.as_millis().to_string();
    let config = common::config(1, &["--lobby-seat-ttl-ms", &ttl]);
    LocalCluster::start(config, |_| {}).expect("start a local cluster")
}

async fn join(pool: &ServerPool, name: &str) -> GameSession {
    GameSession::join(pool, name, new_token())
        .await
        .expect("join")
        .0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_client_keeps_its_lobby_seat_and_a_silent_one_loses_it() {
    let cluster = cluster();
    let pool = ServerPool::connect(&cluster.addresses(), PoolConfig::default())
        .await
        .unwrap();
    let mut waiting = join(&pool, "waiting").await;
    let mut silent = join(&pool, "silent").await;
    assert_eq!((waiting.seat(), silent.seat()), (0, 1));

    // `waiting` polls like every front end does; `silent` sends nothing.
    let until = Instant::now() + TTL * 2;
    let mut idles = 0;
    while Instant::now() < until {
        if waiting.lobby_idle_due() {
            waiting.act(Action::Idle).await.expect("idle in the lobby");
            idles += 1;
        } else {
            waiting.state().await.expect("poll in the lobby");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!((3..=5).contains(&idles), "about one idle a second: {idles}");

    let newcomer = join(&pool, "newcomer").await;
    assert_eq!(newcomer.game_id(), waiting.game_id());
    assert_eq!(newcomer.seat(), 1, "the silent player's seat");
    let (state, _) = waiting.state().await.expect("still seated");
    assert_eq!(state.phase(), Phase::Waiting);
    assert_eq!(state.seated, 2);

    let err = silent.state().await.expect_err("the seat was given away");
    assert!(seat_lost(&err), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_waiting_for_players_keeps_its_seat() {
    let cluster = cluster();
    let servers = cluster.addresses();
    let (_stopper, stop) = borbaman::shutdown::channel();
    let (outcomes, _) = mpsc::unbounded_channel();
    let _bots = spawn_bots(
        &servers,
        PoolConfig::default(),
        &BotTeam::new(1),
        stop,
        outcomes,
    )
    .await
    .unwrap();
    let pool = ServerPool::connect(&servers, PoolConfig::default())
        .await
        .unwrap();
    // Seated first (on a busy machine the bot's join may come late) ...
    let what = "the bot seated in a game waiting for players";
    wait::until(what, Duration::from_secs(30), || async {
        let games = live_games(&pool, 0).await.ok()?;
        games
            .iter()
            .any(|g| g.phase == Phase::Waiting as i32 && g.names.iter().any(|n| n == "bot-1"))
            .then_some(())
    })
    .await;
    // ... then alone for twice the TTL: long enough to lose the seat, had
    // it not kept it.
    tokio::time::sleep(TTL * 2).await;

    let mut player = join(&pool, "player").await;
    assert_eq!(player.seat(), 1, "the bot kept seat 0");
    let (state, _) = player.state().await.unwrap();
    assert_eq!(state.seated, 2);
    assert_eq!(state.players[0].name, "bot-1");
}
