//! Client-side prediction in the terminal: the player's own move is drawn
//! as soon as its key is handled, while the server's reply is still held
//! back, and stays drawn once the server has applied it.
//!
//! The network task of `borbaman play` runs against a real server, which is
//! then stopped (SIGSTOP: its connections stay open, nothing answers), so
//! no reply can arrive; the screen is drawn on ratatui's test backend.

mod common;

use std::time::{Duration, Instant};

use borbaman::play::network_task;
use borbaman::shutdown;
use borbaman::ui::View;
use borbaman::ui::input::Command;
use borbaman_client::pool::{PoolConfig, ServerPool};
use borbaman_client::session::{GameSession, new_token};
use borbaman_client::state_dir::StateDir;
use borbaman_cluster::wait;
use borbaman_proto::pb;
use tokio::sync::{mpsc, watch};

/// Where `glyph` is drawn on the board (the left box; the HUD beside it
/// names the player too): (column, row).
fn drawn_at(rows: &[String], glyph: &str) -> Option<(usize, usize)> {
    rows.iter().enumerate().find_map(|(y, row)| {
        let board: String = row.chars().take(32).collect();
        let at = board.find(glyph)?;
        Some((board[..at].chars().count(), y))
    })
}

/// A free cell next to the player's and the command that moves there, and
/// the glyph's expected shift on screen (two columns per cell).
fn free_step(state: &pb::GameState, seat: u32) -> (Command, (i64, i64)) {
    let me = &state.players[seat as usize];
    let (x, y) = (me.x as i64, me.y as i64);
    let free = |dx: i64, dy: i64| {
        let (nx, ny) = (x + dx, y + dy);
        let i = (ny * state.width as i64 + nx) as usize;
        state.cells[i] == pb::Cell::Floor as u8
            && !state
                .bombs
                .iter()
                .any(|b| (b.x as i64, b.y as i64) == (nx, ny))
    };
    let moves = [
        (Command::Left, (-1, 0)),
        (Command::Right, (1, 0)),
        (Command::Up, (0, -1)),
        (Command::Down, (0, 1)),
    ];
    let (command, (dx, dy)) = moves
        .into_iter()
        .find(|(_, (dx, dy))| free(*dx, *dy))
        .expect("a spawn corner always has a free neighbour");
    (command, (2 * dx, dy))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_players_own_move_is_on_screen_while_the_reply_is_held_back() {
    let mut cluster = common::cluster(1);
    let pool = ServerPool::connect(&cluster.addresses(), PoolConfig::default())
        .await
        .unwrap();
    let db = common::database(&cluster).await;
    // Three others wait in a game; the player's join starts it.
    let mut others = Vec::new();
    for n in 1..=3 {
        let (session, _) = GameSession::join(&pool, &format!("bot{n}"), new_token())
            .await
            .expect("join");
        others.push(session);
    }
    let state_dir = tempfile::tempdir().unwrap();
    let (view_tx, view) = watch::channel(View::default());
    let (commands, commands_rx) = mpsc::channel(16);
    let (stopper, quit) = shutdown::channel();
    let task = tokio::spawn(network_task(
        pool.clone(),
        "Zed".into(),
        StateDir::at(state_dir.path()),
        view_tx,
        commands_rx,
        quit,
        Some("0 ms (a stopped server)".into()),
    ));

    let (playing, rows) = common::until_view(
        &view,
        "the running game on screen",
        Duration::from_secs(20),
        |v, _| {
            v.seat.is_some()
                && v.state
                    .as_ref()
                    .is_some_and(|s| s.phase() == pb::Phase::Playing)
        },
    )
    .await;
    let seat = playing.seat.unwrap();
    assert!(
        rows.iter().any(|r| r.contains("Distance 0 ms")),
        "the HUD names the distance:\n{}",
        rows.join("\n")
    );
    let glyph = format!("Z{}", seat + 1);
    let before = drawn_at(&rows, &glyph).expect("the player is drawn");
    let (command, (dx, dy)) = free_step(playing.state.as_ref().unwrap(), seat);
    let game_id = playing.state.as_ref().unwrap().game_id;
    let applied_before = common::applied_seqs(&db, game_id, seat).await;

    // Every reply held back from here on.
    common::blocking(|| cluster.hang(0)).expect("stop the server");
    let key_at = Instant::now();
    commands.send(command).await.unwrap();
    let want = (
        (before.0 as i64 + dx) as usize,
        (before.1 as i64 + dy) as usize,
    );
    let (_, rows) = common::until_view(
        &view,
        "the move on screen",
        Duration::from_secs(20),
        |_, rows| drawn_at(rows, &glyph) == Some(want),
    )
    .await;
    let drawn_after = key_at.elapsed();
    // Nothing could have answered: the server is stopped and has applied
    // nothing since the key.
    assert_eq!(
        common::applied_seqs(&db, game_id, seat).await,
        applied_before,
        "the server applied the move before it was drawn"
    );
    assert_eq!(drawn_at(&rows, &glyph), Some(want));

    // The server comes back and applies it; the player stays where drawn.
    common::blocking(|| cluster.resume(0)).expect("resume the server");
    wait::until("the move applied", Duration::from_secs(20), || async {
        let applied = common::applied_seqs(&db, game_id, seat).await;
        (applied.len() > applied_before.len()).then_some(())
    })
    .await;
    let logged: Vec<i16> = sqlx::query_scalar(
        "SELECT a.action FROM actions a JOIN sessions s ON s.id = a.session_id \
         WHERE s.game_id = $1 AND s.seat = $2 ORDER BY a.seq",
    )
    .bind(game_id as i64)
    .bind(seat as i16)
    .fetch_all(&db)
    .await
    .unwrap();
    let moved = command.action().unwrap() as i16;
    assert_eq!(
        logged.iter().filter(|&&a| a == moved).count(),
        1,
        "the move applied once: {logged:?}"
    );
    let (confirmed, rows) = common::until_view(
        &view,
        "the confirmed state",
        Duration::from_secs(20),
        |v, _| v.net.unacked == 0 && v.net.rtt_last.is_some(),
    )
    .await;
    assert_eq!(
        drawn_at(&rows, &glyph),
        Some(want),
        "the player jumped back when the server confirmed the move"
    );
    assert_eq!(confirmed.net.mispredictions, 0);
    eprintln!("drawn {drawn_after:?} after the key, with the reply held back");

    stopper.stop();
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
}
