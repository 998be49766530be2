//! A player who is out of a running game moves on, as `r` does in `borbaman
//! play`: it leaves (a forfeit that changes nothing for the others) and a
//! fresh join seats it in a new waiting game, while its old game runs on.

mod common;

use std::time::Duration;

use borbaman::ui::out_of_game;
use borbaman_client::session::{GameSession, new_token};
use borbaman_proto::pb::{Action, Phase};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_player_who_is_out_leaves_and_joins_the_next_game() {
    let cluster = common::cluster(2);
    let (pool, mut players) = common::pool_and_game(&cluster, "out").await;
    let old_game = players[0].game_id();

    // The player bombs its own cell and stays there.
    players[0].act(Action::Bomb).await.expect("plant a bomb");
    let seat = players[0].seat();
    let what = "the player's bomb killing it";
    common::until_state(&mut players[0], what, Duration::from_secs(8), |state| {
        assert_eq!(state.phase(), Phase::Playing, "the game ended first");
        out_of_game(state, seat)
    })
    .await;

    players[0].leave().await.expect("leave the running game");
    let (next, _) = GameSession::join(&pool, "out1", new_token())
        .await
        .expect("join the next game");
    // (Not `!rejoined`: a join hedged or retried on a second server finds
    // the session its first copy seated and answers as a rejoin.)
    assert_ne!(next.game_id(), old_game, "seated in a new game");
    let lobby = next.latest().expect("the join's state");
    assert_eq!(
        lobby.phase(),
        Phase::Waiting,
        "the new game waits for players"
    );
    assert_eq!(lobby.seated, 1, "{lobby:?}");

    // The others play on in the old game, all three still alive.
    let (old, _) = players[1].state().await.expect("state of the old game");
    assert_eq!((old.game_id, old.phase()), (old_game, Phase::Playing));
    let alive: Vec<u32> = old
        .players
        .iter()
        .filter(|p| p.seated && p.alive)
        .map(|p| p.seat)
        .collect();
    let others: Vec<u32> = players[1..].iter().map(GameSession::seat).collect();
    assert_eq!(alive, others, "{old:?}");
}
