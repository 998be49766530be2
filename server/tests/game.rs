//! End-to-end play against real servers and a real PostgreSQL: the lobby,
//! exactly-once actions, and games that move between servers.

mod common;

use std::time::Duration;

use borbaman_game::{Action, Dir, GameState};
use borbaman_proto::pb;
use borbaman_server::wire::ToProto;
use common::*;
use tonic::Code;

#[tokio::test]
async fn lobby_starts_at_four_and_a_fifth_opens_a_new_game() {
    let (_pg, _server, mut client) = one_server_and_client(&[]).await;

    let mut players = Vec::new();
    for i in 0..3 {
        let (p, reply) = join(&mut client, &format!("p{i}")).await;
        assert_eq!(phase(&reply.state), pb::Phase::Waiting, "join {i}");
        assert_eq!(reply.state.as_ref().unwrap().seated, i + 1);
        assert_eq!(reply.seat, i);
        assert!(!reply.rejoined);
        players.push(p);
    }
    let (fourth, reply) = join(&mut client, "p3").await;
    assert_eq!(fourth.game_id, players[0].game_id);
    assert_eq!(phase(&reply.state), pb::Phase::Playing);
    let names: Vec<_> = reply
        .state
        .as_ref()
        .unwrap()
        .players
        .iter()
        .map(|p| p.name.clone())
        .collect();
    assert_eq!(names, ["p0", "p1", "p2", "p3"]);

    let (fifth, reply) = join(&mut client, "p4").await;
    assert_ne!(fifth.game_id, fourth.game_id);
    assert_eq!(phase(&reply.state), pb::Phase::Waiting);
    assert_eq!(reply.seat, 0);

    // Joining again with a known token puts the player back in its game.
    let again = client
        .join(pb::JoinRequest {
            name: "p1".into(),
            token: players[1].token.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(again.rejoined);
    assert_eq!((again.game_id, again.seat), (players[1].game_id, 1));

    // A waiting player who leaves frees its seat for the next joiner.
    let left = client
        .leave(pb::LeaveRequest {
            token: fifth.token.clone(),
            game_id: fifth.game_id,
            seat: fifth.seat,
            seq: 1,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(left.seq, 1);
    let (sixth, reply) = join(&mut client, "p5").await;
    assert_eq!((sixth.game_id, sixth.seat), (fifth.game_id, 0));
    assert_eq!(reply.state.unwrap().seated, 1);
}

#[tokio::test]
async fn a_retried_sequence_number_is_applied_once() {
    let pg = start_db();
    let a = ServerProcess::start(&pg.url());
    let b = ServerProcess::start(&pg.url());
    let (mut ca, mut cb) = (a.game().await, b.game().await);
    let mut players = full_game(&mut ca).await;
    let db = sql(&pg.url()).await;

    let request = players[0].act_request(pb::Action::Bomb);
    let first = ca.act(request.clone()).await.unwrap().into_inner();
    assert!(!first.replayed);
    // The same request again, on another server, as a client would after a
    // lost reply.
    let retry = cb.act(request.clone()).await.unwrap().into_inner();
    assert!(retry.replayed);
    assert_eq!(
        (retry.seq, retry.outcome, retry.applied_tick),
        (first.seq, first.outcome, first.applied_tick)
    );
    assert_eq!(logged_actions(&db, players[0].game_id).await, 1);
    let version = first.state.as_ref().unwrap().version;
    assert_eq!(stored_game(&db, players[0].game_id).await.0 as u64, version);

    // The same number for a different action is refused, and so is an
    // older number once a newer one was applied.
    let mut other = request.clone();
    other.action = pb::Action::Up as i32;
    let err = ca.act(other).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let newer = players[0].act_request(pb::Action::Idle);
    ca.act(newer).await.unwrap();
    let mut older = request.clone();
    older.seq = 1;
    older.action = pb::Action::Idle as i32;
    let err = cb.act(older).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("older"), "{}", err.message());
    assert_eq!(logged_actions(&db, players[0].game_id).await, 2);
}

/// One player's actions alternate between two servers; replaying the same
/// actions at the same ticks on the core locally must give exactly the
/// stored and the returned state.
#[tokio::test]
async fn two_servers_serve_one_game_alternately_and_it_continues_exactly() {
    let pg = start_db();
    let servers = [
        ServerProcess::start(&pg.url()),
        ServerProcess::start(&pg.url()),
    ];
    let mut clients = [servers[0].game().await, servers[1].game().await];
    let mut players = full_game(&mut clients[0]).await;
    let game_id = players[0].game_id;
    let db = sql(&pg.url()).await;
    let (_, start_bytes) = stored_game(&db, game_id).await;
    let mut local = GameState::decode(&start_bytes).unwrap();

    let script = [
        (0, pb::Action::Right),
        (1, pb::Action::Left),
        (2, pb::Action::Down),
        (3, pb::Action::Up),
        (0, pb::Action::Down),
        (1, pb::Action::Bomb),
        (2, pb::Action::Right),
        (3, pb::Action::Left),
        (0, pb::Action::Right),
        (1, pb::Action::Right),
        (2, pb::Action::Up),
        (3, pb::Action::Down),
    ];
    let mut last = None;
    let mut versions = Vec::new();
    for (i, &(seat, action)) in script.iter().cycle().take(36).enumerate() {
        let request = players[seat].act_request(action);
        let reply = clients[i % 2].act(request).await.unwrap().into_inner();
        local.apply(seat as u8, core_action(action), reply.applied_tick);
        versions.push(reply.state.as_ref().unwrap().version);
        last = reply.state;
        tokio::time::sleep(Duration::from_millis(20 + (i as u64 % 3) * 20)).await;
    }
    // Every call committed exactly one new version, whichever server ran it.
    assert!(
        versions.windows(2).all(|w| w[1] == w[0] + 1),
        "{versions:?}"
    );
    let (version, stored) = stored_game(&db, game_id).await;
    assert_eq!(version as u64, *versions.last().unwrap());
    assert_eq!(GameState::decode(&stored).unwrap(), local);
    assert_eq!(stored, local.encode());
    let last = last.unwrap();
    let names: [String; 4] = std::array::from_fn(|i| last.players[i].name.clone());
    let connected: [bool; 4] = std::array::from_fn(|i| last.players[i].connected);
    assert_eq!(
        local.to_proto(game_id, version as u64, &names, connected),
        last
    );
}

/// Four players act at once, each alternating between two servers: every
/// acknowledged action is in the log exactly once, and every commit bumped
/// the version once.
#[tokio::test]
async fn four_players_acting_at_once_through_two_servers_lose_nothing() {
    let pg = start_db();
    let a = ServerProcess::start(&pg.url());
    let b = ServerProcess::start(&pg.url());
    let mut ca = a.game().await;
    let cb = b.game().await;
    let players = full_game(&mut ca).await;
    let game_id = players[0].game_id;
    const ACTS: u64 = 30;

    let mut tasks = Vec::new();
    for (i, mut player) in players.into_iter().enumerate() {
        let mut clients = [ca.clone(), cb.clone()];
        tasks.push(tokio::spawn(async move {
            let moves = [
                pb::Action::Up,
                pb::Action::Down,
                pb::Action::Left,
                pb::Action::Right,
            ];
            let mut acked = 0u64;
            for n in 0..ACTS as usize {
                let request = player.act_request(moves[(n + i) % 4]);
                let reply = clients[(n + i) % 2]
                    .act(request)
                    .await
                    .unwrap()
                    .into_inner();
                assert!(!reply.replayed);
                acked += 1;
            }
            acked
        }));
    }
    let mut acked = 0;
    for t in tasks {
        acked += t.await.unwrap();
    }
    assert_eq!(acked, 4 * ACTS);
    let db = sql(&pg.url()).await;
    assert_eq!(logged_actions(&db, game_id).await as u64, acked);
    let per_session: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT count(a.seq), min(a.seq), max(a.seq) \
         FROM sessions s JOIN actions a ON a.session_id = s.id \
         WHERE s.game_id = $1 GROUP BY s.id",
    )
    .bind(game_id as i64)
    .fetch_all(&db)
    .await
    .unwrap();
    assert_eq!(per_session.len(), 4);
    for row in per_session {
        assert_eq!(row, (ACTS as i64, 1, ACTS as i64));
    }
    // Joins made versions 1-4; each commit one more (calls queued together
    // behind the game's gate in one server share a commit).
    let commits = commits(&db, game_id).await;
    assert_eq!(stored_game(&db, game_id).await.0, 4 + commits);
}

#[tokio::test]
async fn get_state_reads_the_callers_game_and_leaving_forfeits() {
    let (_pg, _server, mut client) = one_server_and_client(&[]).await;
    let players = full_ranked_game(&mut client).await;
    let game_id = players[0].game_id;

    let state = client
        .get_state(pb::GetStateRequest {
            token: players[2].token.clone(),
            game_id,
        })
        .await
        .unwrap()
        .into_inner()
        .state
        .unwrap();
    assert_eq!(state.game_id, game_id);
    assert_eq!(
        pb::Phase::try_from(state.phase).unwrap(),
        pb::Phase::Playing
    );

    // Three leave: the last one standing wins, and the rankings say so.
    for p in &players[1..] {
        let seq = p.next_seq;
        client
            .leave(pb::LeaveRequest {
                token: p.token.clone(),
                game_id,
                seat: p.seat,
                seq,
            })
            .await
            .unwrap();
    }
    let state = client
        .get_state(pb::GetStateRequest {
            token: players[0].token.clone(),
            game_id,
        })
        .await
        .unwrap()
        .into_inner()
        .state
        .unwrap();
    assert_eq!(
        pb::Phase::try_from(state.phase).unwrap(),
        pb::Phase::Finished
    );
    assert_eq!(state.winner, Some(0));
    let rankings = client
        .rankings(pb::RankingsRequest { limit: 10 })
        .await
        .unwrap()
        .into_inner()
        .rankings;
    assert_eq!(rankings.len(), 4);
    assert_eq!(
        (
            rankings[0].name.as_str(),
            rankings[0].wins,
            rankings[0].games
        ),
        ("r0", 1, 1)
    );
    assert!(rankings[1..].iter().all(|r| r.games == 1 && r.wins == 0));

    // A player whose game finished joins a new one; its numbering goes on.
    let again = client
        .join(pb::JoinRequest {
            name: "p0".into(),
            token: players[0].token.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_ne!(again.game_id, game_id);
    assert!(!again.rejoined);
}

fn core_action(action: pb::Action) -> Action {
    match action {
        pb::Action::Up => Action::Move(Dir::Up),
        pb::Action::Down => Action::Move(Dir::Down),
        pb::Action::Left => Action::Move(Dir::Left),
        pb::Action::Right => Action::Move(Dir::Right),
        pb::Action::Bomb => Action::Bomb,
        _ => Action::Idle,
    }
}

/// Players joining at the same moment, through two servers, fill games
/// four at a time instead of each opening its own.
#[tokio::test]
async fn simultaneous_joiners_fill_games_four_at_a_time() {
    let pg = start_db();
    let a = ServerProcess::start(&pg.url());
    let b = ServerProcess::start(&pg.url());
    let clients = [a.game().await, b.game().await];
    let mut tasks = Vec::new();
    for i in 0..8 {
        let mut client = clients[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            join(&mut client, &format!("j{i}")).await.0
        }));
    }
    let mut per_game = std::collections::BTreeMap::<u64, Vec<u32>>::new();
    for t in tasks {
        let p = t.await.unwrap();
        per_game.entry(p.game_id).or_default().push(p.seat);
    }
    assert_eq!(per_game.len(), 2, "{per_game:?}");
    for seats in per_game.values_mut() {
        seats.sort();
        assert_eq!(seats, &[0, 1, 2, 3]);
    }
}

/// A client that retries on a second server while the first still runs the
/// call: both answer, exactly one applied it, the other replays its reply.
#[tokio::test]
async fn the_same_call_racing_on_two_servers_is_applied_once() {
    let pg = start_db();
    let a = ServerProcess::start(&pg.url());
    let b = ServerProcess::start(&pg.url());
    let (mut ca, mut cb) = (a.game().await, b.game().await);
    let mut players = full_game(&mut ca).await;
    const CALLS: usize = 30;
    for _ in 0..CALLS {
        let request = players[0].act_request(pb::Action::Idle);
        let (ra, rb) = tokio::join!(ca.act(request.clone()), cb.act(request));
        let (ra, rb) = (ra.unwrap().into_inner(), rb.unwrap().into_inner());
        assert!(ra.replayed != rb.replayed, "exactly one applies it");
        assert_eq!(ra.applied_tick, rb.applied_tick);
    }
    let db = sql(&pg.url()).await;
    assert_eq!(logged_actions(&db, players[0].game_id).await, CALLS as i64);
}
