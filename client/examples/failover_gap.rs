//! How long does one client's call take when the server it is using is
//! SIGKILLed (or SIGSTOPped)? Four players act every 20 ms against a
//! local cluster of 3 servers; every `--every-ms` the server the pool is using
//! of the first player is killed (and replaced, so the cluster keeps its size) or hung. For each
//! call that failed over it prints the gap from the start of the failed
//! attempt to the reply, then p50/max of all gaps and of the calls that did
//! not fail over.
//!
//! ```text
//! cargo build --release -p borbaman --bin borbaman --example failover_gap
//! target/release/examples/failover_gap [--faults 10] [--every-ms 1000] [--hang]
//! ```

use std::time::{Duration, Instant};

use anyhow::Context;
use borbaman_client::pool::{PoolConfig, ServerPool};
use borbaman_client::session::{GameSession, new_token};
use borbaman_cluster::local::{ClusterConfig, LocalCluster};
use borbaman_proto::pb::Action;
use hdrhistogram::Histogram;

fn main() -> anyhow::Result<()> {
    let mut faults = 10;
    let mut every = Duration::from_millis(1000);
    let mut hang = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--faults" => faults = args.next().context("--faults N")?.parse()?,
            "--every-ms" => {
                every = Duration::from_millis(args.next().context("--every-ms N")?.parse()?)
            }
            "--hang" => hang = true,
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let binary = std::env::current_exe()?
        .parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("borbaman"))
        .context("locating the borbaman binary")?;
    let config = ClusterConfig::temporary(3).with_binary(binary);
    let mut cluster = LocalCluster::start(config, |step| eprintln!("{step}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let pool = ServerPool::connect(&cluster.addresses(), PoolConfig::default()).await?;
        // The other three players have pools of their own, so they spread
        // over the servers and keep them warm, as other clients would.
        let mut others = Vec::new();
        let (mut player, _) = GameSession::join(&pool, "gap1", new_token()).await?;
        for n in 2..=4 {
            let own = ServerPool::connect(&cluster.addresses(), PoolConfig::default()).await?;
            others.push(GameSession::join(&own, &format!("gap{n}"), new_token()).await?.0);
        }
        let mut gaps = histogram();
        let mut normal = histogram();
        let mut ticker = tokio::time::interval(Duration::from_millis(20));
        let mut next_fault = Instant::now() + every;
        let mut done = 0;
        let mut hung: Option<usize> = None;
        while done < faults {
            ticker.tick().await;
            if Instant::now() >= next_fault {
                if let Some(i) = hung.take() {
                    cluster.resume(i)?;
                }
                let current = pool.status().current.context("no current server")?;
                let i = cluster.index_of(&current).context("unknown server")?;
                if hang {
                    cluster.hang(i)?;
                    hung = Some(i);
                } else {
                    cluster.kill(i)?;
                }
                next_fault = Instant::now() + every;
                done += 1;
            }
            for other in &mut others {
                other.act(Action::Idle).await?;
            }
            let (_, info) = player.act(Action::Idle).await?;
            match info.first_failure {
                Some(failed) => {
                    let gap = (info.started + info.rtt).duration_since(failed);
                    println!(
                        "failed over to {} after {} attempts: gap {:.2} ms",
                        info.server,
                        info.attempts,
                        gap.as_secs_f64() * 1e3
                    );
                    gaps.record(gap.as_micros().max(1) as u64)?;
                }
                None => normal.record(info.rtt.as_micros().max(1) as u64)?,
            }
            if !hang && cluster.running_addresses().len() < 3 {
                // Keep three servers; the pool finds the new one by itself.
                let dead = (0..cluster.len()).find(|&i| !cluster.is_running(i));
                if let Some(i) = dead {
                    cluster.replace(i)?;
                }
            }
        }
        if let Some(i) = hung {
            cluster.resume(i)?;
        }
        println!(
            "failover gap: n={} p50 {:.2} ms max {:.2} ms; calls without failover: p50 {:.2} ms p99 {:.2} ms",
            gaps.len(),
            gaps.value_at_quantile(0.5) as f64 / 1e3,
            gaps.max() as f64 / 1e3,
            normal.value_at_quantile(0.5) as f64 / 1e3,
            normal.value_at_quantile(0.99) as f64 / 1e3,
        );
        anyhow::Ok(())
    })
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}
