//! `borbaman replay`: four bots finish a game through real servers.
//! Played back through the servers, the game steps to its stored state and
//! is drawn as in play; `--verify` re-simulates it from its seed and log
//! and gets its stored state byte for byte; once its stored state is
//! altered by SQL, the check fails, exits non-zero and names the game.
//!
//! One bot game for both (a whole game is most of the test's time): the
//! playback reads the game before its state is altered.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use borbaman_client::pool::PoolConfig;

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

/// Four bots play one game on `map` to its end; returns its id.
async fn bot_game(cluster: &borbaman_cluster::local::LocalCluster, map: &str) -> u64 {
    let finished = common::bot_game(
        &cluster.addresses(),
        PoolConfig::default(),
        map,
        Duration::from_secs(90),
        "the game before sudden death has closed the arena",
    )
    .await;
    finished[0].game_id
}

/// `borbaman replay GAME_ID`: a finished game fetched through the servers
/// (a read-only call), stepped tick by tick to its end, is the stored final
/// state byte for byte, and is drawn like a game in play with the replay's
/// status in the HUD. A game that has not finished is refused. Then
/// `borbaman replay --verify --all` passes on it, and fails naming it once
/// one byte of its stored state is altered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_the_stored_state_and_verify_fails_once_it_is_altered() {
    use borbaman::replay::playback::Control;
    use borbaman::ui::{ColorMode, draw};
    use borbaman_client::pool::ServerPool;
    use borbaman_game::Phase;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    let cluster = common::cluster_with(2, &["--round-ms=1000"]);
    let game_id = bot_game(&cluster, "corridors").await;
    let db = common::database(&cluster).await;
    let arena: i16 = sqlx::query_scalar("SELECT arena FROM games WHERE id = $1")
        .bind(game_id as i64)
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(arena, 2, "the bots asked for the corridors arena");

    let pool = ServerPool::connect(&cluster.addresses(), PoolConfig::default())
        .await
        .unwrap();
    let mut playback = borbaman::replay::fetch(&pool, game_id).await.unwrap();
    assert_eq!(
        playback.state().phase(),
        Phase::Playing,
        "the lobby is skipped"
    );

    let screen = |view: &borbaman::ui::View| {
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
        terminal
            .draw(|frame| draw::draw(frame, view, ColorMode::Indexed256))
            .unwrap();
        let buffer = terminal.backend().buffer().clone();
        let width = buffer.area.width as usize;
        let symbols: Vec<&str> = buffer.content().iter().map(|c| c.symbol()).collect();
        symbols
            .chunks(width)
            .map(|row| row.concat())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let first = screen(&playback.view());
    assert!(first.contains("REPLAY playing  x1"), "{first}");
    assert!(first.contains(&format!("game {game_id}")), "{first}");
    assert!(first.contains("Map    corridors"), "{first}");

    playback.control(Control::Faster).unwrap();
    assert_eq!(playback.speed(), 2.0);
    let mut steps = 0;
    while !playback.at_end() {
        assert!(playback.control(Control::Step).unwrap());
        steps += 1;
    }
    assert!(playback.paused() && steps > 10, "{steps} steps");
    let stored: Vec<u8> = sqlx::query_scalar("SELECT state FROM games WHERE id = $1")
        .bind(game_id as i64)
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(
        playback.state().encode(),
        stored,
        "stepped to its end, the replay is the stored game"
    );
    let last = screen(&playback.view());
    assert!(last.contains("REPLAY end"), "{last}");
    assert!(!playback.control(Control::Quit).unwrap());

    let err = borbaman::replay::fetch(&pool, game_id + 1000)
        .await
        .err()
        .expect("an unknown game has no replay");
    assert!(
        format!("{err:#}").contains("not a finished game"),
        "{err:#}"
    );

    let url = cluster.database_url();
    let checked = common::blocking(|| verify_all(&url));
    let stdout = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(
        stdout.contains("re-simulated 1 finished games")
            && stdout.contains("1 equal to their stored state, 0 differ"),
        "{stdout}"
    );

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
