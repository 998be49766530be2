//! The limits a server puts on its callers, against a real server process
//! and a real PostgreSQL: acts per session, joins per address, connections
//! per address and in total, the first-bytes timeout, the request size of
//! every service. Each refusal has a clear status and leaves nothing in the
//! database, and the server serves normally afterwards.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use borbaman_cluster::wait;
use borbaman_proto::{MAX_REQUEST_BYTES, Reason, pb};
use common::*;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// Whether the server closes `stream` within `within` (what it sent before
/// is read and dropped).
async fn closes_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

async fn ping(url: String) -> Result<pb::PingReply, String> {
    let mut client = pb::game_client::GameClient::connect(url)
        .await
        .map_err(|e| e.to_string())?;
    client
        .ping(pb::PingRequest { payload: vec![1] })
        .await
        .map(|r| r.into_inner())
        .map_err(|e| e.to_string())
}

/// Pings until one answers (a closed connection's slot frees when the
/// server notices the close); panics after 10 s.
async fn ping_eventually(url: String) {
    wait::until("the server answering Ping", Duration::from_secs(10), || {
        let url = url.clone();
        async move { ping(url).await.ok().map(|_| ()) }
    })
    .await
}

async fn sessions_and_games(db: &sqlx::PgPool) -> (i64, i64) {
    sqlx::query_as("SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM games)")
        .fetch_one(db)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_act_flood_is_refused_and_logs_nothing_for_the_refused() {
    let (pg, server, mut client) = one_server_and_client(&["--max-acts-per-s", "10"]).await;
    let mut players = full_game(&mut client).await;
    let db = sql(&pg.url()).await;
    let before = logged_actions(&db, players[0].game_id).await;

    // As fast as one connection goes, until refused (the first 10 pass
    // at once, then 10 a second).
    let (mut accepted, mut refused) = (0i64, 0);
    for _ in 0..1_000 {
        let req = players[0].act_request(pb::Action::Idle);
        match client.act(req).await {
            Ok(_) => accepted += 1,
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                assert_eq!(Reason::of(&status), Some(Reason::RateLimited));
                refused += 1;
                if refused == 50 {
                    break;
                }
            }
        }
    }
    assert_eq!(refused, 50, "the flood was never refused");
    assert!(accepted >= 10, "the first burst must pass: {accepted}");
    assert_eq!(
        logged_actions(&db, players[0].game_id).await - before,
        accepted,
        "a refused act left a row in the action log"
    );

    // Other sessions are not limited by this one's flood.
    let req = players[1].act_request(pb::Action::Idle);
    client.act(req).await.expect("another session acts");
    // The flooding session acts again once it slows down (to 5 acts a
    // second).
    wait::until(
        "the slowed-down session acting again",
        Duration::from_secs(10),
        || {
            let (mut client, req) = (client.clone(), players[0].act_request(pb::Action::Idle));
            async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                client.act(req).await.ok().map(|_| ())
            }
        },
    )
    .await;
    ping_eventually(server.url()).await;
}

#[tokio::test]
async fn too_many_joins_from_one_address_are_refused_and_store_nothing() {
    let (pg, server, mut client) =
        one_server_and_client(&["--max-joins-per-ip-per-min", "5"]).await;
    let db = sql(&pg.url()).await;
    for i in 0..5 {
        join(&mut client, &format!("j{i}")).await;
    }
    let before = sessions_and_games(&db).await;
    for i in 0..20 {
        let status = client
            .join(pb::JoinRequest {
                name: format!("flood{i}"),
                token: token(),
                ..Default::default()
            })
            .await
            .expect_err("a join over the limit");
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert_eq!(Reason::of(&status), Some(Reason::RateLimited));
        assert!(status.message().contains("too many joins"), "{status:?}");
    }
    assert_eq!(sessions_and_games(&db).await, before);
    ping_eventually(server.url()).await;
}

#[tokio::test]
async fn connections_over_the_limits_are_closed_or_make_room_and_their_slots_free_again() {
    let (_pg, server) = one_server(&["--max-connections-per-ip", "3", "--max-connections", "5"]);
    let addr: SocketAddr = server.addr.parse().unwrap();
    let [a, b, c] = [1, 2, 3].map(|n| IpAddr::from([127, 0, 0, n]));

    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(h2_connection(addr, a).await.expect("within the limit"));
    }
    assert!(
        h2_connection(addr, a).await.is_none(),
        "a fourth connection from one address"
    );
    assert!(ping(server.url()).await.is_err(), "a client over the limit");
    for _ in 0..2 {
        held.push(h2_connection(addr, b).await.expect("another address"));
    }
    // Full: a newcomer from another address is let in all the same, and
    // an idle connection of the address holding the most goes instead.
    held.push(
        h2_connection(addr, c)
            .await
            .expect("a sixth connection in all, admitted by closing an idle one"),
    );
    let mut closed = 0;
    for stream in &mut held[..3] {
        if closes_within(stream, Duration::from_secs(1)).await {
            closed += 1;
        }
    }
    assert_eq!(closed, 1, "one of the busiest address's connections goes");

    // Once the connections close, a fresh client is served.
    drop(held);
    ping_eventually(server.url()).await;
    let mut client = server.game().await;
    join(&mut client, "after").await;
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed() {
    let (_pg, server) = one_server(&["--first-bytes-timeout-ms", "300", "--max-connections", "2"]);
    let mut idle = TcpStream::connect(&server.addr).await.unwrap();
    // The server speaks first (its HTTP/2 settings), then hangs up.
    let mut buf = Vec::new();
    // End of stream or a reset: closed either way.
    let _closed = tokio::time::timeout(Duration::from_secs(20), idle.read_to_end(&mut buf))
        .await
        .expect("the idle connection is still open after 20 s");
    // A client that talks is not cut off.
    let mut client = server.game().await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    client
        .ping(pb::PingRequest { payload: vec![] })
        .await
        .expect("a connection in use stays open");
}

/// A request of any method, padded with a field no request has (callers
/// skip unknown fields): it reaches every method with the size we choose.
#[derive(Clone, PartialEq, prost::Message)]
struct Padded {
    #[prost(bytes = "vec", tag = "1000")]
    pad: Vec<u8>,
}

/// Every method of every service the server serves, as gRPC paths, and
/// whether it answers with a stream.
const METHODS: [(&str, bool); 12] = [
    ("/borbaman.v1.Game/Join", false),
    ("/borbaman.v1.Game/Act", false),
    ("/borbaman.v1.Game/GetState", false),
    ("/borbaman.v1.Game/Leave", false),
    ("/borbaman.v1.Game/Rankings", false),
    ("/borbaman.v1.Game/GetReplay", false),
    ("/borbaman.v1.Game/ListGames", false),
    ("/borbaman.v1.Game/WatchState", true),
    ("/borbaman.v1.Game/Ping", false),
    ("/borbaman.v1.Registry/ListServers", false),
    ("/grpc.health.v1.Health/Check", false),
    ("/grpc.health.v1.Health/Watch", true),
];

/// Sends `request` to `path` and returns the status it fails with (`None`
/// if it is answered).
async fn call_raw(
    channel: &Channel,
    path: &'static str,
    streaming: bool,
    request: Padded,
) -> Option<tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.expect("the channel is ready");
    let codec = tonic_prost::ProstCodec::<Padded, Padded>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
    let request = tonic::Request::new(request);
    if streaming {
        grpc.server_streaming(request, path, codec).await.err()
    } else {
        grpc.unary(request, path, codec).await.err()
    }
}

#[tokio::test]
async fn every_service_refuses_oversized_requests() {
    let (_pg, server) = one_server(&[]);
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    for (path, streaming) in METHODS {
        let oversized = Padded {
            pad: vec![b'x'; MAX_REQUEST_BYTES + 1],
        };
        let status = call_raw(&channel, path, streaming, oversized)
            .await
            .unwrap_or_else(|| panic!("{path} answered a request over {MAX_REQUEST_BYTES} bytes"));
        assert!(
            status.code() == Code::OutOfRange && status.message().contains("too large"),
            "{path} must refuse a request over {MAX_REQUEST_BYTES} bytes for its size: {status:?}"
        );
        // Just under the limit, the size is not what is refused (the
        // request is empty otherwise: it may be refused for that).
        let fits = Padded {
            pad: vec![b'x'; MAX_REQUEST_BYTES - 16],
        };
        if let Some(status) = call_raw(&channel, path, streaming, fits).await {
            assert!(
                !status.message().contains("too large"),
                "{path} refused a request under the limit for its size: {status:?}"
            );
        }
    }
    // The server still answers, health included.
    let mut health = HealthClient::new(channel);
    let served = health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("a normal health check");
    assert_eq!(served.into_inner().status, 1);
    ping_eventually(server.url()).await;
}

/// CPU time (user + system) the process has used so far, in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces): state is the
    // 3rd field, utime the 14th and stime the 15th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[tokio::test]
async fn out_of_file_descriptors_the_server_waits_instead_of_spinning_and_recovers() {
    let pg = start_db();
    let log = log_path("emfile");
    let server = ServerProcess::start_logged_on(
        "127.0.0.1:0",
        &pg.url(),
        &[
            "--db-connections",
            "2",
            "--db-min-connections",
            "2",
            "--first-bytes-timeout-ms",
            "0",
        ],
        &log,
        Some(40),
    );
    ping_eventually(server.url()).await;

    // Far more connections than descriptors: the kernel completes them,
    // the server cannot accept them all.
    let mut held = Vec::new();
    for _ in 0..80 {
        held.push(TcpStream::connect(&server.addr).await.unwrap());
    }
    // Out of descriptors.
    wait::until_logged(&log, "cannot accept connections", Duration::from_secs(10)).await;
    // Starved, it waits: well under half a core over two seconds (a loop
    // retrying at once takes a whole one).
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let before = cpu_ticks(server.pid());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_ticks(server.pid()) - before;
    assert!(
        used < ticks_per_s,
        "{used} ticks of CPU in 2 s ({ticks_per_s} a second) while out of descriptors"
    );

    drop(held);
    ping_eventually(server.url()).await;
}

#[tokio::test]
async fn plaintext_on_a_network_address_is_warned_about() {
    let pg = start_db();
    let quiet = log_path("plaintext-loopback");
    let loud = log_path("plaintext-any");
    let server = ServerProcess::start_logged_on("127.0.0.1:0", &pg.url(), &[], &quiet, None);
    ping_eventually(server.url()).await;
    let any = ServerProcess::start_logged_on("0.0.0.0:0", &pg.url(), &[], &loud, None);
    let port = any.addr.rsplit_once(':').unwrap().1;
    ping_eventually(format!("http://127.0.0.1:{port}")).await;
    let warning = "serving plaintext on a network address";
    assert!(!std::fs::read_to_string(&quiet).unwrap().contains(warning));
    assert!(std::fs::read_to_string(&loud).unwrap().contains(warning));
}
