//! `borbaman rankings --servers …`: four bots with identities of their own
//! (as `play`'s local bots have) finish a ranked game; the rankings, piped,
//! list each of them once with one game, and mark the `--name` player's
//! line.

mod common;

use std::process::Command;
use std::time::Duration;

use borbaman::bot::{BotTeam, spawn_bots};
use borbaman_client::pool::PoolConfig;
use borbaman_client::state_dir::StateDir;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rankings_list_the_players_of_a_ranked_game_and_mark_yours() {
    let cluster = common::cluster_with(2, &["--round-ms=1000"]);
    let home = tempfile::tempdir().unwrap();
    let (_stopper, stop) = borbaman::shutdown::channel();
    let (outcome_tx, mut outcomes) = tokio::sync::mpsc::unbounded_channel();
    let team = BotTeam {
        games: Some(1),
        map: "open".into(),
        sessions: Some(StateDir::at(home.path())),
        ..BotTeam::new(4)
    };
    let bots = spawn_bots(
        &cluster.addresses(),
        PoolConfig::default(),
        &team,
        stop,
        outcome_tx,
    )
    .await
    .expect("four bots connect");
    for _ in 0..4 {
        tokio::time::timeout(Duration::from_secs(90), outcomes.recv())
            .await
            .expect("the game ends before sudden death has closed the arena")
            .expect("bots report before they stop");
    }
    bots.join_all().await;

    let servers = cluster.addresses().join(",");
    // The game's result is ranked once it is recorded; ask until it is.
    let output =
        borbaman_cluster::wait::until("four ranked players", Duration::from_secs(10), || async {
            let out = Command::new(env!("CARGO_BIN_EXE_borbaman"))
                .args(["rankings", "--servers", &servers, "--name", "bot-2"])
                .env_remove("BORBAMAN_SERVERS")
                .output()
                .expect("run borbaman rankings");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            (text.lines().count() == 5).then_some(text)
        })
        .await;
    println!("{output}");
    let lines: Vec<&str> = output.lines().collect();
    assert!(lines[0].contains("games") && lines[0].contains("win rate"));
    for n in 1..=4 {
        let line = lines
            .iter()
            .find(|l| l.contains(&format!("bot-{n} ")))
            .unwrap_or_else(|| panic!("bot-{n} ranked: {output}"));
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[2], "1", "one game each: {line}");
        assert_eq!(line.ends_with("<- you"), n == 2, "{line}");
    }

    // Without --servers it says what to give.
    let out = Command::new(env!("CARGO_BIN_EXE_borbaman"))
        .arg("rankings")
        .env_remove("BORBAMAN_SERVERS")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--servers"));
}
