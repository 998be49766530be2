//! The floors a run is judged against, measured in the same run on the same
//! machine: a bare gRPC ping to the same servers (`Game.Ping`, no database)
//! and a bare PostgreSQL transaction of the same shape as a game call
//! (`SELECT … FOR UPDATE` + `UPDATE` + `COMMIT` of a game-sized row) against
//! the same database.
//!
//! This machine is shared and noisy, so an absolute time says little; a
//! ratio to a floor taken side by side says how much the game adds. Floors
//! are taken twice: on the idle cluster before the workload starts, and by a
//! prober running beside the workload during the measured window (one ping
//! and one transaction per interval), whose figures go in `summary.json` as
//! `floor_ping_us` and `floor_db_txn_us`.
//!
//! At a distance (`--wan`) the pings cross the same delay proxies as the
//! clients' calls: the ping floor is then the network's own round trip.
//! A ping to a server that has just died (a fault, or a server killed by
//! hand behind `--servers`) is skipped and counted, never the end of the
//! run: the floors are measured on the servers that answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use borbaman_proto::pb::PingRequest;
use borbaman_proto::pb::game_client::GameClient;
use borbaman_server::store::audit;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::time::timeout;
use tonic::transport::Channel;

use super::attribution::Sample;
use super::capacity::{self, PhaseRate};
use super::record::{RunClock, duration_us};
use crate::shutdown::Shutdown;
use borbaman_client::pool::ServerPool;

/// A probe sample slower than this is abandoned.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Bytes of the ping payload: about the size of an `ActRequest`.
const PING_PAYLOAD_BYTES: usize = 40;
/// Bytes of the floor table's state column: about a game's encoded state.
pub const FLOOR_STATE_BYTES: usize = 200;
/// Rows of the floor table, like the games of a bench run.
const FLOOR_ROWS: i64 = 4;

#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    #[error("ping to {server} failed: {status}")]
    Ping {
        server: String,
        status: tonic::Status,
    },
    #[error("no server connection to ping")]
    NoServer,
    #[error("bare PostgreSQL transaction failed: {0}")]
    Database(#[from] sqlx::Error),
}

/// Samples of both floors, in microseconds.
#[derive(Clone, Debug, Default)]
pub struct FloorSamples {
    pub ping_us: Vec<u64>,
    pub db_txn_us: Vec<u64>,
    /// Pings that failed or went unanswered (a dead or hung server), left
    /// out of `ping_us`.
    pub ping_failed: u64,
    /// Beside the workload: when each sample started, µs since the start
    /// of the run (the same order as `ping_us` and `db_txn_us`), to set
    /// the floor beside the stall windows.
    pub ping_at_us: Vec<u64>,
    pub db_txn_at_us: Vec<u64>,
}

impl FloorSamples {
    /// The ping samples with their start times.
    pub fn pings(&self) -> Vec<Sample> {
        samples(&self.ping_at_us, &self.ping_us)
    }

    /// The bare-transaction samples with their start times.
    pub fn db_txns(&self) -> Vec<Sample> {
        samples(&self.db_txn_at_us, &self.db_txn_us)
    }
}

fn samples(at_us: &[u64], rtt_us: &[u64]) -> Vec<Sample> {
    at_us
        .iter()
        .zip(rtt_us)
        .map(|(&at_us, &rtt_us)| Sample { at_us, rtt_us })
        .collect()
}

/// One bare `Game.Ping`, timed.
pub async fn ping_once(server: &str, channel: &Channel) -> Result<Duration, FloorError> {
    let mut client = GameClient::new(channel.clone());
    let request = PingRequest {
        payload: vec![0x5a; PING_PAYLOAD_BYTES],
    };
    let started = Instant::now();
    client
        .ping(request)
        .await
        .map_err(|status| FloorError::Ping {
            server: server.to_string(),
            status,
        })?;
    Ok(started.elapsed())
}

/// The bare-transaction floor: its own table in the game database (created
/// here, dropped by [`DbFloor::close`]) and one connection, as a game server
/// uses one connection per call.
pub struct DbFloor {
    db: PgPool,
    state: Vec<u8>,
    next_row: i64,
}

impl DbFloor {
    pub async fn open(database_url: &str) -> Result<DbFloor, FloorError> {
        let db = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(5))
            .connect(database_url)
            .await?;
        audit::create_txn_floor(&db, FLOOR_ROWS, FLOOR_STATE_BYTES).await?;
        Ok(DbFloor {
            db,
            state: vec![0xa5; FLOOR_STATE_BYTES],
            next_row: 0,
        })
    }

    /// One bare transaction on the next row, timed.
    pub async fn txn_once(&mut self) -> Result<Duration, FloorError> {
        self.next_row = (self.next_row + 1) % FLOOR_ROWS;
        self.state[0] = self.state[0].wrapping_add(1);
        let started = Instant::now();
        audit::bare_transaction(&self.db, self.next_row + 1, &self.state).await?;
        Ok(started.elapsed())
    }

    /// Drops the floor table and closes the connection.
    pub async fn close(self) {
        if let Err(e) = audit::drop_txn_floor(&self.db).await {
            tracing::warn!("could not drop the floor table: {e}");
        }
        self.db.close().await;
    }
}

/// The closed-loop throughput of bare transactions of a game call's shape:
/// `connections` connections, each running `BEGIN; SELECT … FOR UPDATE;
/// UPDATE` of a 200-byte row`; COMMIT` back to back for `duration`, the
/// connection for client `c` on row `c / 4` of `rows` (four players a
/// game, as in the workload). What the same database can commit without
/// the game in the way: the capacity floor of a closed-loop run, counted
/// per [`capacity::SLICE`] (see [`capacity`] for why).
///
/// With several database clusters (`database_urls`, home first), each
/// game's four connections go to one cluster, the games spread over them
/// in turn as the servers spread games: the floor of the clusters
/// together.
pub async fn txn_throughput(
    database_urls: &[String],
    connections: u32,
    rows: u32,
    duration: Duration,
) -> Result<PhaseRate, FloorError> {
    let clusters = database_urls.len().max(1) as u32;
    let mut dbs = Vec::new();
    for (k, url) in database_urls.iter().enumerate() {
        // This cluster's share of the connections: every game `g` with
        // `g % clusters == k`.
        let own = (0..connections)
            .filter(|c| (c / 4) % clusters == k as u32)
            .count() as u32;
        let db = PgPoolOptions::new()
            .max_connections(own.max(1))
            .min_connections(own.max(1))
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await?;
        audit::create_txn_floor(&db, i64::from(rows.max(1)), FLOOR_STATE_BYTES).await?;
        dbs.push(db);
    }
    let committed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..connections {
        let db = dbs[((c / 4) % clusters) as usize].clone();
        let committed = committed.clone();
        let row = i64::from((c / 4) % rows.max(1)) + 1;
        tasks.spawn(async move {
            let mut state = vec![0xa5u8; FLOOR_STATE_BYTES];
            while started.elapsed() < duration {
                state[0] = state[0].wrapping_add(1);
                audit::bare_transaction(&db, row, &state).await?;
                committed.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), sqlx::Error>(())
        });
    }
    // Count each slice as it ends; the last (partial) one when every
    // connection has stopped.
    let mut slices = Vec::new();
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::from_std(started + capacity::SLICE),
        capacity::SLICE,
    );
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut counted, mut slice_start) = (0u64, started);
    let mut tally = |slices: &mut Vec<(u64, Duration)>| {
        let now = Instant::now();
        let total = committed.load(Ordering::Relaxed);
        slices.push((total - counted, now - slice_start));
        (counted, slice_start) = (total, now);
    };
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                Some(joined) => joined.map_err(|e| sqlx::Error::Protocol(e.to_string()))??,
                None => break,
            },
            _ = ticker.tick(), if started.elapsed() < duration => tally(&mut slices),
        }
    }
    tally(&mut slices);
    for db in dbs {
        if let Err(e) = audit::drop_txn_floor(&db).await {
            tracing::warn!("could not drop the floor table: {e}");
        }
        db.close().await;
    }
    Ok(PhaseRate::from_slices(&slices))
}

/// Takes `samples` of each floor one after another, on an idle cluster.
/// A server whose ping fails or goes unanswered within [`PROBE_TIMEOUT`]
/// is left out (and counted in `ping_failed`); only when no server answers
/// at all is it an error.
pub async fn measure_idle(
    servers: &[(String, Channel)],
    db: Option<&mut DbFloor>,
    samples: usize,
) -> Result<FloorSamples, FloorError> {
    let mut out = FloorSamples::default();
    // One untimed call each, so connection set-up is not measured; a
    // server that fails it is not pinged again.
    let mut answering = Vec::new();
    let mut last_failure = None;
    for (server, channel) in servers {
        match ping_within(server, channel).await {
            Ok(_) => answering.push((server, channel)),
            Err(e) => {
                out.ping_failed += 1;
                tracing::warn!("floor: {e}; measuring the floor on the other servers");
                last_failure = Some(e);
            }
        }
    }
    if answering.is_empty() {
        return Err(last_failure.unwrap_or(FloorError::NoServer));
    }
    for i in 0..samples {
        let (server, channel) = answering[i % answering.len()];
        match ping_within(server, channel).await {
            Ok(rtt) => out.ping_us.push(duration_us(rtt)),
            Err(_) => out.ping_failed += 1,
        }
    }
    if let Some(db) = db {
        db.txn_once().await?;
        for _ in 0..samples {
            out.db_txn_us.push(duration_us(db.txn_once().await?));
        }
    }
    Ok(out)
}

/// [`ping_once`] within [`PROBE_TIMEOUT`]: a hung server is a failure too.
async fn ping_within(server: &str, channel: &Channel) -> Result<Duration, FloorError> {
    match timeout(PROBE_TIMEOUT, ping_once(server, channel)).await {
        Ok(result) => result,
        Err(_) => Err(FloorError::Ping {
            server: server.to_string(),
            status: tonic::Status::deadline_exceeded(format!("no answer within {PROBE_TIMEOUT:?}")),
        }),
    }
}

/// Measures both floors once per `interval` from `from` until `stop` turns
/// true, beside
/// the workload, on the pool's live connections; returns the samples and the
/// floor table's connection. A sample that fails or takes longer than
/// [`PROBE_TIMEOUT`] (a server killed or stopped by a fault) is skipped.
pub async fn probe(
    pool: ServerPool,
    mut db: Option<DbFloor>,
    clock: RunClock,
    from: Instant,
    interval: Duration,
    mut stop: Shutdown,
) -> (FloorSamples, Option<DbFloor>) {
    let mut out = FloorSamples::default();
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::from_std(from), interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut i = 0usize;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.recv() => break,
        }
        let servers = pool.live_channels();
        if !servers.is_empty() {
            let (server, channel) = &servers[i % servers.len()];
            let at_us = clock.now_us();
            match ping_within(server, channel).await {
                Ok(rtt) => {
                    out.ping_us.push(duration_us(rtt));
                    out.ping_at_us.push(at_us);
                }
                Err(_) => out.ping_failed += 1,
            }
        }
        let at_us = clock.now_us();
        if let Some(db) = db.as_mut()
            && let Ok(Ok(rtt)) = timeout(PROBE_TIMEOUT, db.txn_once()).await
        {
            out.db_txn_us.push(duration_us(rtt));
            out.db_txn_at_us.push(at_us);
        }
        i += 1;
    }
    (out, db)
}
