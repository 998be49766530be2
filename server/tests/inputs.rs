//! Batched inputs: an `Act` carrying a player's unacknowledged inputs
//! applies, in one commit, exactly those the session has not applied yet,
//! in order, each once, however often, late or in parallel the batch
//! arrives; the reply's `ack` says how far the session has got.

mod common;

use borbaman_proto::pb;
use borbaman_server::store::replay::{Verdict, finished_games, verify};
use common::*;
use tonic::Code;
use tonic::transport::Channel;

type Client = pb::game_client::GameClient<Channel>;

async fn act(client: &mut Client, request: pb::ActRequest) -> pb::ActReply {
    client.act(request).await.expect("act").into_inner()
}

/// The action log of `player`'s session: (seq, action, version), by seq.
async fn log_of(db: &sqlx::PgPool, player: &Player) -> Vec<(i64, i16, i64)> {
    sqlx::query_as(
        "SELECT a.seq, a.action, a.version FROM actions a \
         JOIN sessions s ON s.id = a.session_id \
         WHERE s.game_id = $1 AND s.seat = $2 ORDER BY a.seq",
    )
    .bind(player.game_id as i64)
    .bind(player.seat as i16)
    .fetch_all(db)
    .await
    .unwrap()
}

/// Every input `1..=n` logged once, with the action sent, in order: a
/// later input never at an earlier version than the one before it.
fn assert_each_once_in_order(log: &[(i64, i16, i64)], n: u64) {
    let seqs: Vec<i64> = log.iter().map(|r| r.0).collect();
    assert_eq!(seqs, (1..=n as i64).collect::<Vec<_>>(), "each input once");
    for &(seq, logged, _) in log {
        assert_eq!(logged, action(seq as u64) as i16, "input {seq}'s action");
    }
    assert!(
        log.windows(2).all(|w| w[0].2 <= w[1].2),
        "inputs applied out of order: {log:?}"
    );
}

#[tokio::test]
async fn a_batch_with_repeats_applies_each_input_once_in_order() {
    let (pg, _server, mut client) = one_server_and_client(&[]).await;
    let players = full_game(&mut client).await;
    let db = sql(&pg.url()).await;
    let p = &players[0];

    let first = act(&mut client, batch(p, 1..=3)).await;
    assert_eq!((first.ack, first.applied, first.seq), (3, 3, 3));
    assert!(!first.replayed);
    // Inputs 2 and 3 again (no reply came yet, say), with 4 and 5 new.
    let second = act(&mut client, batch(p, 2..=5)).await;
    assert_eq!((second.ack, second.applied, second.seq), (5, 2, 5));

    let log = log_of(&db, p).await;
    assert_each_once_in_order(&log, 5);
    // One commit per call: 1-3 share a version, 4-5 the next one.
    let versions: Vec<i64> = log.iter().map(|r| r.2).collect();
    let v = versions[0];
    assert_eq!(versions, [v, v, v, v + 1, v + 1]);
    assert_eq!(second.state.unwrap().version as i64, v + 1);
}

#[tokio::test]
async fn an_older_or_duplicate_batch_applies_nothing() {
    let (pg, _server, mut client) = one_server_and_client(&[]).await;
    let players = full_game(&mut client).await;
    let db = sql(&pg.url()).await;
    let p = &players[1];

    act(&mut client, batch(p, 1..=4)).await;
    let (version, _) = stored_game(&db, p.game_id).await;
    let rows = logged_actions(&db, p.game_id).await;

    for (what, seqs) in [("the same batch", 1..=4), ("an older one", 1..=2)] {
        let again = act(&mut client, batch(p, seqs)).await;
        assert!(again.replayed, "{what}");
        assert_eq!((again.ack, again.applied), (4, 0), "{what}");
        assert_eq!(stored_game(&db, p.game_id).await.0, version, "{what}");
        assert_eq!(logged_actions(&db, p.game_id).await, rows, "{what}");
    }
    // The same batch answers with the newest input's stored outcome.
    let same = act(&mut client, batch(p, 3..=4)).await;
    assert_ne!(same.outcome, pb::Outcome::Unspecified as i32);
    assert_eq!(same.applied_tick, log_tick(&db, p, 4).await);

    // A batch that would skip input 5 is refused, and so is one too big.
    let gap = client.act(batch(p, 6..=7)).await.unwrap_err();
    assert_eq!(gap.code(), Code::FailedPrecondition);
    assert!(gap.message().contains("input 5 is missing"), "{gap:?}");
    let too_many = client.act(batch(p, 5..=37)).await.unwrap_err();
    assert_eq!(too_many.code(), Code::InvalidArgument);
    assert_eq!(stored_game(&db, p.game_id).await.0, version);
    assert_eq!(logged_actions(&db, p.game_id).await, rows);
    assert_each_once_in_order(&log_of(&db, p).await, 4);
}

async fn log_tick(db: &sqlx::PgPool, p: &Player, seq: i64) -> u32 {
    let tick: i32 = sqlx::query_scalar(
        "SELECT a.tick FROM actions a JOIN sessions s ON s.id = a.session_id \
         WHERE s.game_id = $1 AND s.seat = $2 AND a.seq = $3",
    )
    .bind(p.game_id as i64)
    .bind(p.seat as i16)
    .bind(seq)
    .fetch_one(db)
    .await
    .unwrap();
    tick as u32
}

/// A client that does not wait for replies sends its growing batch to two
/// servers at once, over and over (a retry and its original, a hedge):
/// every input is applied once, in order, and the finished game replays
/// from its log to its stored state.
#[tokio::test]
async fn racing_copies_on_two_servers_apply_each_input_once() {
    let pg = start_db();
    let a = ServerProcess::start(&pg.url());
    let b = ServerProcess::start(&pg.url());
    let (mut ca, mut cb) = (a.game().await, b.game().await);
    let players = full_game(&mut ca).await;
    let db = sql(&pg.url()).await;

    const INPUTS: u64 = 40;
    let mut tasks = Vec::new();
    for player in players.clone() {
        let (mut ca, mut cb) = (ca.clone(), cb.clone());
        tasks.push(tokio::spawn(async move {
            let mut acked = 0;
            let mut applied = 0;
            for newest in 1..=INPUTS {
                // Everything not acknowledged yet, to both servers.
                let request = batch(&player, acked + 1..=newest);
                let (ra, rb) = tokio::join!(ca.act(request.clone()), cb.act(request));
                for reply in [ra, rb] {
                    let reply = reply.expect("act").into_inner();
                    acked = acked.max(reply.ack);
                    applied += u64::from(reply.applied);
                }
            }
            (acked, applied)
        }));
    }
    for task in tasks {
        let (acked, applied) = task.await.unwrap();
        assert_eq!(acked, INPUTS, "every input acknowledged");
        assert_eq!(applied, INPUTS, "the replies applied each input once");
    }
    for p in &players {
        assert_each_once_in_order(&log_of(&db, p).await, INPUTS);
    }

    // Three leave: the game finishes, and its log replays to its state.
    for p in &players[1..] {
        cb.leave(pb::LeaveRequest {
            token: p.token.clone(),
            game_id: p.game_id,
            seat: p.seat,
            seq: INPUTS + 1,
        })
        .await
        .expect("leave");
    }
    let game = players[0].game_id as i64;
    let logged = finished_games(&db, Some(&[game])).await.unwrap();
    assert_eq!(logged.len(), 1, "the game finished");
    assert_eq!(verify(&logged[0]), Verdict::Same);
}

/// A detonate is an input like any other: sent in a batch that is hedged to
/// two servers at once and retried, it is logged once, as a detonate, and
/// the finished game still replays from its log to its stored state.
#[tokio::test]
async fn a_hedged_and_retried_detonate_is_applied_once() {
    let pg = start_db();
    let a = ServerProcess::start(&pg.url());
    let b = ServerProcess::start(&pg.url());
    let (mut ca, mut cb) = (a.game().await, b.game().await);
    let players = full_game(&mut ca).await;
    let db = sql(&pg.url()).await;
    let p = &players[0];

    let sent = [pb::Action::Bomb, pb::Action::Right, pb::Action::Detonate];
    let mut request = batch(p, 1..=3);
    for (input, action) in request.inputs.iter_mut().zip(sent) {
        input.action = action as i32;
    }
    request.action = pb::Action::Detonate as i32;
    // The hedge: the same batch on both servers at once; then a retry.
    let (ra, rb) = tokio::join!(ca.act(request.clone()), cb.act(request.clone()));
    let applied: u32 = [ra, rb]
        .into_iter()
        .map(|r| r.expect("act").into_inner().applied)
        .sum();
    assert_eq!(applied, 3, "the two copies applied the three inputs once");
    let retry = act(&mut cb, request).await;
    assert!(retry.replayed && retry.applied == 0, "{retry:?}");
    assert_eq!(retry.ack, 3);

    let log = log_of(&db, p).await;
    let logged: Vec<(i64, i16)> = log.iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        logged,
        [
            (1, pb::Action::Bomb as i16),
            (2, pb::Action::Right as i16),
            (3, pb::Action::Detonate as i16),
        ],
        "each input once, the detonate as a detonate"
    );

    for q in &players[1..] {
        ca.leave(pb::LeaveRequest {
            token: q.token.clone(),
            game_id: q.game_id,
            seat: q.seat,
            seq: 1,
        })
        .await
        .expect("leave");
    }
    let game = p.game_id as i64;
    let logged = finished_games(&db, Some(&[game])).await.unwrap();
    assert_eq!(logged.len(), 1, "the game finished");
    assert_eq!(verify(&logged[0]), Verdict::Same);
}
