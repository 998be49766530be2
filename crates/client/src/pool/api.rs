//! What a caller of the pool sees: its configuration ([`PoolConfig`]), the
//! record of one call ([`CallInfo`]), the pool's status ([`PoolStatus`])
//! and its errors ([`PoolError`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use borbaman_proto::reason::retry_pushback;
use borbaman_proto::timing::ServerTiming as CallTiming;
use tonic::transport::ClientTlsConfig;

use super::tuning::Tuning;

/// How the pool behaves. `PoolConfig::default()` suits a player anywhere
/// from a LAN to another continent: deadlines come from measured round
/// trips, not from here.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// How often the background task refreshes the server list and
    /// health-checks the connections.
    pub refresh: Duration,
    /// Most servers to keep a connection open to.
    pub max_connections: usize,
    /// A call gives up (with an error) after retrying this long: when no
    /// server is reachable, or the database stays unavailable.
    pub give_up_after: Duration,
    /// Ask every server for its timing of each call (the
    /// `borbaman-timing` metadata), which [`CallInfo::server_timing`]
    /// then carries: benchmarks attribute slow calls with it.
    pub server_timing: bool,
    /// Runs the background refresh task. Off only to measure what it costs:
    /// without it the pool still fails over, but only to the servers it
    /// connected to at start-up.
    pub background: bool,
    /// Deadline of a TCP + HTTP/2 connection set-up to a server, and of the
    /// health check that follows it (nothing is known about the server's
    /// distance yet: long enough for the far side of the world).
    pub connect_timeout: Duration,
    /// The shortest deadline of a background `grpc.health.v1` check or a
    /// registry call; a far server gets twice its network RTO.
    pub health_timeout: Duration,
    /// Speak TLS to every server, verified as this configures (the CA);
    /// `None`: plaintext.
    pub tls: Option<ClientTlsConfig>,
    /// Addresses to dial instead of the ones given (bootstrap or
    /// registry), keyed by the given one, which still names the server
    /// everywhere else: a client emulated at another distance reaches each
    /// server through a delay proxy of its own. Empty: dial as given.
    pub dial: HashMap<String, String>,
    /// Every number the pool's decisions are tuned with, each with its
    /// reason ([`Tuning`]); the default is what the figures were measured
    /// with.
    pub tuning: Tuning,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            refresh: Duration::from_millis(500),
            max_connections: 8,
            give_up_after: Duration::from_secs(15),
            server_timing: false,
            background: true,
            connect_timeout: Duration::from_secs(2),
            health_timeout: Duration::from_millis(250),
            tls: None,
            dial: HashMap::new(),
            tuning: Tuning::default(),
        }
    }
}

/// What happened during one [`ServerPool::call`].
#[derive(Clone, Debug)]
pub struct CallInfo {
    /// Address of the server that answered.
    pub server: String,
    /// Address of the server the call's first attempt was sent to: the
    /// game's server when the call began. It differs from `server` when a
    /// copy or a later attempt answered; a report of a server's fault
    /// counts the calls sent to it by this.
    pub first_server: String,
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
    /// not answered within the hedge delay (see `pool::rtt`).
    pub hedges: u32,
    /// The answer came from a hedged copy.
    pub hedge_won: bool,
    /// From the start of the call to the reply, retries included.
    pub rtt: Duration,
    /// Time the call slept between attempts (backoff, a server's
    /// pushback, or waiting for a live server): part of `rtt`.
    pub backoff: Duration,
    /// When the request that was answered was sent, from the start of the
    /// call: what came before (failed attempts, backoff, the wait before
    /// a hedge) delayed the answer without being in it.
    pub answer_sent: Duration,
    /// The answering server's own account of the call, when the request
    /// asked for it ([`ServerPool::request`] with
    /// [`PoolConfig::server_timing`]).
    pub server_timing: Option<CallTiming>,
    /// The call went first to another server than the call before it,
    /// and why.
    pub moved: Option<Move>,
}

/// Why a player's calls went to another server than its last call's
/// ([`CallInfo::moved`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Move {
    /// A new game: its players' server ([`ServerPool::set_game`]).
    Game,
    /// A copy sent to the server beat the last one twice.
    CopyWon,
    /// The last server refused calls or could not commit them, and was
    /// left for a while.
    Left,
    /// The last server was dropped: dead, hung, or failing its health
    /// check.
    Down,
    /// Back where the game's players are: the player was alone on the last
    /// server (`borbaman-alone`).
    Alone,
    /// To the game's choice (a server that settled, a cool-off that
    /// ended), or any other change.
    Back,
}

impl Move {
    pub fn as_str(self) -> &'static str {
        match self {
            Move::Game => "game",
            Move::CopyWon => "copy-won",
            Move::Left => "left",
            Move::Down => "down",
            Move::Alone => "alone",
            Move::Back => "back",
        }
    }
}

/// One live server's timing, for a HUD or a report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerRtt {
    pub address: String,
    /// Smoothed network round trip (health checks on the warm connection);
    /// `None` before the first.
    pub srtt: Option<Duration>,
    /// Its smoothed variation.
    pub rttvar: Duration,
    /// Smoothed round trip of answered calls (network and server work).
    pub call_srtt: Option<Duration>,
    /// A call attempt to this server is late for good after this long.
    pub deadline: Duration,
    /// A call to this server is hedged after this long.
    pub hedge_delay: Duration,
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
    /// True while every server the pool tried was slow together (a shared
    /// stall): calls wait instead of hedging or failing over.
    pub shared_stall: bool,
    /// Hedged copies sent so far.
    pub hedges: u64,
    /// Attempts after the first, over all calls (failovers and the retries
    /// of a database outage).
    pub retries: u64,
    /// The current server's hedge delay.
    pub hedge_delay: Duration,
    /// The current server's call deadline.
    pub deadline: Duration,
    /// Each live server's timing, in the order of `live`.
    pub servers: Vec<ServerRtt>,
}

impl PoolStatus {
    /// The current server's timing, if there is one.
    pub fn current_rtt(&self) -> Option<&ServerRtt> {
        let current = self.current.as_deref()?;
        self.servers.iter().find(|s| s.address == current)
    }
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
    /// A refusal for load (`server-full`) carries the server's pushback
    /// ([`PoolError::retry_pushback`]).
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

    /// How long the server asked the caller to wait before trying again
    /// (`grpc-retry-pushback-ms`), if it did.
    pub fn retry_pushback(&self) -> Option<Duration> {
        self.status().and_then(retry_pushback)
    }
}
