//! A client that crashed rejoins its running game: the token kept in the
//! state directory puts it back in its seat, and its sequence numbers go on
//! from where the server left them.

mod common;

use std::time::{Duration, Instant};

use borbaman::bot::{BotTeam, spawn_bots};
use borbaman_client::pool::{PoolConfig, ServerPool};
use borbaman_client::session::{GameSession, new_token};
use borbaman_client::state_dir::{SavedSession, StateDir};
use borbaman_cluster::wait;
use borbaman_proto::pb::{Action, Phase};
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_client_rejoins_its_game_from_the_saved_token() {
    let cluster = common::cluster(2);
    let state_home = tempfile::tempdir().unwrap();
    let state_dir = StateDir::at(state_home.path().join("borbaman"));
    let (game_id, seat, last_seq) = {
        let pool = ServerPool::connect(&cluster.addresses(), PoolConfig::default())
            .await
            .unwrap();
        let mut players = common::seat_four(&pool, "re").await;
        let player = &mut players[0];
        state_dir
            .save(&SavedSession {
                name: "re1".into(),
                token_hex: hex::encode(player.token()),
                game_id: player.game_id(),
                seat: player.seat(),
                servers: cluster.addresses().join(","),
            })
            .unwrap();
        for _ in 0..3 {
            player.act(Action::Idle).await.unwrap();
        }
        (player.game_id(), player.seat(), player.next_seq() - 1)
        // The pool and sessions are dropped here: the client "crashed".
    };

    let restarted = Instant::now();
    let saved = state_dir.load("re1").expect("the session was saved");
    let pool = ServerPool::connect(&cluster.addresses(), PoolConfig::default())
        .await
        .unwrap();
    let (mut player, _) = GameSession::join(&pool, "re1", saved.token().unwrap())
        .await
        .unwrap();
    let rejoin_time = restarted.elapsed();

    assert!(player.rejoined(), "the server recognised the token");
    assert_eq!((player.game_id(), player.seat()), (game_id, seat));
    assert_eq!(player.next_seq(), last_seq + 1, "sequence numbers carry on");
    assert_eq!(player.latest().map(|s| s.phase()), Some(Phase::Playing));
    let (reply, _) = player
        .act(Action::Idle)
        .await
        .expect("acting after a rejoin");
    assert!(!reply.replayed);
    // How fast is for `bench` to measure (about 0.1 s on a quiet machine);
    // here only that the rejoin waits for nothing (no timeout, no lobby).
    assert!(
        rejoin_time < Duration::from_secs(5),
        "rejoined at once after starting again: {rejoin_time:?}"
    );
}

/// `borbaman play`'s local bots keep their sessions too: when the process
/// running them dies mid-game and a new one starts them again, they act in
/// their old seats of the same game (rather than opening a new one and
/// leaving the player alone with three frozen opponents).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_bots_rejoin_their_game_from_their_saved_sessions() {
    let cluster = common::cluster(2);
    let db = common::database(&cluster).await;
    let servers = cluster.addresses();
    let home = tempfile::tempdir().unwrap();
    let team = BotTeam {
        sessions: Some(StateDir::at(home.path()).local_bots()),
        ..BotTeam::new(3)
    };
    let sessions = team.sessions.clone().unwrap();
    let pool = ServerPool::connect(&servers, PoolConfig::default())
        .await
        .unwrap();
    let (mut human, _) = GameSession::join(&pool, "human", new_token())
        .await
        .unwrap();
    let (_stopper, stop) = borbaman::shutdown::channel();
    let (outcomes, _) = mpsc::unbounded_channel();
    let bots = spawn_bots(
        &servers,
        PoolConfig::default(),
        &team,
        stop.clone(),
        outcomes.clone(),
    )
    .await
    .unwrap();
    let what = "the bots filling the game";
    common::until_state(&mut human, what, Duration::from_secs(10), |state| {
        state.phase() == Phase::Playing
    })
    .await;
    let game = human.game_id();
    // The fourth seat starts the game before the last bot has its reply
    // and saves its session: wait for the files too.
    let saved = wait::until(
        "the 3 bots' saved sessions",
        Duration::from_secs(10),
        || {
            let saved = sessions.load_all();
            async move { (saved.len() == 3).then_some(saved) }
        },
    )
    .await;
    assert!(saved.iter().all(|s| s.game_id == game), "{saved:?}");

    // The process dies: the bots stop mid-call, nobody leaves.
    drop(bots);
    let mut last_seq = Vec::new();
    for bot in &saved {
        let seqs = common::applied_seqs(&db, game, bot.seat).await;
        last_seq.push(seqs.last().copied().unwrap_or(0));
    }

    let _bots = spawn_bots(&servers, PoolConfig::default(), &team, stop, outcomes)
        .await
        .unwrap();
    // Bots act at least every 2 s while their game runs.
    let what = format!("every bot acting again in game {game} (after {last_seq:?})");
    wait::until(&what, Duration::from_secs(8), || async {
        for (bot, &before) in saved.iter().zip(&last_seq) {
            let seqs = common::applied_seqs(&db, game, bot.seat).await;
            if seqs.last().is_none_or(|&seq| seq <= before) {
                return None;
            }
        }
        Some(())
    })
    .await;
    let again = sessions.load_all();
    assert!(again.iter().all(|s| s.game_id == game), "{again:?}");
    let (state, _) = human.state().await.unwrap();
    assert_eq!(state.game_id, game);
}
