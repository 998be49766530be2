//! A client that crashed rejoins its running game: the token kept in the
//! state directory puts it back in its seat, and its sequence numbers go on
//! from where the server left them.

mod common;

use std::time::{Duration, Instant};

use borbaman::pool::{PoolConfig, ServerPool};
use borbaman::session::GameSession;
use borbaman::state_dir::{SavedSession, StateDir};
use borbaman_proto::pb::{Action, Phase};

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
    assert!(
        rejoin_time < Duration::from_secs(1),
        "rejoined within a second of starting again: {rejoin_time:?}"
    );
}
