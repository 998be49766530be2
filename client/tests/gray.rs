//! Gray failures against real server processes, one call at a time: a
//! server cut off the database while its clients still reach it, and a
//! server that answers late. Both still pass their health checks; the pool
//! must move calls to servers that can serve them, and apply each action
//! once.

mod common;

use std::time::Duration;

use borbaman_client::pool::{PoolConfig, ServerPool, Tuning};
use borbaman_cluster::wait;
use borbaman_proto::pb::Action;

/// The current server loses the database: it answers "database
/// unavailable" at once, and the same request goes to another server,
/// which commits it. The partitioned server is not dropped (it is alive),
/// and once healed it commits again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_server_is_left_for_one_that_can_commit() {
    let mut cluster = common::cluster_with_proxies(3, &[]);
    let db = common::database(&cluster).await;
    let (pool, mut players) = common::pool_and_game(&cluster, "cut").await;
    let player = &mut players[0];
    player.act(Action::Idle).await.unwrap();
    let (victim, index) = common::current_server(&pool, &cluster);
    cluster.partition_database(index).unwrap();
    assert_eq!(cluster.proxy(index).unwrap().open_connections(), 0);

    let seq = player.next_seq();
    let (reply, info) = player
        .act(Action::Bomb)
        .await
        .expect("another server commits it");
    assert_eq!(reply.seq, seq);
    assert_ne!(info.server, victim);
    assert!(info.attempts >= 2 || info.hedge_won, "{info:?}");
    // A pool that kept asking the partitioned server would wait until the
    // partition heals (here: never) and give up after 15 s.
    assert!(
        info.rtt < Duration::from_secs(5),
        "the partitioned server must be left, not waited for: {:?}",
        info.rtt
    );
    // One copy's win does not move calls (it may be a moment's slowness);
    // the next call, refused or beaten again, does.
    let (_, next) = player.act(Action::Idle).await.expect("committed");
    assert_ne!(next.server, victim, "{next:?}");
    assert_ne!(pool.status().current.as_deref(), Some(victim.as_str()));
    assert!(
        pool.status().live.contains(&victim),
        "a partitioned server is alive: not dropped"
    );
    assert!(!pool.status().database_unavailable);

    // Healed, the server commits again: ask it directly.
    cluster.heal_database(index).unwrap();
    let game = borbaman_proto::pb::game_client::GameClient::connect(format!("http://{victim}"))
        .await
        .unwrap();
    wait::until(
        "the healed server to answer a database read",
        Duration::from_secs(5),
        || {
            let mut game = game.clone();
            async move {
                game.rankings(borbaman_proto::pb::RankingsRequest { limit: 1 })
                    .await
                    .ok()
            }
        },
    )
    .await;
    assert!(cluster.proxy(index).unwrap().open_connections() > 0);

    let next = player.act(Action::Idle).await.expect("the game goes on");
    assert_eq!(next.0.seq, seq + 2);
    let applied = common::applied_seqs(&db, player.game_id(), player.seat()).await;
    assert_eq!(applied, (1..=seq as i64 + 2).collect::<Vec<_>>());
}

/// A partition ends every connection of the server it cuts off. Once it
/// heals, the server opens its standing connections again at once, with
/// no call asking for them: the next failover's burst of calls lands on
/// connections already open, not on PostgreSQL starting a backend for
/// each (which costs every server's calls tens of milliseconds at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healed_server_reopens_its_standing_connections() {
    const STANDING: usize = 6;
    let standing = format!("--db-min-connections={STANDING}");
    let mut cluster = common::cluster_with_proxies(1, &[standing.as_str()]);
    let opened = cluster.proxy(0).unwrap().open_connections();
    assert!(opened >= STANDING, "opened at start-up: {opened}");

    cluster.partition_database(0).unwrap();
    assert_eq!(cluster.proxy(0).unwrap().open_connections(), 0);
    // Cut off until its heartbeat has failed (the outage was seen).
    wait::until_logged(
        cluster.server_log(0).unwrap(),
        "heartbeat failed",
        Duration::from_secs(5),
    )
    .await;
    cluster.heal_database(0).unwrap();

    // Nothing calls the server: only its heartbeat needs a connection.
    let proxy = cluster.proxy(0).unwrap();
    wait::until(
        "the healed server to reopen its standing connections",
        Duration::from_secs(5),
        || async { (proxy.open_connections() >= STANDING).then_some(()) },
    )
    .await;
}

/// Two servers: the current one is cut off the database, the other is
/// slower than the call deadline. The call must wait for the slow one (it
/// can commit) rather than go back and forth between backing off and the
/// partitioned one, which answers at once but can never commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_server_beside_a_slow_one_does_not_stall_calls() {
    let mut cluster = common::cluster_with_proxies(2, &["--slow-mode-ms=300"]);
    let db = common::database(&cluster).await;
    let (pool, mut players) = common::pool_and_game(&cluster, "both").await;
    let player = &mut players[0];
    player.act(Action::Idle).await.unwrap();
    let (_, index) = common::current_server(&pool, &cluster);
    let other = 1 - index;
    cluster.partition_database(index).unwrap();
    cluster.slow(other).unwrap();
    common::until_slow(&cluster, other).await;

    let seq = player.next_seq();
    let (reply, info) = player
        .act(Action::Idle)
        .await
        .expect("the slow server commits it");
    assert_eq!(reply.seq, seq);
    assert_eq!(info.server, cluster.addresses()[other]);
    // The slow server misses the 150 ms deadline once, then gets the 1 s
    // slow-call deadline; waiting for the partition would take until the
    // 15 s give-up.
    assert!(
        info.rtt < Duration::from_secs(5),
        "the slow server must be given time: {:?} {info:?}",
        info.rtt
    );
    assert!(
        info.rtt >= Duration::from_millis(300),
        "answered after the slow server's delay: {info:?}"
    );

    cluster.unslow(other).unwrap();
    cluster.heal_database(index).unwrap();
    let applied = common::applied_seqs(&db, player.game_id(), player.seat()).await;
    assert_eq!(applied, (1..=seq as i64).collect::<Vec<_>>());
}

/// A leave is not copied for being late: on a server turned slow (it
/// still answers its health checks) it waits for its deadline, and is
/// answered there or moved, never run on two servers at once; applied once.
/// An act on the same slow server is copied (the test below).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_leave_on_a_slow_server_is_not_copied() {
    let mut cluster = common::cluster_with(3, &["--slow-mode-ms=400"]);
    let db = common::database(&cluster).await;
    // A slow server still answers its health checks; on a loaded machine
    // its answer can come more than the usual 10 ms after another
    // server's, and be taken for silence, which copies even a leave (as it
    // should for a hung server). This test is about a late server that is
    // heard: the slack keeps a loaded machine from making it silent.
    let config = PoolConfig {
        tuning: Tuning {
            silent_slack: Duration::from_millis(250),
            ..Tuning::default()
        },
        ..PoolConfig::default()
    };
    let pool = ServerPool::connect(&cluster.addresses(), config)
        .await
        .expect("connect to the cluster");
    let mut players = common::seat_four(&pool, "leave").await;
    let player = &mut players[0];
    player.act(Action::Idle).await.unwrap();
    let (_, index) = common::current_server(&pool, &cluster);
    cluster.slow(index).unwrap();
    common::until_slow(&cluster, index).await;

    let seq = player.next_seq();
    let info = player.leave().await.expect("the leave is answered");
    assert_eq!(info.hedges, 0, "a late leave was copied: {info:?}");

    cluster.unslow(index).unwrap();
    common::drain(&mut cluster, index).await;
    let applied = common::applied_seqs(&db, player.game_id(), player.seat()).await;
    assert_eq!(
        applied.iter().filter(|&&s| s == seq as i64).count(),
        1,
        "the leave (seq {seq}) applied exactly once: {applied:?}"
    );
}

/// The current server turns slow: the call is hedged to another server
/// after the hedge delay, which answers first, and calls stay there. The
/// slow server's own copy is cancelled or answered as a replay: the action
/// is applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_server_is_hedged_around() {
    const SLOW: Duration = Duration::from_millis(1000);
    let mut cluster = common::cluster_with(3, &["--slow-mode-ms=1000"]);
    let db = common::database(&cluster).await;
    let (pool, mut players) = common::pool_and_game(&cluster, "slow").await;
    let player = &mut players[0];
    player.act(Action::Idle).await.unwrap();
    let (victim, index) = common::current_server(&pool, &cluster);
    cluster.slow(index).unwrap();
    // The signal is handled by a task of the server's: until it logs so,
    // the next call can still find the server fast.
    common::until_slow(&cluster, index).await;

    let seq = player.next_seq();
    let (reply, info) = player.act(Action::Bomb).await.expect("answered");
    assert_eq!(reply.seq, seq);
    assert_ne!(info.server, victim);
    assert!(info.hedge_won || info.attempts >= 2, "{info:?}");
    assert!(
        info.rtt < SLOW,
        "the slow server's delay must not be waited out: {info:?}"
    );
    // One copy's win does not move calls (it may be a moment's slowness);
    // a second win over the same server within 500 ms does. On a loaded
    // machine the next call can come later than that: the wins after it
    // move the calls, and none of them waits for the slow server.
    let mut moved = false;
    for _ in 0..5 {
        let (_, next) = player.act(Action::Idle).await.expect("answered");
        assert_ne!(next.server, victim, "{next:?}");
        assert!(next.rtt < SLOW, "{next:?}");
        if pool.status().current.as_deref() != Some(victim.as_str()) {
            moved = true;
            break;
        }
    }
    assert!(
        moved,
        "the calls moved off the slow server: {:?}",
        pool.status()
    );
    assert!(pool.status().live.contains(&victim), "slow, not dropped");

    // The slow server's copy of the call may still be waiting: stop the
    // server gracefully, which drains its calls, before counting.
    cluster.unslow(index).unwrap();
    common::drain(&mut cluster, index).await;
    let applied = common::applied_seqs(&db, player.game_id(), player.seat()).await;
    assert_eq!(
        applied.iter().filter(|&&s| s == seq as i64).count(),
        1,
        "seq {seq} applied exactly once: {applied:?}"
    );
}
