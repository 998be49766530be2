//! Group commit per game: the four players of a game acting at once
//! through one server have their calls written together, fewer game writes
//! than calls, each input still applied exactly once, in order, and the
//! finished game replays from its log to its stored state.

mod common;

use std::collections::BTreeSet;

use borbaman_proto::pb;
use borbaman_server::store::audit::version_audit;
use borbaman_server::store::replay::{Verdict, finished_games, verify};
use common::*;

#[tokio::test]
async fn four_players_acting_at_once_through_one_server_share_commits() {
    let (pg, _server, mut client) = one_server_and_client(&[]).await;
    let players = full_game(&mut client).await;
    let db = sql(&pg.url()).await;
    let game = players[0].game_id as i64;
    let (version_before, _) = stored_game(&db, players[0].game_id).await;

    const INPUTS: u64 = 30;
    let mut tasks = Vec::new();
    for player in players.clone() {
        let mut client = client.clone();
        tasks.push(tokio::spawn(async move {
            // One call at a time per player, each as soon as the last was
            // answered: the other three players' calls meet it at the gate.
            let mut versions = Vec::new();
            for seq in 1..=INPUTS {
                let reply = client
                    .act(batch(&player, seq..=seq))
                    .await
                    .expect("act")
                    .into_inner();
                assert_eq!((reply.ack, reply.applied), (seq, 1), "input {seq}");
                versions.push(reply.state.expect("a state").version);
            }
            versions
        }));
    }
    let mut replied_versions = BTreeSet::new();
    for task in tasks {
        let versions = task.await.unwrap();
        assert!(
            versions.windows(2).all(|w| w[0] < w[1]),
            "a player's replies went back: {versions:?}"
        );
        replied_versions.extend(versions);
    }

    // Each input once, in order, per player.
    let log: Vec<(i16, i64, i16, i64, i32)> = sqlx::query_as(
        "SELECT seat, seq, action, version, ord FROM actions WHERE game_id = $1 \
         ORDER BY seat, seq",
    )
    .bind(game)
    .fetch_all(&db)
    .await
    .unwrap();
    for p in &players {
        let mine: Vec<&(i16, i64, i16, i64, i32)> =
            log.iter().filter(|r| r.0 == p.seat as i16).collect();
        let seqs: Vec<i64> = mine.iter().map(|r| r.1).collect();
        assert_eq!(
            seqs,
            (1..=INPUTS as i64).collect::<Vec<_>>(),
            "seat {}",
            p.seat
        );
        for r in &mine {
            assert_eq!(
                r.2,
                action(r.1 as u64) as i16,
                "seat {} input {}",
                p.seat,
                r.1
            );
        }
        assert!(
            mine.windows(2).all(|w| (w[0].3, w[0].4) < (w[1].3, w[1].4)),
            "seat {}'s inputs applied out of order",
            p.seat
        );
    }

    // Fewer game writes than calls: the version advanced once per commit,
    // and commits held several players' inputs.
    let calls = players.len() as i64 * INPUTS as i64;
    let commits: BTreeSet<i64> = log.iter().map(|r| r.3).collect();
    let (version_after, _) = stored_game(&db, players[0].game_id).await;
    assert_eq!(
        version_after - version_before,
        commits.len() as i64,
        "one version per commit"
    );
    assert_eq!(
        replied_versions,
        commits.iter().map(|&v| v as u64).collect(),
        "each reply shows its commit's version"
    );
    eprintln!("{calls} calls in {} commits", commits.len());
    assert!(
        (commits.len() as i64) < calls,
        "{calls} calls in {} commits: none shared",
        commits.len()
    );
    let audit = version_audit(&db, &[game]).await.unwrap();
    assert!(audit.is_clean(), "{audit:?}");

    // Three leave at once: the game finishes, and its log, several players'
    // inputs per commit, replays to its stored state.
    let mut leaves = Vec::new();
    for p in players[1..].iter().cloned() {
        let mut client = client.clone();
        leaves.push(tokio::spawn(async move {
            client
                .leave(pb::LeaveRequest {
                    token: p.token.clone(),
                    game_id: p.game_id,
                    seat: p.seat,
                    seq: INPUTS + 1,
                })
                .await
                .expect("leave")
        }));
    }
    for leave in leaves {
        leave.await.unwrap();
    }
    let logged = finished_games(&db, Some(&[game])).await.unwrap();
    assert_eq!(logged.len(), 1, "the game finished");
    assert_eq!(verify(&logged[0]), Verdict::Same);
}
