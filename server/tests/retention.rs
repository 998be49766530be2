//! End-to-end retention against a real PostgreSQL and real servers: with a
//! 1-second window a finished game goes with all its rows, while a running
//! game keeps every one of its own; an abandoned waiting game goes too; and
//! the job runs on one server at a time, passing to another when that
//! server dies.

mod common;

use std::path::Path;
use std::time::Duration;

use borbaman_proto::pb;
use common::*;
use sqlx::PgPool;

/// The servers' `--lobby-seat-ttl-ms` here: a waiting game is abandoned
/// after ten of them.
const TTL_MS: &str = "500";

/// Rows of each table that belong to `game`.
async fn rows_of(db: &PgPool, game: u64) -> [i64; 5] {
    let row: (i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM games WHERE id = $1), \
                (SELECT count(*) FROM seats WHERE game_id = $1), \
                (SELECT count(*) FROM sessions WHERE game_id = $1), \
                (SELECT count(*) FROM actions WHERE game_id = $1), \
                (SELECT count(*) FROM seat_log WHERE game_id = $1)",
    )
    .bind(game as i64)
    .fetch_one(db)
    .await
    .unwrap();
    [row.0, row.1, row.2, row.3, row.4]
}

/// Polls `done` until it holds, for at most a minute.
async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    borbaman_cluster::wait::until(what, Duration::from_secs(60), || {
        let check = done();
        async move { check.await.then_some(()) }
    })
    .await
}

fn log_lines(log: &Path, needle: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

const RUNS_JOB: &str = "this server runs the retention job";

#[tokio::test]
async fn finished_and_abandoned_games_go_with_all_their_rows_and_running_ones_stay() {
    let pg = start_db();
    let (log_a, log_b) = (log_path("retention-a"), log_path("retention-b"));
    let args = [
        "--retention",
        "1s",
        "--lobby-seat-ttl-ms",
        TTL_MS,
        "--metrics-listen=127.0.0.1:0",
    ];
    let mut a = ServerProcess::start_logged(&pg.url(), &args, &log_a);
    let mut b = ServerProcess::start_logged(&pg.url(), &args, &log_b);
    let db = sql(&pg.url()).await;
    let mut client = a.game().await;

    // A game that finishes (between identified players: ranked): three
    // forfeit.
    let finished = full_ranked_game(&mut client).await;
    let finished_id = finished[0].game_id;
    for p in &finished[1..] {
        client
            .leave(pb::LeaveRequest {
                token: p.token.clone(),
                game_id: finished_id,
                seat: p.seat,
                seq: p.next_seq,
            })
            .await
            .unwrap();
    }
    // A game that keeps running, with a move logged.
    let mut running = full_game(&mut client).await;
    let running_id = running[0].game_id;
    assert_ne!(running_id, finished_id);
    let req = running[0].act_request(pb::Action::Idle);
    client.act(req).await.unwrap();
    let running_rows = rows_of(&db, running_id).await;
    assert_eq!(running_rows[..3], [1, 4, 4]);
    assert!(
        running_rows[3] >= 1 && running_rows[4] >= 4,
        "{running_rows:?}"
    );
    // A waiting game whose only player goes silent.
    let (waiting, _) = join(&mut client, "alone").await;
    let finished_rows = rows_of(&db, finished_id).await;
    assert!(
        finished_rows[3] >= 3 && finished_rows[4] >= 4,
        "{finished_rows:?}"
    );

    eventually("the finished game's deletion", || async {
        rows_of(&db, finished_id).await == [0; 5]
    })
    .await;
    eventually("the abandoned game's deletion", || async {
        rows_of(&db, waiting.game_id).await == [0; 5]
    })
    .await;
    eventually("the purge queue emptying", || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM purged_games")
            .fetch_one(&db)
            .await
            .unwrap()
            == 0
    })
    .await;
    // The running game is untouched, and plays on.
    assert_eq!(rows_of(&db, running_id).await, running_rows);
    let req = running[1].act_request(pb::Action::Idle);
    client.act(req).await.unwrap();
    // Its rankings stay: retention deletes games, not what they scored.
    let ranked: i64 = sqlx::query_scalar("SELECT count(*) FROM rankings")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(ranked, 4);

    // One server ran the job and logged what it deleted; the other never
    // took it.
    let (runs_a, runs_b) = (log_lines(&log_a, RUNS_JOB), log_lines(&log_b, RUNS_JOB));
    assert_eq!(runs_a + runs_b, 1, "a: {runs_a}, b: {runs_b}");
    // The job's server counts the deletes and the passes in its metrics; the other's count none.
    let (held, other) = if runs_a == 1 { (&a, &b) } else { (&b, &a) };
    let deleted = |what: &str| format!("borbaman_retention_deleted_rows_total{{what=\"{what}\"}}");
    let held_metrics = scrape(held);
    assert!(
        sample(&held_metrics, &deleted("finished_games")) >= Some(1.0),
        "{held_metrics}"
    );
    assert!(sample(&held_metrics, &deleted("abandoned_games")) >= Some(1.0));
    assert!(
        sample(
            &held_metrics,
            r#"borbaman_retention_passes_total{outcome="ok"}"#
        ) >= Some(1.0)
    );
    assert!(
        sample(
            &held_metrics,
            "borbaman_retention_last_success_timestamp_seconds"
        ) > Some(0.0)
    );
    let other_metrics = scrape(other);
    assert_eq!(sample(&other_metrics, &deleted("finished_games")), None);
    assert_eq!(
        sample(
            &other_metrics,
            r#"borbaman_retention_passes_total{outcome="ok"}"#
        ),
        Some(0.0)
    );

    let (holder, holder_log, other_log) = if runs_a == 1 {
        (&mut a, &log_a, &log_b)
    } else {
        (&mut b, &log_b, &log_a)
    };
    assert!(log_lines(holder_log, "retention: deleted") >= 1);
    assert_eq!(log_lines(other_log, "retention: deleted"), 0);
    // When it dies, the other takes the job over.
    holder.kill();
    eventually("the other server taking the job over", || async {
        log_lines(other_log, RUNS_JOB) == 1
    })
    .await;
}

/// A session freed from its lobby seat goes a window after it was freed,
/// not after it was created: a player who sat long in a lobby before going
/// silent keeps the session (and can join again with its token) for the
/// whole window.
#[tokio::test]
async fn a_freed_session_is_kept_a_window_after_it_was_freed() {
    const WINDOW: Duration = Duration::from_secs(3);
    // A 1 s seat TTL: the waiting game is abandoned only after 10 s, well
    // after the window.
    let (pg, _server, mut client) =
        one_server_and_client(&["--retention", "3s", "--lobby-seat-ttl-ms", "1000"]).await;
    let db = sql(&pg.url()).await;

    // A player sat in the lobby for an hour (its session is that old),
    // then went silent.
    let (silent, _) = join(&mut client, "silent").await;
    let session: i64 = sqlx::query_scalar(
        "UPDATE sessions SET created_at = now() - interval '1 hour' \
         WHERE game_id = $1 AND seat = 0 RETURNING id",
    )
    .bind(silent.game_id as i64)
    .fetch_one(&db)
    .await
    .unwrap();
    let session_exists = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM sessions WHERE id = $1")
            .bind(session)
            .fetch_one(&db)
            .await
            .unwrap()
            == 1
    };
    // Its seat TTL passes; a newcomer's join frees the seat.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let freeing = std::time::Instant::now();
    let (fresh, _) = join(&mut client, "fresh").await;
    assert_eq!(
        (fresh.game_id, fresh.seat),
        (silent.game_id, 0),
        "the seat was freed"
    );
    let seat: i16 = sqlx::query_scalar("SELECT seat FROM sessions WHERE id = $1")
        .bind(session)
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(seat, -1, "the silent player's session is freed");

    // Deleted, but no earlier than the window after it was freed.
    eventually("the freed session's deletion", || async {
        !session_exists().await
    })
    .await;
    let after = freeing.elapsed();
    assert!(
        after >= WINDOW - Duration::from_millis(100),
        "the freed session went {after:?} after it was freed, within the {WINDOW:?} window"
    );
}
