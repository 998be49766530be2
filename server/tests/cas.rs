//! Compare-and-set writes: a stopped server holds nothing that blocks the
//! other players of its games, and calls that cross on one game (copies of
//! one call on two servers, players acting at once through several servers)
//! apply everything exactly once, one version per commit.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use borbaman_cluster::wait;
use borbaman_proto::pb;
use common::*;

/// Far longer than the test: a server stopped inside a transaction would
/// hold its locks throughout, and calls needing them could only wait.
const IDLE_TXN_TIMEOUT_MS: &str = "60000";

/// Server flags for the stopped-server test: no idle transaction is ended
/// for it, and a call may wait 5 s before it gives up.
const PATIENT: [&str; 4] = [
    "--idle-txn-timeout-ms",
    IDLE_TXN_TIMEOUT_MS,
    "--db-timeout-ms",
    "5000",
];

/// Acts through another server each take far less than this while one
/// server is stopped mid-call (it is a generous bound for a noisy machine;
/// a lock held by the stopped server would make them wait out the 5 s
/// database timeout and fail).
const PROMPT: Duration = Duration::from_secs(1);

/// Game servers hold no transaction open between their calls' round trips.
async fn idle_in_transaction(db: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE application_name = 'borbaman-server' AND state LIKE 'idle in transaction%'",
    )
    .fetch_one(db)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_stopped_server_holds_nothing_that_blocks_the_other_players() {
    let pg = start_db();
    let mut a = ServerProcess::start_with(&pg.url(), &PATIENT);
    let b = ServerProcess::start_with(&pg.url(), &PATIENT);
    let mut ca = a.game().await;
    let cb = b.game().await;
    let players = full_game(&mut ca).await;
    let game_id = players[0].game_id;
    let db = sql(&pg.url()).await;

    let stuck_players = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for mut player in players {
        let (ca, mut cb) = (ca.clone(), cb.clone());
        let stuck_players = stuck_players.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = 0u64;
            // Act on A until a call does not answer: A was stopped. The
            // call is left running, to see how it ends when A wakes up.
            let (stuck, on_a) = loop {
                let req = player.act_request(pb::Action::Idle);
                let mut ca = ca.clone();
                let sent = req.clone();
                let mut call = tokio::spawn(async move { ca.act(sent).await });
                match tokio::time::timeout(Duration::from_millis(200), &mut call).await {
                    Ok(Ok(Ok(_))) => acked += 1,
                    Ok(outcome) => panic!("{outcome:?}"),
                    Err(_) => break (req, call),
                }
            };
            stuck_players.fetch_add(1, Ordering::Relaxed);
            // The call A left unanswered, then more, through B.
            let mut slowest = Duration::ZERO;
            let mut req = stuck;
            for _ in 0..20 {
                let started = Instant::now();
                cb.act(req).await.expect("act through B while A is stopped");
                slowest = slowest.max(started.elapsed());
                acked += 1;
                req = player.act_request(pb::Action::Idle);
            }
            (acked, slowest, on_a)
        }));
    }
    wait::until(
        "every player's first calls through A",
        Duration::from_secs(10),
        || async { (logged_actions(&db, game_id).await >= 12).then_some(()) },
    )
    .await;
    unsafe { libc::kill(a.pid(), libc::SIGSTOP) };
    // Every player has found A unanswering (A is stopped, whatever it was
    // doing): no transaction of A's may be left open.
    wait::until(
        "every player to find A stopped",
        Duration::from_secs(10),
        || async { (stuck_players.load(Ordering::Relaxed) == 4).then_some(()) },
    )
    .await;
    assert_eq!(
        idle_in_transaction(&db).await,
        0,
        "a stopped server holds a transaction open"
    );
    let mut acked = 0;
    let mut on_a = Vec::new();
    for t in tasks {
        let (n, slowest, call) = t.await.unwrap();
        acked += n;
        on_a.push(call);
        assert!(slowest < PROMPT, "an act through B took {slowest:?}");
    }
    assert_eq!(idle_in_transaction(&db).await, 0);

    // A wakes up with its calls half done: whatever it read is stale, so it
    // applies nothing more (its requests were all answered by B). Count
    // once each of those calls has come back from A.
    unsafe { libc::kill(a.pid(), libc::SIGCONT) };
    for call in on_a {
        // Its answer may be an error (stale), a replay, or the original
        // commit if A was stopped between committing and answering (then
        // B's copy was the replay): the count below tells them apart from
        // a duplicate.
        let _answer = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("A answers the calls it had when it was stopped within 10 s")
            .expect("the call to A did not panic");
    }
    a.kill();
    assert_eq!(logged_actions(&db, game_id).await as u64, acked);
    let (version, _) = stored_game(&db, game_id).await;
    assert_eq!(version, 4 + commits(&db, game_id).await);
}

/// Checks a game's log after `per_session` calls of each of its four
/// sessions: each session's numbers are exactly 1..=per_session, and each
/// commit made exactly one new version, all of them since the four joins
/// (versions 1-4), without gaps (calls queued together behind the game's
/// gate in one server share a commit, each at its own place in it).
async fn assert_each_call_applied_once(db: &sqlx::PgPool, game_id: u64, per_session: i64) {
    let sessions: Vec<(i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT count(a.seq), count(DISTINCT a.seq), min(a.seq), max(a.seq) \
         FROM sessions s JOIN actions a ON a.session_id = s.id \
         WHERE s.game_id = $1 GROUP BY s.id",
    )
    .bind(game_id as i64)
    .fetch_all(db)
    .await
    .unwrap();
    assert_eq!(sessions.len(), 4);
    for row in sessions {
        assert_eq!(row, (per_session, per_session, 1, per_session));
    }
    let applied = 4 * per_session;
    let commits = commits(db, game_id).await;
    let versions: (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT (version, ord)), min(version), max(version) \
         FROM actions WHERE game_id = $1",
    )
    .bind(game_id as i64)
    .fetch_one(db)
    .await
    .unwrap();
    assert_eq!(versions, (applied, applied, 5, 4 + commits));
    assert_eq!(stored_game(db, game_id).await.0, 4 + commits);
}

/// Every player sends each call to two servers at once, as a client that
/// retries elsewhere before the first answer: both answer alike, exactly
/// one applies it. The players leave the same way, and the game they end
/// is counted in the rankings once.
#[tokio::test]
async fn the_same_call_sent_to_two_servers_at_once_is_applied_once() {
    let pg = start_db();
    let servers = [
        ServerProcess::start(&pg.url()),
        ServerProcess::start(&pg.url()),
        ServerProcess::start(&pg.url()),
    ];
    let clients = [
        servers[0].game().await,
        servers[1].game().await,
        servers[2].game().await,
    ];
    let players = full_ranked_game(&mut clients[0].clone()).await;
    let game_id = players[0].game_id;
    const ROUNDS: usize = 20;

    let mut tasks = Vec::new();
    for (i, mut player) in players.into_iter().enumerate() {
        let clients = clients.clone();
        tasks.push(tokio::spawn(async move {
            let moves = [pb::Action::Up, pb::Action::Left, pb::Action::Down];
            for r in 0..ROUNDS {
                let mut x = clients[(i + r) % 3].clone();
                let mut y = clients[(i + r + 1) % 3].clone();
                let req = player.act_request(moves[r % 3]);
                let (rx, ry) = tokio::join!(x.act(req.clone()), y.act(req));
                let (rx, ry) = (rx.unwrap().into_inner(), ry.unwrap().into_inner());
                assert!(rx.replayed != ry.replayed, "exactly one applies it");
                assert_eq!(
                    (rx.seq, rx.outcome, rx.applied_tick),
                    (ry.seq, ry.outcome, ry.applied_tick)
                );
            }
            let mut x = clients[i % 3].clone();
            let mut y = clients[(i + 1) % 3].clone();
            let req = pb::LeaveRequest {
                token: player.token.clone(),
                game_id: player.game_id,
                seat: player.seat,
                seq: player.next_seq,
            };
            let (lx, ly) = tokio::join!(x.leave(req.clone()), y.leave(req));
            assert_eq!(lx.unwrap().into_inner().seq, ly.unwrap().into_inner().seq);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }

    let db = sql(&pg.url()).await;
    assert_each_call_applied_once(&db, game_id, ROUNDS as i64 + 1).await;
    let leaves: i64 =
        sqlx::query_scalar("SELECT count(*) FROM actions WHERE game_id = $1 AND action = 7")
            .bind(game_id as i64)
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(leaves, 4);
    let rankings: Vec<(String, i32, i32, i32)> =
        sqlx::query_as("SELECT name, games, wins, draws FROM rankings ORDER BY name")
            .fetch_all(&db)
            .await
            .unwrap();
    assert_eq!(rankings.len(), 4, "{rankings:?}");
    assert!(rankings.iter().all(|r| r.1 == 1), "{rankings:?}");
    let ended: i32 = rankings.iter().map(|r| r.2 + r.3).sum();
    assert!(
        ended == 1 || ended == 4,
        "one winner or a draw: {rankings:?}"
    );
}

/// The four players of one game act back to back, each call through the
/// next of three servers: their writes cross all the time (the servers
/// count the retries), yet every call is applied once and each commit made
/// exactly one new version.
#[tokio::test]
async fn players_of_one_game_acting_at_once_through_three_servers_lose_nothing() {
    let pg = start_db();
    let logs: Vec<_> = (0..3).map(|i| log_path(&format!("cas-{i}"))).collect();
    let mut servers: Vec<_> = logs
        .iter()
        .map(|log| ServerProcess::start_logged(&pg.url(), &[], log))
        .collect();
    let mut clients = Vec::new();
    for s in &servers {
        clients.push(s.game().await);
    }
    let players = full_game(&mut clients[0]).await;
    let game_id = players[0].game_id;
    const ACTS: usize = 60;

    let mut tasks = Vec::new();
    for (i, mut player) in players.into_iter().enumerate() {
        let clients = clients.clone();
        tasks.push(tokio::spawn(async move {
            let moves = [
                pb::Action::Up,
                pb::Action::Down,
                pb::Action::Left,
                pb::Action::Right,
                pb::Action::Idle,
            ];
            let mut versions = Vec::new();
            for n in 0..ACTS {
                let req = player.act_request(moves[(n + i) % moves.len()]);
                let reply = clients[(n + i) % 3]
                    .clone()
                    .act(req)
                    .await
                    .unwrap()
                    .into_inner();
                assert!(!reply.replayed);
                versions.push(reply.state.unwrap().version);
            }
            versions
        }));
    }
    let mut versions = BTreeSet::new();
    for t in tasks {
        let mine = t.await.unwrap();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "{mine:?}");
        versions.extend(mine);
    }
    // Each reply carries the version its own commit made: together every
    // version after the joins.
    let db = sql(&pg.url()).await;
    let commits = commits(&db, game_id).await as u64;
    assert_eq!(versions, (5..=4 + commits).collect::<BTreeSet<_>>());
    assert_each_call_applied_once(&db, game_id, ACTS as i64).await;

    // Stopped off this test's runtime, which must keep serving the client
    // side of the connections the servers drain.
    let retries = tokio::task::spawn_blocking(move || {
        let mut retries = 0;
        for (server, log) in servers.iter_mut().zip(&logs) {
            server.terminate();
            retries += logged_cas_retries(log).expect("a stopped server logs its retries");
            let _ = std::fs::remove_file(log);
        }
        retries
    })
    .await
    .unwrap();
    eprintln!(
        "compare-and-set retries: {retries} for {} acts in {commits} commits",
        4 * ACTS
    );
    assert!(
        retries > 0,
        "no write ever lost a race: the test proves little"
    );
}

/// A game the clock alone ends (sudden death, no one acting) is committed
/// once, by whichever of many readers racing through two servers saw it
/// first: one new version, and the rankings count the game once.
#[tokio::test]
async fn a_game_the_clock_ends_is_committed_once_by_racing_readers() {
    let pg = start_db();
    let short = ["--round-ms", "50"];
    let servers = [
        ServerProcess::start_with(&pg.url(), &short),
        ServerProcess::start_with(&pg.url(), &short),
    ];
    let clients = [servers[0].game().await, servers[1].game().await];
    let players = full_ranked_game(&mut clients[0].clone()).await;
    let game_id = players[0].game_id;

    let mut tasks = Vec::new();
    for (i, player) in players.iter().cycle().take(8).enumerate() {
        let mut client = clients[i % 2].clone();
        let token = player.token.clone();
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            // Past the end, a few more reads of the finished game.
            let mut after_the_end = 0;
            while after_the_end < 5 {
                let reply = client
                    .get_state(pb::GetStateRequest {
                        token: token.clone(),
                        game_id,
                    })
                    .await
                    .unwrap()
                    .into_inner();
                if phase(&reply.state) == pb::Phase::Finished {
                    after_the_end += 1;
                }
                assert!(started.elapsed() < Duration::from_secs(60), "no end");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let db = sql(&pg.url()).await;
    assert_eq!(
        stored_game(&db, game_id).await.0,
        5,
        "one commit of the end"
    );
    assert_eq!(logged_actions(&db, game_id).await, 0);
    let games: Vec<i32> = sqlx::query_scalar("SELECT games FROM rankings")
        .fetch_all(&db)
        .await
        .unwrap();
    assert_eq!(games, [1, 1, 1, 1]);
}
