//! End-to-end lobby seats against a real server and PostgreSQL: a player
//! who goes silent in a waiting game (a crashed client) loses the seat to
//! the next joiner; one who keeps acting keeps it; the freed session is told
//! so and may join again with its token.

mod common;

use std::time::Duration;

use borbaman_proto::pb;
use common::*;
use tonic::Code;

/// The server's `--lobby-seat-ttl-ms` in these tests.
const TTL_MS: u64 = 1000;

fn names(reply: &Option<pb::GameState>) -> Vec<String> {
    let state = reply.as_ref().expect("state");
    state.players.iter().map(|p| p.name.clone()).collect()
}

#[tokio::test]
async fn silent_lobby_players_lose_their_seats_and_the_game_starts_with_live_ones() {
    let ttl = TTL_MS.to_string();
    let (pg, _server, mut client) = one_server_and_client(&["--lobby-seat-ttl-ms", &ttl]).await;
    let db = sql(&pg.url()).await;

    // Three players sit down; the first acts once, then all go silent, as
    // if their clients had crashed without leaving.
    let mut lost = Vec::new();
    for i in 0..3 {
        let (p, reply) = join(&mut client, &format!("lost{i}")).await;
        assert_eq!(reply.seat, i);
        lost.push(p);
    }
    let game_id = lost[0].game_id;
    let request = lost[0].act_request(pb::Action::Idle);
    client.act(request).await.expect("idle in the lobby");
    tokio::time::sleep(Duration::from_millis(TTL_MS * 3 / 2)).await;

    // A newcomer gets the first freed seat of the same game, which is
    // still waiting, with only the newcomer seated.
    let (fresh, reply) = join(&mut client, "fresh").await;
    assert_eq!(fresh.game_id, game_id);
    assert_eq!(fresh.seat, 0);
    assert_eq!(phase(&reply.state), pb::Phase::Waiting);
    assert_eq!(reply.state.as_ref().unwrap().seated, 1);
    assert_eq!(names(&reply.state), ["fresh", "", "", ""]);
    let seats: Vec<(i16, String)> =
        sqlx::query_as("SELECT seat, name FROM seats WHERE game_id = $1 ORDER BY seat")
            .bind(game_id as i64)
            .fetch_all(&db)
            .await
            .unwrap();
    assert_eq!(seats, [(0, "fresh".to_string())]);

    // The freed sessions are told their seat is gone, whatever they call.
    let request = lost[0].act_request(pb::Action::Bomb);
    let err = client.act(request).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("given to another player"), "{err:?}");
    let err = client
        .get_state(pb::GetStateRequest {
            token: lost[1].token.clone(),
            game_id,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let err = client
        .leave(pb::LeaveRequest {
            token: lost[2].token.clone(),
            game_id,
            seat: lost[2].seat,
            seq: lost[2].next_seq,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");

    // A freed player that comes back joins again with its token: seated
    // anew (not a rejoin), its sequence numbers continuing.
    let reply = client
        .join(pb::JoinRequest {
            name: "lost0".into(),
            token: lost[0].token.clone(),
            ..Default::default()
        })
        .await
        .expect("join again")
        .into_inner();
    assert_eq!((reply.game_id, reply.seat), (game_id, 1));
    assert!(!reply.rejoined);
    assert_eq!(reply.last_seq, 1, "the idle it sent before going silent");
    lost[0].seat = reply.seat;
    lost[0].next_seq = reply.last_seq + 1;
    let request = lost[0].act_request(pb::Action::Idle);
    client.act(request).await.expect("seated again, it may act");

    // Two more fill the game: it starts with the four live players only.
    join(&mut client, "fresh2").await;
    let (_, reply) = join(&mut client, "fresh3").await;
    assert_eq!(reply.game_id, game_id);
    assert_eq!(phase(&reply.state), pb::Phase::Playing);
    assert_eq!(names(&reply.state), ["fresh", "lost0", "fresh2", "fresh3"]);
    let in_game: i64 =
        sqlx::query_scalar("SELECT count(*) FROM sessions WHERE game_id = $1 AND in_game")
            .bind(game_id as i64)
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(in_game, 4);
    db.close().await;
}

#[tokio::test]
async fn a_lobby_player_that_keeps_acting_keeps_its_seat() {
    let ttl = TTL_MS.to_string();
    let (_pg, _server, mut client) = one_server_and_client(&["--lobby-seat-ttl-ms", &ttl]).await;

    let (mut alive, _) = join(&mut client, "alive").await;
    let (silent, _) = join(&mut client, "silent").await;
    // `alive` idles like a client in the lobby does; `silent` only reads
    // (reads do not count as being heard from).
    let until = tokio::time::Instant::now() + Duration::from_millis(TTL_MS * 2);
    while tokio::time::Instant::now() < until {
        let request = alive.act_request(pb::Action::Idle);
        client.act(request).await.expect("idle in the lobby");
        client
            .get_state(pb::GetStateRequest {
                token: silent.token.clone(),
                game_id: silent.game_id,
            })
            .await
            .expect("still seated until someone joins");
        tokio::time::sleep(Duration::from_millis(TTL_MS / 5)).await;
    }

    let (newcomer, reply) = join(&mut client, "newcomer").await;
    assert_eq!(newcomer.game_id, alive.game_id);
    assert_eq!(newcomer.seat, silent.seat, "the silent player's seat");
    assert_eq!(reply.state.as_ref().unwrap().seated, 2);
    assert_eq!(names(&reply.state), ["alive", "newcomer", "", ""]);
    let state = reply.state.as_ref().unwrap();
    assert!(state.players[0].connected && state.players[0].seated);

    let request = alive.act_request(pb::Action::Idle);
    let reply = client
        .act(request)
        .await
        .expect("kept its seat")
        .into_inner();
    assert_eq!(phase(&reply.state), pb::Phase::Waiting);
}
