//! Players at a distance: a local cluster with `ClusterConfig::wan` puts a
//! delay proxy in front of every server, the registry hands out the
//! proxies' addresses, every byte really crosses the emulated distance, a
//! bot game plays through it, a client at another distance of a mix
//! dials its own proxies, and a server killed behind its proxy resets its
//! clients' connections and is skipped by the floors. Timing is checked from below only (a delay
//! proxy can make a call slower than the network, never faster), with
//! loose upper bounds where a hang must be told from a delay.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use borbaman::measure::floors;
use borbaman_client::pool::{PoolConfig, ServerPool};
use borbaman_cluster::local::{ClusterConfig, LocalCluster};
use borbaman_cluster::{WanSpec, wait};
use borbaman_proto::pb::game_client::GameClient;
use borbaman_proto::pb::registry_client::RegistryClient;
use borbaman_proto::pb::{ListServersRequest, PingRequest};
use tonic::transport::Channel;

fn wan_cluster(wan: &[&str], server_args: &[&str]) -> LocalCluster {
    let config = ClusterConfig {
        wan: wan.iter().map(|w| WanSpec::parse(w).unwrap()).collect(),
        ..common::config(3, server_args)
    };
    LocalCluster::start(config, |_| {}).expect("start a local cluster at a distance")
}

/// The pool's settings for a client far away: connecting and a first
/// health check cost two round trips (the handshake, then the check),
/// more than the LAN defaults allow at 80 ms one way on a loaded machine.
/// How the pool should choose its own deadlines at a distance is not what
/// these tests are about.
fn far_pool() -> PoolConfig {
    PoolConfig {
        connect_timeout: Duration::from_secs(2),
        health_timeout: Duration::from_secs(2),
        ..PoolConfig::default()
    }
}

/// The fastest of a few pings on `channel` (the first already warmed it).
async fn best_ping(channel: &Channel) -> Duration {
    let mut client = GameClient::new(channel.clone());
    let mut best = Duration::MAX;
    for _ in 0..4 {
        let started = Instant::now();
        client
            .ping(PingRequest {
                payload: vec![1; 40],
            })
            .await
            .expect("ping through the delay proxy");
        best = best.min(started.elapsed());
    }
    best
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_game_plays_through_delay_proxies_the_registry_hands_out() {
    let cluster = wan_cluster(&["50ms"], &["--round-ms=1000"]);
    let advertised = cluster.addresses();
    let listening: HashSet<String> = cluster.listen_addresses().into_iter().collect();
    assert!(
        advertised.iter().all(|a| !listening.contains(a)),
        "clients are given the proxies, not the servers: {advertised:?}"
    );
    assert_eq!(cluster.wan(), [WanSpec::parse("50ms").unwrap()]);

    let pool = ServerPool::connect(&advertised, far_pool())
        .await
        .expect("connect through the proxies");
    let (address, channel) = pool.live_channels().remove(0);
    let listed = RegistryClient::new(channel.clone())
        .list_servers(ListServersRequest {})
        .await
        .expect("the registry answers")
        .into_inner()
        .servers;
    let listed: HashSet<String> = listed.into_iter().map(|s| s.address).collect();
    assert_eq!(
        listed,
        advertised.iter().cloned().collect::<HashSet<_>>(),
        "the registry hands out the proxies' addresses"
    );
    let ping = best_ping(&channel).await;
    assert!(
        ping >= Duration::from_millis(100),
        "a ping to {address} crosses 50 ms each way: took {ping:?}"
    );

    let finished = common::bot_game(
        &advertised,
        far_pool(),
        "",
        Duration::from_secs(120),
        "the game at 50 ms before sudden death has closed the arena",
    )
    .await;
    let game = finished[0].game_id;
    assert!(finished.iter().all(|o| o.game_id == game), "{finished:?}");
    assert!(
        finished[0].draw || finished[0].winner.is_some(),
        "{finished:?}"
    );
    assert!(finished.iter().all(|o| o.regressions == 0), "{finished:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_a_mix_dials_its_own_distance_and_a_killed_server_is_not_a_hang_nor_the_end_of_the_floors()
 {
    let mut cluster = wan_cluster(&["5ms", "80ms"], &[]);
    let near = ServerPool::connect(&cluster.addresses(), far_pool())
        .await
        .expect("a near client connects");
    let far = ServerPool::connect(
        &cluster.addresses(),
        PoolConfig {
            dial: cluster.wan_routes(1),
            ..far_pool()
        },
    )
    .await
    .expect("a far client connects through its own proxies");
    assert!(cluster.wan_routes(0).is_empty());
    assert_eq!(cluster.wan_routes(1).len(), 3);

    // The same server names, at two distances.
    let (address, far_channel) = far.live_channels().remove(0);
    let far_ping = best_ping(&far_channel).await;
    assert!(
        far_ping >= Duration::from_millis(160),
        "the far client crosses 80 ms each way: {far_ping:?}"
    );
    let near_channel = near
        .live_channels()
        .into_iter()
        .find(|(a, _)| *a == address)
        .map(|(_, c)| c)
        .expect("the near client knows the same server by the same name");
    let near_ping = best_ping(&near_channel).await;
    assert!(
        near_ping >= Duration::from_millis(10) && near_ping < far_ping,
        "near {near_ping:?}, far {far_ping:?}"
    );

    // A server killed behind its proxy: the far client's ping fails (the
    // reset crosses the distance), it does not hang.
    let index = cluster.index_of(&address).expect("a proxy of the cluster");
    common::blocking(|| cluster.kill(index)).unwrap();
    let started = Instant::now();
    let mut client = GameClient::new(far_channel.clone());
    let failed = tokio::time::timeout(
        Duration::from_secs(5),
        client.ping(PingRequest { payload: vec![] }),
    )
    .await
    .expect("a killed server's connection ends instead of hanging");
    assert!(failed.is_err(), "no answer from a killed server");
    assert!(started.elapsed() < Duration::from_secs(5));

    // The idle floor of a run that has one dead server among its
    // connections skips it, counts it, and measures on the others.
    let channels: Vec<(String, Channel)> = cluster
        .addresses()
        .into_iter()
        .map(|a| {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{a}"))
                .unwrap()
                .connect_lazy();
            (a, channel)
        })
        .collect();
    let floors = floors::measure_idle(&channels, None, 10)
        .await
        .expect("the floors are measured on the live servers");
    assert_eq!(floors.ping_failed, 1, "the dead server is counted once");
    assert_eq!(floors.ping_us.len(), 10);
    assert!(
        floors.ping_us.iter().all(|&us| us >= 10_000),
        "pinged through the 5 ms proxies: {:?}",
        floors.ping_us
    );

    // Replaced, the server is found again at the same address.
    common::blocking(|| cluster.replace(index)).unwrap();
    assert_eq!(cluster.addresses()[index], address);
    let what = format!("the far client reaching the replaced server at {address}");
    wait::until(&what, Duration::from_secs(20), || {
        let channel = far
            .live_channels()
            .into_iter()
            .find(|(a, _)| *a == address)
            .map(|(_, c)| c);
        async move {
            let mut client = GameClient::new(channel?);
            client.ping(PingRequest { payload: vec![] }).await.ok()?;
            Some(())
        }
    })
    .await;
}
