//! Does the pool's background task (registry refresh + health checks every
//! 500 ms) add latency to calls? Measures the RTT of calls through a
//! `ServerPool` with the task on and with it off, in alternating rounds on
//! the same servers, and prints p50/p99/p99.9/max of each.
//!
//! ```text
//! cargo run --release -p borbaman --example pool_overhead -- [--servers host:port,…]
//!     [--calls 5000] [--rounds 6] [--refresh-ms 500] [--call get-state|ping]
//! ```
//!
//! Without `--servers` it starts a local cluster of 3 servers (the
//! `borbaman` binary next to this example, on a throwaway PostgreSQL or
//! `DATABASE_URL`). `ping` measures the pool and network alone (no database);
//! `get-state` (the default) a player's state read, the common call.

use std::time::{Duration, Instant};

use anyhow::Context;
use borbaman_client::pool::{PoolConfig, ServerPool};
use borbaman_client::session::{GameSession, new_token};
use borbaman_cluster::local::{ClusterConfig, LocalCluster};
use borbaman_proto::pb::PingRequest;
use hdrhistogram::Histogram;

struct Args {
    servers: Vec<String>,
    calls: usize,
    rounds: usize,
    refresh: Duration,
    ping: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        servers: Vec::new(),
        calls: 5000,
        rounds: 6,
        refresh: Duration::from_millis(500),
        ping: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--servers" => args.servers = value()?.split(',').map(str::to_string).collect(),
            "--calls" => args.calls = value()?.parse()?,
            "--rounds" => args.rounds = value()?.parse()?,
            "--refresh-ms" => args.refresh = Duration::from_millis(value()?.parse()?),
            "--call" => args.ping = value()? == "ping",
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    Ok(args)
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let cluster = if args.servers.is_empty() {
        let binary = std::env::current_exe()?
            .parent()
            .and_then(|examples| examples.parent())
            .map(|dir| dir.join("borbaman"))
            .context("locating the borbaman binary")?;
        anyhow::ensure!(
            binary.exists(),
            "{} not found: build it first (cargo build --release -p borbaman)",
            binary.display()
        );
        let config = ClusterConfig::temporary(3).with_binary(binary);
        Some(LocalCluster::start(config, |step| eprintln!("{step}"))?)
    } else {
        None
    };
    let servers = cluster
        .as_ref()
        .map_or_else(|| args.servers.clone(), |c| c.addresses());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(measure(&args, &servers))
}

async fn measure(args: &Args, servers: &[String]) -> anyhow::Result<()> {
    let config = |background| PoolConfig {
        refresh: args.refresh,
        background,
        ..PoolConfig::default()
    };
    let with = ServerPool::connect(servers, config(true)).await?;
    let without = ServerPool::connect(servers, config(false)).await?;
    // A seated player to read the state of (joins are not measured).
    let (session_with, _) = GameSession::join(&with, "overhead-on", new_token()).await?;
    let (session_without, _) = GameSession::join(&without, "overhead-off", new_token()).await?;
    let mut histograms = [new_histogram(), new_histogram()];
    let mut sessions = [session_with, session_without];
    for round in 0..args.rounds * 2 {
        let i = round % 2;
        let session = &mut sessions[i];
        for _ in 0..args.calls {
            let started = Instant::now();
            if args.ping {
                let payload = vec![7u8; 64];
                session
                    .pool()
                    .call(|mut client| {
                        let payload = payload.clone();
                        async move { client.ping(PingRequest { payload }).await }
                    })
                    .await?;
            } else {
                session.state().await?;
            }
            let rtt_us = started.elapsed().as_micros() as u64;
            histograms[i].record(rtt_us.max(1))?;
        }
    }
    let call = if args.ping { "Ping" } else { "GetState" };
    println!(
        "{call} RTT through ServerPool, {} calls x {} rounds each, {} servers, refresh {} ms",
        args.calls,
        args.rounds,
        servers.len(),
        args.refresh.as_millis()
    );
    println!("background   p50 us   p99 us  p99.9 us   max us");
    for (label, h) in [("on", &histograms[0]), ("off", &histograms[1])] {
        println!(
            "{label:<10} {:>8} {:>8} {:>9} {:>8}",
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max()
        );
    }
    Ok(())
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}
