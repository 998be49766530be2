//! Games partitioned over two database clusters: real servers on a home
//! PostgreSQL and a second one (`--db-cluster c1=...`). Every game lives on
//! the cluster its partition names, every call of it runs there, joins meet
//! in one lobby, and a ranked game finished on the second cluster counts
//! once in home's rankings.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use borbaman_cluster::wait;
use borbaman_proto::pb;
use borbaman_proto::pb::game_client::GameClient;
use common::*;
use sqlx::PgPool;
use tonic::transport::Channel;

/// The cluster holding each partition, as home's map says.
async fn partition_map(home: &PgPool) -> BTreeMap<i64, String> {
    sqlx::query_as::<_, (i16, String)>("SELECT partition, cluster FROM partition_map")
        .fetch_all(home)
        .await
        .unwrap()
        .into_iter()
        .map(|(p, c)| (i64::from(p), c))
        .collect()
}

/// Live servers whose heartbeat lists `cluster` among those they opened.
async fn servers_listing(home: &PgPool, cluster: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM servers \
         WHERE heartbeat_at > now() - interval '2 seconds' AND $1 = ANY (clusters)",
    )
    .bind(cluster)
    .fetch_one(home)
    .await
    .unwrap()
}

async fn count(pool: &PgPool, sql: &'static str, game_id: u64) -> i64 {
    sqlx::query_scalar(sql)
        .bind(game_id as i64)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Two servers, both given the second cluster.
fn two_clusters() -> (
    borbaman_cluster::LocalPostgres,
    borbaman_cluster::LocalPostgres,
    Vec<ServerProcess>,
) {
    let (home, other) = (start_db(), start_db());
    let cluster = format!("--db-cluster=c1={}", other.url());
    let servers = (0..2)
        .map(|_| ServerProcess::start_with(&home.url(), &[&cluster]))
        .collect();
    (home, other, servers)
}

#[tokio::test]
async fn each_game_and_every_call_of_it_live_on_its_partitions_cluster() {
    let (home_pg, other_pg, servers) = two_clusters();
    let (home, other) = (sql(&home_pg.url()).await, sql(&other_pg.url()).await);
    let map = partition_map(&home).await;
    let on_home = map.values().filter(|c| *c == "home").count();
    assert_eq!((on_home, map.len()), (32, 64), "spread evenly: {map:?}");

    let mut clients = Vec::new();
    for s in &servers {
        clients.push(s.game().await);
    }
    // Four games' players, joining through either server.
    let mut games: BTreeMap<u64, Vec<Player>> = BTreeMap::new();
    for g in 0..4 {
        let players = full_game(&mut clients[g % 2]).await;
        games.insert(players[0].game_id, players);
    }
    assert_eq!(games.len(), 4, "four games of four");
    let mut clusters_used = std::collections::BTreeSet::new();
    for (&game_id, players) in &mut games {
        let cluster = &map[&((game_id % 64) as i64)];
        clusters_used.insert(cluster.clone());
        let (mine, theirs) = if cluster == "home" {
            (&home, &other)
        } else {
            (&other, &home)
        };
        // Acts and a state read, alternating servers.
        for (i, player) in players.iter_mut().enumerate() {
            for n in 0..3 {
                let req = player.act_request(action(player.next_seq));
                clients[(i + n) % 2].clone().act(req).await.unwrap();
            }
            let state = clients[i % 2]
                .clone()
                .get_state(pb::GetStateRequest {
                    token: player.token.clone(),
                    game_id,
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(state.state.unwrap().game_id, game_id);
        }
        let watched = clients[0]
            .clone()
            .watch_state(pb::WatchStateRequest { game_id })
            .await;
        assert!(watched.is_ok(), "game {game_id} watched: {watched:?}");
        for (what, sql) in [
            ("game", "SELECT count(*) FROM games WHERE id = $1"),
            ("seats", "SELECT count(*) FROM seats WHERE game_id = $1"),
            (
                "sessions",
                "SELECT count(*) FROM sessions WHERE game_id = $1",
            ),
            ("actions", "SELECT count(*) FROM actions WHERE game_id = $1"),
        ] {
            let here = count(mine, sql, game_id).await;
            let there = count(theirs, sql, game_id).await;
            let expected = match what {
                "game" => 1,
                "actions" => 12,
                _ => 4,
            };
            assert_eq!(
                (here, there),
                (expected, 0),
                "game {game_id}'s {what} on {cluster} only"
            );
        }
    }
    assert_eq!(
        clusters_used.len(),
        2,
        "new games spread over both clusters: {:?}",
        games.keys().collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_join_retried_on_another_server_gets_the_same_seat_on_its_cluster() {
    let (_home_pg, _other_pg, servers) = two_clusters();
    let (mut a, mut b) = (servers[0].game().await, servers[1].game().await);
    // Past the first game's worth of joiners, so this one is placed on the
    // second cluster's turn.
    let _first = full_game(&mut a).await;
    let nonce = token();
    let (first, _) = join_as(&mut a, &[], "again", nonce.clone()).await.unwrap();
    let (retried, reply) = join_as(&mut b, &[], "again", nonce).await.unwrap();
    assert_eq!(
        (retried.game_id, retried.seat, retried.token.clone()),
        (first.game_id, first.seat, first.token.clone())
    );
    assert!(
        reply.rejoined,
        "the retry found the seat the first try took"
    );
}

#[tokio::test]
async fn a_ranked_game_finished_on_the_second_cluster_counts_once_at_home() {
    let (home_pg, other_pg, servers) = two_clusters();
    let (home, other) = (sql(&home_pg.url()).await, sql(&other_pg.url()).await);
    let map = partition_map(&home).await;
    let mut client = servers[0].game().await;
    // The first game's worth of joiners goes to home, the next to c1.
    let first = full_game(&mut client).await;
    assert_eq!(map[&((first[0].game_id % 64) as i64)], "home");
    let players = full_ranked_game(&mut client).await;
    let game_id = players[0].game_id;
    assert_eq!(map[&((game_id % 64) as i64)], "c1");
    // Everyone leaves: the game ends, on the second cluster.
    for (i, player) in players.iter().enumerate() {
        servers[i % 2]
            .game()
            .await
            .leave(pb::LeaveRequest {
                token: player.token.clone(),
                game_id,
                seat: player.seat,
                seq: player.next_seq,
            })
            .await
            .unwrap();
    }
    wait::until(
        "the game folded into home's rankings",
        Duration::from_secs(10),
        || {
            let home = home.clone();
            async move {
                let folded: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM folded_games WHERE game_id = $1)",
                )
                .bind(game_id as i64)
                .fetch_one(&home)
                .await
                .unwrap();
                folded.then_some(())
            }
        },
    )
    .await;
    let rows: Vec<(String, i32)> = sqlx::query_as("SELECT name, games FROM rankings ORDER BY name")
        .fetch_all(&home)
        .await
        .unwrap();
    let names: Vec<(String, i32)> = (0..4).map(|i| (format!("r{i}"), 1)).collect();
    assert_eq!(rows, names, "every player of the game counted once");
    let left: i64 = count(
        &other,
        "SELECT count(*) FROM results WHERE game_id = $1",
        game_id,
    )
    .await;
    assert_eq!(left, 0, "the outbox was emptied");
    let at_home: i64 = count(&home, "SELECT count(*) FROM games WHERE id = $1", game_id).await;
    assert_eq!(at_home, 0);
}

/// Two servers on two clusters, the first of which ends its process at
/// crash point `point` (see `store::partitions::crash_point`).
fn two_clusters_one_crashing(
    point: &str,
) -> (
    borbaman_cluster::LocalPostgres,
    borbaman_cluster::LocalPostgres,
    ServerProcess,
    ServerProcess,
) {
    let (home, other) = (start_db(), start_db());
    let cluster = format!("--db-cluster=c1={}", other.url());
    // SAFETY: this test's own process, before any of its threads reads the
    // environment; the child started in between inherits it.
    unsafe { std::env::set_var("BORBAMAN_CRASH_AT", point) };
    let crashing = ServerProcess::start_with(&home.url(), &[&cluster]);
    unsafe { std::env::remove_var("BORBAMAN_CRASH_AT") };
    let steady = ServerProcess::start_with(&home.url(), &[&cluster]);
    (home, other, crashing, steady)
}

/// Sessions on both clusters.
async fn sessions(home: &PgPool, other: &PgPool) -> i64 {
    let mut n = 0;
    for pool in [home, other] {
        n += sqlx::query_scalar::<_, i64>("SELECT count(*) FROM sessions")
            .fetch_one(pool)
            .await
            .unwrap();
    }
    n
}

/// A join whose server dies after one of its steps, retried with the same
/// nonce on another server: one seat, on the cluster it was placed on.
async fn join_killed_at(point: &str, seated_before_the_kill: bool) {
    let (home_pg, other_pg, mut crashing, steady) = two_clusters_one_crashing(point);
    let (home, other) = (sql(&home_pg.url()).await, sql(&other_pg.url()).await);
    let map = partition_map(&home).await;
    let mut b = steady.game().await;
    // Fills home's turn, so the next joiner is placed on c1.
    let _first = full_game(&mut b).await;
    let nonce = token();
    let mut a = crashing.game().await;
    let refused = join_as(&mut a, &[], "crash", nonce.clone()).await;
    assert!(refused.is_err(), "the server died before it answered");
    let status = wait::until(
        "the crashing server to exit",
        Duration::from_secs(10),
        || {
            let exited = crashing.try_exit();
            async move { exited }
        },
    )
    .await;
    assert!(!status.success(), "it crashed at {point}");
    let (player, reply) = join_as(&mut b, &[], "crash", nonce).await.unwrap();
    assert_eq!(map[&((player.game_id % 64) as i64)], "c1");
    assert_eq!(
        reply.rejoined, seated_before_the_kill,
        "the retry finds the seat only if the first try took it"
    );
    assert_eq!(sessions(&home, &other).await, 5, "no ghost, no seat twice");
    let seats: i64 = count(
        &other,
        "SELECT count(*) FROM seats WHERE game_id = $1",
        player.game_id,
    )
    .await;
    assert_eq!(seats, 1);
    // The retry took no turn of its own: the next three joiners meet the
    // player in its game, as they would have without the crash.
    for n in 0..3 {
        let (joiner, _) = join_as(&mut b, &[], &format!("next{n}"), token())
            .await
            .unwrap();
        assert_eq!(
            joiner.game_id, player.game_id,
            "joiner {n} after the retry sat in the retried player's game"
        );
    }
}

#[tokio::test]
async fn a_join_killed_after_its_placement_is_seated_by_its_retry() {
    join_killed_at("join-placed", false).await;
}

#[tokio::test]
async fn a_join_killed_after_its_seat_gets_that_seat_on_retry() {
    join_killed_at("join-seated", true).await;
}

#[tokio::test]
async fn a_fold_killed_after_home_counted_it_counts_the_game_once() {
    let (home_pg, other_pg, mut crashing, steady) = two_clusters_one_crashing("fold-counted");
    let (home, other) = (sql(&home_pg.url()).await, sql(&other_pg.url()).await);
    let mut a = crashing.game().await;
    let _first = full_game(&mut a).await;
    let players = full_ranked_game(&mut a).await;
    let game_id = players[0].game_id;
    let map = partition_map(&home).await;
    assert_eq!(map[&((game_id % 64) as i64)], "c1");
    // The crashing server ends the game, and so folds it first; once it
    // died, the leaves go to the other server (the same sequence numbers:
    // a leave it applied before dying is answered, not applied again).
    let mut b = steady.game().await;
    for player in &players {
        let leave = pb::LeaveRequest {
            token: player.token.clone(),
            game_id,
            seat: player.seat,
            seq: player.next_seq,
        };
        if a.leave(leave.clone()).await.is_err() {
            b.leave(leave).await.unwrap();
        }
    }
    wait::until("the outbox emptied", Duration::from_secs(10), || {
        let other = other.clone();
        async move {
            let left: i64 = sqlx::query_scalar("SELECT count(*) FROM results")
                .fetch_one(&other)
                .await
                .unwrap();
            (left == 0).then_some(())
        }
    })
    .await;
    let rows: Vec<(String, i32)> = sqlx::query_as("SELECT name, games FROM rankings ORDER BY name")
        .fetch_all(&home)
        .await
        .unwrap();
    let names: Vec<(String, i32)> = (0..4).map(|i| (format!("r{i}"), 1)).collect();
    assert_eq!(rows, names, "counted once although the first fold died");
    let crashed = crashing.try_exit();
    assert!(
        crashed.is_some_and(|s| !s.success()),
        "the server that ended the game died folding it"
    );
    drop(steady);
}

/// Moves partition `partition` to `cluster` in home's map (no rows move:
/// that is for the mover) and bumps the map's version.
async fn remap(home: &PgPool, partition: i64, cluster: &str) {
    let mut tx = home.begin().await.unwrap();
    sqlx::query("UPDATE partition_map SET cluster = $2 WHERE partition = $1")
        .bind(partition as i16)
        .bind(cluster)
        .execute(&mut *tx)
        .await
        .unwrap();
    next_map_version(tx).await;
}

/// Bumps the map's version with what `tx` changed, as the servers' and
/// the mover's changes of the map do: every server reads the map again.
async fn next_map_version(mut tx: sqlx::Transaction<'_, sqlx::Postgres>) {
    sqlx::query("UPDATE partition_map_version SET version = version + 1 WHERE id = 1")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn every_server_routes_by_a_changed_map() {
    let (home_pg, _other_pg, servers) = two_clusters();
    let home = sql(&home_pg.url()).await;
    let mut clients = Vec::new();
    for s in &servers {
        clients.push(s.game().await);
    }
    let mut players = full_game(&mut clients[0]).await;
    let game_id = players[0].game_id;
    let partition = (game_id % 64) as i64;
    assert_eq!(partition_map(&home).await[&partition], "home");
    let player = &mut players[0];
    for client in &mut clients {
        let req = player.act_request(action(player.next_seq));
        client.act(req).await.expect("the game plays on home");
    }
    // Its partition now said to be on c1, where the game is not: each
    // server looks for it there.
    remap(&home, partition, "c1").await;
    until_every_server(&clients, &player.token, game_id, false).await;
    // And back: the game plays again through either server.
    remap(&home, partition, "home").await;
    until_every_server(&clients, &player.token, game_id, true).await;
}

/// Waits until every client's server finds (`found`) or does not find the
/// token's game `game_id`: it routes the game by the map home has now.
async fn until_every_server(
    clients: &[GameClient<Channel>],
    token: &[u8],
    game_id: u64,
    found: bool,
) {
    for client in clients {
        wait::until(
            "the server to route by the map",
            Duration::from_secs(3),
            || {
                let mut client = client.clone();
                let req = pb::GetStateRequest {
                    token: token.to_vec(),
                    game_id,
                };
                async move { (client.get_state(req).await.is_ok() == found).then_some(()) }
            },
        )
        .await;
    }
}

/// A cluster registered while the servers run (`db add-cluster`, before
/// any partition moves to it) is opened by every running server at its
/// next look at the map, as their heartbeats show: a move waits for that
/// before it cuts over to the cluster.
#[tokio::test]
async fn running_servers_open_a_cluster_added_while_they_run() {
    let (home_pg, other_pg) = (start_db(), start_db());
    let servers: Vec<ServerProcess> = (0..2)
        .map(|_| ServerProcess::start(&home_pg.url()))
        .collect();
    let home = sql(&home_pg.url()).await;
    let opened = |cluster: &'static str| servers_listing(&home, cluster);
    wait::until("both servers to beat", Duration::from_secs(10), || async {
        (opened("home").await == 2).then_some(())
    })
    .await;
    assert_eq!(opened("c1").await, 0);

    let spec = borbaman_server::store::partitions::ClusterSpec {
        name: "c1".into(),
        url: other_pg.url(),
        patroni: Vec::new(),
    };
    let row = borbaman_server::store::grow::add_cluster(&home_pg.url(), &spec)
        .await
        .unwrap();
    assert!(
        row.partitions.is_empty(),
        "a cluster added holds no partition"
    );
    wait::until(
        "every running server to open the added cluster",
        Duration::from_secs(10),
        || async { (opened("c1").await == 2).then_some(()) },
    )
    .await;
    drop(servers);
}

/// A cluster the map names that a server cannot open yet (here its
/// database takes no writes, so the server cannot set its fence) is tried
/// again at every look at the map, not only at the map's next change, and
/// said once in the server's log, not at every look.
#[tokio::test]
async fn a_cluster_a_server_could_not_open_is_opened_once_it_can_be_without_a_map_change() {
    let (home_pg, c1_pg, scratch_pg) = (start_db(), start_db(), start_db());
    // c1 gets its schema and fence through a scratch home, then turns
    // read-only for every new connection.
    let spec = borbaman_server::store::partitions::ClusterSpec {
        name: "c1".into(),
        url: c1_pg.url(),
        patroni: Vec::new(),
    };
    borbaman_server::store::grow::add_cluster(&scratch_pg.url(), &spec)
        .await
        .unwrap();
    let c1 = sql(&c1_pg.url()).await;
    let read_only = |on: bool| {
        let c1 = c1.clone();
        async move {
            let set = if on {
                "SET default_transaction_read_only = on"
            } else {
                "RESET default_transaction_read_only"
            };
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I {set}', current_database()); END $$"
            )))
            .execute(&c1)
            .await
            .unwrap();
        }
    };
    read_only(true).await;

    let log = log_path("unopened");
    let server = ServerProcess::start_logged(&home_pg.url(), &[], &log);
    let home = sql(&home_pg.url()).await;
    let opened = |cluster: &'static str| servers_listing(&home, cluster);
    wait::until("the server to beat", Duration::from_secs(10), || async {
        (opened("home").await == 1).then_some(())
    })
    .await;
    // Registered as `db add-cluster` registers it: listed, the map's
    // version bumped.
    let mut tx = home.begin().await.unwrap();
    sqlx::query("INSERT INTO db_clusters (name, number, url) VALUES ('c1', 1, $1)")
        .bind(c1_pg.url())
        .execute(&mut *tx)
        .await
        .unwrap();
    next_map_version(tx).await;
    let said = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("names database clusters this server cannot open")
            .count()
    };
    wait::until(
        "the server to say it cannot open c1",
        Duration::from_secs(20),
        || async { (said() > 0).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(opened("c1").await, 0, "c1 takes no writes: not opened");

    read_only(false).await;
    wait::until(
        "the server to open c1 once it can, the map unchanged",
        Duration::from_secs(20),
        || async { (opened("c1").await == 1).then_some(()) },
    )
    .await;
    assert_eq!(
        said(),
        1,
        "said once over seconds of looks every 500 ms: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    drop(server);
    std::fs::remove_file(&log).ok();
}

/// A server started while a cluster the map names is down (one cluster's
/// outage while a server restarts) starts all the same: it serves the
/// games of the clusters it reaches, answers the calls of the down
/// cluster's games "database unavailable" (what sends a client to a server
/// that reaches it, never a wrong answer), and serves them once the
/// cluster is back, its map unchanged; and it runs that cluster's
/// retention job from then on, as for the clusters open at its start.
#[tokio::test]
async fn a_server_started_while_a_cluster_is_down_serves_the_others_then_that_one_once_back() {
    let (home_pg, mut c1_pg) = (start_db(), start_db());
    let cluster = format!("--db-cluster=c1={}", c1_pg.url());
    let home = sql(&home_pg.url()).await;
    // One game on each cluster, seated through a first server.
    let first = ServerProcess::start_with(&home_pg.url(), &[&cluster]);
    let map = partition_map(&home).await;
    let mut client = first.game().await;
    let mut games: BTreeMap<String, Vec<Player>> = BTreeMap::new();
    for _ in 0..6 {
        let players = full_game(&mut client).await;
        let on = map[&((players[0].game_id % 64) as i64)].clone();
        games.entry(on).or_insert(players);
        if games.len() == 2 {
            break;
        }
    }
    assert_eq!(games.len(), 2, "joins spread games over both clusters");
    drop(client);
    drop(first);

    c1_pg.stop().expect("stop c1");
    let log = log_path("c1-down");
    let server =
        ServerProcess::start_logged(&home_pg.url(), &[&cluster, "--retention", "1s"], &log);
    let client = server.game().await;
    let act = |player: &mut Player| {
        let req = player.act_request(action(player.next_seq));
        let mut client = client.clone();
        async move { client.act(req).await }
    };
    let on_home = &mut games.get_mut("home").unwrap()[0];
    act(on_home)
        .await
        .expect("home's game is served while c1 is down");
    let on_c1 = &mut games.get_mut("c1").unwrap()[0];
    let refused = act(on_c1).await.expect_err("c1 is down");
    assert_eq!(
        (refused.code(), borbaman_proto::Reason::of(&refused)),
        (
            tonic::Code::Unavailable,
            Some(borbaman_proto::Reason::DatabaseUnavailable)
        ),
        "c1's game: {refused:?}"
    );
    assert!(
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("names database clusters this server cannot open"),
        "the server says which cluster it cannot open"
    );

    c1_pg.start().expect("start c1 again");
    wait::until(
        "c1's game served once c1 is back",
        Duration::from_secs(20),
        || {
            let on_c1 = &mut games.get_mut("c1").unwrap()[0];
            let req = on_c1.act_request(action(on_c1.next_seq));
            let mut client = client.clone();
            async move { client.act(req).await.ok().map(|_| ()) }
        },
    )
    .await;

    // Its players leave; the finished game goes from c1 with the
    // retention job this server runs there (the only server).
    let players = games.remove("c1").unwrap();
    let game_id = players[0].game_id;
    for player in &players {
        client
            .clone()
            .leave(player.leave_request())
            .await
            .expect("leave");
    }
    let c1 = sql(&c1_pg.url()).await;
    wait::until(
        "c1's finished game deleted by retention",
        Duration::from_secs(30),
        || {
            let c1 = c1.clone();
            async move {
                (count(&c1, "SELECT count(*) FROM games WHERE id = $1", game_id).await == 0)
                    .then_some(())
            }
        },
    )
    .await;
    drop(client);
    drop(server);
    std::fs::remove_file(&log).ok();
}

/// A cluster whose address takes connections and never answers (a host
/// gone, its address kept by something silent) neither holds a server's
/// start nor its games on the other clusters: the server starts, seats
/// and serves players on home, and says it cannot open the cluster.
#[tokio::test]
async fn a_cluster_that_takes_connections_and_never_answers_holds_no_start_and_no_game() {
    let home_pg = start_db();
    // Accepts every connection and says nothing, until the test ends.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().flatten() {
            held.push(stream);
        }
    });
    let cluster = format!("--db-cluster=c1=postgres://postgres@127.0.0.1:{port}/borbaman");
    let log = log_path("silent-cluster");
    // Fresh: the first server spreads the partitions over home and c1.
    let server = ServerProcess::start_logged(&home_pg.url(), &[&cluster], &log);
    let home = sql(&home_pg.url()).await;
    let map = partition_map(&home).await;
    assert_eq!(
        map.values().filter(|c| *c == "c1").count(),
        32,
        "c1 holds half the partitions: {map:?}"
    );
    let mut client = server.game().await;
    let mut players = full_game(&mut client).await;
    assert_eq!(
        map[&((players[0].game_id % 64) as i64)],
        "home",
        "joins go where this server can seat them"
    );
    for player in &mut players {
        let req = player.act_request(action(player.next_seq));
        client.act(req).await.expect("home's game is served");
    }
    wait::until(
        "the server to say it cannot open c1",
        Duration::from_secs(20),
        || async {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("names database clusters this server cannot open")
                .then_some(())
        },
    )
    .await;
    drop(client);
    drop(server);
    std::fs::remove_file(&log).ok();
}
