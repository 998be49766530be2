//! The registry of live servers: this server's heartbeat, and the
//! `Registry` gRPC service that lists the live ones.
//!
//! Every server writes its own row every `heartbeat` interval and any
//! server answers `ListServers`, so there is no lone naming service that
//! can die alone. Liveness is judged by the database clock, so servers on
//! machines with skewed clocks agree.

use std::sync::Arc;
use std::time::Duration;

use borbaman_proto::pb;
use borbaman_shutdown::Shutdown;
use tonic::{Request, Response, Status};

use crate::store::Store;

/// This server's identity in the registry.
#[derive(Clone, Debug)]
pub struct Registration {
    pub server_id: Arc<str>,
    pub address: String,
}

/// Heartbeats until `shutdown`. Failures are logged and retried
/// at the next beat: a database outage must not stop the server.
pub async fn heartbeat_task(
    store: Store,
    me: Registration,
    every: Duration,
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
        match store.heartbeat(&me.server_id, &me.address).await {
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

/// The `Registry` service.
#[derive(Clone, Debug)]
pub struct RegistryService {
    store: Store,
    ttl: Duration,
}

impl RegistryService {
    /// `ttl`: a server silent for longer is not listed.
    pub fn new(store: Store, ttl: Duration) -> Self {
        RegistryService { store, ttl }
    }
}

#[tonic::async_trait]
impl pb::registry_server::Registry for RegistryService {
    async fn list_servers(
        &self,
        _req: Request<pb::ListServersRequest>,
    ) -> Result<Response<pb::ListServersReply>, Status> {
        let servers = self.store.live_servers(self.ttl).await?;
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
