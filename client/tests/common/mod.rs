//! Shared harness for the client's end-to-end tests: a local cluster of real
//! `borbaman server` processes on a throwaway PostgreSQL, players seated in
//! a running game, and read-only SQL to check what the servers committed.

#![allow(dead_code)]

pub mod chaos;

use borbaman_client::pool::ServerPool;
use borbaman_client::session::{GameSession, new_token};
use std::time::Duration;

use borbaman_cluster::local::{ClusterConfig, LocalCluster};
use borbaman_cluster::no_warm_up_pace_unless_set;
use borbaman_cluster::wait;
use borbaman_proto::pb::game_client::GameClient;
use borbaman_proto::pb::{Phase, PingRequest};
use sqlx::PgPool;

/// `servers` servers of the binary under test on a throwaway database of
/// their own.
pub fn cluster(servers: usize) -> LocalCluster {
    cluster_with(servers, &[])
}

/// `args` for every server of a test's cluster, with no pause between the
/// standing connections a server opens at start-up unless `args` sets one
/// ([`no_warm_up_pace_unless_set`]).
pub fn server_args(args: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    args.extend(no_warm_up_pace_unless_set(&args));
    args
}

/// A test's cluster config: `servers` servers of the binary under test,
/// with [`server_args`] of `args`, on a throwaway database.
pub fn config(servers: usize, args: &[&str]) -> ClusterConfig {
    ClusterConfig {
        server_args: server_args(args),
        ..ClusterConfig::temporary(servers).with_binary(env!("CARGO_BIN_EXE_borbaman"))
    }
}

/// [`cluster`] with extra flags for every server (e.g. a short round).
pub fn cluster_with(servers: usize, server_args: &[&str]) -> LocalCluster {
    let config = config(servers, server_args);
    LocalCluster::start(config, |_| {}).expect("start a local cluster")
}

/// [`cluster_with`], each server reaching the database through a proxy of
/// its own, which [`LocalCluster::partition_database`] cuts.
pub fn cluster_with_proxies(servers: usize, server_args: &[&str]) -> LocalCluster {
    let config = ClusterConfig {
        database_proxy: true,
        ..config(servers, server_args)
    };
    LocalCluster::start(config, |_| {}).expect("start a local cluster")
}

pub async fn database(cluster: &LocalCluster) -> PgPool {
    PgPool::connect(&cluster.database_url())
        .await
        .expect("connect to the test database")
}

/// Four players seated in one game, which is then running.
pub async fn seat_four(pool: &ServerPool, prefix: &str) -> Vec<GameSession> {
    let mut sessions = Vec::new();
    for n in 1..=4 {
        let (session, _) = GameSession::join(pool, &format!("{prefix}{n}"), new_token())
            .await
            .expect("join");
        sessions.push(session);
    }
    let game = sessions[0].game_id();
    assert!(
        sessions.iter().all(|s| s.game_id() == game),
        "four joins share a game"
    );
    let (state, _) = sessions[0].state().await.expect("state");
    assert_eq!(state.phase(), Phase::Playing, "the game starts at four");
    sessions
}

/// Sequence numbers the database holds for the session in `game`, `seat`,
/// in order.
pub async fn applied_seqs(db: &PgPool, game_id: u64, seat: u32) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT a.seq FROM actions a JOIN sessions s ON s.id = a.session_id \
         WHERE s.game_id = $1 AND s.seat = $2 ORDER BY a.seq",
    )
    .bind(game_id as i64)
    .bind(seat as i16)
    .fetch_all(db)
    .await
    .expect("query the action log")
}

/// Runs blocking cluster operations (signals, waits) off the async workers.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Waits until server `i` has switched slow mode on (after
/// [`LocalCluster::slow`]): its signal handler logs it.
pub async fn until_slow(cluster: &LocalCluster, i: usize) {
    let log = cluster.server_log(i).expect("a server in that slot");
    wait::until_logged(log, "slow mode on", Duration::from_secs(10)).await;
}

/// Stops server `i` gracefully and waits until it has drained: every call
/// it had in flight has finished, so nothing it was asking for can land in
/// the database after this. Waits for its "stopped" line (a SIGKILL after a
/// grace period would not do: a statement it had sent could still commit),
/// up to 30 s on a loaded machine, then reaps it.
pub async fn drain(cluster: &mut LocalCluster, i: usize) {
    let pid = cluster.pids()[i];
    // SAFETY: kill(2) on a server process this test started.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    let log = cluster
        .server_log(i)
        .expect("a server in that slot")
        .to_path_buf();
    // The local cluster's servers log JSON.
    wait::until_logged(&log, "\"message\":\"stopped\"", Duration::from_secs(30)).await;
    blocking(|| cluster.terminate(i)).expect("reap the server");
}

/// Waits until the server at `address` answers a `Ping` on a new
/// connection (after it was resumed or restarted).
pub async fn until_answers(address: &str) {
    let url = format!("http://{address}");
    wait::until(
        &format!("{address} to answer a ping"),
        Duration::from_secs(10),
        || {
            let url = url.clone();
            async move {
                let mut game = GameClient::connect(url).await.ok()?;
                game.ping(PingRequest::default()).await.ok().map(|_| ())
            }
        },
    )
    .await
}

/// Waits until `pool` counts `server` among its live servers (`live`) or
/// no longer does (`!live`): a hung server dropped, a woken one back.
pub async fn until_pool_sees(pool: &ServerPool, server: &str, live: bool, timeout: Duration) {
    let what = if live {
        format!("the pool to count {server} live again")
    } else {
        format!("the pool to drop {server}")
    };
    wait::until(&what, timeout, || async move {
        (pool.status().live.iter().any(|s| s == server) == live).then_some(())
    })
    .await
}

/// A plain HTTP/1.0 GET of `path` on `addr`: the body, or why not.
pub fn http_get(addr: &str, path: &str) -> Result<String, String> {
    use std::io::{Read, Write};
    let mut stream =
        std::net::TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| format!("read {addr}{path}: {e}"))?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP head from {addr}{path}"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return Err(format!(
            "{addr}{path}: {}",
            head.lines().next().unwrap_or("")
        ));
    }
    Ok(body.to_string())
}

/// Four bots that play one game on `map` (empty: any) on `servers`, with
/// the pool settings `pool`, until each has reported its end; fails naming
/// `what` if the game has not ended within `within`. The four outcomes, in
/// the order the bots reported them.
pub async fn bot_game(
    servers: &[String],
    pool: borbaman_client::pool::PoolConfig,
    map: &str,
    within: Duration,
    what: &str,
) -> Vec<borbaman::bot::GameOutcome> {
    bot_game_at(servers, pool, map, Default::default(), within, what).await
}

/// [`bot_game`] with bots of `level`.
pub async fn bot_game_at(
    servers: &[String],
    pool: borbaman_client::pool::PoolConfig,
    map: &str,
    level: borbaman::brain::Level,
    within: Duration,
    what: &str,
) -> Vec<borbaman::bot::GameOutcome> {
    use borbaman::bot::{BotTeam, spawn_bots};
    let (_stopper, stop) = borbaman::shutdown::channel();
    let (outcome_tx, mut outcomes) = tokio::sync::mpsc::unbounded_channel();
    let bots = spawn_bots(
        servers,
        pool,
        &BotTeam {
            games: Some(1),
            map: map.into(),
            level,
            ..BotTeam::new(4)
        },
        stop,
        outcome_tx,
    )
    .await
    .expect("four bots connect");
    let deadline = tokio::time::Instant::now() + within;
    let mut finished = Vec::new();
    while finished.len() < 4 {
        let outcome = tokio::time::timeout_at(deadline, outcomes.recv())
            .await
            .unwrap_or_else(|_| panic!("{what}: no end within {within:?}; ended {finished:?}"))
            .expect("bots report before they stop");
        finished.push(outcome);
    }
    bots.join_all().await;
    finished
}

/// `view` drawn on ratatui's test backend of 100×30 cells, as rows of
/// text.
pub fn screen_rows(view: &borbaman::ui::View) -> Vec<String> {
    use borbaman::ui::{ColorMode, draw};
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    let mut terminal = Terminal::new(TestBackend::new(100, 30)).unwrap();
    terminal
        .draw(|frame| draw::draw(frame, view, ColorMode::Indexed256))
        .unwrap();
    let buffer = terminal.backend().buffer();
    (0..buffer.area.height)
        .map(|y| {
            (0..buffer.area.width)
                .map(|x| buffer[(x, y)].symbol())
                .collect::<String>()
        })
        .collect()
}

/// Waits (up to `within`) until `done` holds for the view and its rows as
/// drawn by [`screen_rows`], checking each time the view changes; returns
/// both. Fails naming `what` and showing the last screen.
pub async fn until_view(
    view: &tokio::sync::watch::Receiver<borbaman::ui::View>,
    what: &str,
    within: Duration,
    done: impl Fn(&borbaman::ui::View, &[String]) -> bool,
) -> (borbaman::ui::View, Vec<String>) {
    let mut view = view.clone();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let snapshot = view.borrow_and_update().clone();
        let rows = screen_rows(&snapshot);
        if done(&snapshot, &rows) {
            return (snapshot, rows);
        }
        let why = match tokio::time::timeout_at(deadline, view.changed()).await {
            Ok(Ok(())) => continue,
            Ok(Err(_)) => "the view is no longer published",
            Err(_) => "the deadline passed",
        };
        panic!(
            "{what} never came within {within:?} ({why}); the screen:\n{}",
            rows.join("\n")
        );
    }
}

/// Asks `session` for its game's state until `ready` holds of it (a failed
/// call is asked again); returns it.
pub async fn until_state(
    session: &mut GameSession,
    what: &str,
    within: Duration,
    ready: impl Fn(&borbaman_proto::pb::GameState) -> bool,
) -> borbaman_proto::pb::GameState {
    let session = &tokio::sync::Mutex::new(session);
    let ready = &ready;
    wait::until(what, within, move || async move {
        let (state, _) = session.lock().await.state().await.ok()?;
        ready(&state).then_some(state)
    })
    .await
}

/// A pool with default settings on every server of `cluster`, and four
/// players (`prefix1`…`prefix4`) seated through it in one running game.
pub async fn pool_and_game(cluster: &LocalCluster, prefix: &str) -> (ServerPool, Vec<GameSession>) {
    let pool = ServerPool::connect(&cluster.addresses(), Default::default())
        .await
        .expect("connect to the cluster");
    let players = seat_four(&pool, prefix).await;
    (pool, players)
}

/// The server the pool's calls go to now, and its slot in `cluster`.
pub fn current_server(pool: &ServerPool, cluster: &LocalCluster) -> (String, usize) {
    let current = pool.status().current.expect("a current server");
    let index = cluster
        .index_of(&current)
        .unwrap_or_else(|| panic!("{current} is not a server of the cluster"));
    (current, index)
}

/// `player` has `calls` idle acts answered (its pool has a current server
/// and a game under way there), then that server is SIGKILLed; its
/// address.
pub async fn kill_current_after(
    cluster: &mut LocalCluster,
    pool: &ServerPool,
    player: &mut GameSession,
    calls: usize,
) -> String {
    for _ in 0..calls {
        player
            .act(borbaman_proto::pb::Action::Idle)
            .await
            .expect("an idle act before the kill");
    }
    let (victim, index) = current_server(pool, cluster);
    blocking(|| cluster.kill(index)).expect("kill the current server");
    victim
}
