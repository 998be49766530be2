//! Four bots play a whole game against a real cluster and finish it with a
//! winner or a draw (sudden death guarantees an end; the servers create
//! games with a 1-second round, so the arena starts closing early), at
//! every bot level.

mod common;

use std::time::Duration;

use borbaman::brain::Level;
use borbaman_client::pool::PoolConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_bots_finish_a_game() {
    let cluster = common::cluster_with(3, &["--round-ms=1000"]);
    // A 1-second round, then sudden death closes the 113 open cells, one
    // every 3 ticks: about 20 s in all.
    let finished = common::bot_game(
        &cluster.addresses(),
        PoolConfig::default(),
        "",
        Duration::from_secs(90),
        "the game before sudden death has closed the arena",
    )
    .await;

    let game = finished[0].game_id;
    assert!(
        finished.iter().all(|o| o.game_id == game),
        "one game: {finished:?}"
    );
    let first = &finished[0];
    assert!(first.draw || first.winner.is_some(), "{first:?}");
    assert!(
        finished
            .iter()
            .all(|o| o.winner == first.winner && o.draw == first.draw),
        "every bot saw the same ending: {finished:?}"
    );
    if let Some(winner) = &first.winner {
        assert!(winner.starts_with("bot-"), "{winner}");
    }
    assert!(finished.iter().all(|o| o.regressions == 0), "{finished:?}");
}

/// Easy and hard bots (normal ones above) finish their games too, one after
/// the other on one cluster, and `borbaman replay --verify` re-simulates
/// both games to their stored states byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_bots_of_each_other_level_finish_a_game() {
    let cluster = common::cluster_with(3, &["--round-ms=1000"]);
    for level in [Level::Easy, Level::Hard] {
        let finished = common::bot_game_at(
            &cluster.addresses(),
            PoolConfig::default(),
            "open",
            level,
            Duration::from_secs(90),
            &format!("the {level} bots' game before sudden death has closed the arena"),
        )
        .await;
        let first = &finished[0];
        assert!(
            finished.iter().all(|o| o.game_id == first.game_id),
            "{level}: one game: {finished:?}"
        );
        assert!(first.draw || first.winner.is_some(), "{level}: {first:?}");
        assert!(finished.iter().all(|o| o.regressions == 0), "{finished:?}");
    }
    let verified = std::process::Command::new(env!("CARGO_BIN_EXE_borbaman"))
        .args(["replay", "--verify", "--all", "--database-url"])
        .arg(cluster.database_url())
        .env_remove("DATABASE_URL")
        .output()
        .expect("run borbaman replay --verify");
    let out = String::from_utf8_lossy(&verified.stdout);
    assert!(
        verified.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    assert!(out.contains("2 finished games"), "{out}");
}
