//! A client that hangs up in the middle of a call (a hedge that lost, a
//! deadline that passed) does not cut the call's database work short: the
//! call is carried out once, and the connection it used stays open. Cutting
//! it short would close the connection (nothing tells it where the dropped
//! statement stopped) and make the server open another, a process start in
//! PostgreSQL, at the moment a stall has made calls late and hedges fire.
//!
//! A call its client hung up on *before the server began it* is another
//! matter: nothing has been done, and no one waits for the answer. A server
//! stopped for a while finds such calls by the dozen when it resumes (each
//! was copied to another server, answered there, and reset), and drops
//! them unstarted.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use borbaman_cluster::wait;
use borbaman_proto::pb;
use common::raw_h2::*;
use common::*;
use prost::Message;
use tokio::io::AsyncWriteExt;
use tonic::Request;

/// The client gives up on its call after this.
const CLIENT_DEADLINE: Duration = Duration::from_millis(300);

/// The database connections the server holds.
async fn server_backends(db: &sqlx::PgPool) -> BTreeSet<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'borbaman-server'",
    )
    .fetch_all(db)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

/// The server's backend waiting on a lock, if one is.
async fn backend_waiting_on_a_lock(db: &sqlx::PgPool) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity \
         WHERE application_name = 'borbaman-server' AND wait_event_type = 'Lock'",
    )
    .fetch_optional(db)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_call_its_client_hung_up_on_is_carried_out_once_on_the_same_connection() {
    // A patient database timeout: the call waits on the lock below for as
    // long as the test holds it, never giving up by itself.
    let (pg, _server, mut client) =
        one_server_and_client(&["--db-timeout-ms", "10000", "--db-min-connections", "4"]).await;
    let mut players = full_game(&mut client).await;
    let game_id = players[0].game_id;
    let db = sql(&pg.url()).await;
    let before = logged_actions(&db, game_id).await;
    let backends = wait::until(
        "the server's four warm database connections",
        Duration::from_secs(10),
        || async {
            let pids = server_backends(&db).await;
            (pids.len() >= 4).then_some(pids)
        },
    )
    .await;

    // Hold the game's row: the call's write waits for it.
    let mut lock = db.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM games WHERE id = $1 FOR UPDATE")
        .bind(game_id as i64)
        .execute(&mut *lock)
        .await
        .unwrap();
    let act = players[0].act_request(pb::Action::Right);
    let seq = act.seq;
    let mut call = client.clone();
    let mut request = Request::new(act.clone());
    request.set_timeout(CLIENT_DEADLINE);
    let hung_up = tokio::spawn(async move { call.act(request).await });
    let waiting = wait::until(
        "the call's write to wait on the game's row",
        Duration::from_secs(10),
        || async { backend_waiting_on_a_lock(&db).await },
    )
    .await;
    let refused = hung_up
        .await
        .unwrap()
        .expect_err("the client's deadline passes first");
    assert!(
        matches!(
            refused.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ),
        "the client gave up on its call: {refused:?}"
    );
    lock.commit().await.unwrap();

    // The call goes on without its client and commits the input, once.
    until_logged_actions(&db, game_id, before + 1).await;
    let after = server_backends(&db).await;
    assert!(
        after.contains(&waiting),
        "the connection that served the abandoned call (backend {waiting}) is still open: \
         before {backends:?}, after {after:?}"
    );
    assert_eq!(
        after.difference(&backends).count(),
        0,
        "no connection was opened in its place: before {backends:?}, after {after:?}"
    );

    // The client sends it again, as it would after a timeout: the server
    // answers with what the first copy did and applies nothing more.
    let again = client
        .act(act)
        .await
        .expect("the same call again")
        .into_inner();
    assert_eq!(again.seq, seq);
    assert!(
        again.replayed,
        "the second copy is answered from the log: {again:?}"
    );
    assert_eq!(logged_actions(&db, game_id).await, before + 1);
}

/// The count of `Act` calls the server dropped because their client hung
/// up before their work began.
fn acts_hung_up(server: &ServerProcess) -> f64 {
    scrape(server)
        .lines()
        .filter(|l| l.starts_with("borbaman_calls_hung_up_total{") && l.contains(r#"method="Act""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn a_call_hung_up_on_before_its_work_began_is_dropped_unstarted() {
    let (pg, server, mut client) = one_server_and_client(&["--metrics-listen=127.0.0.1:0"]).await;
    let mut players = full_game(&mut client).await;
    let game_id = players[0].game_id;
    let db = sql(&pg.url()).await;
    let before = logged_actions(&db, game_id).await;

    // A player's call opens (its HEADERS read by the server, which waits
    // for the body), then the server stops. The body arrives while it is
    // stopped, and the player's reset after it, as a pool resets a call
    // another server answered: the resumed server reads both at once.
    let act = players[0].act_request(pb::Action::Right);
    let (mut raw, _, refused) = open_calls(
        server.addr.parse().unwrap(),
        "127.0.0.1".parse().unwrap(),
        1,
        &call_headers("/borbaman.v1.Game/Act"),
    )
    .await;
    assert!(refused.is_empty(), "the call was opened");
    unsafe { libc::kill(server.pid(), libc::SIGSTOP) };
    let mut frames = h2_frame(DATA, END_STREAM, 1, &grpc_message(&act.encode_to_vec()));
    frames.extend(h2_frame(RST_STREAM, 0, 1, &CANCEL.to_be_bytes()));
    raw.write_all(&frames).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    unsafe { libc::kill(server.pid(), libc::SIGCONT) };

    // The server drops the call before its work begins: no input applied.
    wait::until(
        "the server to drop the call hung up on",
        Duration::from_secs(10),
        || async { (acts_hung_up(&server) >= 1.0).then_some(()) },
    )
    .await;
    assert_eq!(
        logged_actions(&db, game_id).await,
        before,
        "the call hung up on applied nothing"
    );

    // The player sends it again, as after any call whose fate it does not
    // know: applied now, once.
    let again = client
        .act(act)
        .await
        .expect("the same call again")
        .into_inner();
    assert!(
        !again.replayed,
        "the dropped call left nothing to replay: {again:?}"
    );
    assert_eq!(logged_actions(&db, game_id).await, before + 1);
}
