//! The registry of live servers: this server's heartbeat, and the
//! `Registry` gRPC service that lists the live ones.
//!
//! Every server writes its own row every `heartbeat` interval and any
//! server answers `ListServers`, so there is no lone naming service that
//! can die alone. Liveness is judged by the database clock, so servers on
//! machines with skewed clocks agree.
//!
//! Every client's pool asks for the list every 2 s (every 500 ms while it
//! holds fewer connections than were listed): a few hundred clients make
//! that a hundred reads a second and more, on the database that is
//! full when the calls pile up. So a server runs one read of the list at a
//! time, and the callers that asked while it ran share the next one: each
//! answer still comes from a read that started after its caller asked,
//! but a crowd of callers costs one read, not one each.

use std::sync::Arc;
use std::time::{Duration, Instant};

use borbaman_proto::pb;
use borbaman_shutdown::Shutdown;
use tonic::{Request, Response, Status};

use crate::health::DatabaseHealth;
use crate::seating::{LIVE_WITHIN, SHARED_WITHIN, Seats};
use crate::store::Store;
use crate::store::servers::LiveServer;

/// This server's identity in the registry.
#[derive(Clone, Debug)]
pub struct Registration {
    pub server_id: Arc<str>,
    pub address: String,
}

/// Heartbeats until `shutdown`. Failures are logged and retried
/// at the next beat: a database outage must not stop the server.
/// Each outcome goes to `health` (the game service's health, see
/// [`crate::health`]).
pub async fn heartbeat_task(
    store: Store,
    me: Registration,
    seats: Seats,
    every: Duration,
    health: Arc<DatabaseHealth>,
    mut shutdown: Shutdown,
) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.recv() => return,
        }
        let limit = seats.with(|s| s.learned());
        let beat = store
            .heartbeat(
                &me.server_id,
                &me.address,
                limit,
                LIVE_WITHIN,
                SHARED_WITHIN,
            )
            .await
            .map(|beat| seats.with(|s| s.heard(beat.live, beat.shared)));
        health.beat(beat.is_ok());
        // Reachable again after an outage: reopen the standing
        // connections before the next failover needs them.
        store.keep_standing(beat.is_ok());
        match beat {
            Ok(()) if failing => {
                tracing::info!("heartbeat recovered");
                failing = false;
            }
            Ok(()) => {}
            Err(err) if !failing => {
                tracing::warn!(error = %err, "heartbeat failed");
                failing = true;
            }
            Err(_) => {}
        }
    }
}

/// A read of the live servers and when it started.
type LastRead = (Instant, Vec<LiveServer>);

/// The `Registry` service.
#[derive(Clone, Debug)]
pub struct RegistryService {
    store: Store,
    ttl: Duration,
    /// The last read and when it started. An async mutex: the caller
    /// that reads holds it across the read, and those who asked meanwhile
    /// wait for the next read instead of each running one.
    last_read: Arc<tokio::sync::Mutex<Option<LastRead>>>,
}

impl RegistryService {
    /// `ttl`: a server silent for longer is not listed.
    pub fn new(store: Store, ttl: Duration) -> Self {
        RegistryService {
            store,
            ttl,
            last_read: Default::default(),
        }
    }

    /// The live servers, from a read that started after this call asked.
    async fn live_servers(&self) -> Result<Vec<LiveServer>, Status> {
        let asked = Instant::now();
        let mut last_read = self.last_read.lock().await;
        if let Some((started, servers)) = last_read.as_ref()
            && answers(*started, asked)
        {
            return Ok(servers.clone());
        }
        let started = Instant::now();
        let servers = self.store.live_servers(self.ttl).await?;
        *last_read = Some((started, servers.clone()));
        Ok(servers)
    }
}

/// Whether a read that started at `started` answers a caller that asked at
/// `asked`: only if it started after, so that it saw every change the
/// caller could know of (a server that deregistered before it asked).
fn answers(started: Instant, asked: Instant) -> bool {
    started >= asked
}

#[tonic::async_trait]
impl pb::registry_server::Registry for RegistryService {
    async fn list_servers(
        &self,
        _req: Request<pb::ListServersRequest>,
    ) -> Result<Response<pb::ListServersReply>, Status> {
        let servers = self.live_servers().await?;
        Ok(Response::new(pb::ListServersReply {
            servers: servers
                .into_iter()
                .map(|s| pb::ServerInfo {
                    id: s.id,
                    address: s.address,
                    heartbeat_age_ms: s.heartbeat_age_ms,
                })
                .collect(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_read_started_after_the_call_answers_it() {
        let asked = Instant::now();
        assert!(answers(asked, asked));
        assert!(answers(asked + Duration::from_millis(1), asked));
        assert!(!answers(asked, asked + Duration::from_millis(1)));
    }
}
