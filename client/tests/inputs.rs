//! Inputs that do not wait for round trips, against real servers: a player
//! who presses keys far faster than replies come back has every key
//! applied, once each and in the order pressed.

mod common;

use std::time::Duration;

use borbaman_proto::pb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_inputs_sent_without_waiting_are_all_applied() {
    let cluster = common::cluster(2);
    let (_pool, mut players) = common::pool_and_game(&cluster, "keys").await;
    let db = common::database(&cluster).await;
    let player = &mut players[0];

    const KEYS: u64 = 200;
    let keys = [
        pb::Action::Right,
        pb::Action::Left,
        pb::Action::Idle,
        pb::Action::Down,
        pb::Action::Up,
    ];
    let first = player.next_seq();
    let mut most_in_flight = 0;
    for k in 0..KEYS {
        // Returns at once: no reply is waited for between two keys.
        player.send_input(keys[k as usize % keys.len()]);
        most_in_flight = most_in_flight.max(player.calls_in_flight());
    }
    assert!(
        most_in_flight > 1,
        "the keys went out one call at a time, each waiting for the last"
    );
    assert!(
        player.flush(Duration::from_secs(30)).await,
        "{} of {KEYS} inputs were never acknowledged",
        player.unacked().len()
    );
    assert_eq!(player.input_counts(), (KEYS, KEYS), "inputs sent, applied");

    // Each input in the log once, in the order pressed, with its action.
    let log: Vec<(i64, i16, i64)> = sqlx::query_as(
        "SELECT a.seq, a.action, a.version FROM actions a \
         JOIN sessions s ON s.id = a.session_id \
         WHERE s.game_id = $1 AND s.seat = $2 ORDER BY a.seq",
    )
    .bind(player.game_id() as i64)
    .bind(player.seat() as i16)
    .fetch_all(&db)
    .await
    .unwrap();
    let seqs: Vec<i64> = log.iter().map(|r| r.0).collect();
    let expected: Vec<i64> = (first..first + KEYS).map(|s| s as i64).collect();
    assert_eq!(seqs, expected);
    for (k, &(seq, action, _)) in log.iter().enumerate() {
        assert_eq!(action, keys[k % keys.len()] as i16, "input {seq}'s action");
    }
    assert!(
        log.windows(2).all(|w| w[0].2 <= w[1].2),
        "an input was applied before one pressed earlier"
    );
}
