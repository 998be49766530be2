//! A partition moved to another cluster while its game plays: real
//! servers on two real PostgreSQL clusters, one of them with a map that
//! never refreshes by itself (it learns the move only from the fence).
//! Every act answered is in the target's log exactly once, the source
//! takes no write after the cut-over, and a player joining again finds
//! its game on the target.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use borbaman_cluster::{LocalPostgres, wait};
use borbaman_proto::pb;
use borbaman_server::store::mover;
use common::*;
use sqlx::PgPool;

async fn writable(pool: &PgPool, partition: i16) -> bool {
    sqlx::query_scalar("SELECT writable FROM partition_fence WHERE partition = $1")
        .bind(partition)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Whether `partition` is writable on home and on the other cluster.
async fn writable_on(home: &PgPool, other: &PgPool, partition: i16) -> (bool, bool) {
    (
        writable(home, partition).await,
        writable(other, partition).await,
    )
}

/// Each (token, seq) of game `game_id`'s action log on `pool`.
async fn logged(pool: &PgPool, game_id: u64) -> Vec<(Vec<u8>, i64)> {
    sqlx::query_as(
        "SELECT s.token_hash, a.seq FROM actions a JOIN sessions s ON s.id = a.session_id \
         WHERE a.game_id = $1 ORDER BY 1, 2",
    )
    .bind(game_id as i64)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Home and a second cluster `c1`, each a throwaway database, and two
/// servers on them: `fresh` follows the map; `stale`'s map never
/// refreshes on its own, so it learns of a move only when the source's
/// fence turns its calls away.
struct TwoClusters {
    home_pg: LocalPostgres,
    other_pg: LocalPostgres,
    fresh: ServerProcess,
    stale: ServerProcess,
}

impl TwoClusters {
    fn start() -> TwoClusters {
        let (home_pg, other_pg) = (start_db(), start_db());
        let fresh = ServerProcess::start_with(&home_pg.url(), &[&cluster_arg(&other_pg)]);
        let stale = stale_server(&home_pg, &other_pg);
        TwoClusters {
            home_pg,
            other_pg,
            fresh,
            stale,
        }
    }

    /// Another server whose map never refreshes on its own.
    fn another_stale_server(&self) -> ServerProcess {
        stale_server(&self.home_pg, &self.other_pg)
    }
}

fn cluster_arg(other_pg: &LocalPostgres) -> String {
    format!("--db-cluster=c1={}", other_pg.url())
}

fn stale_server(home_pg: &LocalPostgres, other_pg: &LocalPostgres) -> ServerProcess {
    ServerProcess::start_with_env(
        &home_pg.url(),
        &[&cluster_arg(other_pg)],
        &[("BORBAMAN_MAP_POLL_MS", "3600000")],
    )
}

#[tokio::test]
async fn a_partition_moves_while_its_game_plays_and_every_act_lands_once_on_the_target() {
    let TwoClusters {
        home_pg,
        other_pg,
        fresh,
        stale,
    } = TwoClusters::start();
    let (home, other) = (sql(&home_pg.url()).await, sql(&other_pg.url()).await);
    let mut client = fresh.game().await;
    // The first game's worth of joiners is placed on home.
    let players = full_game(&mut client).await;
    let game_id = players[0].game_id;
    let partition = (game_id % 64) as i16;
    let on: String = sqlx::query_scalar("SELECT cluster FROM partition_map WHERE partition = $1")
        .bind(partition)
        .fetch_one(&home)
        .await
        .unwrap();
    assert_eq!(on, "home", "the first game is on home");
    assert_eq!(
        writable_on(&home, &other, partition).await,
        (true, false),
        "a partition is writable where the map puts it, and only there"
    );

    // Each player acts in turn through both servers until told to stop;
    // every act must be answered.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for (i, mut player) in players.clone().into_iter().enumerate() {
        let clients = [fresh.game().await, stale.game().await];
        let stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let mut answered = Vec::new();
            let mut n = i;
            while !*stop.borrow() || answered.len() < 40 {
                let req = player.act_request(action(player.next_seq));
                let seq = req.seq;
                let reply = clients[n % 2].clone().act(req).await;
                assert!(
                    reply.is_ok(),
                    "act {seq} of seat {}: {reply:?}",
                    player.seat
                );
                answered.push(seq as i64);
                n += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (player, answered)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut said = Vec::new();
    let report = mover::move_partition(&home_pg.url(), partition as u16, "c1", &mut |line| {
        said.push(line)
    })
    .await
    .expect("the move");
    eprintln!("{}\n{report:?}", said.join("\n"));
    assert_eq!(
        (report.source.as_str(), report.target.as_str()),
        ("home", "c1")
    );
    assert!(
        said.iter().any(|l| l.contains("read-only")),
        "the move tells its steps: {said:?}"
    );
    // Play on after the move, through both servers.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop_tx.send(true).unwrap();
    let mut sent = BTreeSet::new();
    for task in tasks {
        let (player, answered) = task.await.unwrap();
        for seq in answered {
            sent.insert((player.token.clone(), seq));
        }
    }

    // The map and the fences: writable on the target only.
    let on: String = sqlx::query_scalar("SELECT cluster FROM partition_map WHERE partition = $1")
        .bind(partition)
        .fetch_one(&home)
        .await
        .unwrap();
    assert_eq!(on, "c1");
    assert_eq!(writable_on(&home, &other, partition).await, (false, true));
    // Every answered act is in the target's log, once; the source kept
    // no copy of the game.
    let target_log = logged(&other, game_id).await;
    let tokens: Vec<Vec<u8>> = players
        .iter()
        .map(|p| borbaman_server::token::hash(&p.token).to_vec())
        .collect();
    let unique: BTreeSet<_> = target_log.iter().cloned().collect();
    assert_eq!(unique.len(), target_log.len(), "no act logged twice");
    for (token, seq) in &sent {
        let hash = &tokens[players.iter().position(|p| &p.token == token).unwrap()];
        assert!(
            unique.contains(&(hash.clone(), *seq)),
            "act {seq} was answered but is not in the target's log"
        );
    }
    assert_eq!(
        target_log.len(),
        sent.len(),
        "no act the players did not send"
    );
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM games WHERE id = $1")
        .bind(game_id as i64)
        .fetch_one(&home)
        .await
        .unwrap();
    assert_eq!(left, 0, "the source's copy is deleted");

    // A player joining again (its client restarted) through the stale
    // server finds its seat in the moved game.
    let mut stale_client = stale.game().await;
    let reply = stale_client
        .join(pb::JoinRequest {
            name: "p0".into(),
            token: players[0].token.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((reply.game_id, reply.rejoined), (game_id, true));

    // Running the move again does nothing.
    let again = mover::move_partition(&home_pg.url(), partition as u16, "c1", &mut |_| {})
        .await
        .unwrap();
    assert!(again.already_there);
}

/// The version of game `player`'s game as `client`'s server reads it.
async fn read_version(
    client: &mut borbaman_proto::pb::game_client::GameClient<tonic::transport::Channel>,
    player: &Player,
) -> u64 {
    client
        .get_state(pb::GetStateRequest {
            token: player.token.clone(),
            game_id: player.game_id,
        })
        .await
        .expect("the state")
        .into_inner()
        .state
        .expect("a state")
        .version
}

#[tokio::test]
async fn a_server_with_a_stale_map_never_answers_from_the_copy_a_move_left_behind() {
    let clusters = TwoClusters::start();
    // A spectator's server, as stale as `stale`.
    let watcher = clusters.another_stale_server();
    let TwoClusters {
        home_pg,
        other_pg: _other_pg,
        fresh,
        stale,
    } = clusters;
    let home = sql(&home_pg.url()).await;
    let (mut fresh_client, mut stale_client) = (fresh.game().await, stale.game().await);
    let mut players = full_game(&mut fresh_client).await;
    let game_id = players[0].game_id;
    let partition = (game_id % 64) as u16;
    read_version(&mut stale_client, &players[0]).await;

    let url = home_pg.url();
    let mover =
        tokio::spawn(
            async move { mover::move_partition(&url, partition, "c1", &mut |_| {}).await },
        );
    // The flip: the map names the target. The source keeps its copy for
    // two seconds more, for servers that have not read the map yet.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let on: String =
            sqlx::query_scalar("SELECT cluster FROM partition_map WHERE partition = $1")
                .bind(partition as i16)
                .fetch_one(&home)
                .await
                .unwrap();
        if on == "c1" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the move flipped");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The game plays on, on the target.
    let mut newest = 0;
    for player in players.iter_mut() {
        let reply = fresh_client
            .act(player.act_request(action(player.next_seq)))
            .await
            .expect("an act after the flip")
            .into_inner();
        newest = newest.max(reply.state.expect("a state").version);
    }
    // A server whose map still names the source: its reads and acts are
    // the target's.
    let version = read_version(&mut stale_client, &players[0]).await;
    let watched = watcher
        .game()
        .await
        .watch_state(pb::WatchStateRequest { game_id })
        .await
        .expect("a spectator's read through a stale server")
        .into_inner()
        .state
        .expect("a state")
        .version;
    let next = action(players[1].next_seq);
    let act = stale_client.act(players[1].act_request(next)).await;
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM games WHERE id = $1")
        .bind(game_id as i64)
        .fetch_one(&home)
        .await
        .unwrap();
    assert_eq!(
        kept, 1,
        "the source's copy was still there while the stale server answered"
    );
    assert!(
        version >= newest,
        "the stale server read version {version}, older than {newest} the target had"
    );
    assert!(
        watched >= newest,
        "a spectator through a stale server saw version {watched}, older than {newest}"
    );
    let act = act.expect("an act through the stale server").into_inner();
    assert!(act.state.expect("a state").version > newest);
    mover.await.unwrap().expect("the move");
}

/// A live server that has not opened the move's target (it cannot reach
/// that database yet) would keep sending the moved games to the fenced
/// source: the move waits for it before its fence, the partition still
/// writable where it was, and cuts over once every live server has the
/// target open.
#[tokio::test]
async fn a_move_waits_before_its_fence_for_every_live_server_to_open_the_target() {
    let TwoClusters {
        home_pg,
        other_pg,
        fresh,
        stale: _stale,
    } = TwoClusters::start();
    let (home, other) = (sql(&home_pg.url()).await, sql(&other_pg.url()).await);
    let mut client = fresh.game().await;
    let players = full_game(&mut client).await;
    let partition = (players[0].game_id % 64) as i16;
    // The real servers report both clusters with their heartbeats.
    wait::until(
        "the servers report the clusters they opened",
        Duration::from_secs(10),
        || async {
            let reporting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM servers WHERE 'c1' = ANY (clusters) AND 'home' = ANY (clusters)",
            )
            .fetch_one(&home)
            .await
            .unwrap();
            (reporting == 2).then_some(())
        },
    )
    .await;
    // A third server, live (its heartbeat ahead of the clock), with only
    // home open.
    sqlx::query(
        "INSERT INTO servers (id, address, heartbeat_at, clusters) \
         VALUES ('cut-off', '127.0.0.1:9', now() + interval '1 hour', '{home}')",
    )
    .execute(&home)
    .await
    .unwrap();

    let url = home_pg.url();
    let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let lines = said.clone();
    let mover = tokio::spawn(async move {
        mover::move_partition(&url, partition as u16, "c1", &mut |line| {
            lines.lock().unwrap().push(line)
        })
        .await
    });
    // The mover says whom it waits for once it has waited two seconds.
    wait::until(
        "the mover to say whom it waits for",
        Duration::from_secs(10),
        || {
            let waiting = mover.is_finished()
                || said
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|line| line.contains("waiting for"));
            async move { waiting.then_some(()) }
        },
    )
    .await;
    assert!(!mover.is_finished(), "the move went on without the server");
    assert_eq!(
        writable_on(&home, &other, partition).await,
        (true, false),
        "the partition stays writable on its cluster while the move waits"
    );
    let step: String = sqlx::query_scalar("SELECT step FROM partition_moves WHERE partition = $1")
        .bind(partition)
        .fetch_one(&home)
        .await
        .unwrap();
    assert_eq!(step, "fencing", "held before its fence");
    assert!(
        said.lock()
            .unwrap()
            .iter()
            .any(|line| line.contains("waiting for 127.0.0.1:9 to open c1")),
        "the mover says whom it waits for: {:?}",
        said.lock().unwrap()
    );

    // The server opens the target: the move cuts over.
    sqlx::query("UPDATE servers SET clusters = '{home,c1}' WHERE id = 'cut-off'")
        .execute(&home)
        .await
        .unwrap();
    let report = tokio::time::timeout(Duration::from_secs(60), mover)
        .await
        .expect("the move ends once every server has the target open")
        .unwrap()
        .expect("the move succeeds");
    assert!(report.read_only_ms.is_some(), "{report:?}");
    assert_eq!(
        writable_on(&home, &other, partition).await,
        (false, true),
        "moved"
    );
}

/// A move reads its copy with the partition read-only on the source for a
/// moment, then makes it writable there again, the map unchanged: an act
/// that met that fence waits and lands on the same cluster once the
/// fence lifts, instead of waiting for a map that never changes.
#[tokio::test]
async fn an_act_held_by_a_fence_that_lifts_in_place_lands_on_the_same_cluster() {
    let TwoClusters {
        home_pg,
        other_pg: _other_pg,
        fresh,
        stale,
    } = TwoClusters::start();
    let home = sql(&home_pg.url()).await;
    let mut client = fresh.game().await;
    let mut players = full_game(&mut client).await;
    let game_id = players[0].game_id;
    let partition = (game_id % 64) as i16;
    for server in [&fresh, &stale] {
        let mut client = server.game().await;
        let player = &mut players[0];
        client
            .act(player.act_request(action(player.next_seq)))
            .await
            .expect("an act before the fence");
    }
    let before = logged(&home, game_id).await.len();

    sqlx::query("UPDATE partition_fence SET writable = false WHERE partition = $1")
        .bind(partition)
        .execute(&home)
        .await
        .unwrap();
    let held = Duration::from_millis(400);
    let lift = {
        let home = home.clone();
        tokio::spawn(async move {
            tokio::time::sleep(held).await;
            sqlx::query("UPDATE partition_fence SET writable = true WHERE partition = $1")
                .bind(partition)
                .execute(&home)
                .await
                .unwrap();
        })
    };
    let sent = tokio::time::Instant::now();
    let mut acts = Vec::new();
    for (server, player) in [&fresh, &stale].into_iter().zip(players.iter_mut().skip(1)) {
        let mut client = server.game().await;
        let req = player.act_request(action(player.next_seq));
        acts.push(tokio::spawn(async move { client.act(req).await }));
    }
    for act in acts {
        act.await
            .unwrap()
            .expect("an act held by the fence is answered once it lifts");
    }
    lift.await.unwrap();
    assert!(
        sent.elapsed() >= held - Duration::from_millis(50),
        "the acts waited for the fence: answered after {:?}",
        sent.elapsed()
    );
    assert_eq!(
        logged(&home, game_id).await.len(),
        before + 2,
        "both acts landed on home, once each"
    );
}
