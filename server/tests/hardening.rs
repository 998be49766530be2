//! What a hostile client tried and must not get, against real server
//! processes and a real PostgreSQL: names that pass for another player's,
//! seats taken by guessing a token, made-up tokens that cost the database,
//! unlimited reads, connections held open by saying nothing, names held
//! forever, wins farmed against throwaway players, undecodable requests
//! answered as internal errors, thousands of streams on one connection, a
//! client that makes the server write and never reads, and the server's
//! status told to strangers.

mod common;

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use borbaman_cluster::wait;
use borbaman_proto::codec::StrictCodec;
use borbaman_proto::{Reason, pb};
use common::raw_h2::*;
use common::*;
use hyper_util::rt::TokioIo;
use pb::game_client::GameClient;
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tonic::Code;
use tonic::codegen::Service;
use tonic::codegen::http::Uri;
use tonic::transport::{Channel, Endpoint};

async fn count(db: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(db).await.unwrap()
}

/// Dials the server from the loopback address `source`.
#[derive(Clone)]
struct From {
    source: IpAddr,
    server: SocketAddr,
}

impl Service<Uri> for From {
    type Response = TokioIo<TcpStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<TcpStream>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let (source, server) = (self.source, self.server);
        Box::pin(async move {
            let socket = TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(source, 0))?;
            let stream = socket.connect(server).await?;
            // As tonic's own connector does: without it, Nagle holds a
            // call's second write for the server's delayed ACK (40 ms).
            stream.set_nodelay(true)?;
            Ok(TokioIo::new(stream))
        })
    }
}

/// A game client whose connection comes from `source`.
async fn client_from(server: &ServerProcess, source: IpAddr) -> GameClient<Channel> {
    let channel = Endpoint::from_shared(server.url())
        .unwrap()
        .connect_with_connector(From {
            source,
            server: server.addr.parse().unwrap(),
        })
        .await
        .expect("connect from another loopback address");
    GameClient::new(channel)
}

/// [`h2_connection`] to `server`.
async fn silent_connection(server: &ServerProcess, source: IpAddr) -> Option<TcpStream> {
    h2_connection(server.addr.parse().unwrap(), source).await
}

/// Reads until the server closes `stream`; panics if it is still open
/// after `within`.
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    within: Duration,
    what: &str,
) {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(_)) => {}
            Err(_) => panic!("{what} is still open after {within:?}"),
        }
    }
}

// 1. Names.

#[tokio::test]
async fn names_that_differ_by_case_or_blanks_are_refused_to_another_identity() {
    let (pg, _server, mut client) = one_server_and_client(&[]).await;
    let db = sql(&pg.url()).await;
    for owned in ["Alice", "Ivan", "Bill", "Ana"] {
        join_as(&mut client, &token(), owned, token())
            .await
            .unwrap_or_else(|e| panic!("{owned}: {e:?}"));
    }
    let sessions = count(&db, "SELECT count(*) FROM sessions").await;
    let intruder = token();
    for fake in [
        "ALICE",
        "ivan",
        "IVAN",
        "BILL",
        "Ana ",
        " Ana",
        "Ana\u{00A0}",
        "Ana\u{3000}",
        "Ana\u{2800}",
        "A  na",
        "A\u{2009}na",
        "\u{2800}\u{2800}",
    ] {
        let err = join_as(&mut client, &intruder, fake, token())
            .await
            .map(|_| ())
            .expect_err(fake);
        assert!(
            matches!(err.code(), Code::AlreadyExists | Code::InvalidArgument),
            "{fake:?}: {err:?}"
        );
        // Nor without an identity.
        let err = join_as(&mut client, &[], fake, token())
            .await
            .map(|_| ())
            .expect_err(fake);
        assert!(
            matches!(err.code(), Code::AlreadyExists | Code::InvalidArgument),
            "{fake:?} anonymous: {err:?}"
        );
    }
    assert_eq!(
        count(&db, "SELECT count(*) FROM sessions").await,
        sessions,
        "a refused join wrote a session"
    );
}

// 2. Tokens.

#[tokio::test]
async fn a_guessed_token_takes_no_seat_and_a_retried_join_gets_the_same_one() {
    let (pg, _server, mut client) = one_server_and_client(&[]).await;
    // A careless client's nonce: passes the entropy check, easy to guess.
    let weak = b"0123456789abcdef".to_vec();
    let (victim, reply) = join_as(&mut client, &[], "victim", weak.clone())
        .await
        .unwrap();
    assert_ne!(reply.token, weak, "the server issues the token");
    assert_eq!(reply.token.len(), 32);

    // Acting with the nonce, or any token the servers did not issue: refused.
    for guess in [weak.clone(), token(), vec![7u8; 32]] {
        let err = client
            .act(pb::ActRequest {
                token: guess,
                game_id: victim.game_id,
                seat: victim.seat,
                seq: 1,
                action: pb::Action::Right as i32,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
        assert_eq!(Reason::of(&err), Some(Reason::UnknownSession));
    }

    // The join retried (the same nonce, another server): the same seat.
    let other = ServerProcess::start(&pg.url());
    let (again, again_reply) = join_as(&mut other.game().await, &[], "victim", weak.clone())
        .await
        .unwrap();
    assert_eq!(again_reply.token, reply.token);
    assert_eq!((again.game_id, again.seat), (victim.game_id, victim.seat));
    // A crashed client rejoins with the token it saved.
    let (_, rejoined) = join_as(&mut client, &[], "victim", reply.token.clone())
        .await
        .unwrap();
    assert_eq!(
        (rejoined.game_id, rejoined.seat),
        (victim.game_id, victim.seat)
    );
    let mut player = victim.clone();
    client
        .act(player.act_request(pb::Action::Idle))
        .await
        .expect("the holder of the issued token acts");
}

#[tokio::test]
async fn made_up_tokens_are_refused_without_the_database_and_cost_no_limit() {
    let mut pg = start_db();
    let server = ServerProcess::start_with(&pg.url(), &["--max-acts-per-s", "10"]);
    let mut client = server.game().await;
    let mut players = full_game(&mut client).await;
    pg.stop().unwrap();
    // The database is down: anything that asked it would be UNAVAILABLE.
    let started = Instant::now();
    for i in 0..300 {
        let err = client
            .act(pb::ActRequest {
                token: token(),
                game_id: players[0].game_id,
                seat: 0,
                seq: 1,
                action: pb::Action::Idle as i32,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "call {i}: {err:?}");
    }
    let get = client
        .get_state(pb::GetStateRequest {
            token: token(),
            game_id: players[0].game_id,
        })
        .await
        .unwrap_err();
    assert_eq!(get.code(), Code::Unauthenticated, "{get:?}");
    eprintln!("300 forged acts refused in {:?}", started.elapsed());
    pg.start().unwrap();
    // The real player's budget is untouched by the forgeries.
    for _ in 0..5 {
        let req = players[0].act_request(pb::Action::Idle);
        let what = "the player acting after the database came back";
        wait::until(what, Duration::from_secs(5), || {
            let (mut client, req) = (client.clone(), req.clone());
            async move {
                match client.act(req).await {
                    Ok(_) => Some(()),
                    // The store's connections come back after the restart.
                    Err(e) if e.code() == Code::Unavailable => None,
                    Err(e) => panic!("{e:?}"),
                }
            }
        })
        .await;
    }
}

// 3. Reads.

#[tokio::test]
async fn sessionless_reads_are_limited_per_address_and_a_spectator_never_is() {
    let (_pg, server, mut player_client) =
        one_server_and_client(&["--max-reads-per-ip-per-s", "50"]).await;
    let players = full_game(&mut player_client).await;
    let game_id = players[0].game_id;

    // A spectator at 20 Hz for 3 s, with the live games every second.
    let mut spectator = client_from(&server, IpAddr::from([127, 0, 0, 2])).await;
    let mut ticker = tokio::time::interval(Duration::from_millis(50));
    for i in 0..60 {
        ticker.tick().await;
        spectator
            .watch_state(pb::WatchStateRequest { game_id })
            .await
            .unwrap_or_else(|e| panic!("watch {i}: {e:?}"));
        if i % 20 == 0 {
            spectator
                .list_games(pb::ListGamesRequest { limit: 100 })
                .await
                .unwrap_or_else(|e| panic!("list {i}: {e:?}"));
        }
    }

    // A flood of each read (200 at once), from an address of its own:
    // most refused, as rate-limited.
    for (n, read) in ["ListGames", "WatchState", "GetReplay", "Rankings"]
        .into_iter()
        .enumerate()
    {
        // Over 8 connections, as each holds at most 32 calls at once.
        let mut flooders = Vec::new();
        for _ in 0..8 {
            flooders.push(client_from(&server, IpAddr::from([127, 0, 0, 10 + n as u8])).await);
        }
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..200 {
            let mut flooder = flooders[i % flooders.len()].clone();
            calls.spawn(async move {
                match read {
                    "ListGames" => flooder
                        .list_games(pb::ListGamesRequest { limit: 100 })
                        .await
                        .map(|_| ()),
                    "WatchState" => flooder
                        .watch_state(pb::WatchStateRequest { game_id })
                        .await
                        .map(|_| ()),
                    "GetReplay" => flooder
                        .get_replay(pb::ReplayRequest { game_id })
                        .await
                        .map(|_| ()),
                    _ => flooder
                        .rankings(pb::RankingsRequest { limit: 100 })
                        .await
                        .map(|_| ()),
                }
            });
        }
        let mut refused = 0;
        while let Some(result) = calls.join_next().await {
            match result.unwrap() {
                Err(e) if Reason::of(&e) == Some(Reason::RateLimited) => refused += 1,
                // Of those the limit let through, the ones over the
                // spectators' share of the database are told server-full
                // by admission control: also reads the limit let pass.
                Err(e) if Reason::of(&e) == Some(Reason::ServerFull) => {}
                // The replay of a running game is refused as not finished,
                // and a busy database may not answer all those let through:
                // both are reads the limit let pass.
                Err(e)
                    if (read == "GetReplay" && e.code() == Code::FailedPrecondition)
                        || e.code() == Code::Unavailable => {}
                Err(e) => panic!("{read}: {e:?}"),
                Ok(()) => {}
            }
        }
        assert!(refused >= 100, "{read}: only {refused} of 200 refused");
    }
    // The player is not limited by them.
    player_client
        .get_state(pb::GetStateRequest {
            token: players[0].token.clone(),
            game_id,
        })
        .await
        .expect("a player reads its game");
}

// 4. Idle and held connections.

#[tokio::test]
async fn a_connection_with_no_call_is_closed_after_the_idle_timeout() {
    let (_pg, server) = one_server(&["--idle-connection-timeout-ms", "1000"]);
    // Preface only, then silence.
    let mut preface_only = silent_connection(&server, IpAddr::from([127, 0, 0, 1]))
        .await
        .expect("admitted");
    closed_within(
        &mut preface_only,
        Duration::from_secs(10),
        "a preface-only connection",
    )
    .await;
    // One that sends an HTTP/2 PING every 200 ms (and reads the answers)
    // but opens no call: PINGs keep nothing open.
    let mut pinging = silent_connection(&server, IpAddr::from([127, 0, 0, 1]))
        .await
        .expect("admitted");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 1024];
    'open: loop {
        if pinging
            .write_all(&h2_frame(PING, 0, 0, b"now&then"))
            .await
            .is_err()
        {
            break;
        }
        let next = tokio::time::Instant::now() + Duration::from_millis(200);
        loop {
            match tokio::time::timeout_at(next.min(deadline), pinging.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break 'open,
                Ok(Ok(_)) => {}
                Err(_) if tokio::time::Instant::now() >= deadline => {
                    panic!("a connection that only PINGs is still open after 10 s")
                }
                Err(_) => break,
            }
        }
    }
    // A client that calls now and then is not cut off: a pool's health
    // checks keep its connection in use.
    let mut client = server.game().await;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        client
            .ping(pb::PingRequest { payload: vec![] })
            .await
            .expect("a connection in use stays open");
    }
}

#[tokio::test]
async fn two_silent_connections_per_address_do_not_lock_a_new_address_out() {
    let (_pg, server) = one_server(&["--max-connections-per-ip", "2", "--max-connections", "6"]);
    // Three attacking addresses hold two silent connections each: full.
    let mut held = Vec::new();
    for n in 2..5u8 {
        for _ in 0..2 {
            held.push(
                silent_connection(&server, IpAddr::from([127, 0, 0, n]))
                    .await
                    .expect("within the limits"),
            );
        }
    }
    // A third from an attacking address: over its own limit.
    assert!(
        silent_connection(&server, IpAddr::from([127, 0, 0, 2]))
            .await
            .is_none(),
        "a third connection from one address"
    );
    // A player from a new address is served, every time (and stays
    // connected, so each newcomer finds the server full).
    let mut players = Vec::new();
    for n in 20..23u8 {
        let mut client = client_from(&server, IpAddr::from([127, 0, 0, n])).await;
        client
            .ping(pb::PingRequest { payload: vec![1] })
            .await
            .unwrap_or_else(|e| panic!("a new address was locked out: {e:?}"));
        players.push(client);
    }
    // To let them in, attackers' connections were closed.
    let mut closed = 0;
    for stream in &mut held {
        let mut buf = [0u8; 1024];
        let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
        loop {
            match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    closed += 1;
                    break;
                }
                Ok(Ok(_)) => {}
                Err(_) => break,
            }
        }
    }
    assert_eq!(closed, 3, "one held connection closed per newcomer");
}

#[tokio::test]
async fn a_peer_that_stops_answering_is_found_by_keepalive_pings() {
    // Neither the idle timeout nor the call timeout: only the PINGs.
    let (_pg, server) = one_server(&[
        "--keepalive-interval-ms",
        "1000",
        "--keepalive-timeout-ms",
        "1000",
        "--idle-connection-timeout-ms",
        "0",
        "--call-timeout-ms",
        "0",
    ]);
    let mut stream = TcpStream::connect(&server.addr).await.unwrap();
    let mut hello = H2_PREFACE.to_vec();
    hello.extend(h2_frame(SETTINGS, 0, 0, &[]));
    // A whole Ping call on stream 1, to show the frames are well formed.
    hello.extend(h2_frame(HEADERS, END_HEADERS, 1, &ping_headers()));
    hello.extend(h2_frame(DATA, END_STREAM, 1, &grpc_message(&[])));
    stream.write_all(&hello).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut head = [0u8; 9];
        tokio::time::timeout_at(deadline, stream.read_exact(&mut head))
            .await
            .expect("no answer to a well-formed call")
            .expect("the server closed a well-formed call's connection");
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0u8; len];
        stream.read_exact(&mut payload).await.unwrap();
        let stream_id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        assert_ne!(head[3], 0x7, "GOAWAY: the frames are malformed");
        if head[3] == 0x1 && stream_id == 1 {
            break; // the answer's HEADERS
        }
    }
    // Then a call that never ends (its request never finishes), from a peer
    // that reads nothing more and answers no PING: a dead peer.
    stream
        .write_all(&h2_frame(HEADERS, END_HEADERS, 3, &ping_headers()))
        .await
        .unwrap();
    closed_within(
        &mut stream,
        Duration::from_secs(15),
        "a dead peer's connection",
    )
    .await;
}

// 5. Names held one at a time, released; rankings between identities.

#[tokio::test]
async fn an_identity_holds_one_name_and_lets_it_go_after_the_hold() {
    let (pg, _server, mut client) = one_server_and_client(&["--name-hold", "1s"]).await;
    let db = sql(&pg.url()).await;
    let (alice, bob) = (token(), token());
    join_as(&mut client, &alice, "Zed", token()).await.unwrap();
    join_as(&mut client, &alice, "Yan", token()).await.unwrap();
    let held = count(&db, "SELECT count(*) FROM names WHERE released_at IS NULL").await;
    assert_eq!(held, 1, "an identity holds one name at a time");
    // Let go of, but still held for a while: not anyone's yet.
    let err = join_as(&mut client, &bob, "zed", token())
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    // After the hold, anyone may take it.
    let what = "the released name free for another identity";
    wait::until(what, Duration::from_secs(10), || {
        let (mut client, bob) = (client.clone(), bob.clone());
        async move { name_taken(&mut client, &bob, "zed").await }
    })
    .await;
    // And the one Alice holds now is still hers.
    let err = join_as(&mut client, &bob, "YAN", token())
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
}

#[tokio::test]
async fn a_name_no_one_uses_is_released_by_retention() {
    let (_pg, _server, mut client) =
        one_server_and_client(&["--retention", "10s", "--name-retention", "1s"]).await;
    join_as(&mut client, &token(), "Squat", token())
        .await
        .unwrap();
    let newcomer = token();
    let what = "the unused name released";
    wait::until(what, Duration::from_secs(15), || {
        let (mut client, newcomer) = (client.clone(), newcomer.clone());
        async move { name_taken(&mut client, &newcomer, "Squat").await }
    })
    .await;
}

/// `Some` once `identity` joined under `name`; `None` while the name is
/// another's.
async fn name_taken(client: &mut GameClient<Channel>, identity: &[u8], name: &str) -> Option<()> {
    match join_as(client, identity, name, token()).await {
        Ok(_) => Some(()),
        Err(e) if e.code() == Code::AlreadyExists => None,
        Err(e) => panic!("joining as {name}: {e:?}"),
    }
}

/// Four players (identified as given) in one game; all but seat 0 leave,
/// so seat 0 wins.
async fn won_by_seat_0(client: &mut GameClient<Channel>, identified: [bool; 4], tag: &str) {
    let mut players = Vec::new();
    for (i, id) in identified.into_iter().enumerate() {
        let identity = if id { token() } else { Vec::new() };
        let (p, _) = join_as(client, &identity, &format!("{tag}{i}"), token())
            .await
            .unwrap();
        players.push(p);
    }
    assert!(players.iter().all(|p| p.game_id == players[0].game_id));
    for p in &players[1..] {
        client
            .leave(pb::LeaveRequest {
                token: p.token.clone(),
                game_id: p.game_id,
                seat: p.seat,
                seq: p.next_seq,
            })
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn wins_over_players_without_an_identity_are_not_ranked() {
    let (_pg, _server, mut client) = one_server_and_client(&[]).await;
    won_by_seat_0(&mut client, [true, false, false, false], "farm").await;
    won_by_seat_0(&mut client, [true, true, true, false], "most").await;
    let rankings = client
        .rankings(pb::RankingsRequest { limit: 10 })
        .await
        .unwrap()
        .into_inner()
        .rankings;
    assert!(rankings.is_empty(), "{rankings:?}");
    won_by_seat_0(&mut client, [true; 4], "real").await;
    let rankings = client
        .rankings(pb::RankingsRequest { limit: 10 })
        .await
        .unwrap()
        .into_inner()
        .rankings;
    assert_eq!(rankings.len(), 4, "{rankings:?}");
    assert_eq!((rankings[0].name.as_str(), rankings[0].wins), ("real0", 1));
}

// 6. Malformed requests.

#[tokio::test]
async fn undecodable_requests_are_invalid_arguments() {
    let (_pg, server) = one_server(&[]);
    let channel = Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    // A length-delimited field 1 where GetReplay expects a number, and
    // bytes that are not UTF-8 where Join expects a name.
    for (path, payload) in [
        ("/borbaman.v1.Game/GetReplay", b"x".to_vec()),
        ("/borbaman.v1.Game/Join", vec![0xff, 0xfe]),
    ] {
        grpc.ready().await.unwrap();
        let status = grpc
            .unary(
                tonic::Request::new(pb::PingRequest { payload }),
                tonic::codegen::http::uri::PathAndQuery::from_static(path),
                StrictCodec::<pb::PingRequest, pb::PingReply>::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{path}: {status:?}");
    }
}

/// A call's codec buffers start small (`codec::BUFFER_BYTES`) and grow for
/// a larger message: messages of sizes around and past that, up to what a
/// request may hold, arrive whole, both ways.
#[tokio::test]
async fn messages_larger_than_a_calls_first_buffer_arrive_whole() {
    let (_pg, _server, mut client) = one_server_and_client(&[]).await;
    let first = borbaman_proto::codec::BUFFER_BYTES;
    let most = borbaman_proto::MAX_REQUEST_BYTES - 16;
    for len in [
        0,
        first - 8,
        first - 1,
        first,
        first + 1,
        3 * first + 7,
        most,
    ] {
        let payload: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let reply = client
            .ping(pb::PingRequest {
                payload: payload.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("a ping of {len} bytes: {e:?}"))
            .into_inner();
        assert!(
            reply.payload == payload,
            "a ping of {len} bytes came back changed"
        );
    }
}

// 7. Streams held by the thousand, writes no one reads, Status.

/// The memory one connection at its stream limit may cost the server, as
/// `docs/security.md` states it: 16 KiB per held stream, the connection's
/// 256 KiB HTTP/2 receive window, and 256 KiB for the connection itself.
fn connection_budget_bytes(max_streams: u32) -> u64 {
    u64::from(max_streams) * 16 * 1024 + 512 * 1024
}

/// The allocator takes memory from the system 2 MiB at a time: a server
/// that serves a few calls grows by 0 or 2 MiB (measured), whatever they
/// were.
const ALLOCATOR_STEP_BYTES: u64 = 2 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_streams_on_one_connection_are_refused_past_the_limit() {
    const STREAMS: u32 = 1000;
    let limit: u32 = borbaman_server::incoming::DEFAULT_MAX_STREAMS;
    // Default limits (a test server's connection caps are off, but not
    // the stream limit).
    let (_pg, server) = one_server(&[]);
    let addr: SocketAddr = server.addr.parse().unwrap();

    // A fair client on an address of its own pings all through the flood.
    let mut fair = client_from(&server, IpAddr::from([127, 0, 0, 3])).await;
    fair.ping(pb::PingRequest { payload: vec![] })
        .await
        .expect("a fair client");
    // Each ping's wait, until no one listens.
    let (waits_tx, mut waits) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let sent = Instant::now();
            let answered = fair.ping(pb::PingRequest { payload: vec![7] }).await;
            if waits_tx.send(answered.map(|_| sent.elapsed())).is_err() {
                return;
            }
        }
    });

    // Before the baseline, the server has served the fair client and a
    // connection at its stream limit (so the allocator's pages for them
    // are counted already).
    for _ in 0..20 {
        let wait = tokio::time::timeout(Duration::from_secs(10), waits.recv())
            .await
            .expect("the fair client is stuck")
            .unwrap();
        wait.expect("the fair client is answered");
    }
    let (_at_limit, settings, refused) =
        open_streams(addr, IpAddr::from([127, 0, 0, 4]), limit).await;
    let announced = settings.chunks(6).find_map(|s| {
        (u16::from_be_bytes([s[0], s[1]]) == SETTINGS_MAX_CONCURRENT_STREAMS)
            .then(|| u32::from_be_bytes([s[2], s[3], s[4], s[5]]))
    });
    assert_eq!(
        announced,
        Some(limit),
        "the server's SETTINGS announce no MAX_CONCURRENT_STREAMS of {limit}"
    );
    assert!(refused.is_empty(), "streams within the limit were refused");

    let rss_before = rss_bytes(server.pid());
    let (_flooding, _, refused) = open_streams(addr, IpAddr::from([127, 0, 0, 2]), STREAMS).await;
    let first_refused = refused.iter().min().copied();
    let refused = refused.len() as u32;
    assert!(
        first_refused.is_none_or(|id| id > 2 * limit),
        "stream {first_refused:?}, within the limit, was refused"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    // The fair client goes on while the allowed streams are held (until
    // the call timeout): 50 more pings.
    let mut slowest = Duration::ZERO;
    let mut pings = 0;
    while let Ok(wait) = waits.try_recv() {
        let wait = wait.expect("the fair client is answered");
        slowest = slowest.max(wait);
        pings += 1;
    }
    for _ in 0..50 {
        let wait = tokio::time::timeout_at(deadline, waits.recv())
            .await
            .expect("the fair client is stuck")
            .unwrap()
            .expect("the fair client is answered");
        slowest = slowest.max(wait);
        pings += 1;
    }
    drop(waits);
    let grown = rss_bytes(server.pid()).saturating_sub(rss_before);
    let budget = connection_budget_bytes(limit);
    eprintln!(
        "{refused} of {STREAMS} streams refused; RSS grew {} KiB (budget {} KiB); \
         the fair client's slowest of {pings} pings: {slowest:?}",
        grown / 1024,
        budget / 1024
    );
    assert_eq!(refused, STREAMS - limit, "streams past the limit refused");
    assert!(
        grown < budget + ALLOCATOR_STEP_BYTES,
        "RSS grew {} KiB, over the budget of {} KiB (and the allocator's 2 MiB step)",
        grown / 1024,
        budget / 1024
    );
    assert!(
        slowest < Duration::from_millis(100),
        "the fair client waited {slowest:?} for a ping"
    );
}

#[tokio::test]
async fn a_call_whose_request_never_ends_is_cancelled_at_the_call_timeout() {
    const END_STREAM: u8 = 0x1;
    let (_pg, server) = one_server(&["--call-timeout-ms", "1000", "--keepalive-interval-ms", "0"]);
    let started = Instant::now();
    let (mut stream, _, refused) = open_streams(
        server.addr.parse().unwrap(),
        IpAddr::from([127, 0, 0, 1]),
        1,
    )
    .await;
    assert!(refused.is_empty());
    // The call's end: its status (HEADERS that end the stream) or a reset.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (kind, flags, id, _) = tokio::time::timeout_at(deadline, read_frame(&mut stream))
            .await
            .expect("a call whose request never ends is still open after 10 s")
            .expect("the server closed the connection instead of ending the call");
        if id == 1 && ((kind == 0x1 && flags & END_STREAM != 0) || kind == RST_STREAM) {
            break;
        }
    }
    let ended = started.elapsed();
    assert!(
        ended >= Duration::from_secs(1),
        "ended after {ended:?}, before the call timeout"
    );
}

#[tokio::test]
async fn a_client_that_honours_the_stream_limit_waits_for_a_stream_instead_of_being_refused() {
    let (_pg, server) = one_server(&["--max-streams-per-connection", "4"]);
    // tonic's channel, one connection: once the server's SETTINGS came
    // (before the first answer, on the wire), 100 calls at once go out 4
    // at a time.
    let mut client = server.game().await;
    client
        .ping(pb::PingRequest { payload: vec![] })
        .await
        .expect("the first call");
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..100u8 {
        let mut client = client.clone();
        calls.spawn(async move { client.ping(pb::PingRequest { payload: vec![n] }).await });
    }
    while let Some(call) = calls.join_next().await {
        call.unwrap()
            .expect("a call queued behind the stream limit is served");
    }
}

/// Sends PINGs on `stream` as fast as it takes them and never reads; the
/// time until the server cuts the connection (a write fails), or `None`
/// if it is still open after `within`.
async fn ping_flood_until_cut<S: tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
    within: Duration,
) -> Option<Duration> {
    let mut pings = Vec::new();
    for n in 0..64u64 {
        pings.extend(h2_frame(PING, 0, 0, &n.to_be_bytes()));
    }
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.write_all(&pings)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Some(started.elapsed()),
            Err(_) => return None,
        }
    }
}

/// A socket whose receive buffer is small, so the server's answers fill it
/// (and the server's send buffer) soon.
fn small_receive_buffer() -> TcpSocket {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket
}

/// Only the write-stall timeout may close the flooding connection: no
/// idle timeout, no keepalive PINGs, no call timeout.
const ONLY_THE_WRITE_STALL: [&str; 8] = [
    "--write-stall-timeout-ms",
    "2000",
    "--idle-connection-timeout-ms",
    "0",
    "--keepalive-interval-ms",
    "0",
    "--call-timeout-ms",
    "0",
];

#[tokio::test]
async fn a_client_that_floods_pings_and_never_reads_is_cut_off() {
    let (_pg, server) = one_server(&ONLY_THE_WRITE_STALL);
    let mut stream = small_receive_buffer()
        .connect(server.addr.parse().unwrap())
        .await
        .unwrap();
    let mut hello = H2_PREFACE.to_vec();
    hello.extend(h2_frame(SETTINGS, 0, 0, &[]));
    stream.write_all(&hello).await.unwrap();
    let cut = ping_flood_until_cut(&mut stream, Duration::from_secs(10)).await;
    eprintln!("cut after {cut:?}");
    let cut = cut.expect("a client that never reads is still connected after 10 s");
    assert!(
        cut >= Duration::from_secs(2),
        "cut after {cut:?}, before the write-stall timeout"
    );
}

#[tokio::test]
async fn a_tls_client_that_floods_pings_and_never_reads_is_cut_off() {
    let (certificates, _pg, server) = tls_server(&ONLY_THE_WRITE_STALL);
    let tcp = small_receive_buffer()
        .connect(server.addr.parse().unwrap())
        .await
        .unwrap();
    let mut tls = tls_handshake(&certificates, tcp).await;
    let mut hello = H2_PREFACE.to_vec();
    hello.extend(h2_frame(SETTINGS, 0, 0, &[]));
    tls.write_all(&hello).await.unwrap();
    let cut = ping_flood_until_cut(&mut tls, Duration::from_secs(10)).await;
    eprintln!("cut after {cut:?}");
    let cut = cut.expect("a TLS client that never reads is still connected after 10 s");
    assert!(
        cut >= Duration::from_secs(2),
        "cut after {cut:?}, before the write-stall timeout"
    );
}

/// A `Status` call with `authorization`, if given, to `server`.
async fn status_with(
    server: &ServerProcess,
    authorization: Option<&str>,
) -> Result<pb::StatusReply, tonic::Status> {
    let mut client = pb::status_client::StatusClient::connect(server.url())
        .await
        .expect("connect");
    let mut request = tonic::Request::new(pb::StatusRequest {});
    if let Some(value) = authorization {
        request
            .metadata_mut()
            .insert("authorization", value.parse().unwrap());
    }
    client.get_status(request).await.map(|r| r.into_inner())
}

#[tokio::test]
async fn status_answers_only_the_operators_token() {
    const TOKEN: &str = "hardening-operator-0123456789";
    let pg = start_db();
    // No token set: Status answers no one, and players are served.
    let closed = ServerProcess::start(&pg.url());
    for authorization in [None, Some("Bearer hardening-operator-0123456789")] {
        let err = status_with(&closed, authorization)
            .await
            .expect_err("a stranger read the status");
        assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
        assert!(err.message().contains("--operator-token"), "{err:?}");
    }
    let mut game = closed.game().await;
    game.ping(pb::PingRequest { payload: vec![] })
        .await
        .expect("the game stays open");
    let servers = closed
        .registry()
        .await
        .list_servers(pb::ListServersRequest {})
        .await
        .expect("the server list stays open")
        .into_inner()
        .servers;
    assert!(!servers.is_empty());

    // With a token: only a call that carries it is answered.
    let token_flag = format!("--operator-token={TOKEN}");
    let open = ServerProcess::start_with(&pg.url(), &[&token_flag]);
    for authorization in [
        None,
        Some(TOKEN),
        Some("Bearer hardening-operator-012345678"),
        Some("Bearer not-the-operator-0123456789"),
    ] {
        let err = status_with(&open, authorization)
            .await
            .expect_err("a wrong token read the status");
        assert_eq!(
            err.code(),
            Code::PermissionDenied,
            "{authorization:?}: {err:?}"
        );
    }
    let reply = status_with(&open, Some(&format!("Bearer {TOKEN}")))
        .await
        .expect("the operator reads the status");
    assert_eq!(reply.server_id, open.id);
}
