//! Failover against real server processes: a killed server, a hung server.
//! The retried request keeps its sequence number and is applied once.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
    let (stop, stopping) = borbaman::shutdown::channel();
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
        while !stopping.is_shutdown() {
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
    stop.stop();
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

/// Every server silent at once for a moment (the machine or the link slow
/// for everyone, as past a cluster's capacity): the pool's health checks
/// go unanswered, and it keeps its connections instead of dropping every
/// server, so the game's calls go on where they were, with no failover
/// and no reconnection, once the servers answer again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_silent_together_for_a_moment_are_kept() {
    let mut cluster = common::cluster(2);
    let (pool, mut players) = common::pool_and_game(&cluster, "silent").await;
    let player = &mut players[0];
    player.act(Action::Idle).await.unwrap();
    wait::until(
        "the pool to hold both servers",
        Duration::from_secs(5),
        || {
            let both = pool.status().live.len() == 2;
            async move { both.then_some(()) }
        },
    )
    .await;
    let before = pool.status();
    common::blocking(|| {
        cluster.hang(0).unwrap();
        cluster.hang(1).unwrap();
    });
    // Several rounds of health checks (one every half second, each given
    // at least 250 ms) with neither server answering.
    let mut fewest = usize::MAX;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        fewest = fewest.min(pool.status().live.len());
    }
    common::blocking(|| {
        cluster.resume(0).unwrap();
        cluster.resume(1).unwrap();
    });
    assert_eq!(fewest, 2, "servers silent together were dropped");

    let (_, info) = player.act(Action::Idle).await.expect("the game goes on");
    let after = pool.status();
    assert_eq!(before.current.as_ref(), Some(&info.server), "{info:?}");
    assert_eq!(after.failovers, before.failovers, "{after:?}");
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

/// One player of a game loses its way to the game's server (its own path
/// to it is cut; the other three still reach it) and fails over to
/// another. Once the path is back and the server has settled in its pool,
/// its calls go back to the game's server: the four players meet in one
/// server again instead of racing for the game's row from two for the rest
/// of the game. Every act is applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_player_that_lost_its_games_server_goes_back_to_it() {
    use borbaman_client::pool::{PoolConfig, ServerPool};
    use borbaman_client::session::{GameSession, new_token};
    use borbaman_cluster::proxy::TcpProxy;

    let cluster = common::cluster(3);
    let db = common::database(&cluster).await;
    // The lone player reaches every server through a proxy of its own.
    let proxies: Vec<(String, TcpProxy)> = cluster
        .addresses()
        .into_iter()
        .map(|address| {
            let proxy = TcpProxy::start(&address).expect("a proxy");
            (address, proxy)
        })
        .collect();
    let three = ServerPool::connect(&cluster.addresses(), PoolConfig::default())
        .await
        .expect("the three connect");
    let lone = ServerPool::connect(
        &cluster.addresses(),
        PoolConfig {
            dial: proxies
                .iter()
                .map(|(address, proxy)| (address.clone(), proxy.address().to_string()))
                .collect(),
            ..PoolConfig::default()
        },
    )
    .await
    .expect("the lone player connects through its proxies");
    let mut players = Vec::new();
    for (n, pool) in [&three, &three, &three, &lone].into_iter().enumerate() {
        let (session, _) = GameSession::join(pool, &format!("back{n}"), new_token())
            .await
            .expect("join");
        players.push(session);
    }
    assert!(players.iter().all(|p| p.game_id() == players[0].game_id()));
    let mut lone_player = players.pop().unwrap();
    for player in players.iter_mut().chain([&mut lone_player]) {
        player.act(Action::Idle).await.expect("an act");
    }
    let home = three.status().current.expect("the three's server");
    assert_eq!(lone.status().current.as_deref(), Some(home.as_str()));

    // Cut: the lone player's next act is answered by another server.
    let proxy = &proxies.iter().find(|(a, _)| *a == home).unwrap().1;
    proxy.cut();
    let (_, info) = lone_player.act(Action::Idle).await.expect("failed over");
    assert_ne!(info.server, home, "{info:?}");
    proxy.heal();

    // Healed: it goes back within its pool's reconnect and settling (the
    // others play on meanwhile).
    let what = format!("the lone player back on the game's server {home}");
    let playing = &tokio::sync::Mutex::new((&mut lone_player, &mut players));
    let home = &home;
    wait::until(&what, Duration::from_secs(10), move || async move {
        let (lone_player, players) = &mut *playing.lock().await;
        let (_, info) = lone_player.act(Action::Idle).await.expect("an act");
        for player in players.iter_mut() {
            player.act(Action::Idle).await.expect("an act");
        }
        (info.server == *home && !info.hedge_won).then_some(())
    })
    .await;
    assert_eq!(lone.status().current.as_deref(), Some(home.as_str()));
    let seq = lone_player.next_seq() as i64 - 1;
    let applied = common::applied_seqs(&db, lone_player.game_id(), lone_player.seat()).await;
    assert_eq!(applied, (1..=seq).collect::<Vec<_>>());
}
