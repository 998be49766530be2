//! End-to-end player identities against a real server and PostgreSQL: one
//! identity never takes two seats of one game, a name belongs to the
//! identity that first claimed it (look-alikes included), rankings count
//! per identity under its name, and secrets without entropy are refused.

mod common;

use borbaman_proto::{Reason, pb};
use common::*;
use pb::game_client::GameClient;
use sqlx::PgPool;
use tonic::Code;
use tonic::transport::Channel;

/// A fresh random identity secret.
fn identity() -> Vec<u8> {
    token()
}

/// Joins as `identity` with a fresh nonce: the player, or the refusal.
async fn join_identified(
    client: &mut GameClient<Channel>,
    identity: &[u8],
    name: &str,
) -> Result<Player, tonic::Status> {
    join_as(client, identity, name, token())
        .await
        .map(|(player, _)| player)
}

async fn sessions(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM sessions")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn one_identity_never_sits_twice_in_one_game() {
    // The first game waits, its one player silent, while nine joins go by:
    // on a loaded machine that can pass the default 3 s lobby seat
    // lifetime, and a waiting game whose seats all lapsed is abandoned
    // (the others would then open a new one). Not what this test is about.
    let (pg, _server, mut client) = one_server_and_client(&["--lobby-seat-ttl-ms", "60000"]).await;
    let me = identity();
    let first = join_identified(&mut client, &me, "solo").await.unwrap();
    // The same identity with another token (a second terminal, or a client
    // trying to play against itself) is seated, but never in that game.
    let second = join_identified(&mut client, &me, "solo").await.unwrap();
    assert_ne!(second.game_id, first.game_id);
    // Three more tokens of it: each in a game of its own.
    let mut games = vec![first.game_id, second.game_id];
    for _ in 0..3 {
        let p = join_identified(&mut client, &me, "solo").await.unwrap();
        assert!(!games.contains(&p.game_id), "seated twice in {}", p.game_id);
        games.push(p.game_id);
    }
    // Other identities fill the first game as usual.
    for i in 0..3 {
        let p = join_identified(&mut client, &identity(), &format!("other{i}"))
            .await
            .unwrap();
        assert_eq!(p.game_id, first.game_id);
    }
    let db = sql(&pg.url()).await;
    let doubled: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT 1 FROM seats GROUP BY game_id, identity_hash \
         HAVING count(*) > 1) d",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(doubled, 0);
}

#[tokio::test]
async fn a_name_and_its_look_alikes_belong_to_the_identity_that_claimed_it() {
    let (pg, _server, mut client) = one_server_and_client(&[]).await;
    let db = sql(&pg.url()).await;
    let (owner, other) = (identity(), identity());
    join_identified(&mut client, &owner, "Ana").await.unwrap();
    let before = sessions(&db).await;
    // Case, a Cyrillic А (U+0410) and a fullwidth Ａ look the same to a
    // person: all refused to another identity, and to a client without one.
    for name in ["Ana", "ANA", "\u{0410}na", "\u{FF21}na"] {
        let err = join_identified(&mut client, &other, name)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::AlreadyExists, "{name:?}");
        assert_eq!(Reason::of(&err), Some(Reason::NameTaken), "{name:?}");
        assert!(
            err.message().contains("pick another name"),
            "{}",
            err.message()
        );
        let err = client
            .join(pb::JoinRequest {
                name: name.into(),
                token: token(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::AlreadyExists, "{name:?} without identity");
    }
    assert_eq!(
        sessions(&db).await,
        before,
        "a refused join wrote a session"
    );
    // The owner may spell it any of those ways.
    for name in ["ANA", "\u{0410}na"] {
        join_identified(&mut client, &owner, name).await.unwrap();
    }
    // The other identity can take a name that only resembles it loosely.
    join_identified(&mut client, &other, "Anna").await.unwrap();
    // Clients without an identity claim nothing: two of them share a name.
    join(&mut client, "guest").await;
    join(&mut client, "guest").await;
    // The first identity to use it claims it from then on.
    join_identified(&mut client, &other, "guest").await.unwrap();
    let err = join_identified(&mut client, &owner, "GUEST")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
}

#[tokio::test]
async fn rankings_count_per_identity_under_its_latest_name() {
    let (_pg, _server, mut client) = one_server_and_client(&[]).await;
    let ids: Vec<Vec<u8>> = (0..4).map(|_| identity()).collect();
    for round in 0..2 {
        let mut players = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let name = if i == 0 {
                format!("champ{round}")
            } else {
                format!("p{i}")
            };
            players.push(join_identified(&mut client, id, &name).await.unwrap());
        }
        let game_id = players[0].game_id;
        assert!(players.iter().all(|p| p.game_id == game_id));
        // Three forfeit: the first player wins.
        for p in &players[1..] {
            client
                .leave(pb::LeaveRequest {
                    token: p.token.clone(),
                    game_id,
                    seat: p.seat,
                    seq: p.next_seq,
                })
                .await
                .unwrap();
        }
    }
    let rankings = client
        .rankings(pb::RankingsRequest { limit: 10 })
        .await
        .unwrap()
        .into_inner()
        .rankings;
    // One row per identity, not per name; the winner under its latest name.
    assert_eq!(rankings.len(), 4, "{rankings:?}");
    assert_eq!(
        (
            rankings[0].name.as_str(),
            rankings[0].wins,
            rankings[0].games
        ),
        ("champ1", 2, 2)
    );
    assert!(rankings[1..].iter().all(|r| r.games == 2 && r.wins == 0));
}

#[tokio::test]
async fn tokens_and_identities_without_entropy_are_refused() {
    let (pg, _server, mut client) = one_server_and_client(&[]).await;
    let db = sql(&pg.url()).await;
    let weak: [Vec<u8>; 3] = [vec![0; 16], vec![0xAB; 32], (0u8..24).collect()];
    for secret in &weak {
        let err = client
            .join(pb::JoinRequest {
                name: "weak".into(),
                token: secret.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(
            err.message().contains("token has no entropy"),
            "{}",
            err.message()
        );
        let err = client
            .join(pb::JoinRequest {
                name: "weak".into(),
                token: token(),
                identity: secret.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(
            err.message().contains("identity has no entropy"),
            "{}",
            err.message()
        );
    }
    assert_eq!(sessions(&db).await, 0);
    let names: i64 = sqlx::query_scalar("SELECT count(*) FROM names")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(names, 0);
}
