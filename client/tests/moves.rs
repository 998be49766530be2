//! `borbaman db move` killed at each of its steps while the partition's
//! game plays: the partition is writable on at most one cluster (on
//! exactly one but for the cut-over's moment), running the move again
//! finishes it, and every input the players sent is applied once. And a
//! short chaos run moving partitions back and forth while games play.

mod common;

use common::chaos;

use std::process::Command;

use borbaman_client::session::GameSession;
use borbaman_cluster::{ClusterConfig, LocalCluster};
use borbaman_proto::pb::Action;
use sqlx::PgPool;

/// Where partition `p` may be written: (home, c1).
async fn writable(home: &PgPool, c1: &PgPool, p: i16) -> (bool, bool) {
    let on = |pool: &PgPool| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, bool>(
                "SELECT writable FROM partition_fence WHERE partition = $1",
            )
            .bind(p)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    (on(home).await, on(c1).await)
}

async fn owner(home: &PgPool, p: i16) -> String {
    sqlx::query_scalar("SELECT cluster FROM partition_map WHERE partition = $1")
        .bind(p)
        .fetch_one(home)
        .await
        .unwrap()
}

/// `borbaman db move P --to TO`, ended at `crash_at` if given.
fn db_move(home_url: &str, p: i16, to: &str, crash_at: Option<&str>) -> std::process::Output {
    // Bounded: a move that hangs fails the test with what it said.
    let mut command = Command::new("timeout");
    command.args(["120", env!("CARGO_BIN_EXE_borbaman")]);
    command.args([
        "db",
        "move",
        &p.to_string(),
        "--to",
        to,
        "--database-url",
        home_url,
    ]);
    if let Some(point) = crash_at {
        command.env("BORBAMAN_CRASH_AT", point);
    }
    command.env("RUST_BACKTRACE", "0");
    command.output().expect("run borbaman db move")
}

/// One act of every player, each answered: the game plays on after a
/// move; the acts sent.
async fn play_on(players: &mut [GameSession]) -> u64 {
    for player in players.iter_mut() {
        player
            .act(Action::Idle)
            .await
            .expect("an act after the move");
    }
    players.len() as u64
}

/// Every input the players sent (`sent`) is in game `game_id`'s log on
/// `db`, none twice.
async fn assert_applied_once(db: &PgPool, game_id: u64, players: &[GameSession], sent: u64) {
    let mut applied = 0;
    for player in players {
        let seqs = common::applied_seqs(db, game_id, player.seat()).await;
        let unique: std::collections::BTreeSet<_> = seqs.iter().collect();
        assert_eq!(unique.len(), seqs.len(), "no input applied twice");
        applied += seqs.len() as u64;
    }
    assert!(
        applied >= sent,
        "every input sent applied on the game's cluster: {applied} of {sent}"
    );
}

/// Two clusters, two servers, and a game of four seated on it: what the
/// movers' tests move.
struct Moving {
    _cluster: LocalCluster,
    /// Home's database first.
    urls: Vec<String>,
    home: PgPool,
    c1: PgPool,
    _pool: borbaman_client::pool::ServerPool,
    players: Vec<GameSession>,
    game_id: u64,
    /// The game's partition.
    p: i16,
}

impl Moving {
    async fn start(prefix: &str) -> Moving {
        let cluster = LocalCluster::start(
            ClusterConfig {
                db_clusters: 2,
                ..common::config(2, &[])
            },
            |_| {},
        )
        .expect("start a local cluster");
        let urls = cluster.database_urls();
        let home = PgPool::connect(&urls[0]).await.unwrap();
        let c1 = PgPool::connect(&urls[1]).await.unwrap();
        let (pool, players) = common::pool_and_game(&cluster, prefix).await;
        let game_id = players[0].game_id();
        Moving {
            _cluster: cluster,
            urls,
            home,
            c1,
            _pool: pool,
            players,
            game_id,
            p: (game_id % 64) as i16,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mover_killed_at_any_step_leaves_one_writer_at_most_and_running_it_again_finishes() {
    let Moving {
        _cluster,
        urls,
        home,
        c1,
        _pool,
        mut players,
        game_id,
        p,
    } = Moving::start("mover").await;
    let mut sent = 0u64;
    let mut on = owner(&home, p).await;
    for point in [
        "move-started",
        "move-snapshot",
        "move-rows-copied",
        "move-copied",
        "move-fenced",
        "move-flipped",
    ] {
        let to = if on == "home" { "c1" } else { "home" };
        eprintln!("moving partition {p} to {to}, ended at {point}");
        let killed = db_move(&urls[0], p, to, Some(point));
        eprintln!(
            "{}{}",
            String::from_utf8_lossy(&killed.stdout),
            String::from_utf8_lossy(&killed.stderr)
        );
        assert!(
            !killed.status.success(),
            "the mover ended at {point}: {}",
            String::from_utf8_lossy(&killed.stderr)
        );
        let (at_home, at_c1) = writable(&home, &c1, p).await;
        let writers = usize::from(at_home) + usize::from(at_c1);
        if point == "move-fenced" || point == "move-snapshot" {
            // Cut while fenced: between the fence and the flip, or in the
            // moment the copy's snapshot is taken.
            assert_eq!(writers, 0, "cut at {point}: nobody writes");
        } else {
            assert_eq!(writers, 1, "killed at {point}: ({at_home}, {at_c1})");
            let writer = if at_home { "home" } else { "c1" };
            assert_eq!(owner(&home, p).await, writer, "the map names the writer");
        }
        let again = db_move(&urls[0], p, to, None);
        assert!(
            again.status.success(),
            "the move run again after {point}: {}{}",
            String::from_utf8_lossy(&again.stdout),
            String::from_utf8_lossy(&again.stderr)
        );
        assert_eq!(owner(&home, p).await, to);
        assert_eq!(
            writable(&home, &c1, p).await,
            (to == "home", to == "c1"),
            "after {point}"
        );
        on = to.to_string();
        // The game plays on, on its new cluster.
        sent += play_on(&mut players).await;
    }
    let db = if on == "home" { &home } else { &c1 };
    assert_applied_once(db, game_id, &players, sent).await;
}

/// Drops partition `p`'s move slot on `pool`, as a failover of the
/// source loses it (Patroni does not carry logical slots): the walsender
/// using it is ended first, and the drop tried until the subscriber's
/// worker is not back on it.
async fn lose_slot(pool: &PgPool, p: i16) {
    let slot = format!("borbaman_move_{p}");
    borbaman_cluster::wait::until(
        "the move's slot to be dropped",
        std::time::Duration::from_secs(30),
        || async {
            sqlx::query(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
             WHERE slot_name = $1 AND active_pid IS NOT NULL",
            )
            .bind(&slot)
            .execute(pool)
            .await
            .unwrap();
            sqlx::query("SELECT pg_drop_replication_slot($1)")
                .bind(&slot)
                .execute(pool)
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
}

/// A move whose source lost its replication slot (a failover) before or
/// after its fence copies the partition again when run again, and the
/// game plays on with every input applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_whose_source_lost_its_slot_copies_again_and_loses_nothing() {
    let Moving {
        _cluster,
        urls,
        home,
        c1,
        _pool,
        mut players,
        game_id,
        p,
    } = Moving::start("slot").await;
    let mut sent = 0u64;
    let mut on = owner(&home, p).await;
    for point in ["move-copied", "move-fenced"] {
        let to = if on == "home" { "c1" } else { "home" };
        let killed = db_move(&urls[0], p, to, Some(point));
        assert!(!killed.status.success(), "the mover ended at {point}");
        let (source, target) = if on == "home" {
            (&home, &c1)
        } else {
            (&c1, &home)
        };
        lose_slot(source, p).await;
        if point == "move-fenced" {
            // The fence's mark had not reached the target either.
            sqlx::query("DELETE FROM move_marks WHERE partition = $1")
                .bind(p)
                .execute(target)
                .await
                .unwrap();
        }
        let again = db_move(&urls[0], p, to, None);
        let said = String::from_utf8_lossy(&again.stdout).to_string();
        assert!(
            again.status.success(),
            "the move run again after {point} and a lost slot: {said}{}",
            String::from_utf8_lossy(&again.stderr)
        );
        assert!(said.contains("copying again"), "{said}");
        assert_eq!(owner(&home, p).await, to);
        assert_eq!(
            writable(&home, &c1, p).await,
            (to == "home", to == "c1"),
            "after {point}"
        );
        on = to.to_string();
        sent += play_on(&mut players).await;
    }
    let db = if on == "home" { &home } else { &c1 };
    assert_applied_once(db, game_id, &players, sent).await;
}

#[test]
fn partitions_moved_back_and_forth_while_games_play_lose_and_duplicate_nothing() {
    let run = chaos::run(
        "chaos --fault partition-move",
        &[
            chaos::SHORT_RUN,
            &[
                "--db-clusters",
                "2",
                "--faults",
                "3",
                "--fault-interval-s",
                "3",
                "--fault",
                "partition-move",
            ],
        ]
        .concat(),
    );
    run.assert_nothing_lost(3);
    let (rows, text) = run.faults();
    assert_eq!(rows.len(), 3, "{text}");
    for row in &rows {
        assert_eq!(row[2], "partition-move", "{text}");
        assert!(row[3].starts_with("partition "), "{text}");
        assert_eq!(row[8], "", "every move finished: {text}");
        let read_only: f64 = row[9].parse().unwrap_or_else(|_| panic!("{text}"));
        assert!(read_only > 0.0, "{text}");
    }
    let inputs = &run.summary["invariants"]["inputs"];
    assert_eq!(inputs["sent"], inputs["applied"], "{}", run.stdout);
}
