//! Requests that must be refused, with the right status and a message that
//! says what was wrong.

mod common;

use borbaman_proto::pb;
use common::*;
use tonic::Code;

#[tokio::test]
async fn bad_requests_get_the_right_status() {
    let (pg, _server, mut client) = one_server_and_client(&[]).await;
    let mut players = full_game(&mut client).await;
    let (p0, p1) = (players[0].clone(), players[1].clone());
    let db = sql(&pg.url()).await;

    // Unknown token.
    let mut req = players[0].act_request(pb::Action::Idle);
    req.token = token();
    let err = client.act(req).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    let err = client
        .get_state(pb::GetStateRequest {
            token: token(),
            game_id: p0.game_id,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);

    // Malformed token.
    let mut req = players[0].act_request(pb::Action::Idle);
    req.token = vec![1; 8];
    let err = client.act(req).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("token"), "{}", err.message());
    let err = client
        .join(pb::JoinRequest {
            name: "x".into(),
            token: vec![7; 65],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    // An arena that does not exist: the message lists the ones that do.
    let err = client
        .join(pb::JoinRequest {
            name: "x".into(),
            token: token(),
            map: "lava".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("\"lava\"") && err.message().contains("classic, open, corridors"),
        "{}",
        err.message()
    );

    // A replay of a game that has not finished.
    let err = client
        .get_replay(pb::ReplayRequest {
            game_id: p0.game_id,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message().contains("not a finished game"),
        "{}",
        err.message()
    );

    // Someone else's seat, someone else's game.
    let mut req = players[0].act_request(pb::Action::Idle);
    req.seat = p1.seat;
    let err = client.act(req).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let (other, _) = join(&mut client, "other").await;
    let mut req = players[0].act_request(pb::Action::Idle);
    req.game_id = other.game_id;
    let err = client.act(req).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    let err = client
        .get_state(pb::GetStateRequest {
            token: p0.token.clone(),
            game_id: other.game_id,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);

    // Bad names.
    for name in ["", "seventeen-chars-x", "esc\u{1b}[31m", "bell\u{7}", "   "] {
        let err = client
            .join(pb::JoinRequest {
                name: name.into(),
                token: token(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{name:?}");
        assert!(err.message().contains("name"), "{}", err.message());
    }

    // Bad action, seq, seat.
    for action in [0, 7, -1] {
        let mut req = players[0].act_request(pb::Action::Idle);
        req.action = action;
        let err = client.act(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains("action"), "{}", err.message());
    }
    let mut req = players[0].act_request(pb::Action::Idle);
    req.seq = 0;
    let err = client.act(req).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("seq"), "{}", err.message());
    let mut req = players[0].act_request(pb::Action::Idle);
    req.seat = 9;
    let err = client.act(req).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    // Oversized: refused before decoding.
    let err = client
        .join(pb::JoinRequest {
            name: "x".repeat(borbaman_proto::MAX_REQUEST_BYTES + 1),
            token: token(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err.code(), Code::OutOfRange | Code::ResourceExhausted),
        "{err:?}"
    );

    // None of the refused calls left a trace.
    assert_eq!(logged_actions(&db, p0.game_id).await, 0);
    let sessions: i64 = sqlx::query_scalar("SELECT count(*) FROM sessions")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(sessions, 5);
    // And the server still serves.
    let req = players[0].act_request(pb::Action::Idle);
    client.act(req).await.unwrap();
}
