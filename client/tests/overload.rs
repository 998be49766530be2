//! Overload: a server driven past its admission bound keeps serving the
//! game already running, answers every one of a storm of joins at once
//! (seated, or refused `server-full` with a pushback), and loses nothing.
//!
//! The server admits eight places at once (`--max-db-concurrency 8`): the
//! running game's calls share one, joins may take four. Its players' calls
//! may wait in line for a second, its joins 250 ms ([`JOIN_QUEUE_MS`]:
//! long enough for some of a storm's joins to get in on a machine busy
//! with other tests, where 100 ms once let none in). Rate limits are off, so
//! every refusal here is admission control's, and says the server is busy
//! (`borbaman-busy`, which stops clients hedging into it).

mod common;

use std::time::{Duration, Instant};

use borbaman::driver;
use borbaman::measure::invariants;
use borbaman::measure::workload::{Ack, ClientLog, SessionLog};
use borbaman_client::pool::{PoolConfig, ServerPool};
use borbaman_client::session::{GameSession, new_token};
use borbaman_proto::Reason;
use borbaman_proto::pb::game_client::GameClient;
use borbaman_proto::pb::{Action, JoinRequest};
use borbaman_proto::timing::BUSY_KEY;
use tonic::metadata::{Ascii, MetadataValue};

/// Joiners in the storm: the 128 at once.
const JOINERS: usize = 128;
/// How long a join may wait in the server's line.
const JOIN_QUEUE_MS: u64 = 250;
/// Joins sent beside the storm, their answers read whole.
const RAW_JOINERS: usize = 32;
/// Joins sent on one connection at once: half the server's default stream
/// limit (`--max-streams-per-connection`), so none is refused for it.
const PER_CONNECTION: usize = 16;
/// How soon every join must be answered, seated or refused.
const ANSWERED_WITHIN: Duration = Duration::from_secs(2);

/// What one joiner of the storm got.
enum Joined {
    Seated(SessionLog),
    Full { pushback: Option<Duration> },
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn past_the_admission_bound_running_games_are_served_and_joins_told_server_full() {
    let cluster = common::cluster_with(
        1,
        &[
            "--max-db-concurrency",
            "8",
            "--admission-queue-ms",
            "1000",
            "--join-queue-ms",
            &JOIN_QUEUE_MS.to_string(),
            "--max-joins-per-ip-per-min",
            "0",
            "--max-acts-per-s",
            "0",
        ],
    );
    let servers = cluster.addresses();
    let players_pool = ServerPool::connect(&servers, PoolConfig::default())
        .await
        .unwrap();
    let players = common::seat_four(&players_pool, "run").await;
    let game = players[0].game_id();

    // The four players act as fast as they are answered for as long as the
    // storm lasts (and at least 20 times each).
    let (storm_over, storm) = borbaman::shutdown::channel();
    let mut acting = Vec::new();
    for (n, mut session) in players.into_iter().enumerate() {
        let storm = storm.clone();
        acting.push(tokio::spawn(async move {
            let mut log = ClientLog {
                client: n as u32,
                ..ClientLog::default()
            };
            let mut problems = Vec::new();
            let mut sent = 0;
            while !storm.is_shutdown() || sent < 20 {
                let seq = session.next_seq();
                sent += 1;
                match session.act(Action::Idle).await {
                    Ok((reply, _)) => log.acknowledged.push(Ack {
                        token: session.token().to_vec(),
                        seq: reply.seq.max(seq),
                        game_id: session.game_id(),
                    }),
                    Err(e) => problems.push(format!("act {seq}: {e}")),
                }
            }
            log.sessions.push(SessionLog {
                token: session.token().to_vec(),
                game_id: session.game_id(),
                seat: session.seat(),
                last_seq_sent: session.next_seq() - 1,
                regressions: session.regressions(),
                finished: false,
                ..SessionLog::default()
            });
            (log, problems, sent)
        }));
    }

    // The storm's pools (players have a pool each; one connection carries
    // at most the server's stream limit).
    let mut joiners_pools = Vec::new();
    for _ in 0..JOINERS.div_ceil(PER_CONNECTION) {
        let pool = ServerPool::connect(&servers, PoolConfig::default())
            .await
            .unwrap();
        joiners_pools.push(pool);
    }

    // 128 joins at once.
    let mut storm = tokio::task::JoinSet::new();
    for n in 0..JOINERS {
        let pool = joiners_pools[n / PER_CONNECTION].clone();
        storm.spawn(async move {
            let started = Instant::now();
            let result = GameSession::join(&pool, &format!("storm{n}"), new_token()).await;
            let took = started.elapsed();
            let joined = match result {
                Ok((session, _)) => Ok(Joined::Seated(SessionLog {
                    token: session.token().to_vec(),
                    game_id: session.game_id(),
                    seat: session.seat(),
                    ..SessionLog::default()
                })),
                Err(e) => match driver::refusal(&e) {
                    Some(r) if r.reason == Reason::ServerFull => Ok(Joined::Full {
                        pushback: r.pushback,
                    }),
                    _ => Err(format!("join {n} failed: {e}")),
                },
            };
            (took, joined)
        });
    }
    // Behind the storm, joins of their own (on connections of their own,
    // as the storm's), to read the answers' heads: a join refused after
    // its wait in line says the server is busy, and for how long it queued.
    let mut raw_clients = Vec::new();
    for _ in 0..RAW_JOINERS.div_ceil(PER_CONNECTION) {
        let client = GameClient::connect(format!("http://{}", servers[0]))
            .await
            .expect("connecting to the server");
        raw_clients.push(client);
    }
    let mut raw = tokio::task::JoinSet::new();
    for n in 0..RAW_JOINERS {
        let mut client = raw_clients[n / PER_CONNECTION].clone();
        raw.spawn(async move {
            client
                .join(JoinRequest {
                    name: format!("raw{n}"),
                    token: new_token(),
                    map: String::new(),
                    identity: Vec::new(),
                })
                .await
                .map(|_| ())
                .map_err(|status| {
                    (
                        Reason::of(&status),
                        status.metadata().get(BUSY_KEY).cloned(),
                        format!("{:?}: {}", status.code(), status.message()),
                    )
                })
        });
    }

    let outcomes = storm.join_all().await;
    let raw = raw.join_all().await;
    storm_over.stop();
    let busy_ms =
        |value: Option<MetadataValue<Ascii>>| -> Option<u64> { value?.to_str().ok()?.parse().ok() };
    let mut raw_refused = 0;
    for outcome in raw {
        match outcome {
            Ok(_) => {}
            Err((Some(Reason::ServerFull), busy, _)) => {
                raw_refused += 1;
                let waited =
                    busy_ms(busy).expect("a join refused after its line says the server is busy");
                assert!(
                    waited >= JOIN_QUEUE_MS,
                    "it queued its {JOIN_QUEUE_MS} ms in line, the answer says {waited} ms"
                );
            }
            Err((reason, _, status)) => panic!("a raw join failed: {reason:?} ({status})"),
        }
    }
    assert!(
        raw_refused > 0,
        "none of the {RAW_JOINERS} joins beside the storm was refused"
    );

    let mut seated = Vec::new();
    let mut refused = 0;
    for (took, joined) in outcomes {
        assert!(
            took <= ANSWERED_WITHIN,
            "a join was answered only after {took:?}"
        );
        match joined.unwrap_or_else(|e| panic!("{e}")) {
            Joined::Seated(session) => seated.push(session),
            Joined::Full { pushback } => {
                refused += 1;
                let pushback = pushback.expect("a server-full refusal says when to try again");
                assert!(
                    (Duration::from_millis(100)..=Duration::from_secs(10)).contains(&pushback),
                    "pushback {pushback:?}"
                );
            }
        }
    }
    eprintln!(
        "{} joins seated, {refused} refused server-full",
        seated.len()
    );
    assert!(
        refused > 0,
        "no join was refused server-full: the storm never passed the bound ({} seated)",
        seated.len()
    );
    assert!(
        !seated.is_empty(),
        "every join was refused: joins must still get in between the players' calls"
    );

    // The running game was served all along: no call of its players was
    // refused or failed.
    let mut logs = Vec::new();
    for task in acting {
        let (log, problems, sent) = task.await.unwrap();
        assert!(
            problems.is_empty(),
            "player {} of the running game was not served: {problems:?}",
            log.client
        );
        assert_eq!(log.acknowledged.len(), sent);
        logs.push(log);
    }
    assert!(logs.iter().all(|l| l.sessions[0].game_id == game));

    // Nothing lost, nothing applied twice, every game consistent.
    logs.push(ClientLog {
        client: logs.len() as u32,
        sessions: seated,
        ..ClientLog::default()
    });
    let db = common::database(&cluster).await;
    let report = invariants::check(&db, &logs).await.expect("audit");
    assert!(report.failed().is_empty(), "{:?}", report.checks);
    assert_eq!(report.actions.lost, 0);
    assert!(report.actions.acknowledged >= 80, "{:?}", report.actions);
}
