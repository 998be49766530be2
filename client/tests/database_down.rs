//! When the database goes away every server answers UNAVAILABLE: the pool
//! must not take that for dead servers. It backs off, says so in its
//! status, and the call goes through once the database is back, applied once.
//!
//! On a loaded machine a late call's probe can still find one server's
//! health check slower than another's and drop it, as it would a hung
//! server; while the database is down the registry cannot list it again,
//! so it comes back a heartbeat and a refresh after the database does,
//! which can be after the call. The test therefore waits for every
//! server to be live again rather than counting them at the call's end.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use borbaman_proto::pb::Action;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_is_waited_out_without_dropping_servers() {
    let mut cluster = common::cluster(3);
    let db_url = cluster.database_url().to_string();
    let (pool, mut players) = common::pool_and_game(&cluster, "dbdown").await;
    let mut player = players.remove(0);
    player.act(Action::Idle).await.unwrap();

    // The cluster's database is always its own throwaway one.
    common::blocking(|| cluster.stop_database()).unwrap();
    let seq = player.next_seq();
    let call = tokio::spawn(async move {
        let result = player.act(Action::Idle).await;
        (player, result)
    });
    borbaman_cluster::wait::until(
        "the pool to say the database is unavailable",
        Duration::from_secs(10),
        || async { pool.status().database_unavailable.then_some(()) },
    )
    .await;
    assert!(!call.is_finished(), "the call waits for the database");
    common::blocking(|| cluster.start_database()).unwrap();
    let (player, result) = call.await.unwrap();
    let (reply, _) = result.expect("the call goes through once the database is back");
    assert_eq!(reply.seq, seq);
    assert!(!pool.status().database_unavailable);
    // No server is lost for good: every one is live in the pool again (the
    // registry lists a server at its first heartbeat after the outage, and
    // the pool asks it at each refresh while it knows of more servers
    // than it has).
    let every: BTreeSet<String> = cluster.addresses().into_iter().collect();
    borbaman_cluster::wait::until(
        "every server to be live in the pool again after the outage",
        Duration::from_secs(10),
        || async {
            let live: BTreeSet<String> = pool.status().live.into_iter().collect();
            (live == every).then_some(())
        },
    )
    .await;

    let db = sqlx::PgPool::connect(&db_url).await.unwrap();
    let applied = common::applied_seqs(&db, player.game_id(), player.seat()).await;
    assert_eq!(applied, (1..=seq as i64).collect::<Vec<_>>());
}
