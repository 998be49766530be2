//! `borbaman replay --verify`: four bots finish a game on the corridors
//! arena through real servers; re-simulating it from its seed and log gives
//! its stored state byte for byte. Once its stored state is altered by SQL,
//! the check fails, exits non-zero and names the game.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use borbaman::bot::{BotTeam, spawn_bots};
use borbaman_client::pool::PoolConfig;
use tokio::sync::mpsc;

fn verify_all(database_url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_borbaman"))
        .args([
            "replay",
            "--verify",
            "--all",
            "--database-url",
            database_url,
        ])
        .env_remove("DATABASE_URL")
        .output()
        .expect("run borbaman replay")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_on_a_bot_game_and_fails_once_its_state_is_altered() {
    let cluster = common::cluster_with(2, &["--round-ms=3000"]);
    let (_stopper, stop) = borbaman::shutdown::channel();
    let (outcome_tx, mut outcomes) = mpsc::unbounded_channel();
    let bots = spawn_bots(
        &cluster.addresses(),
        PoolConfig::default(),
        &BotTeam {
            games: Some(1),
            map: "corridors".into(),
            ..BotTeam::new(4)
        },
        stop,
        outcome_tx,
    )
    .await
    .unwrap();
    let mut game_id = 0;
    for _ in 0..4 {
        let outcome = tokio::time::timeout(Duration::from_secs(90), outcomes.recv())
            .await
            .expect("the game ends before sudden death has closed the arena")
            .expect("bots report before they stop");
        game_id = outcome.game_id;
    }
    bots.join_all().await;

    let db = common::database(&cluster).await;
    let arena: i16 = sqlx::query_scalar("SELECT arena FROM games WHERE id = $1")
        .bind(game_id as i64)
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(arena, 2, "the bots asked for the corridors arena");

    let url = cluster.database_url();
    let checked = common::blocking(|| verify_all(&url));
    let stdout = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(stdout.contains("verified 1 finished games"), "{stdout}");

    // One byte of the stored state: seat 0's bombs, range and kills.
    sqlx::query(
        "UPDATE games SET state = set_byte(state, 24, get_byte(state, 24) # 1) WHERE id = $1",
    )
    .bind(game_id as i64)
    .execute(&db)
    .await
    .unwrap();
    let altered = common::blocking(|| verify_all(&url));
    let stderr = String::from_utf8_lossy(&altered.stderr);
    assert!(
        !altered.status.success(),
        "an altered game must fail: {stderr}"
    );
    assert!(
        stderr.contains(&format!("game {game_id} differs from its replay")),
        "{stderr}"
    );
}
