//! The server's resident memory under the worst connection flood its
//! limits allow: every connection an address may open, then every
//! connection the server admits, each holding as many calls (HTTP/2
//! streams) as it may, none of which ever ends its request.
//!
//! Starts a private PostgreSQL and one `borbaman-server` process with the
//! default limits (64 connections per address, 1024 in all, 32 streams per
//! connection); opens 64 connections from 127.0.0.2, then 15 × 64 more from
//! 127.0.0.3-17, each sending as many call HEADERS as `FLOOD_STREAMS` (the
//! stream limit by default) and a PING, and reads the server's VmRSS once
//! every PING is answered (every stream the server took is held by then).
//! (The last address opens one connection less: the client that measured
//! the server at rest holds one.)
//!
//! `FLOOD_UNLIMITED=1` starts the server with no stream limit, as it was
//! before it had one (set `FLOOD_STREAMS` to what each connection opens);
//! `FLOOD_ONE_ADDRESS=1` stops after the first address's connections.
//!
//! `cargo bench -p borbaman-server --bench flood`

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use common::raw_h2::{open_streams, rss_bytes};
use common::{ServerProcess, start_db};

const PER_ADDRESS: usize = 64;
const ADDRESSES: u8 = 16;

fn env_u32(name: &str) -> Option<u32> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn main() {
    let unlimited = std::env::var_os("FLOOD_UNLIMITED").is_some();
    let streams =
        env_u32("FLOOD_STREAMS").unwrap_or(borbaman_server::incoming::DEFAULT_MAX_STREAMS);
    borbaman_server::incoming::raise_open_files_limit().expect("raise the open files limit");
    let pg = start_db();
    let mut flags = vec![
        "--max-connections-per-ip",
        "64",
        "--max-connections",
        "1024",
    ];
    if unlimited {
        flags.extend(["--max-streams-per-connection", "0"]);
    }
    let server = ServerProcess::start_with(&pg.url(), &flags);
    let addr: SocketAddr = server.addr.parse().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    runtime.block_on(async {
        let mut game = server.game().await;
        game.ping(borbaman_proto::pb::PingRequest { payload: vec![] })
            .await
            .expect("the server answers");
        let idle = rss_bytes(server.pid());
        println!(
            "server {} (streams per connection: {}), each flooding connection opens {streams}",
            server.addr,
            if unlimited {
                "no limit".to_string()
            } else {
                streams.to_string()
            }
        );
        println!("RSS at rest: {:.1} MiB", mib(idle));
        let mut held = Vec::new();
        let mut open = 0;
        let phases = if std::env::var_os("FLOOD_ONE_ADDRESS").is_some() {
            1
        } else {
            2
        };
        for (label, sources) in [
            ("one address", 2..3u8),
            ("every connection", 3..2 + ADDRESSES),
        ]
        .into_iter()
        .take(phases)
        {
            let started = Instant::now();
            let mut opening = tokio::task::JoinSet::new();
            for n in sources {
                // The client that measured the server at rest holds one
                // of the server's connections: the flood takes the rest.
                let of_address = if n == 1 + ADDRESSES {
                    PER_ADDRESS - 1
                } else {
                    PER_ADDRESS
                };
                for _ in 0..of_address {
                    let source = IpAddr::from([127, 0, 0, n]);
                    opening.spawn(async move { open_streams(addr, source, streams).await });
                }
            }
            let (mut refused, mut taken) = (0usize, 0usize);
            while let Some(opened) = opening.join_next().await {
                let (stream, _, refusals) = opened.expect("a flooding connection");
                refused += refusals.len();
                taken += streams as usize - refusals.len();
                held.push(stream);
            }
            open += taken;
            let rss = rss_bytes(server.pid());
            println!(
                "{label}: {} connections, {open} streams held ({refused} refused) in {:.1} s: \
                 RSS {:.1} MiB, {:.1} MiB over rest, {:.1} KiB a held stream",
                held.len(),
                started.elapsed().as_secs_f64(),
                mib(rss),
                mib(rss - idle),
                (rss - idle) as f64 / 1024.0 / open.max(1) as f64,
            );
        }
    });
}
