//! The registry of live servers, health, and graceful shutdown.

mod common;

use std::time::{Duration, Instant};

use borbaman_cluster::wait;
use borbaman_proto::pb;
use common::*;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

async fn live(server: &ServerProcess) -> Vec<pb::ServerInfo> {
    server
        .registry()
        .await
        .list_servers(pb::ListServersRequest {})
        .await
        .unwrap()
        .into_inner()
        .servers
}

async fn health(server: &ServerProcess, service: &str) -> ServingStatus {
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    let reply = client
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner();
    ServingStatus::try_from(reply.status).unwrap()
}

#[tokio::test]
async fn servers_list_each_other_and_leave_the_list_when_gone() {
    let pg = start_db();
    let mut a = ServerProcess::start(&pg.url());
    let mut b = ServerProcess::start(&pg.url());
    let mut c = ServerProcess::start_with(&pg.url(), &["--advertise", "game-c.example:7000"]);

    let listed = live(&a).await;
    let mut ids: Vec<_> = listed.iter().map(|s| s.id.as_str()).collect();
    ids.sort();
    let mut want = vec![a.id.as_str(), b.id.as_str(), c.id.as_str()];
    want.sort();
    assert_eq!(ids, want);
    let addr_of = |id: &str| listed.iter().find(|s| s.id == id).unwrap().address.clone();
    assert_eq!(addr_of(&a.id), a.addr);
    assert_eq!(addr_of(&c.id), "game-c.example:7000");
    assert!(listed.iter().all(|s| s.heartbeat_age_ms < 1000));

    assert_eq!(health(&a, "").await, ServingStatus::Serving);
    assert_eq!(health(&a, "borbaman.v1.Game").await, ServingStatus::Serving);
    let ping = a
        .game()
        .await
        .ping(pb::PingRequest {
            payload: b"hello".to_vec(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (ping.payload.as_slice(), ping.server_id.as_str()),
        (&b"hello"[..], a.id.as_str())
    );

    // SIGTERM: exits 0 and removes itself at once.
    let status = c.terminate();
    assert!(status.success(), "{status:?}");
    let ids: Vec<_> = live(&a).await.into_iter().map(|s| s.id).collect();
    assert!(!ids.contains(&c.id));

    // SIGKILL: no goodbye; dropped once its heartbeat is older than the TTL.
    b.kill();
    let killed = Instant::now();
    let what = "the killed server gone from the list";
    wait::until(what, Duration::from_secs(3), || async {
        let ids: Vec<_> = live(&a).await.into_iter().map(|s| s.id).collect();
        (!ids.contains(&b.id)).then_some(())
    })
    .await;
    assert!(
        killed.elapsed() >= Duration::from_millis(500),
        "dropped too early"
    );
    a.kill();
}

#[tokio::test]
async fn sigterm_drains_in_flight_calls_before_exiting() {
    let (pg, mut server, mut client) = one_server_and_client(&[]).await;
    let players = full_game(&mut client).await;
    let game_id = players[0].game_id;
    let db = sql(&pg.url()).await;

    // Keep calls in flight while the server is told to stop: every call
    // either completes or is refused cleanly; none is cut off mid-way.
    let mut tasks = Vec::new();
    for mut player in players {
        let mut client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut ok = 0;
            for _ in 0..200 {
                let req = player.act_request(pb::Action::Idle);
                match client.act(req).await {
                    Ok(_) => ok += 1,
                    Err(_) => break,
                }
            }
            ok
        }));
    }
    until_logged_actions(&db, game_id, 8).await;
    let status = tokio::task::spawn_blocking(move || {
        let status = server.terminate();
        (server, status)
    })
    .await
    .unwrap();
    assert!(status.1.success(), "{:?}", status.1);
    let mut acked = 0;
    for t in tasks {
        acked += t.await.unwrap();
    }
    let db = sql(&pg.url()).await;
    let logged: i64 = sqlx::query_scalar("SELECT count(*) FROM actions")
        .fetch_one(&db)
        .await
        .unwrap();
    assert!(acked > 0);
    // Every acknowledged call was committed; at most one per player was
    // committed without its reply reaching the client.
    assert!(
        logged >= acked && logged <= acked + 4,
        "{logged} vs {acked}"
    );
    let servers: i64 = sqlx::query_scalar("SELECT count(*) FROM servers")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(servers, 0);
}

/// Several servers starting at once on a fresh database: the migrations run
/// once and every server comes up.
#[tokio::test]
async fn servers_starting_at_once_share_one_migration() {
    let pg = start_db();
    let url = pg.url();
    let servers: Vec<ServerProcess> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..3)
            .map(|_| scope.spawn(|| ServerProcess::start(&url)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(live(&servers[0]).await.len(), 3);
    let db = sql(&url).await;
    let migrations: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&db)
        .await
        .unwrap();
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations"))
        .unwrap()
        .count() as i64;
    assert_eq!(migrations, files);
}
