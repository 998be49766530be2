//! A player whose game-mates call another server, which writes the game,
//! is told it is alone (`borbaman-alone`), on its acts and its state
//! polls; a player whose game-mates call the same server is not, and a
//! game-mate's hedged copy (`borbaman-copy`) is not its calls.

mod common;

use borbaman_proto::pb;
use borbaman_proto::pb::game_client::GameClient;
use borbaman_proto::timing::{ALONE_KEY, COPY_KEY};
use common::*;
use tonic::transport::Channel;

#[tokio::test]
async fn a_player_is_told_it_is_alone_on_a_server_its_game_mates_do_not_call() {
    let pg = start_db();
    let home = ServerProcess::start(&pg.url());
    let other = ServerProcess::start(&pg.url());
    let mut at_home = home.game().await;
    let mut elsewhere = other.game().await;
    let mut players = full_game(&mut at_home).await;
    for player in players.iter_mut() {
        let reply = idle(&mut at_home, player).await;
        assert_eq!(
            phase(&reply.get_ref().state),
            pb::Phase::Playing,
            "the game runs"
        );
    }

    // The last player's calls go elsewhere, its game-mates' stay at home.
    let first = idle(&mut elsewhere, &mut players[3]).await;
    assert!(!alone(&first), "nothing written elsewhere seen yet");
    idle(&mut at_home, &mut players[0]).await;
    let act = idle(&mut elsewhere, &mut players[3]).await;
    assert!(
        alone(&act),
        "its game-mates call another server, which wrote the game"
    );
    idle(&mut at_home, &mut players[1]).await;
    let poll = elsewhere
        .get_state(pb::GetStateRequest {
            token: players[3].token.clone(),
            game_id: players[3].game_id,
        })
        .await
        .expect("a poll elsewhere");
    assert!(alone(&poll), "a poll is told too");
    let act = idle(&mut at_home, &mut players[2]).await;
    assert!(
        !alone(&act),
        "its game-mates called this server a moment ago"
    );

    // A game-mate's hedged copy sent there is no company: its calls still
    // go home.
    let mut copy = tonic::Request::new(players[0].act_request(pb::Action::Idle));
    copy.metadata_mut()
        .insert(COPY_KEY, tonic::metadata::MetadataValue::from_static("1"));
    let copied = elsewhere.act(copy).await.expect("a copy elsewhere");
    assert!(!alone(&copied), "a copy is not told");
    let act = idle(&mut elsewhere, &mut players[3]).await;
    assert!(alone(&act), "a game-mate's copy is not its calls");

    // A game-mate follows it: it is not alone there any more.
    idle(&mut elsewhere, &mut players[1]).await;
    idle(&mut at_home, &mut players[0]).await;
    let act = idle(&mut elsewhere, &mut players[3]).await;
    assert!(!alone(&act), "a game-mate is here");
}

/// An idle act of `player` through `client`.
async fn idle(
    client: &mut GameClient<Channel>,
    player: &mut Player,
) -> tonic::Response<pb::ActReply> {
    client
        .act(player.act_request(pb::Action::Idle))
        .await
        .expect("an act")
}

/// Whether an answer says its caller is alone on that server.
fn alone<T>(answer: &tonic::Response<T>) -> bool {
    answer.metadata().contains_key(ALONE_KEY)
}
