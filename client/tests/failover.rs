//! Failover against real server processes: a killed server, a hung server.
//! The retried request keeps its sequence number and is applied once.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use borbaman_cluster::wait;
use borbaman_proto::pb::Action;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_current_server_retries_the_same_seq_on_another() {
    let mut cluster = common::cluster(3);
    let db = common::database(&cluster).await;
    let (pool, mut players) = common::pool_and_game(&cluster, "kill").await;
    let player = &mut players[0];
    let victim = common::kill_current_after(&mut cluster, &pool, player, 3).await;

    let seq = player.next_seq();
    let (reply, info) = player.act(Action::Idle).await.expect("the call fails over");
    assert_eq!(reply.seq, seq, "the retry carries the same sequence number");
    // Left for another server: by a retry once the dead one's connection
    // reset, or (on a busy machine, where the reset can come after the
    // hedge delay) by the hedged copy, which carries the same seq.
    assert!(
        (info.failed_over && info.attempts >= 2) || info.hedge_won,
        "{info:?}"
    );
    assert_ne!(info.server, victim);
    if info.failed_over {
        assert!(pool.status().failovers >= 1);
    }
    wait::until("the dead server dropped", Duration::from_secs(10), || {
        let dropped = !pool.status().live.contains(&victim);
        async move { dropped.then_some(()) }
    })
    .await;

    let applied = common::applied_seqs(&db, player.game_id(), player.seat()).await;
    assert_eq!(
        applied,
        (1..=seq as i64).collect::<Vec<_>>(),
        "each seq applied once"
    );
}

/// Calls stream while the server they go to is killed mid-stream: every call
/// succeeds, and the database holds exactly the acknowledged actions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_mid_stream_loses_and_duplicates_nothing() {
    let mut cluster = common::cluster(3);
    let db = common::database(&cluster).await;
    let (pool, mut players) = common::pool_and_game(&cluster, "stream").await;
    let mut player = players.remove(0);
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let answered = Arc::new(AtomicU64::new(0));
    let answers = answered.clone();
    let caller = tokio::spawn(async move {
        let mut acknowledged = BTreeSet::new();
        let mut failovers = 0;
        let actions = [
            Action::Up,
            Action::Left,
            Action::Down,
            Action::Right,
            Action::Idle,
        ];
        let mut i = 0;
        while !stopping.load(Ordering::Relaxed) {
            let seq = player.next_seq();
            let (reply, info) = player
                .act(actions[i % actions.len()])
                .await
                .expect("every call succeeds");
            assert_eq!(reply.seq, seq);
            acknowledged.insert(seq as i64);
            answers.fetch_add(1, Ordering::Relaxed);
            failovers += info.failed_over as u32;
            i += 1;
        }
        (player, acknowledged, failovers)
    });
    // Kill the current server twice, each time once calls stream again.
    let calls_after = |n: u64| {
        let answered = answered.clone();
        async move {
            let what = format!("{n} answered calls");
            wait::until(&what, Duration::from_secs(15), || {
                let done = answered.load(Ordering::Relaxed) >= n;
                async move { done.then_some(()) }
            })
            .await
        }
    };
    calls_after(10).await;
    for _ in 0..2 {
        let (_victim, index) = common::current_server(&pool, &cluster);
        common::blocking(|| cluster.kill(index)).unwrap();
        calls_after(answered.load(Ordering::Relaxed) + 10).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (player, acknowledged, failovers) = caller.await.unwrap();
    assert!(failovers >= 1, "a call failed over");
    let applied: BTreeSet<i64> = common::applied_seqs(&db, player.game_id(), player.seat())
        .await
        .into_iter()
        .collect();
    assert_eq!(
        applied, acknowledged,
        "applied exactly the acknowledged actions"
    );
    assert_eq!(player.regressions(), 0, "no state went backwards");
}

/// A hung (SIGSTOPped) server: the call is hedged to another server after
/// the hedge delay and answered there, without waiting for the 150 ms call
/// deadline. When the hung server wakes up it runs its copy of the request
/// too, and the sequence number makes that a replay: applied exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_is_hedged_around_and_the_act_applied_once() {
    let mut cluster = common::cluster(3);
    let db = common::database(&cluster).await;
    let (pool, mut players) = common::pool_and_game(&cluster, "hang").await;
    let player = &mut players[0];
    player.act(Action::Idle).await.unwrap();
    let (victim, index) = common::current_server(&pool, &cluster);
    cluster.hang(index).unwrap();

    let seq = player.next_seq();
    let result = player.act(Action::Bomb).await;
    let (reply, info) = result.expect("the call is answered by another server");
    assert_eq!(reply.seq, seq);
    assert_ne!(info.server, victim);
    assert!(info.hedge_won || info.attempts >= 2, "{info:?}");
    assert!(info.hedges >= 1 || info.attempts >= 2, "{info:?}");
    // A pool that waited for the hung server would give up only after 15 s.
    assert!(
        info.rtt < Duration::from_secs(5),
        "a hung server must be left, not waited for: {:?}",
        info.rtt
    );
    // The probe the late call opened finds it silent beside a server that
    // answers, and drops it.
    wait::until(
        "calls to leave the hung server",
        Duration::from_secs(5),
        || {
            let left = pool.status().current.as_deref() != Some(victim.as_str());
            async move { left.then_some(()) }
        },
    )
    .await;

    // The hung server wakes up and runs the copy it was sent: once it
    // answers again it has read it; drained and stopped, it has finished it.
    cluster.resume(index).unwrap();
    common::until_answers(&victim).await;
    common::drain(&mut cluster, index).await;
    let applied = common::applied_seqs(&db, player.game_id(), player.seat()).await;
    assert_eq!(
        applied.iter().filter(|&&s| s == seq as i64).count(),
        1,
        "seq {seq} applied exactly once: {applied:?}"
    );
    let next = player.act(Action::Idle).await.expect("the game goes on");
    assert_eq!(next.0.seq, seq + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_server_down_a_call_waits_says_so_and_goes_on_when_one_is_back() {
    let mut cluster = common::cluster(2);
    let (pool, mut players) = common::pool_and_game(&cluster, "wait").await;
    let mut player = players.remove(0);
    player.act(Action::Idle).await.unwrap();
    common::blocking(|| {
        cluster.kill(0).unwrap();
        cluster.kill(1).unwrap();
    });

    let seq = player.next_seq();
    let call = tokio::spawn(async move {
        let result = player.act(Action::Idle).await;
        (player, result)
    });
    wait::until(
        "the pool to say it is waiting for a server",
        Duration::from_secs(2),
        || async { pool.status().waiting_for_server.then_some(()) },
    )
    .await;
    assert!(!call.is_finished());
    common::blocking(|| cluster.restart(0)).unwrap();

    let (_player, result) = call.await.unwrap();
    let (reply, info) = result.expect("the call goes on once a server is back");
    assert_eq!(reply.seq, seq);
    assert_eq!(info.server, cluster.addresses()[0]);
    assert!(!pool.status().waiting_for_server);
}
