//! `ServerPool`: discovery, health and failover, all in one place.
//!
//! Every game server is stateless and serves every game, so a client may send
//! any call to any live server. The pool keeps a warm, health-checked HTTP/2
//! connection to each live server, up to [`PoolConfig::max_connections`]
//! (8) of them, and sends calls to one of them (the
//! *current* server, first picked at random). When a call fails because of
//! the server (transport error, `UNAVAILABLE`, `CANCELLED`, or no answer
//! within the per-call deadline), the pool retries the *same request* at once
//! on another live server picked at random: mutating requests carry a
//! sequence number, so a retry is applied at most once.
//!
//! A background task (one per pool, woken every [`PoolConfig::refresh`],
//! never a busy loop) health-checks the connections, drops dead servers, asks
//! any live server's registry for the list of live servers and connects to
//! new ones, so the next failover finds a connection already open.
//!
//! Two failures are *not* a server's fault and do not mark it down: the
//! database being unavailable (every server says so; the pool backs off and
//! retries, bounded by [`PoolConfig::give_up_after`]) and any other status
//! (`INVALID_ARGUMENT`, ...), which is returned to the caller at once.
//!
//! tonic's `balance_list` is not used: with a dead endpoint it keeps failing
//! calls instead of moving on.

mod choice;
mod hedge;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use borbaman_proto::pb::game_client::GameClient;
use borbaman_proto::pb::registry_client::RegistryClient;
use borbaman_proto::pb::{ListServersRequest, ServerInfo};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use choice::{Exhausted, FailureKind, classify, exhausted, pick, pick_for_game};
pub use hedge::HedgeDelay;

/// How long a server that lost a hedge race is left out of its game's
/// choice (see `ServerPool::hedge_won`).
pub const SLOW_COOL_OFF: Duration = Duration::from_secs(1);

/// Background refresh interval while no server is live.
const NO_SERVER_REFRESH: Duration = Duration::from_millis(100);

/// How the pool behaves. `PoolConfig::default()` suits a player on a LAN.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// How often the background task refreshes the server list and
    /// health-checks the connections.
    pub refresh: Duration,
    /// A call attempt without an answer after this long is abandoned and
    /// retried on another server. Long enough for a loaded server's p99.9,
    /// short enough to leave a hung (SIGSTOPped) server fast.
    pub call_deadline: Duration,
    /// Most servers to keep a connection open to.
    pub max_connections: usize,
    /// A call gives up (with an error) after retrying this long: when no
    /// server is reachable, or the database stays unavailable.
    pub give_up_after: Duration,
    /// Runs the background refresh task. Off only to measure what it costs:
    /// without it the pool still fails over, but only to the servers it
    /// connected to at start-up.
    pub background: bool,
    /// The deadline of further attempts once every live server has missed
    /// `call_deadline` in one call: servers that all answer slowly are busy
    /// or waiting on the database, not hung, and get time to say which.
    pub slow_call_deadline: Duration,
    /// Deadline of a TCP + HTTP/2 connection set-up to a server.
    pub connect_timeout: Duration,
    /// Deadline of a `grpc.health.v1` check or a registry call.
    pub health_timeout: Duration,
    /// Speak TLS to every server, verified as this configures (the CA);
    /// `None`: plaintext.
    pub tls: Option<ClientTlsConfig>,
    /// Addresses to dial instead of the ones given (bootstrap or
    /// registry), keyed by the given one, which still names the server
    /// everywhere else: a client emulated at another distance reaches each
    /// server through a delay proxy of its own. Empty: dial as given.
    pub dial: HashMap<String, String>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            refresh: Duration::from_millis(500),
            call_deadline: Duration::from_millis(150),
            max_connections: 8,
            give_up_after: Duration::from_secs(15),
            background: true,
            slow_call_deadline: Duration::from_secs(1),
            connect_timeout: Duration::from_millis(500),
            health_timeout: Duration::from_millis(250),
            tls: None,
            dial: HashMap::new(),
        }
    }
}

/// What happened during one [`ServerPool::call`].
#[derive(Clone, Debug)]
pub struct CallInfo {
    /// Address of the server that answered.
    pub server: String,
    /// Attempts made, 1 when the first server answered.
    pub attempts: u32,
    /// True when at least one attempt failed because of its server and the
    /// call was retried on another.
    pub failed_over: bool,
    /// When the call started.
    pub started: Instant,
    /// When the first failed attempt started (the failover gap runs from
    /// here to the reply).
    pub first_failure: Option<Instant>,
    /// When the attempt that answered started, if it was not the first:
    /// the failover gap splits into noticing the failure (up to here) and
    /// the retry (from here to the reply).
    pub last_attempt: Option<Instant>,
    /// What the last failed attempt ended with (empty when none failed).
    pub last_failure: String,
    /// Copies of the request sent to a second server because the first had
    /// not answered within the hedge delay (see `pool::hedge`).
    pub hedges: u32,
    /// The answer came from a hedged copy.
    pub hedge_won: bool,
    /// From the start of the call to the reply, retries included.
    pub rtt: Duration,
}

/// A snapshot of the pool, for a HUD or a report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStatus {
    /// The server calls go to now.
    pub current: Option<String>,
    /// Servers with an open, healthy connection.
    pub live: Vec<String>,
    /// Times the current server was abandoned because it failed.
    pub failovers: u64,
    /// True while a call waits for the background task to find a server.
    pub waiting_for_server: bool,
    /// True while calls are told the database is unavailable.
    pub database_unavailable: bool,
    /// Hedged copies sent so far.
    pub hedges: u64,
    /// The delay after which a call is hedged now.
    pub hedge_delay: Duration,
}

/// Why a call or the start-up failed.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error(
        "no Borbaman server reachable at {addresses}: check --servers, or start one \
         with `borbaman server --database-url URL`"
    )]
    NoServerReachable { addresses: String },
    #[error("invalid server address {address:?}: {reason}")]
    InvalidAddress { address: String, reason: String },
    /// The server refused the request; retrying elsewhere would not help.
    #[error("{}: {}", .0.code(), .0.message())]
    Status(tonic::Status),
    /// A server answered with a game state this client cannot use (another
    /// version of the game, or a hostile server).
    #[error("server sent an invalid game state: {0}")]
    InvalidState(String),
    #[error("gave up after {} ms: {last}", after.as_millis())]
    GaveUp {
        after: Duration,
        /// The last failure seen.
        last: String,
        /// True when the database was the trouble, not the servers.
        database: bool,
    },
}

impl PoolError {
    /// The status the server answered with, if it answered.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            PoolError::Status(status) => Some(status),
            _ => None,
        }
    }
}

/// A cheap-to-clone handle to the pool. The background task stops when the
/// last handle is dropped.
#[derive(Clone)]
pub struct ServerPool {
    shared: Arc<Shared>,
}

struct Shared {
    config: PoolConfig,
    /// Every address ever heard of: bootstrap, then the registry's. Tried
    /// again when no server is live.
    state: Mutex<State>,
    /// Number of live servers; waiters watch it.
    live_count: watch::Sender<usize>,
    /// Wakes the background task early (a server failed, a call waits).
    wake: Arc<Notify>,
    /// Stops the background task; notified when `Shared` is dropped.
    shutdown: Arc<Notify>,
}

/// Guarded by a std `Mutex`: every critical section is a few field updates,
/// never held across an `.await`.
#[derive(Default)]
struct State {
    servers: Vec<Server>,
    current: Option<String>,
    known: Vec<String>,
    failovers: u64,
    waiting: u32,
    database_unavailable: bool,
    hedges: u64,
    hedge: HedgeDelay,
    /// The game this client plays, if any: its server is chosen by
    /// [`pick_for_game`], so all its players share one.
    game: Option<u64>,
    /// Servers that lost a hedge race, left out of the game's choice until
    /// the time given.
    cooling: Vec<(String, Instant)>,
}

#[derive(Clone)]
struct Server {
    address: String,
    channel: Channel,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.shutdown.notify_one();
    }
}

impl ServerPool {
    /// Connects to every reachable bootstrap server (at least one must
    /// answer its health check), picks the current server at random and
    /// starts the background task. Addresses are `host:port`.
    pub async fn connect(
        bootstrap: &[String],
        config: PoolConfig,
    ) -> Result<ServerPool, PoolError> {
        let mut known = Vec::new();
        for address in bootstrap {
            let address = address.trim();
            if address.is_empty() {
                continue;
            }
            endpoint(address, &config)?;
            if !known.iter().any(|k| k == address) {
                known.push(address.to_string());
            }
        }
        if known.is_empty() {
            return Err(PoolError::InvalidAddress {
                address: String::new(),
                reason: "no server address given".into(),
            });
        }
        let shutdown = Arc::new(Notify::new());
        let wake = Arc::new(Notify::new());
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(State {
                known: known.clone(),
                ..State::default()
            }),
            live_count: watch::Sender::new(0),
            wake: wake.clone(),
            shutdown: shutdown.clone(),
        });
        let pool = ServerPool { shared };
        pool.connect_new(known.clone()).await;
        // The registry of the first server tells us about the others.
        pool.discover().await;
        if pool.shared.live_count.borrow().eq(&0) {
            return Err(PoolError::NoServerReachable {
                addresses: known.join(","),
            });
        }
        if pool.shared.config.background {
            let weak = Arc::downgrade(&pool.shared);
            tokio::spawn(background(weak, wake, shutdown));
        }
        Ok(pool)
    }

    /// Sends one request, failing over as described in the module docs.
    /// `f` builds and sends the request on the client it is given; it is
    /// called again, with the same request, for every retry and hedge.
    ///
    /// Sending the same request twice is safe because every request is
    /// idempotent: reads change nothing, a join is keyed by its token, and
    /// an `Act` or `Leave` carries its sequence number, which the servers
    /// apply once and answer as a replay afterwards. That is what makes
    /// both retries and hedges possible.
    pub async fn call<T, F, Fut>(&self, mut f: F) -> Result<(T, CallInfo), PoolError>
    where
        F: FnMut(GameClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let config = &self.shared.config;
        let started = Instant::now();
        let give_up_at = started + config.give_up_after;
        let mut attempts = 0u32;
        let mut hedges = 0u32;
        let mut first_failure = None;
        let mut failed_over = false;
        // Servers that timed out during this call: avoided until every live
        // server has been tried.
        let mut avoid: HashSet<String> = HashSet::new();
        // Servers that said their database is unavailable during this call:
        // another server may still reach it (a partitioned server), so they
        // are avoided until every live server has said the same.
        let mut database_down_at: HashSet<String> = HashSet::new();
        let mut backoff = Duration::from_millis(10);
        let mut deadline = config.call_deadline;
        let mut last_failure = String::new();
        let mut database_trouble = false;
        loop {
            let server = if database_down_at.is_empty() {
                self.current_server(&avoid)
            } else {
                self.current_server(&avoid.union(&database_down_at).cloned().collect())
            };
            let server = match server {
                Some(server) => server,
                None => match self.exhausted(&avoid, &database_down_at) {
                    Exhausted::DatabaseDown => {
                        // Every server we could try says the database is down:
                        // it is, for everyone. Back off and ask again, often:
                        // a replicated database is back within seconds, and
                        // every millisecond of backoff after it is back is
                        // the players' wait. A call that is refused costs a
                        // server little.
                        database_down_at.clear();
                        self.set_database_unavailable(true);
                        if !sleep_until_before(backoff, give_up_at).await {
                            return Err(self.give_up(started, last_failure, database_trouble));
                        }
                        backoff = (backoff * 2).min(DATABASE_BACKOFF_CAP);
                        continue;
                    }
                    Exhausted::RetrySlow => {
                        // Every live server timed out once (or said its database
                        // is unavailable): they are alive but slow, or the
                        // database is. Back off, then try the slow ones again
                        // with a longer deadline, long enough for a server to
                        // answer for itself (e.g. "database unavailable").
                        avoid.clear();
                        deadline = config.slow_call_deadline.max(config.call_deadline);
                        if !sleep_until_before(backoff, give_up_at).await {
                            return Err(self.give_up(started, last_failure, database_trouble));
                        }
                        backoff = (backoff * 2).min(SLOW_BACKOFF_CAP);
                        continue;
                    }
                    Exhausted::WaitForServer => {
                        if !self.wait_for_server(give_up_at).await {
                            return Err(self.give_up(started, last_failure, database_trouble));
                        }
                        continue;
                    }
                },
            };
            attempts += 1;
            let attempt_started = Instant::now();
            let skip: HashSet<String> = avoid.union(&database_down_at).cloned().collect();
            let attempt = self
                .attempt(&mut f, &server, &skip, attempt_started, deadline)
                .await;
            hedges += attempt.hedges;
            let failure = match attempt.result {
                Ok(response) => {
                    self.set_database_unavailable(false);
                    let info = CallInfo {
                        server: attempt.answered_by,
                        attempts,
                        failed_over,
                        started,
                        first_failure,
                        last_attempt: (attempts > 1).then_some(attempt_started),
                        last_failure,
                        hedges,
                        hedge_won: attempt.hedge_won,
                        rtt: started.elapsed(),
                    };
                    return Ok((response.into_inner(), info));
                }
                Err(Some(status)) => {
                    let kind = classify(&status);
                    last_failure = format!(
                        "{} from {}: {}",
                        status.code(),
                        server.address,
                        status.message()
                    );
                    match kind {
                        FailureKind::Refused => return Err(PoolError::Status(status)),
                        other => other,
                    }
                }
                Err(None) => {
                    last_failure = format!(
                        "no answer from {} within {} ms",
                        server.address,
                        deadline.as_millis()
                    );
                    FailureKind::Timeout
                }
            };
            tracing::debug!(
                server = server.address,
                elapsed_us = attempt_started.elapsed().as_micros() as u64,
                ?failure,
                last_failure,
                "attempt failed"
            );
            match failure {
                FailureKind::ServerDown => {
                    first_failure.get_or_insert(attempt_started);
                    failed_over = true;
                    self.mark_down(&server.address);
                }
                FailureKind::Timeout => {
                    first_failure.get_or_insert(attempt_started);
                    failed_over = true;
                    avoid.insert(server.address.clone());
                    self.suspect(&server);
                }
                FailureKind::DatabaseUnavailable => {
                    database_trouble = true;
                    first_failure.get_or_insert(attempt_started);
                    database_down_at.insert(server.address.clone());
                    self.leave_current(&server.address);
                }
                FailureKind::Refused => unreachable!("returned above"),
            }
            if Instant::now() >= give_up_at {
                return Err(self.give_up(started, last_failure, database_trouble));
            }
        }
    }

    /// One attempt on `server`, hedged: if it has not answered within the
    /// hedge delay, the same request also goes to another live server (not
    /// in `skip`), and the first good answer wins. A hedge that wins makes
    /// its server the current one: the first was slow, and the next call
    /// should not wait for it again.
    async fn attempt<T, F, Fut>(
        &self,
        f: &mut F,
        server: &Server,
        skip: &HashSet<String>,
        started: Instant,
        deadline: Duration,
    ) -> Attempt<T>
    where
        F: FnMut(GameClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let give_up = tokio::time::Instant::from_std(started + deadline);
        let hedge_after = self.hedge_delay();
        self.shared.state.lock().unwrap().hedge.earn();
        let first = f(GameClient::new(server.channel.clone()));
        tokio::pin!(first);
        let mut attempt = Attempt {
            result: Err(None),
            answered_by: server.address.clone(),
            hedges: 0,
            hedge_won: false,
        };
        let early = tokio::time::timeout(hedge_after.min(deadline), &mut first).await;
        let second = match early {
            Ok(result) => {
                attempt.result = result.map_err(Some);
                if attempt.result.is_ok() {
                    self.record_rtt(started.elapsed());
                }
                return attempt;
            }
            Err(_) if hedge_after >= deadline => return attempt,
            // Every server shares the database: while it is down a copy
            // would only wait beside the first.
            Err(_) if self.status_database_unavailable() => None,
            Err(_) => self.hedge_server(&server.address, skip),
        };
        let Some(second) = second else {
            attempt.result = match tokio::time::timeout_at(give_up, &mut first).await {
                Ok(result) => result.map_err(Some),
                Err(_) => Err(None),
            };
            if attempt.result.is_ok() {
                self.record_rtt(started.elapsed());
            }
            return attempt;
        };
        attempt.hedges = 1;
        self.count_hedge();
        let copy_started = Instant::now();
        let copy = f(GameClient::new(second.channel.clone()));
        tokio::pin!(copy);
        let (mut first_result, mut copy_result) = (None, None);
        while first_result.is_none() || copy_result.is_none() {
            tokio::select! {
                result = &mut first, if first_result.is_none() => match result {
                    Ok(response) => {
                        self.record_rtt(started.elapsed());
                        attempt.result = Ok(response);
                        return attempt;
                    }
                    Err(status) => first_result = Some(status),
                },
                result = &mut copy, if copy_result.is_none() => match result {
                    Ok(response) => {
                        self.record_rtt(copy_started.elapsed());
                        self.hedge_won(&server.address, &second.address);
                        attempt.result = Ok(response);
                        attempt.answered_by = second.address.clone();
                        attempt.hedge_won = true;
                        return attempt;
                    }
                    Err(status) => {
                        if classify(&status) == FailureKind::ServerDown {
                            self.mark_down(&second.address);
                        }
                        copy_result = Some(status);
                    }
                },
                _ = tokio::time::sleep_until(give_up) => break,
            }
        }
        // Nothing good: the first server's failure decides what happens to
        // it (a copy that failed too was dealt with above).
        attempt.result = Err(first_result);
        attempt
    }

    /// A snapshot for a HUD or a report.
    pub fn status(&self) -> PoolStatus {
        let state = self.shared.state.lock().unwrap();
        PoolStatus {
            current: state.current.clone(),
            live: state.servers.iter().map(|s| s.address.clone()).collect(),
            failovers: state.failovers,
            waiting_for_server: state.waiting > 0,
            database_unavailable: state.database_unavailable,
            hedges: state.hedges,
            hedge_delay: state.hedge.delay(),
        }
    }

    /// The open connections, by address: for measurements that must reach
    /// one server directly (a bare ping floor).
    pub fn live_channels(&self) -> Vec<(String, Channel)> {
        let state = self.shared.state.lock().unwrap();
        state
            .servers
            .iter()
            .map(|s| (s.address.clone(), s.channel.clone()))
            .collect()
    }

    /// The pool's settings.
    pub fn config(&self) -> &PoolConfig {
        &self.shared.config
    }

    /// Calls from now on are about `game` (or none): the current server
    /// becomes the game's choice among the live ones (see
    /// [`pick_for_game`]), and a failover picks its next choice. Not a
    /// failover: nothing failed.
    pub fn set_game(&self, game: Option<u64>) {
        let mut state = self.shared.state.lock().unwrap();
        state.game = game;
        if let Some(game) = game {
            let addresses: Vec<&str> = state.servers.iter().map(|s| s.address.as_str()).collect();
            if let Some(i) = pick_for_game(&addresses, &HashSet::new(), game) {
                state.current = Some(state.servers[i].address.clone());
            }
        }
    }

    /// The current server, or a live one not in `avoid` (which then becomes
    /// current): the game's choice, else one at random. `None` when no such
    /// server is live.
    fn current_server(&self, avoid: &HashSet<String>) -> Option<Server> {
        let mut state = self.shared.state.lock().unwrap();
        let current_usable = state.current.as_ref().is_some_and(|current| {
            !avoid.contains(current) && state.servers.iter().any(|s| &s.address == current)
        });
        let now = Instant::now();
        // A server that lost a hedge race has cooled off: the game's choice
        // is made again (it may be that server again).
        let cooled = state.cooling.iter().any(|(_, until)| *until <= now);
        state.cooling.retain(|(_, until)| *until > now);
        let addresses: Vec<&str> = state.servers.iter().map(|s| s.address.as_str()).collect();
        let i = match state.game {
            // The current server serves as long as it serves well: a server
            // that joins the cluster (cold, its connections still opening)
            // takes no running game over.
            _ if current_usable && !cooled => {
                let current = state.current.as_deref();
                state
                    .servers
                    .iter()
                    .position(|s| Some(s.address.as_str()) == current)?
            }
            Some(game) => {
                // The game's server, unless it is cooling off after losing a
                // hedge race (then the next choice, the same for every
                // player).
                let mut skip = avoid.clone();
                skip.extend(state.cooling.iter().map(|(address, _)| address.clone()));
                pick_for_game(&addresses, &skip, game)
                    .or_else(|| pick_for_game(&addresses, avoid, game))?
            }
            None if current_usable => {
                let current = state.current.as_deref();
                state
                    .servers
                    .iter()
                    .position(|s| Some(s.address.as_str()) == current)?
            }
            None => pick(&addresses, avoid, &mut rand::rng())?,
        };
        let server = state.servers[i].clone();
        if !current_usable
            && state.current.is_some()
            && state.current.as_deref() != Some(&server.address)
        {
            // Moving away from a server that failed us.
            state.failovers += 1;
        }
        state.current = Some(server.address.clone());
        Some(server)
    }

    /// What to do when every live server is in `timed_out` or
    /// `database_down` (see [`exhausted`]).
    fn exhausted(&self, timed_out: &HashSet<String>, database_down: &HashSet<String>) -> Exhausted {
        let state = self.shared.state.lock().unwrap();
        let live: Vec<&str> = state.servers.iter().map(|s| s.address.as_str()).collect();
        exhausted(&live, timed_out, database_down)
    }

    /// Drops a failed server's connection; the next call picks another.
    fn mark_down(&self, address: &str) {
        let remaining = {
            let mut state = self.shared.state.lock().unwrap();
            let before = state.servers.len();
            state.servers.retain(|s| s.address != address);
            if state.servers.len() == before {
                return;
            }
            tracing::info!(server = address, "server down, failing over");
            if state.current.as_deref() == Some(address) {
                state.failovers += 1;
                state.current = None;
            }
            state.servers.len()
        };
        self.shared.live_count.send_replace(remaining);
        // Only an empty pool needs the background task at once. With other
        // servers live the next regular refresh will do: waking every
        // client's task together, at the moment their calls fail over,
        // would add a burst of health checks and registry queries to the
        // servers taking over.
        if remaining == 0 {
            self.shared.wake.notify_one();
        }
    }

    /// A server that did not answer in time: calls move away from it now; a
    /// health check in the background decides whether it is down.
    fn suspect(&self, server: &Server) {
        {
            let mut state = self.shared.state.lock().unwrap();
            if state.current.as_deref() == Some(&server.address) {
                state.current = None;
                state.failovers += 1;
            }
        }
        let pool = self.clone();
        let server = server.clone();
        tokio::spawn(async move {
            if !healthy(&server.channel, pool.shared.config.health_timeout).await {
                pool.mark_down(&server.address);
            }
        });
    }

    fn status_database_unavailable(&self) -> bool {
        self.shared.state.lock().unwrap().database_unavailable
    }

    fn hedge_delay(&self) -> Duration {
        self.shared.state.lock().unwrap().hedge.delay()
    }

    fn record_rtt(&self, rtt: Duration) {
        self.shared.state.lock().unwrap().hedge.record(rtt);
    }

    fn count_hedge(&self) {
        self.shared.state.lock().unwrap().hedges += 1;
    }

    /// A live server other than `busy` and not in `skip`, for a hedge, if
    /// the hedge budget allows one.
    fn hedge_server(&self, busy: &str, skip: &HashSet<String>) -> Option<Server> {
        let mut state = self.shared.state.lock().unwrap();
        let candidates: Vec<&Server> = state
            .servers
            .iter()
            .filter(|s| s.address != busy && !skip.contains(&s.address))
            .collect();
        let i = pick(
            &candidates
                .iter()
                .map(|s| s.address.as_str())
                .collect::<Vec<_>>(),
            &HashSet::new(),
            &mut rand::rng(),
        )?;
        let server = candidates[i].clone();
        // Spent only when there is a server to hedge to.
        state.hedge.spend().then_some(server)
    }

    /// A hedge to `winner` answered before `slow` did: calls go to the
    /// winner now. With a game set, `slow` stays its players' server; it is
    /// left out of the game's choice for [`SLOW_COOL_OFF`], then tried
    /// again (a server slow for good keeps losing races and is left again).
    fn hedge_won(&self, slow: &str, winner: &str) {
        let mut state = self.shared.state.lock().unwrap();
        if state.servers.iter().any(|s| s.address == winner) {
            state.current = Some(winner.to_string());
        }
        if state.game.is_some() {
            let until = Instant::now() + SLOW_COOL_OFF;
            state.cooling.retain(|(address, _)| address != slow);
            state.cooling.push((slow.to_string(), until));
        }
    }

    /// Moves calls away from `address` (it cannot serve them now) without
    /// dropping its connection.
    fn leave_current(&self, address: &str) {
        let mut state = self.shared.state.lock().unwrap();
        if state.current.as_deref() == Some(address) {
            state.current = None;
            state.failovers += 1;
        }
    }

    fn set_database_unavailable(&self, unavailable: bool) {
        let mut state = self.shared.state.lock().unwrap();
        state.database_unavailable = unavailable;
    }

    fn give_up(&self, started: Instant, last: String, database: bool) -> PoolError {
        PoolError::GaveUp {
            after: started.elapsed(),
            last: if last.is_empty() {
                "no server reachable".into()
            } else {
                last
            },
            database,
        }
    }

    /// Waits until the background task finds a live server, or `deadline`.
    /// Returns false on the deadline.
    async fn wait_for_server(&self, deadline: Instant) -> bool {
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
    async fn refresh(&self) {
        self.check_health().await;
        let waiting = self.shared.state.lock().unwrap().servers.is_empty();
        if waiting {
            // Nobody to ask: try every address we ever knew.
            let known = self.shared.state.lock().unwrap().known.clone();
            self.connect_new(known).await;
        }
        self.discover().await;
    }

    /// Health-checks every open connection; drops those that fail.
    async fn check_health(&self) {
        let servers = self.shared.state.lock().unwrap().servers.clone();
        let timeout = self.shared.config.health_timeout;
        let mut checks = JoinSet::new();
        for server in servers {
            checks.spawn(async move { (healthy(&server.channel, timeout).await, server.address) });
        }
        while let Some(Ok((ok, address))) = checks.join_next().await {
            if !ok {
                self.mark_down(&address);
            }
        }
    }

    /// Asks a live server's registry for the live servers; connects to the
    /// ones we have no connection to, up to the cap.
    async fn discover(&self) {
        let asked = {
            let state = self.shared.state.lock().unwrap();
            let addresses: Vec<&str> = state.servers.iter().map(|s| s.address.as_str()).collect();
            pick(&addresses, &HashSet::new(), &mut rand::rng()).map(|i| state.servers[i].clone())
        };
        let Some(asked) = asked else { return };
        let listed = match list_servers(&asked.channel, self.shared.config.health_timeout).await {
            Ok(listed) => listed,
            Err(status) => {
                tracing::debug!(server = asked.address, %status, "registry call failed");
                return;
            }
        };
        let new: Vec<String> = {
            let mut state = self.shared.state.lock().unwrap();
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
                .filter(|a| !state.servers.iter().any(|s| &s.address == a))
                .take(room)
                .collect()
        };
        self.connect_new(new).await;
    }

    /// Connects to and health-checks each address at once; adds the healthy
    /// ones to the live set.
    async fn connect_new(&self, addresses: Vec<String>) {
        let config = self.shared.config.clone();
        let mut connecting = JoinSet::new();
        for address in addresses {
            let config = config.clone();
            connecting.spawn(async move {
                let endpoint = endpoint(&address, &config).ok()?;
                let channel = endpoint.connect().await.ok()?;
                healthy(&channel, config.health_timeout)
                    .await
                    .then_some(Server { address, channel })
            });
        }
        while let Some(joined) = connecting.join_next().await {
            let Ok(Some(server)) = joined else { continue };
            let count = {
                let mut state = self.shared.state.lock().unwrap();
                if state.servers.iter().any(|s| s.address == server.address)
                    || state.servers.len() >= config.max_connections
                {
                    continue;
                }
                tracing::debug!(server = server.address, "connected");
                state.servers.push(server);
                state.servers.len()
            };
            self.shared.live_count.send_replace(count);
        }
    }
}

/// Longest pause between two rounds of asking servers whose database is
/// unavailable.
const DATABASE_BACKOFF_CAP: Duration = Duration::from_millis(50);

/// Longest pause before trying servers that all timed out again. Short: a
/// database whose commits stall (a new primary waiting for its synchronous
/// standby) answers them all at once when it recovers, and a client asleep
/// then would only be late. Each retry waits for its answer with the slow
/// deadline, so the pause does not bound the load; the deadline does.
const SLOW_BACKOFF_CAP: Duration = Duration::from_millis(50);

/// What one (possibly hedged) attempt came to.
struct Attempt<T> {
    /// The answer, or the first server's failure (`None`: no answer in
    /// time).
    result: Result<tonic::Response<T>, Option<tonic::Status>>,
    answered_by: String,
    hedges: u32,
    hedge_won: bool,
}

/// The background task: refreshes every `config.refresh` (or at once when
/// woken) until the pool is dropped.
async fn background(shared: Weak<Shared>, wake: Arc<Notify>, shutdown: Arc<Notify>) {
    loop {
        let refresh = match shared.upgrade() {
            // With no live server, look again sooner: each look is one
            // refused connection per known address, cheap enough.
            Some(shared) if shared.state.lock().unwrap().servers.is_empty() => {
                shared.config.refresh.min(NO_SERVER_REFRESH)
            }
            Some(shared) => shared.config.refresh,
            None => return,
        };
        // No strong reference is held while sleeping, so dropping the last
        // handle drops `Shared`, which signals `shutdown`.
        let woken = tokio::select! {
            _ = shutdown.notified() => return,
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
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn endpoint(address: &str, config: &PoolConfig) -> Result<Endpoint, PoolError> {
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
        .tcp_nodelay(true))
}

/// True when the server answers its `grpc.health.v1` check as serving.
async fn healthy(channel: &Channel, timeout: Duration) -> bool {
    let mut client = HealthClient::new(channel.clone());
    let check = client.check(HealthCheckRequest {
        service: String::new(),
    });
    match tokio::time::timeout(timeout, check).await {
        Ok(Ok(reply)) => reply.into_inner().status == ServingStatus::Serving as i32,
        _ => false,
    }
}

async fn list_servers(
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
async fn sleep_until_before(duration: Duration, deadline: Instant) -> bool {
    let wake = Instant::now() + duration;
    if wake >= deadline {
        return false;
    }
    tokio::time::sleep(duration).await;
    true
}
