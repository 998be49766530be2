//! The pool's background task: health checks of the warm connections,
//! discovery of the live servers through any server's registry, and new
//! connections to them, so the next failover finds one open.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use borbaman_proto::pb::registry_client::RegistryClient;
use borbaman_proto::pb::{ListServersRequest, ServerInfo};
use borbaman_shutdown::Shutdown;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::choice::pick;
use super::decide::{Check, drop_silent};

use super::*;

/// The background task: refreshes every `config.refresh` (or at once when
/// woken) until the pool is dropped.
pub(super) async fn background(shared: Weak<Shared>, wake: Arc<Notify>, mut shutdown: Shutdown) {
    loop {
        let refresh = match shared.upgrade() {
            // With no live server, look again sooner: each look is one
            // refused connection per known address, cheap enough.
            Some(shared) if shared.state.lock().unwrap().servers.is_empty() => shared
                .config
                .refresh
                .min(shared.config.tuning.no_server_refresh),
            Some(shared) => shared.config.refresh,
            None => return,
        };
        // No strong reference is held while sleeping, so dropping the last
        // handle drops `Shared` and its `Stopper`, which stops `shutdown`.
        let woken_pause = match shared.upgrade() {
            Some(shared) => shared.config.tuning.woken_pause,
            None => return,
        };
        let woken = tokio::select! {
            _ = shutdown.recv() => return,
            _ = tokio::time::sleep(refresh) => false,
            _ = wake.notified() => true,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let pool = ServerPool { shared };
        pool.refresh().await;
        drop(pool);
        if woken {
            // A failure woke us: do not spin if it keeps failing.
            tokio::time::sleep(woken_pause).await;
        }
    }
}

/// An endpoint for `address`, with HTTP/2 keep-alive: a server that stops
/// answering PINGs for `keepalive_timeout` (hung, or its host gone without
/// a reset) has its connection closed, and its calls fail over, even when
/// no call is late.
pub(super) fn endpoint(
    address: &str,
    config: &PoolConfig,
    keepalive_timeout: Duration,
) -> Result<Endpoint, PoolError> {
    let invalid = |e: tonic::transport::Error| PoolError::InvalidAddress {
        address: address.to_string(),
        reason: e.to_string(),
    };
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let dial = config.dial.get(address).map_or(address, String::as_str);
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{dial}")).map_err(invalid)?;
    if let Some(tls) = &config.tls {
        endpoint = endpoint.tls_config(tls.clone()).map_err(invalid)?;
    }
    Ok(endpoint
        .connect_timeout(config.connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(config.tuning.keepalive_interval)
        .keep_alive_timeout(keepalive_timeout)
        .keep_alive_while_idle(true))
}

/// The round trip of the server's `grpc.health.v1` check, if it answered
/// as serving within `timeout`.
pub(super) async fn healthy(channel: &Channel, timeout: Duration) -> Option<Duration> {
    match check(channel, timeout).await {
        Check::Answered(rtt) => Some(rtt),
        Check::Refused | Check::Silent => None,
    }
}

/// A health check within `timeout`: serving, refused, or silent.
pub(super) async fn check(channel: &Channel, timeout: Duration) -> Check {
    let started = Instant::now();
    let mut client = HealthClient::new(channel.clone());
    let asked = client.check(HealthCheckRequest {
        service: String::new(),
    });
    match tokio::time::timeout(timeout, asked).await {
        Ok(Ok(reply)) if reply.get_ref().status == ServingStatus::Serving as i32 => {
            Check::Answered(started.elapsed())
        }
        Ok(_) => Check::Refused,
        Err(_) => Check::Silent,
    }
}

pub(super) async fn list_servers(
    channel: &Channel,
    timeout: Duration,
) -> Result<Vec<ServerInfo>, tonic::Status> {
    let mut client = RegistryClient::new(channel.clone());
    match tokio::time::timeout(timeout, client.list_servers(ListServersRequest {})).await {
        Ok(reply) => Ok(reply?.into_inner().servers),
        Err(_) => Err(tonic::Status::deadline_exceeded("registry did not answer")),
    }
}

/// Sleeps `duration` unless that would pass `deadline`; false then.
pub(super) async fn sleep_until_before(duration: Duration, deadline: Instant) -> bool {
    let wake = Instant::now() + duration;
    if wake >= deadline {
        return false;
    }
    tokio::time::sleep(duration).await;
    true
}

impl ServerPool {
    /// Waits until the background task finds a live server, or `deadline`.
    /// Returns false on the deadline.
    pub(super) async fn wait_for_server(&self, deadline: Instant) -> bool {
        self.shared.state.lock().unwrap().waiting += 1;
        self.shared.wake.notify_one();
        let mut live = self.shared.live_count.subscribe();
        let found = tokio::time::timeout_at(deadline.into(), live.wait_for(|n| *n > 0))
            .await
            .is_ok_and(|r| r.is_ok());
        self.shared.state.lock().unwrap().waiting -= 1;
        found
    }

    /// One round of the background work.
    pub(super) async fn refresh(&self) {
        let (full, since, in_game) = {
            let mut state = self.shared.state.lock().unwrap();
            let full = state
                .refreshes
                .is_multiple_of(self.shared.config.tuning.full_check_every);
            state.refreshes += 1;
            (
                full,
                Instant::now().checked_sub(self.shared.config.refresh),
                state.game.is_some(),
            )
        };
        // Between full rounds only a player in a game checks the servers
        // its calls do not reach: its copies and failovers go there. A
        // client with no game yet (its joins refused for load, waiting to
        // try again) has no call to move, and checked all its servers at
        // every refresh: six checks a second each, 1 500 a second from a
        // bench's 256 clients left waiting at twice a capped cluster's
        // peak, beside ~3 700 game calls.
        if full || in_game {
            // `since` is `None` only within a refresh of the clock's start.
            self.check_health(if full { None } else { since }).await;
        }
        self.try_dropped();
        let (waiting, short) = {
            let state = self.shared.state.lock().unwrap();
            let live = state.servers.len();
            (
                live == 0,
                live < 2 || state.listed.is_none_or(|listed| live < listed),
            )
        };
        if waiting {
            // Nobody to ask: try every address we ever knew.
            let known = self.shared.state.lock().unwrap().known.clone();
            self.connect_new(known).await;
        }
        if full || short {
            self.discover().await;
        }
    }

    /// Health-checks the open connections (each within twice its network
    /// RTO, at least `health_timeout`): all of them, or with `skip_answered_since`
    /// only those that answered no call since then; drops those that fail.
    /// Each answer is a round-trip sample.
    pub(super) async fn check_health(&self, skip_answered_since: Option<Instant>) {
        let checks_of: Vec<(Server, Duration)> = {
            let state = self.shared.state.lock().unwrap();
            state
                .servers
                .iter()
                .filter(|s| {
                    skip_answered_since.is_none_or(|since| {
                        state
                            .answered_at
                            .get(&s.address)
                            .is_none_or(|at| *at < since)
                    })
                })
                .map(|s| (s.clone(), self.health_timeout(&state.timing(&s.address))))
                .collect()
        };
        let began = Instant::now();
        let mut checks = JoinSet::new();
        for (server, timeout) in checks_of {
            checks.spawn(async move { (check(&server.channel, timeout).await, server.address) });
        }
        let mut answered = false;
        let mut silent = Vec::new();
        while let Some(Ok((heard, address))) = checks.join_next().await {
            match heard {
                Check::Answered(rtt) => {
                    answered = true;
                    self.record_probe(&address, rtt);
                }
                // Calls in flight on it stay: a background check that a
                // busy machine answered late judges no call, and moving
                // them all at once would add work where it is short.
                Check::Refused => self.drop_server(&address, false),
                Check::Silent => silent.push(address),
            }
        }
        if silent.is_empty() {
            return;
        }
        let dropped: Vec<String> = {
            let state = self.shared.state.lock().unwrap();
            // The servers that answered a call since the round began.
            let calls_answered: Vec<&String> = state
                .answered_at
                .iter()
                .filter(|(_, at)| **at >= began)
                .map(|(address, _)| address)
                .collect();
            let others_answered = answered
                || calls_answered
                    .iter()
                    .any(|address| !silent.contains(address));
            silent
                .into_iter()
                .filter(|address| drop_silent(others_answered, calls_answered.contains(&address)))
                .collect()
        };
        for address in dropped {
            self.drop_server(&address, false);
        }
    }

    /// The deadline of a background health check or registry call to a
    /// server timed as `timing`.
    pub(super) fn health_timeout(&self, timing: &ServerTiming) -> Duration {
        let far =
            timing.net.rto().unwrap_or_default() * self.shared.config.tuning.health_check_rtos;
        far.max(self.shared.config.health_timeout)
    }

    /// Asks a live server's registry for the live servers; connects to the
    /// ones we have no connection to, up to the cap.
    pub(super) async fn discover(&self) {
        let asked = {
            let state = self.shared.state.lock().unwrap();
            let addresses: Vec<&str> = state.servers.iter().map(|s| s.address.as_str()).collect();
            pick(&addresses, &HashSet::new(), &mut rand::rng())
                .map(|i| state.servers[i].clone())
                .map(|s| {
                    let timeout = self.health_timeout(&state.timing(&s.address));
                    (s, timeout)
                })
        };
        let Some((asked, timeout)) = asked else {
            return;
        };
        let listed = match list_servers(&asked.channel, timeout).await {
            Ok(listed) => listed,
            Err(status) => {
                tracing::debug!(server = asked.address, %status, "registry call failed");
                return;
            }
        };
        let new: Vec<String> = {
            let mut state = self.shared.state.lock().unwrap();
            state.listed = Some(listed.len().min(self.shared.config.max_connections));
            for info in &listed {
                if !state.known.contains(&info.address) {
                    state.known.push(info.address.clone());
                }
            }
            let room = self
                .shared
                .config
                .max_connections
                .saturating_sub(state.servers.len());
            listed
                .into_iter()
                .map(|info| info.address)
                .filter(|a| !state.is_live(a))
                .take(room)
                .collect()
        };
        self.connect_new(new).await;
    }

    /// Connects to and health-checks each address at once; adds the healthy
    /// ones to the live set.
    pub(super) async fn connect_new(&self, addresses: Vec<String>) {
        let config = self.shared.config.clone();
        let keepalive = self.shared.state.lock().unwrap().keepalive_timeout();
        let mut connecting = JoinSet::new();
        for address in addresses {
            connecting.spawn(connect_one(address, config.clone(), keepalive));
        }
        while let Some(joined) = connecting.join_next().await {
            if let Ok(Some((server, rtt))) = joined {
                self.add_connected(server, rtt);
            }
        }
    }

    /// Tries again, directly, each server this pool dropped within
    /// `Tuning::return_watch` that is not live and has no try under way:
    /// a connection each, on a task of its own (a hung server holds it
    /// until `connect_timeout`, and the refreshes go on meanwhile), added
    /// the moment the server answers. A hung server that resumes is back
    /// within its connection's round trips, not after the next refresh's
    /// registry call lists it.
    fn try_dropped(&self) {
        let config = self.shared.config.clone();
        let (addresses, keepalive) = {
            let mut state = self.shared.state.lock().unwrap();
            let now = Instant::now();
            let watch = state.tuning.return_watch;
            state
                .dropped
                .retain(|_, at| now.saturating_duration_since(*at) < watch);
            let addresses: Vec<String> = state
                .dropped
                .keys()
                .filter(|a| !state.returning.contains(*a) && !state.is_live(a))
                .cloned()
                .collect();
            for address in &addresses {
                state.returning.insert(address.clone());
            }
            (addresses, state.keepalive_timeout())
        };
        for address in addresses {
            let shared = Arc::downgrade(&self.shared);
            let config = config.clone();
            tokio::spawn(async move {
                let connected = connect_one(address.clone(), config, keepalive).await;
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                let pool = ServerPool { shared };
                pool.shared.state.lock().unwrap().returning.remove(&address);
                if let Some((server, rtt)) = connected {
                    tracing::debug!(server = address, "a dropped server answers again");
                    pool.add_connected(server, rtt);
                }
            });
        }
    }

    /// Adds a server just connected (its health check's round trip `rtt`
    /// its first timing sample), unless it is live already or the pool is
    /// full.
    fn add_connected(&self, server: Server, rtt: Duration) {
        let count = {
            let mut state = self.shared.state.lock().unwrap();
            if state.is_live(&server.address)
                || state.servers.len() >= self.shared.config.max_connections
            {
                return;
            }
            tracing::debug!(
                server = server.address,
                rtt_us = rtt.as_micros() as u64,
                "connected"
            );
            state.timing_mut(&server.address).record_probe(rtt);
            state.dropped.remove(&server.address);
            state.servers.push(server);
            state.servers.len()
        };
        self.shared.live_count.send_replace(count);
    }
}

/// A connection to `address`, health-checked: the server and the second
/// check's round trip (the first includes opening the connection: over a
/// distance, the TCP handshake's round trip), if it serves.
async fn connect_one(
    address: String,
    config: PoolConfig,
    keepalive: Duration,
) -> Option<(Server, Duration)> {
    let endpoint = endpoint(&address, &config, keepalive).ok()?;
    let channel = endpoint.connect().await.ok()?;
    healthy(&channel, config.connect_timeout).await?;
    let rtt = healthy(&channel, config.connect_timeout).await?;
    Some((Server::new(address, channel, &config.tuning), rtt))
}
