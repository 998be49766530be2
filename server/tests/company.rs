//! A player whose game-mates call another server, which writes the game,
//! is told it is alone (`borbaman-alone`), on its acts and its state
//! polls; a player whose game-mates call the same server is not, and a
//! game-mate's hedged copy (`borbaman-copy`) is not its calls.

mod common;

use borbaman_proto::pb;
use borbaman_proto::timing::{ALONE_KEY, COPY_KEY};
use common::*;

#[tokio::test]
async fn a_player_is_told_it_is_alone_on_a_server_its_game_mates_do_not_call() {
    let pg = start_db();
    let home = ServerProcess::start(&pg.url());
    let other = ServerProcess::start(&pg.url());
    let mut at_home = home.game().await;
    let mut elsewhere = other.game().await;
    let mut players = full_game(&mut at_home).await;
    for player in players.iter_mut() {
        let reply = at_home
            .act(player.act_request(pb::Action::Idle))
            .await
            .expect("an act at home");
        assert_eq!(
            phase(&reply.get_ref().state),
            pb::Phase::Playing,
            "the game runs"
        );
    }

    // The last player's calls go elsewhere, its game-mates' stay at home.
    let mut via = elsewhere.clone();
    let mut act_elsewhere = async |player: &mut Player| {
        via.act(player.act_request(pb::Action::Idle))
            .await
            .expect("an act elsewhere")
    };
    let first = act_elsewhere(&mut players[3]).await;
    assert!(
        !first.metadata().contains_key(ALONE_KEY),
        "nothing written elsewhere seen yet"
    );
    at_home
        .act(players[0].act_request(pb::Action::Idle))
        .await
        .expect("an act at home");
    let act = act_elsewhere(&mut players[3]).await;
    assert!(
        act.metadata().contains_key(ALONE_KEY),
        "its game-mates call another server, which wrote the game"
    );
    at_home
        .act(players[1].act_request(pb::Action::Idle))
        .await
        .expect("an act at home");
    let poll = elsewhere
        .get_state(pb::GetStateRequest {
            token: players[3].token.clone(),
            game_id: players[3].game_id,
        })
        .await
        .expect("a poll elsewhere");
    assert!(
        poll.metadata().contains_key(ALONE_KEY),
        "a poll is told too"
    );
    let act = at_home
        .act(players[2].act_request(pb::Action::Idle))
        .await
        .expect("an act at home");
    assert!(
        !act.metadata().contains_key(ALONE_KEY),
        "its game-mates called this server a moment ago"
    );

    // A game-mate's hedged copy sent there is no company: its calls still
    // go home.
    let mut copy = tonic::Request::new(players[0].act_request(pb::Action::Idle));
    copy.metadata_mut()
        .insert(COPY_KEY, tonic::metadata::MetadataValue::from_static("1"));
    let copied = elsewhere.act(copy).await.expect("a copy elsewhere");
    assert!(
        !copied.metadata().contains_key(ALONE_KEY),
        "a copy is not told"
    );
    let act = act_elsewhere(&mut players[3]).await;
    assert!(
        act.metadata().contains_key(ALONE_KEY),
        "a game-mate's copy is not its calls"
    );

    // A game-mate follows it: it is not alone there any more.
    act_elsewhere(&mut players[1]).await;
    at_home
        .act(players[0].act_request(pb::Action::Idle))
        .await
        .expect("an act at home");
    let act = act_elsewhere(&mut players[3]).await;
    assert!(
        !act.metadata().contains_key(ALONE_KEY),
        "a game-mate is here"
    );
}
