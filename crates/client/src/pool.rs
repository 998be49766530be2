//! `ServerPool`: discovery, health and failover, all in one place.
//!
//! Every game server is stateless and serves every game, so a client may send
//! any call to any live server. The pool keeps a warm, health-checked HTTP/2
//! connection to each live server, up to [`PoolConfig::max_connections`]
//! (8) of them, and sends calls to one of them (the
//! *current* server, first picked at random). When a call fails because of
//! the server (transport error, `UNAVAILABLE`, `CANCELLED`, a hung server,
//! or a slow one past its deadline), the pool retries the *same request* on
//! another live server: mutating requests carry a sequence number, so a
//! retry is applied at most once.
//!
//! Servers may be near or far: the pool times each one (`pool::rtt`, RFC
//! 6298 estimates from answered calls and from health checks on the warm
//! connection) and derives every deadline and hedge delay from that, so
//! distance is never taken for death. A late call's server is probed on
//! its warm connection: no answer means hung (left at once), an answer
//! means slow. When two servers are slow together the cause is shared (the
//! database), and the pool waits rather than duplicating work into it; so it
//! does on a server whose answers say it queues calls for the database
//! (`borbaman-busy`: it is at its bound, and every server of the cluster
//! shares the database). What
//! a call does next is decided in `pool::decide`, apart from the I/O here;
//! hedges and retries that add load are rationed by a budget, and pauses
//! are jittered (`pool::budget`).
//!
//! A background task (one per pool, woken every [`PoolConfig::refresh`],
//! never a busy loop) health-checks the connections, drops dead servers, asks
//! any live server's registry for the list of live servers and connects to
//! new ones, so the next failover finds a connection already open. Once
//! every [`FULL_CHECK_EVERY`] refreshes it does all of that; in between it
//! checks only the servers that answered no call meanwhile, and asks the
//! registry only while it holds fewer connections than were listed. HTTP/2
//! keep-alive PINGs close a connection whose server stopped answering even
//! while no call is in flight.
//!
//! Two failures are *not* a server's fault and do not mark it down: the
//! database being unavailable (every server says so; the pool backs off and
//! retries, bounded by [`PoolConfig::give_up_after`]) and any other status
//! (`INVALID_ARGUMENT`, `RESOURCE_EXHAUSTED` with `server-full`, ...), which
//! is returned to the caller at once, with the server's pushback if it sent
//! one ([`PoolError::retry_pushback`]).
//!
//! tonic's `balance_list` is not used: with a dead endpoint it keeps failing
//! calls instead of moving on.

mod budget;
mod choice;
mod decide;
mod rtt;

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use borbaman_proto::pb::game_client::GameClient;
use borbaman_proto::pb::registry_client::RegistryClient;
use borbaman_proto::pb::{ListServersRequest, ServerInfo};
use borbaman_proto::reason::retry_pushback;
use borbaman_proto::timing::{
    ALONE_KEY, BUSY_KEY, BUSY_QUEUED, COPY_KEY, ServerTiming as CallTiming, TIMING_KEY,
};
use borbaman_shutdown::{Shutdown, Stopper};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use budget::{Budget, Funds};
use choice::{FailureKind, classify, pick, pick_for_game};
use decide::{
    AtDeadline, CallPlan, Check, Copy, Fate, Hedge, Late, LateNow, PROBE_PATIENCE, Pause, Probe,
    Probing, SETTLE, Suspicion, at_deadline, back_when_alone, busy_excused_until,
    copy_answer_ends_stall, copy_late_after, copy_when_silent, drop_silent, game_server,
    late_copy_is_shared_stall, on_the_beat, probe_verdict, should_hedge, silent_after,
    stall_trial_at, stall_trial_due, when_late, win_moves_calls,
};
pub use rtt::ServerTiming;

/// How long a server that lost a hedge race is left out of its game's
/// choice (see `ServerPool::hedge_won`).
pub const SLOW_COOL_OFF: Duration = Duration::from_secs(1);

/// How long a server that said it queues calls for the database
/// ([`BUSY_KEY`]) is believed busy: its late calls are not hedged, and at
/// their deadline they wait rather than leave, as long as its queue
/// excuses the wait (`decide::busy_excused_until`). Under
/// overload nearly every answer says so again; once the queue is gone its
/// late calls are hedged again within this.
pub const BUSY_HOLD: Duration = Duration::from_millis(500);

/// Every this many background refreshes (2 s at the default 500 ms), the
/// pool health-checks every connection and asks the registry, however
/// things stand. Between them it checks only the servers that answered
/// no call since the last refresh (a call answered says the server is
/// alive), and asks the registry only while it holds fewer connections
/// than the registry last listed, or fewer than two. At 256 clients the
/// background work was 3 health checks and a registry read per client
/// every 500 ms: 2 000 calls a second beside ~2 000 game calls, and every
/// server reading the registry back to back on a database already full.
pub const FULL_CHECK_EVERY: u64 = 4;

/// Background refresh interval while no server is live.
const NO_SERVER_REFRESH: Duration = Duration::from_millis(100);

/// HTTP/2 keep-alive: a PING after this long without a frame from the
/// server, on idle connections too.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
/// The shortest wait for a PING's answer before the connection is closed;
/// longer for far servers (four of the farthest known network RTOs).
const KEEPALIVE_TIMEOUT_FLOOR: Duration = Duration::from_secs(1);
const KEEPALIVE_TIMEOUT_CAP: Duration = Duration::from_secs(10);

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
    /// Wakes the late calls a shared stall held back without a copy, when
    /// an answer on time ends the stall: they send their copies then, not
    /// at the stall's next try.
    stall_over: Notify,
    /// Stops the background task: dropped with `Shared` (the last handle),
    /// which is a stop.
    _stopper: Stopper,
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
    retries: u64,
    /// Every server's timing, by address; kept when a server goes, so it is
    /// known again when it comes back.
    timing: HashMap<String, ServerTiming>,
    /// The hedge and retry budget.
    budget: Budget,
    /// Two servers were slow together and no call has been answered on
    /// time since (see `pool::decide`).
    shared_stall: bool,
    /// When the shared stall was last seen (declared, or a late copy
    /// confirmed it) or last tried with a copy ([`stall_trial_due`]).
    stall_seen: Option<Instant>,
    /// Copies tried through the shared stall since it began.
    stall_tries: u32,
    /// The game this client plays, if any: its server is chosen by
    /// [`pick_for_game`], so all its players share one.
    game: Option<u64>,
    /// Servers that lost a hedge race or were left, kept out of the game's
    /// choice until the time given ([`State::cool_off`]).
    cooling: Vec<(String, Instant)>,
    /// The server a copy last beat without moving calls away from it, and
    /// when ([`win_moves_calls`]); forgotten once it answers a call in time.
    beaten: Option<(String, Instant)>,
    /// In a game, the game's server the player's calls left only because
    /// copies beat it twice ([`win_moves_calls`]): they go back to it when
    /// the server they went to says the player is alone there
    /// ([`ALONE_KEY`], [`back_when_alone`]).
    left_on_win: Option<String>,
    /// When an answer saying the player was alone last sent it back.
    alone_returned_at: Option<Instant>,
    /// Where the last call went first, and why the calls last moved
    /// (taken by the next call that goes elsewhere: [`CallInfo::moved`]).
    first_server: Option<String>,
    why_moved: Option<Move>,
    /// Servers a call went late on, their probe under way: every call in
    /// flight on one shares its probe, its verdict and its token (see
    /// [`Suspicion`]).
    suspects: HashMap<String, Suspect>,
    /// Numbers the suspicions, so a verdict closes its own and no later one.
    next_suspicion: u64,
    /// Servers whose answers said they queued calls for the database
    /// ([`BUSY_KEY`]): until when that is believed ([`BUSY_HOLD`]), and how
    /// long the last such answer queued.
    busy: HashMap<String, (Instant, Duration)>,
    /// When each server last answered a call: alive then, so the next
    /// background refresh need not health-check it ([`FULL_CHECK_EVERY`]).
    answered_at: HashMap<String, Instant>,
    /// Background refreshes so far.
    refreshes: u64,
    /// How many servers the last registry answer listed (at most
    /// [`PoolConfig::max_connections`]); `None` before the first.
    listed: Option<usize>,
}

/// An open [`Suspicion`] and where its verdict will be told.
struct Suspect {
    id: u64,
    suspicion: Suspicion,
    verdict: watch::Receiver<Probe>,
}

impl State {
    /// A copy of a late call goes out now: counted, a token spent if it is
    /// `paid` (not covered by its server's suspicion), and noted as the
    /// shared stall's try if it is one (`trial`).
    fn copy_sent(&mut self, paid: bool, trial: bool, now: Instant) {
        if paid {
            self.budget.spend();
        }
        if trial {
            self.stall_tried(now);
        }
        self.hedges += 1;
    }

    /// A call's first attempt goes to `address`: if the last call's went
    /// elsewhere, why the calls moved ([`Move::Back`] when nothing said).
    fn went_first_to(&mut self, address: &str) -> Option<Move> {
        let why = self.why_moved.take();
        if self.first_server.as_deref() == Some(address) {
            return None;
        }
        // The address is copied only when the calls moved, not every call.
        let moved = self.first_server.replace(address.to_string()).is_some();
        moved.then(|| why.unwrap_or(Move::Back))
    }

    /// In a game, keeps `address` out of the game's choice for
    /// [`SLOW_COOL_OFF`], to the next beat of the wall clock
    /// (`decide::BEAT`), so a game's players go back to it together; then
    /// the game's calls go back to it.
    fn cool_off(&mut self, address: &str) {
        if self.game.is_some() {
            let until = on_the_beat_after(SLOW_COOL_OFF);
            self.cooling.retain(|(cooling, _)| cooling != address);
            self.cooling.push((address.to_string(), until));
        }
    }

    /// If `address` said lately that it queues calls for the database:
    /// until when that excuses the lateness of a call on it sent at `sent`
    /// ([`busy_excused_until`]). `None` when nothing excuses it now.
    fn busy(&self, address: &str, sent: Instant, now: Instant) -> Option<Instant> {
        let (until, queued) = self.busy.get(address)?;
        if now >= *until {
            return None;
        }
        let excused = busy_excused_until(sent, self.hedge_delay(address), *queued);
        (now < excused).then_some(excused)
    }

    /// What the budget says of the copy of a call sent to `address` at
    /// `sent`, late now ([`Budget::copy_funds`], with its server's hedge
    /// delay).
    fn copy_funds(&self, address: &str, sent: Instant, now: Instant) -> Funds {
        let hedge_delay = self.hedge_delay(address);
        self.budget
            .copy_funds(now.saturating_duration_since(sent), hedge_delay)
    }

    /// Whether a late call held back by a shared stall may try a copy now
    /// (see `decide::stall_trial_due`).
    fn stall_trial(&self, now: Instant) -> bool {
        self.shared_stall && stall_trial_due(self.stall_seen, self.stall_tries, now)
    }

    /// When the shared stall's next try is due (see [`Self::stall_trial`]).
    fn stall_trial_at(&self) -> Option<Instant> {
        stall_trial_at(self.stall_seen, self.stall_tries)
    }

    /// A copy went out as a try of the shared stall: the next try waits its
    /// turn, longer each time.
    fn stall_tried(&mut self, now: Instant) {
        self.stall_seen = Some(now);
        self.stall_tries += 1;
    }

    /// Two servers were seen slow together: a shared stall (again).
    fn stall(&mut self) {
        self.shared_stall = true;
        self.stall_seen = Some(Instant::now());
    }

    /// A server's hedge delay, as [`Self::timing`] gives it, without a copy
    /// of its timing when it knows its own p95.
    fn hedge_delay(&self, address: &str) -> Duration {
        match self.timing.get(address) {
            Some(timing) if timing.knows_its_p95() => timing.hedge_delay(),
            _ => self.timing(address).hedge_delay(),
        }
    }

    /// A server's timing; one with too few answers of its own borrows the
    /// others' work for its hedge delay ([`ServerTiming::borrow_work`]).
    fn timing(&self, address: &str) -> ServerTiming {
        let mut timing = self.timing.get(address).cloned().unwrap_or_default();
        if !timing.knows_its_p95() {
            let others = self
                .timing
                .iter()
                .filter(|(other, _)| other.as_str() != address)
                .map(|(_, t)| t);
            if let Some(work) = rtt::borrowed_work(others) {
                timing.borrow_work(work);
            }
        }
        timing
    }

    /// Four of the farthest known network RTOs, for a new connection's
    /// keep-alive timeout.
    fn keepalive_timeout(&self) -> Duration {
        let farthest = self
            .timing
            .values()
            .filter_map(|t| t.net.rto())
            .max()
            .unwrap_or_default();
        (farthest * 4).clamp(KEEPALIVE_TIMEOUT_FLOOR, KEEPALIVE_TIMEOUT_CAP)
    }
}

#[derive(Clone)]
struct Server {
    address: String,
    channel: Channel,
    /// When it will have been live in this pool (connected and answering
    /// its health check) for `decide::SETTLE`, on the next beat: a running
    /// game goes back to it only from then on (`decide::game_server`).
    settled_at: Instant,
    /// Set when the server is dropped (dead, hung, failed its health
    /// check): every attempt in flight on it leaves at once, without
    /// waiting for a deadline or a probe of its own.
    down: Arc<watch::Sender<bool>>,
}

/// The moment `wait` from now, put off to the next beat of the wall clock
/// (`decide::BEAT`), which the pools of a game's players share.
fn on_the_beat_after(wait: Duration) -> Instant {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Instant::now() + on_the_beat(wall, wait)
}

impl Server {
    fn new(address: String, channel: Channel) -> Server {
        Server {
            address,
            channel,
            settled_at: on_the_beat_after(SETTLE),
            down: Arc::new(watch::Sender::new(false)),
        }
    }
}

/// How one attempt failed.
enum Failure {
    /// The server (or the transport) answered with this status.
    Status(tonic::Status),
    /// No answer by the deadline (this long); the server answers its probe.
    Late(Duration),
    /// No answer, and no answer to its health probe.
    Hung,
}

/// What one (possibly hedged) attempt came to.
struct Attempt<T> {
    result: Result<tonic::Response<T>, Failure>,
    answered_by: String,
    hedges: u32,
    hedge_won: bool,
    /// When the hedged copy was sent, from the start of the attempt.
    hedge_sent: Option<Duration>,
}

/// What `probe` tells next after `known` (a suspicion that the server is
/// silent, or the verdict; `Alive` if its probe ended without one); never
/// ends without a probe.
async fn verdict_of(probe: Option<&mut watch::Receiver<Probe>>, known: Probe) -> Probe {
    match probe {
        Some(probe) => match probe
            .wait_for(|p| *p != Probe::Pending && *p != known)
            .await
        {
            Ok(verdict) => *verdict,
            Err(_) => Probe::Alive,
        },
        None => std::future::pending().await,
    }
}

/// Whether a late call may be copied to a second server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Copies {
    Allowed,
    Never,
}

/// Where a call late on `server` sends its copy: another live server not in
/// `skip`; with a game set, the game's next choice ([`pick_for_game`]).
fn copy_target(state: &State, server: &Server, skip: &HashSet<String>) -> Option<Server> {
    let candidates: Vec<&Server> = state
        .servers
        .iter()
        .filter(|s| s.address != server.address && !skip.contains(&s.address))
        .collect();
    let addresses: Vec<&str> = candidates.iter().map(|s| s.address.as_str()).collect();
    let chosen = match state.game {
        Some(game) => pick_for_game(&addresses, &HashSet::new(), game),
        None => pick(&addresses, &HashSet::new(), &mut rand::rng()),
    };
    chosen.map(|i| candidates[i].clone())
}

thread_local! {
    /// Set while a call's closure builds the request of a hedged copy: the
    /// pool calls it there and then, on this thread, so
    /// [`ServerPool::request`] marks that request a copy ([`COPY_KEY`])
    /// without a closure's signature having to say which it builds.
    static SENDING_COPY: Cell<bool> = const { Cell::new(false) };
}

/// [`SENDING_COPY`] set while this lives, unset when it goes (even if the
/// closure panics).
struct SendingCopy;

impl SendingCopy {
    fn new() -> SendingCopy {
        SENDING_COPY.with(|copying| copying.set(true));
        SendingCopy
    }
}

impl Drop for SendingCopy {
    fn drop(&mut self) {
        SENDING_COPY.with(|copying| copying.set(false));
    }
}

/// Awaits `future` if there is one, else never ends (a `select!` branch
/// that is not there).
async fn maybe<F: Future + Unpin>(future: Option<&mut F>) -> F::Output {
    match future {
        Some(future) => future.await,
        None => std::future::pending().await,
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
            endpoint(address, &config, KEEPALIVE_TIMEOUT_FLOOR)?;
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
        let (stopper, shutdown) = borbaman_shutdown::channel();
        let wake = Arc::new(Notify::new());
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(State {
                known: known.clone(),
                ..State::default()
            }),
            live_count: watch::Sender::new(0),
            wake: wake.clone(),
            stall_over: Notify::new(),
            _stopper: stopper,
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
    ///
    /// The decisions are `pool::decide`'s; this only carries them out.
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<(T, CallInfo), PoolError>
    where
        F: FnMut(GameClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.send(f, Copies::Allowed).await
    }

    /// [`Self::call`] for a call whose answer no one is waiting on to play
    /// (a `Leave`): being late does not copy it to a second server. It
    /// still fails over when its server refuses it, is found hung or
    /// passes its deadline, and is copied when its server is silent
    /// beside one that answers (as a failover would: that server is not
    /// working on it). A leave is the costliest write a game makes
    /// (its player's seat, the game's end and rankings), and the players
    /// of a game leave together: copied, each leave ran twice and the
    /// two raced for the game's row, at the moment the game was busiest
    /// (see `docs/failure-detection.md`, "Leaves are not copied").
    pub async fn call_without_copies<T, F, Fut>(&self, f: F) -> Result<(T, CallInfo), PoolError>
    where
        F: FnMut(GameClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.send(f, Copies::Never).await
    }

    async fn send<T, F, Fut>(&self, mut f: F, copies: Copies) -> Result<(T, CallInfo), PoolError>
    where
        F: FnMut(GameClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let config = &self.shared.config;
        let started = Instant::now();
        let give_up_at = started + config.give_up_after;
        let mut plan = CallPlan::default();
        let mut attempts = 0u32;
        let mut hedges = 0u32;
        let mut first_failure = None;
        let mut last_failure = String::new();
        let mut backoff = Duration::ZERO;
        let mut moved = None;
        self.shared.state.lock().unwrap().budget.earn();
        loop {
            let Some(server) = self.current_server(&plan.skip()) else {
                let pause = {
                    let mut state = self.shared.state.lock().unwrap();
                    let live: Vec<&str> =
                        state.servers.iter().map(|s| s.address.as_str()).collect();
                    let throttled = !state.budget.has_token();
                    let pause = plan.exhausted(&live, throttled, &mut rand::rng());
                    match pause {
                        Pause::Sleep {
                            database_down: true,
                            ..
                        } => state.database_unavailable = true,
                        // Every server this call tried was slow: the cause
                        // is shared.
                        Pause::Sleep { .. } => state.stall(),
                        Pause::WaitForServer => {}
                    }
                    pause
                };
                let paused = Instant::now();
                let waited = match pause {
                    Pause::Sleep { duration, .. } => sleep_until_before(duration, give_up_at).await,
                    Pause::WaitForServer => self.wait_for_server(give_up_at).await,
                };
                backoff += paused.elapsed();
                if !waited {
                    return Err(self.give_up(started, last_failure, plan.database_trouble));
                }
                continue;
            };
            attempts += 1;
            if attempts > 1 {
                self.shared.state.lock().unwrap().retries += 1;
            } else {
                moved = self
                    .shared
                    .state
                    .lock()
                    .unwrap()
                    .went_first_to(&server.address);
            }
            let attempt_started = Instant::now();
            let attempt = self
                .attempt(&mut f, &server, &plan, attempt_started, copies)
                .await;
            hedges += attempt.hedges;
            let (kind, pushback) = match attempt.result {
                Ok(response) => {
                    self.set_database_unavailable(false);
                    let server_timing = response
                        .metadata()
                        .get(TIMING_KEY)
                        .and_then(|v| v.to_str().ok())
                        .and_then(CallTiming::parse);
                    let answer_sent = attempt_started.saturating_duration_since(started)
                        + attempt
                            .hedge_sent
                            .filter(|_| attempt.hedge_won)
                            .unwrap_or_default();
                    let info = CallInfo {
                        server: attempt.answered_by,
                        attempts,
                        failed_over: plan.failed_over,
                        started,
                        first_failure,
                        last_attempt: (attempts > 1).then_some(attempt_started),
                        last_failure,
                        hedges,
                        hedge_won: attempt.hedge_won,
                        rtt: started.elapsed(),
                        backoff,
                        answer_sent,
                        server_timing,
                        moved,
                    };
                    return Ok((response.into_inner(), info));
                }
                Err(Failure::Status(status)) => {
                    let kind = classify(&status);
                    if kind == FailureKind::Refused {
                        return Err(PoolError::Status(status));
                    }
                    last_failure = format!(
                        "{} from {}: {}",
                        status.code(),
                        server.address,
                        status.message()
                    );
                    (kind, retry_pushback(&status))
                }
                Err(Failure::Late(deadline)) => {
                    last_failure = format!(
                        "no answer from {} within {} ms",
                        server.address,
                        deadline.as_millis()
                    );
                    (FailureKind::Timeout, None)
                }
                Err(Failure::Hung) => {
                    last_failure = format!(
                        "{} answers neither the call nor a health check",
                        server.address
                    );
                    (FailureKind::Hung, None)
                }
            };
            tracing::debug!(
                server = server.address,
                elapsed_us = attempt_started.elapsed().as_micros() as u64,
                ?kind,
                last_failure,
                "attempt failed"
            );
            first_failure.get_or_insert(attempt_started);
            match plan.failed(&server.address, kind, pushback) {
                Fate::MarkDown => self.mark_down(&server.address),
                Fate::Leave => self.leave_current(&server.address),
                Fate::Return => unreachable!("refusals are returned above"),
            }
            if Instant::now() >= give_up_at {
                return Err(self.give_up(started, last_failure, plan.database_trouble));
            }
        }
    }

    /// One attempt on `server`. After the server's hedge delay the attempt
    /// is late: the server is probed on its warm connection (or the probe
    /// another late call started on it is joined) and, as [`when_late`]
    /// decides, the same request goes to another live server at the same
    /// moment; the first good answer wins. If the server is dropped
    /// meanwhile (hung, dead), the attempt leaves it at once. At the
    /// deadline [`at_deadline`] decides whether to leave the server or keep
    /// waiting.
    async fn attempt<T, F, Fut>(
        &self,
        f: &mut F,
        server: &Server,
        plan: &CallPlan,
        started: Instant,
        copies: Copies,
    ) -> Attempt<T>
    where
        F: FnMut(GameClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let timing = self.shared.state.lock().unwrap().timing(&server.address);
        let (deadline, longest) = plan.deadlines(&timing);
        let hedge_after = timing.hedge_delay().min(deadline);
        let skip = plan.skip();
        let mut attempt = Attempt {
            result: Err(Failure::Late(deadline)),
            answered_by: server.address.clone(),
            hedges: 0,
            hedge_won: false,
            hedge_sent: None,
        };
        let first = f(GameClient::new(server.channel.clone()));
        tokio::pin!(first);
        // `None` once the first copy has failed (or its server hung).
        let mut first_status: Option<tonic::Status> = None;
        let mut first_pending = true;
        let mut first_hung = false;
        let mut copy: Option<(Server, Instant, Pin<Box<Fut>>)> = None;
        let mut copy_state = Copy::None;
        // The copy's server's "down" signal, once a copy is out.
        let mut copy_down: Option<watch::Receiver<bool>> = None;
        let mut probe: Option<watch::Receiver<Probe>> = None;
        let mut down = server.down.subscribe();
        let mut probe_state = Probe::Pending;
        let mut hedge_at = Some(started + hedge_after);
        // When a call a shared stall or its server's queue held back asks
        // for its copy again.
        let mut held_copy_at: Option<Instant> = None;
        let mut copy_late_at: Option<Instant> = None;
        // The copy's server's hedge delay when the copy went out.
        let mut copy_delay = Duration::ZERO;
        let mut deadline_at = Some(started + deadline);
        let mut overdue = false;
        let final_at = started + longest.max(deadline);
        // Sends the call's copy to `second` at `now` (one copy out at a
        // time: a later one replaces it).
        macro_rules! send_copy {
            ($second:expr, $now:expr) => {{
                let (second, now): (Server, Instant) = ($second, $now);
                let copied_after = now.saturating_duration_since(started);
                attempt.hedges += 1;
                attempt.hedge_sent = Some(copied_after);
                copy_delay = self.hedge_delay(&second.address);
                copy_late_at = Some(now + copy_late_after(copy_delay, copied_after));
                let future = {
                    let _copying = SendingCopy::new();
                    Box::pin(f(GameClient::new(second.channel.clone())))
                };
                copy_down = Some(second.down.subscribe());
                copy = Some((second, now, future));
                copy_state = Copy::OnTime;
            }};
        }
        loop {
            let next = [
                hedge_at,
                held_copy_at,
                copy_late_at,
                deadline_at,
                Some(final_at),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(final_at);
            let copy_pending = matches!(copy_state, Copy::OnTime | Copy::Late);
            let mut decide = false;
            tokio::select! {
                result = &mut first, if first_pending => match result {
                    Ok(response) => {
                        self.note_busy(&server.address, response.metadata());
                        self.note_alone(&server.address, response.metadata());
                        let rtt = started.elapsed();
                        self.record_call(&server.address, started, rtt <= hedge_after);
                        attempt.result = Ok(response);
                        return attempt;
                    }
                    Err(status) => {
                        self.note_busy(&server.address, status.metadata());
                        first_pending = false;
                        if !copy_pending {
                            attempt.result = Err(Failure::Status(status));
                            return attempt;
                        }
                        first_status = Some(status);
                    }
                },
                result = maybe(copy.as_mut().map(|(_, _, future)| future)), if copy_pending => {
                    let (second, copy_started, _) = copy.as_ref().expect("a copy is pending");
                    match result {
                        Ok(response) => {
                            self.note_busy(&second.address, response.metadata());
                            let rtt = copy_started.elapsed();
                            let ends_stall = copy_answer_ends_stall(
                                rtt,
                                copy_delay,
                                attempt.hedge_sent.unwrap_or_default(),
                                first_pending,
                            );
                            self.record_call(&second.address, *copy_started, ends_stall);
                            self.hedge_won(&server.address, &second.address, started);
                            self.note_alone(&second.address, response.metadata());
                            attempt.result = Ok(response);
                            attempt.answered_by = second.address.clone();
                            attempt.hedge_won = true;
                            return attempt;
                        }
                        Err(status) => {
                            self.note_busy(&second.address, status.metadata());
                            if classify(&status) == FailureKind::ServerDown {
                                self.mark_down(&second.address);
                            }
                            copy_state = Copy::Failed;
                            if !first_pending {
                                attempt.result = match first_status.take() {
                                    Some(status) => Err(Failure::Status(status)),
                                    None => Err(Failure::Hung),
                                };
                                return attempt;
                            }
                        }
                    }
                },
                verdict = verdict_of(probe.as_mut(), probe_state), if matches!(probe_state, Probe::Pending | Probe::Silent) && probe.is_some() => {
                    // The probe marks a hung server down itself.
                    probe_state = verdict;
                    if probe_state == Probe::Silent && first_pending {
                        // Another server answered its health check, this
                        // one did not: copy the call now, whatever the
                        // budget or a stall say (see `copy_when_silent`).
                        if let Some(second) = self.silent_copy(server, &skip, copy_state) {
                            send_copy!(second, Instant::now());
                        }
                    }
                    if late_copy_is_shared_stall(copy_state, probe_state) {
                        // The copy was late beside a live server: two
                        // servers slow together.
                        self.shared.state.lock().unwrap().stall();
                    }
                    if probe_state == Probe::Hung && first_pending {
                        first_pending = false;
                        first_hung = true;
                        if !copy_pending {
                            attempt.result = Err(Failure::Hung);
                            return attempt;
                        }
                    }
                    decide = overdue && first_pending;
                },
                // An answer on time ended the shared stall that held this
                // call's copy back: ask for it now.
                _ = self.shared.stall_over.notified(), if held_copy_at.is_some() => {
                    held_copy_at = Some(Instant::now());
                },
                // The copy's server was dropped meanwhile (found hung or
                // dead): the copy will not answer.
                _ = async {
                    match copy_down.as_mut() {
                        Some(down) => { let _ = down.wait_for(|d| *d).await; }
                        None => std::future::pending().await,
                    }
                }, if copy_pending => {
                    copy_state = Copy::Failed;
                    copy_late_at = None;
                    if !first_pending {
                        attempt.result = match first_status.take() {
                            Some(status) => Err(Failure::Status(status)),
                            None => Err(Failure::Hung),
                        };
                        return attempt;
                    }
                },
                // The server was dropped meanwhile (another call's probe
                // found it hung, its health check failed): leave it now.
                _ = async { let _ = down.wait_for(|d| *d).await; }, if first_pending => {
                    first_pending = false;
                    first_hung = true;
                    if !copy_pending {
                        attempt.result = Err(Failure::Hung);
                        return attempt;
                    }
                },
                _ = tokio::time::sleep_until(next.into()) => {
                    let now = Instant::now();
                    if hedge_at.is_some_and(|at| at <= now) {
                        // Late: probe the server (or join the probe under
                        // way), and hedge at the same moment.
                        hedge_at = None;
                        let (verdict, second, ask_again) =
                            self.late(server, &skip, started, copies);
                        probe = Some(verdict);
                        held_copy_at = ask_again;
                        if let Some(second) = second {
                            send_copy!(second, now);
                        }
                    }
                    if held_copy_at.is_some_and(|at| at <= now) {
                        held_copy_at = None;
                        if first_pending && copy_state == Copy::None {
                            let (second, ask_again) = self.held_copy(server, &skip, started);
                            held_copy_at = ask_again;
                            if let Some(second) = second {
                                send_copy!(second, now);
                            }
                        }
                    }
                    if copy_late_at.is_some_and(|at| at <= now) {
                        copy_late_at = None;
                        if copy_state == Copy::OnTime {
                            copy_state = Copy::Late;
                            if late_copy_is_shared_stall(copy_state, probe_state) {
                                // Two servers slow together: the cause is
                                // shared. (While the first server's probe
                                // is pending, its verdict decides.)
                                self.shared.state.lock().unwrap().stall();
                            }
                        }
                    }
                    if deadline_at.is_some_and(|at| at <= now) {
                        deadline_at = None;
                        overdue = true;
                        decide = first_pending;
                    }
                    if now >= final_at {
                        attempt.result = match first_status.take() {
                            Some(status) => Err(Failure::Status(status)),
                            None if first_hung => Err(Failure::Hung),
                            None => Err(Failure::Late(longest.max(deadline))),
                        };
                        return attempt;
                    }
                },
            }
            if decide {
                let late = {
                    let state = self.shared.state.lock().unwrap();
                    Late {
                        probe: probe_state,
                        copy: copy_state,
                        // A busy server's copy would queue elsewhere as
                        // it does here: wait, as in a shared stall.
                        shared_stall: state.shared_stall
                            || state
                                .busy(&server.address, started, Instant::now())
                                .is_some(),
                        other_server: state
                            .servers
                            .iter()
                            .any(|s| s.address != server.address && !skip.contains(&s.address)),
                        token: state.budget.has_token(),
                    }
                };
                match at_deadline(late) {
                    AtDeadline::Abandon => {
                        self.shared.state.lock().unwrap().budget.spend();
                        attempt.result = Err(Failure::Late(deadline));
                        return attempt;
                    }
                    AtDeadline::Hung => {
                        attempt.result = Err(Failure::Hung);
                        return attempt;
                    }
                    AtDeadline::Reprobe => {
                        // Probe again at once (joining a probe under way
                        // if another call opened one), with a copy if one
                        // is covered; the verdict alone decides nothing
                        // until the next deadline, so a server that
                        // answers its probes is looked at once a deadline.
                        let now = Instant::now();
                        hedge_at = Some(now);
                        probe_state = Probe::Pending;
                        overdue = false;
                        deadline_at = Some(now + deadline);
                    }
                    AtDeadline::WaitForProbe | AtDeadline::KeepWaiting => {}
                }
            }
        }
    }

    /// A snapshot for a HUD or a report.
    pub fn status(&self) -> PoolStatus {
        let state = self.shared.state.lock().unwrap();
        let servers: Vec<ServerRtt> = state
            .servers
            .iter()
            .map(|s| {
                let timing = state.timing(&s.address);
                ServerRtt {
                    address: s.address.clone(),
                    srtt: timing.net.srtt(),
                    rttvar: timing.net.rttvar(),
                    call_srtt: timing.call.srtt(),
                    deadline: timing.deadline(),
                    hedge_delay: timing.hedge_delay(),
                }
            })
            .collect();
        let current = state
            .current
            .as_deref()
            .map(|address| state.timing(address))
            .unwrap_or_default();
        PoolStatus {
            current: state.current.clone(),
            live: state.servers.iter().map(|s| s.address.clone()).collect(),
            failovers: state.failovers,
            waiting_for_server: state.waiting > 0,
            database_unavailable: state.database_unavailable,
            shared_stall: state.shared_stall,
            hedges: state.hedges,
            retries: state.retries,
            hedge_delay: current.hedge_delay(),
            deadline: current.deadline(),
            servers,
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

    /// `message` as a request, asking for the server's timing when
    /// [`PoolConfig::server_timing`] is on, and marked a copy
    /// ([`COPY_KEY`]) when built for a hedged copy of a call.
    pub fn request<M>(&self, message: M) -> tonic::Request<M> {
        let mut request = tonic::Request::new(message);
        if self.shared.config.server_timing {
            request
                .metadata_mut()
                .insert(TIMING_KEY, tonic::metadata::MetadataValue::from_static("1"));
        }
        if SENDING_COPY.with(Cell::get) {
            request
                .metadata_mut()
                .insert(COPY_KEY, tonic::metadata::MetadataValue::from_static("1"));
        }
        request
    }

    /// Calls from now on are about `game` (or none): the current server
    /// becomes the game's choice among the live ones (see
    /// [`pick_for_game`]), and a failover picks its next choice. Not a
    /// failover: nothing failed.
    pub fn set_game(&self, game: Option<u64>) {
        let mut state = self.shared.state.lock().unwrap();
        state.game = game;
        state.left_on_win = None;
        state.why_moved = Some(Move::Game);
        if let Some(game) = game {
            let addresses: Vec<&str> = state.servers.iter().map(|s| s.address.as_str()).collect();
            if let Some(i) = pick_for_game(&addresses, &HashSet::new(), game) {
                state.current = Some(state.servers[i].address.clone());
            }
        }
    }

    /// The current server, or a live one not in `avoid` (which then becomes
    /// current): in a game, the game's choice once it has settled (see
    /// [`game_server`]), else one at random. `None` when no such server is
    /// live.
    fn current_server(&self, avoid: &HashSet<String>) -> Option<Server> {
        let mut state = self.shared.state.lock().unwrap();
        let now = Instant::now();
        state.cooling.retain(|(_, until)| *until > now);
        let current = state.current.as_ref().and_then(|current| {
            (!avoid.contains(current))
                .then(|| state.servers.iter().position(|s| &s.address == current))
                .flatten()
        });
        let addresses: Vec<&str> = state.servers.iter().map(|s| s.address.as_str()).collect();
        let i = match state.game {
            Some(game) => {
                // The game's server, unless it is cooling off after losing a
                // hedge race or refusing a call (then the next choice, the
                // same for every player).
                let choice = if state.cooling.is_empty() {
                    pick_for_game(&addresses, avoid, game)
                } else {
                    let mut skip = avoid.clone();
                    skip.extend(state.cooling.iter().map(|(address, _)| address.clone()));
                    pick_for_game(&addresses, &skip, game)
                        .or_else(|| pick_for_game(&addresses, avoid, game))
                };
                let settled = choice.is_some_and(|c| state.servers[c].settled_at <= now);
                game_server(current, choice, settled)?
            }
            None => match current {
                Some(current) => current,
                None => pick(&addresses, avoid, &mut rand::rng())?,
            },
        };
        let server = state.servers[i].clone();
        if state.left_on_win.as_deref() == Some(&server.address) {
            // Back at the server left on a copy's wins.
            state.left_on_win = None;
        }
        if current.is_none()
            && state.current.is_some()
            && state.current.as_deref() != Some(&server.address)
        {
            // Moving away from a server that failed us.
            state.failovers += 1;
        }
        state.current = Some(server.address.clone());
        Some(server)
    }

    /// Drops a failed server's connection; the next call picks another,
    /// and every call in flight on it leaves it at once.
    fn mark_down(&self, address: &str) {
        self.drop_server(address, true);
    }

    /// Drops a server's connection; with `leave`, tells every attempt in
    /// flight on it to leave.
    fn drop_server(&self, address: &str, leave: bool) {
        let remaining = {
            let mut state = self.shared.state.lock().unwrap();
            let Some(i) = state.servers.iter().position(|s| s.address == address) else {
                return;
            };
            let gone = state.servers.remove(i);
            if state.left_on_win.as_deref() == Some(address) {
                state.left_on_win = None;
            }
            if leave {
                gone.down.send_replace(true);
            }
            tracing::info!(server = address, "server down, failing over");
            if state.current.as_deref() == Some(address) {
                state.failovers += 1;
                state.current = None;
                state.why_moved = Some(Move::Down);
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

    /// A server's hedge delay (the default timing's when nothing is known
    /// yet).
    fn hedge_delay(&self, address: &str) -> Duration {
        self.shared.state.lock().unwrap().hedge_delay(address)
    }

    /// An attempt on `address` sent at `sent` was answered now; `on_time`:
    /// within its hedge delay (or a copy back first, see
    /// [`copy_answer_ends_stall`]), which ends a shared stall.
    fn record_call(&self, address: &str, sent: Instant, on_time: bool) {
        let rtt = sent.elapsed();
        let mut state = self.shared.state.lock().unwrap();
        let now = Instant::now();
        match state.answered_at.get_mut(address) {
            Some(at) => *at = now,
            None => {
                state.answered_at.insert(address.to_string(), now);
            }
        }
        state
            .timing
            .entry(address.to_string())
            .or_default()
            .record_call(rtt);
        let stall_over = on_time && state.shared_stall;
        if on_time {
            state.shared_stall = false;
            state.stall_tries = 0;
            // Answered in time since a copy beat it: the next win over it
            // is a first again.
            if state
                .beaten
                .as_ref()
                .is_some_and(|(beaten, _)| beaten == address)
            {
                state.beaten = None;
            }
        }
        if let Some(suspect) = state.suspects.get_mut(address) {
            suspect.suspicion.answer(sent);
        }
        drop(state);
        if stall_over {
            self.shared.stall_over.notify_waiters();
        }
    }

    /// An answer (or refusal) from `address` carried these headers: if
    /// they say it queued the call for the database ([`BUSY_KEY`]), its
    /// late calls are not hedged for [`BUSY_HOLD`] while that queue excuses
    /// their wait ([`State::busy`]).
    fn note_busy(&self, address: &str, metadata: &tonic::metadata::MetadataMap) {
        if let Some(value) = metadata.get(BUSY_KEY) {
            let queued = value
                .to_str()
                .ok()
                .and_then(|ms| ms.parse().ok())
                .map_or(BUSY_QUEUED, Duration::from_millis);
            let until = Instant::now() + BUSY_HOLD;
            self.shared
                .state
                .lock()
                .unwrap()
                .busy
                .insert(address.to_string(), (until, queued));
        }
    }

    /// A health check on `address` answered after `rtt`.
    fn record_probe(&self, address: &str, rtt: Duration) {
        let mut state = self.shared.state.lock().unwrap();
        state
            .timing
            .entry(address.to_string())
            .or_default()
            .record_probe(rtt);
    }

    /// A call on `server` is late: decides with [`when_late`] whether to
    /// probe (opening a [`Suspicion`]) or join the one open on it, and
    /// whether a copy goes to another live server (not in `skip`) now:
    /// with a game set, the game's next choice ([`pick_for_game`]), where
    /// every player of the game sends its copies and goes if the server is
    /// left, so that the game's calls do not contend for it from two
    /// servers. `sent`: when the late call was sent. Returns where the
    /// verdict will be told, and the copy's server.
    fn late(
        &self,
        server: &Server,
        skip: &HashSet<String>,
        sent: Instant,
        copies: Copies,
    ) -> (watch::Receiver<Probe>, Option<Server>, Option<Instant>) {
        let mut state = self.shared.state.lock().unwrap();
        let target = match copies {
            Copies::Allowed => copy_target(&state, server, skip),
            Copies::Never => None,
        };
        // A shared stall that has lasted a while lets one late call try a
        // copy: the stall ends only with an answer on time, and a client
        // whose game is on a server that alone turned slow gets none.
        let now = Instant::now();
        let trial = state.stall_trial(now);
        let held = state.shared_stall && !trial;
        let busy = state.busy(&server.address, sent, now);
        let funds = state.copy_funds(&server.address, sent, now);
        let step = when_late(LateNow {
            suspicion: state.suspects.get(&server.address).map(|s| s.suspicion),
            // A server that queues calls for the database is late for
            // that: a copy would queue on another server the same way.
            shared_stall: held || busy.is_some(),
            database_unavailable: state.database_unavailable,
            other_server: target.is_some(),
            token: funds == Funds::Now,
        });
        // Held back by the stall, the server's queue or the budget's
        // reserve: ask again when the stall's next try is due, the queue
        // no longer excuses the wait, or the call stays late enough to
        // spend the reserve (see `held_copy`).
        let stall_try = held.then(|| state.stall_trial_at()).flatten();
        let reserve_at = match funds {
            Funds::LateFor(late) => Some(sent + late),
            Funds::Now | Funds::None => None,
        };
        let ask_again = (step.hedge == Hedge::No
            && should_hedge(false, state.database_unavailable, target.is_some(), true))
        .then(|| stall_try.into_iter().chain(busy).chain(reserve_at).max())
        .flatten();
        if step.hedge == Hedge::Covered
            && let Some(suspect) = state.suspects.get_mut(&server.address)
        {
            suspect.suspicion.covered_left -= 1;
        }
        let target = if step.hedge == Hedge::No {
            None
        } else {
            state.copy_sent(step.hedge == Hedge::Paid, trial, now);
            target
        };
        let verdict = if step.probe {
            let (tell, verdict) = watch::channel(Probe::Pending);
            let id = state.next_suspicion;
            state.next_suspicion += 1;
            state.suspects.insert(
                server.address.clone(),
                Suspect {
                    id,
                    suspicion: Suspicion::opened(step.hedge, sent),
                    verdict: verdict.clone(),
                },
            );
            drop(state);
            self.probe(server, id, tell);
            verdict
        } else {
            state
                .suspects
                .get(&server.address)
                .map(|s| s.verdict.clone())
                .expect("a suspicion is open: joined")
        };
        (verdict, target, ask_again)
    }

    /// A late call on `server`, sent at `sent`, that a shared stall, the
    /// server's queue or the budget's reserve held back, at the time
    /// [`Self::late`] gave: the copy's server if one goes now (paying a
    /// token, as a try of the stall, because the stall has ended or
    /// because the call stays late enough to spend the reserve), or when
    /// to ask again (another call took this try meanwhile, the server said
    /// since that it queues, or the reserve is not the call's yet).
    fn held_copy(
        &self,
        server: &Server,
        skip: &HashSet<String>,
        sent: Instant,
    ) -> (Option<Server>, Option<Instant>) {
        let mut state = self.shared.state.lock().unwrap();
        let now = Instant::now();
        let target = copy_target(&state, server, skip);
        let trial = state.stall_trial(now);
        if state.shared_stall && !trial {
            return (None, state.stall_trial_at());
        }
        if let Some(excused) = state.busy(&server.address, sent, now) {
            return (None, Some(excused));
        }
        let funds = state.copy_funds(&server.address, sent, now);
        if let Funds::LateFor(late) = funds
            && target.is_some()
        {
            return (None, Some(sent + late));
        }
        if !should_hedge(
            false,
            state.database_unavailable,
            target.is_some(),
            funds == Funds::Now,
        ) {
            return (None, None);
        }
        state.copy_sent(true, trial, now);
        (target, None)
    }

    /// A call late on `server`, which its probe found [`Probe::Silent`]:
    /// the server to send its copy to now, if [`copy_when_silent`] says so
    /// (chosen as [`Self::late`] chooses). Pays a token if one is left.
    fn silent_copy(&self, server: &Server, skip: &HashSet<String>, copy: Copy) -> Option<Server> {
        let mut state = self.shared.state.lock().unwrap();
        let target = copy_target(&state, server, skip);
        if !copy_when_silent(copy, target.is_some()) {
            return None;
        }
        state.copy_sent(true, false, Instant::now());
        target
    }

    /// Health-checks a late call's server on its warm connection, and at
    /// the same time one other live server, in a task of its own (its
    /// verdict counts even when the call is answered first).
    /// [`probe_verdict`] decides, as each answer or deadline comes: the
    /// late server has its probe deadline, the other as long as
    /// [`PROBE_PATIENCE`] of them. A hung server is marked down (which
    /// every call in flight on it hears). The verdict is told on `tell`,
    /// and closes suspicion `id`.
    fn probe(&self, server: &Server, id: u64, tell: watch::Sender<Probe>) {
        let pool = self.clone();
        let (timeout, own_round_trip, other) = {
            let state = self.shared.state.lock().unwrap();
            let others: Vec<&Server> = state
                .servers
                .iter()
                .filter(|s| s.address != server.address)
                .collect();
            let addresses: Vec<&str> = others.iter().map(|s| s.address.as_str()).collect();
            let other =
                pick(&addresses, &HashSet::new(), &mut rand::rng()).map(|i| others[i].clone());
            let timing = state.timing(&server.address);
            (
                timing.probe_deadline(),
                timing.net.rto().unwrap_or_default(),
                other,
            )
        };
        let server = server.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let overdue_at = started + timeout;
            let give_up_at = started + timeout * PROBE_PATIENCE;
            let longest = timeout * PROBE_PATIENCE;
            let check = healthy(&server.channel, longest);
            tokio::pin!(check);
            let other_check = async {
                match &other {
                    Some(other) => healthy(&other.channel, longest).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(other_check);
            let mut now = Probing {
                answered: false,
                overdue: false,
                other: other.as_ref().map(|_| None),
                elapsed: Duration::ZERO,
                given_up: false,
                own_round_trip,
            };
            let (mut checking, mut other_checking) = (true, other.is_some());
            let verdict = loop {
                now.elapsed = started.elapsed();
                // A call sent since the late one was answered: alive, only
                // slow, whatever its check says (past a cluster's capacity
                // one server answers checks later than another).
                now.answered |= pool.answered_since_suspected(&server.address, id);
                let verdict = probe_verdict(now, rtt::PROBE_SLACK);
                match verdict {
                    Probe::Pending => {}
                    Probe::Silent => {
                        if *tell.borrow() != Probe::Silent {
                            tracing::debug!(
                                server = server.address,
                                "server silent: probe unanswered beside another's answer"
                            );
                            tell.send_replace(Probe::Silent);
                        }
                    }
                    Probe::Alive | Probe::Hung => break verdict,
                }
                // The other answered: the late server has that long (at
                // least its own round trip) and the silent slack more,
                // then that long and the hung slack more.
                let (silent_at, other_slack_at) = match now.other {
                    Some(Some(other)) if verdict == Probe::Pending => (
                        started + silent_after(other, own_round_trip),
                        started + other + rtt::PROBE_SLACK,
                    ),
                    Some(Some(other)) => (give_up_at, started + other + rtt::PROBE_SLACK),
                    _ => (give_up_at, give_up_at),
                };
                tokio::select! {
                    answer = &mut check, if checking => {
                        checking = false;
                        match answer {
                            Some(rtt) => {
                                pool.record_probe(&server.address, rtt);
                                now.answered = true;
                            }
                            // Failed outright (or silent all along): no.
                            None => now.overdue = true,
                        }
                    }
                    answer = &mut other_check, if other_checking => {
                        other_checking = false;
                        if let (Some(rtt), Some(other)) = (answer, &other) {
                            pool.record_probe(&other.address, rtt);
                            now.other = Some(Some(started.elapsed()));
                        }
                    }
                    _ = tokio::time::sleep_until(overdue_at.into()), if !now.overdue => {
                        now.overdue = true;
                    }
                    _ = tokio::time::sleep_until(silent_at.into()), if silent_at < give_up_at => {}
                    _ = tokio::time::sleep_until(other_slack_at.into()), if other_slack_at < give_up_at => {}
                    _ = tokio::time::sleep_until(give_up_at.into()) => {
                        now.given_up = true;
                    }
                }
                // Both checks over, neither changing anything any more.
                if !checking && !other_checking {
                    now.given_up = true;
                }
            };
            {
                let mut state = pool.shared.state.lock().unwrap();
                if state
                    .suspects
                    .get(&server.address)
                    .is_some_and(|s| s.id == id)
                {
                    state.suspects.remove(&server.address);
                }
            }
            if verdict == Probe::Hung {
                tracing::info!(server = server.address, "server hung: no answer to a probe");
                pool.mark_down(&server.address);
            }
            tell.send_replace(verdict);
        });
    }

    /// Whether `address`, under suspicion `id`, answered a call sent no
    /// earlier than the late one that opened it ([`Suspicion::answer`]).
    fn answered_since_suspected(&self, address: &str, id: u64) -> bool {
        let state = self.shared.state.lock().unwrap();
        state
            .suspects
            .get(address)
            .is_some_and(|s| s.id == id && s.suspicion.answered)
    }

    /// A hedge to `winner` answered before `slow` did, for a call sent at
    /// `sent`. A second such win over `slow` ([`win_moves_calls`]) moves
    /// calls to the winner. With a game set, `slow` stays its players'
    /// server; it is left out of the game's choice for [`SLOW_COOL_OFF`],
    /// then tried again (a server slow for good keeps losing races and is
    /// left again).
    fn hedge_won(&self, slow: &str, winner: &str, sent: Instant) {
        let mut state = self.shared.state.lock().unwrap();
        let now = Instant::now();
        let beaten = state
            .beaten
            .as_ref()
            .map(|(address, at)| (address.as_str(), *at));
        if !win_moves_calls(beaten, slow, sent, now) {
            state.beaten = Some((slow.to_string(), now));
            return;
        }
        state.beaten = None;
        if state.servers.iter().any(|s| s.address == winner) {
            state.current = Some(winner.to_string());
            state.why_moved = Some(Move::CopyWon);
            if state.game.is_some() {
                state.left_on_win = Some(slow.to_string());
            }
        }
        state.cool_off(slow);
    }

    /// An answer of `address` said (metadata [`ALONE_KEY`]) the player is
    /// alone there: its game-mates call another server. If the player's
    /// calls came here only on a copy's wins, they go back to the game's
    /// server they left ([`back_when_alone`]).
    fn note_alone(&self, address: &str, metadata: &tonic::metadata::MetadataMap) {
        if !metadata.contains_key(ALONE_KEY) {
            return;
        }
        let mut state = self.shared.state.lock().unwrap();
        let now = Instant::now();
        if state.game.is_none()
            || state.current.as_deref() != Some(address)
            || !back_when_alone(
                state.left_on_win.as_deref(),
                address,
                state.alone_returned_at,
                now,
            )
        {
            return;
        }
        let Some(left) = state.left_on_win.take() else {
            return;
        };
        if state.servers.iter().any(|s| s.address == left) {
            tracing::debug!(
                server = left,
                from = address,
                "alone here: back to the game's server"
            );
            state.cooling.retain(|(cooling, _)| *cooling != left);
            state.current = Some(left);
            state.why_moved = Some(Move::Alone);
            state.alone_returned_at = Some(now);
        }
    }

    /// Moves calls away from `address` (it cannot serve them now) without
    /// dropping its connection.
    fn leave_current(&self, address: &str) {
        let mut state = self.shared.state.lock().unwrap();
        // Left for a failure, not a copy's win.
        state.left_on_win = None;
        if state.current.as_deref() == Some(address) {
            state.current = None;
            state.failovers += 1;
            state.why_moved = Some(Move::Left);
        }
        // The game's calls go back to it after a cool-off, not at the next
        // call (a server cut off the database refuses every one).
        state.cool_off(address);
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
        let (full, since) = {
            let mut state = self.shared.state.lock().unwrap();
            let full = state.refreshes.is_multiple_of(FULL_CHECK_EVERY);
            state.refreshes += 1;
            (full, Instant::now().checked_sub(self.shared.config.refresh))
        };
        // `since` is `None` only within a refresh of the clock's start.
        self.check_health(if full { None } else { since }).await;
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
    async fn check_health(&self, skip_answered_since: Option<Instant>) {
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
    fn health_timeout(&self, timing: &ServerTiming) -> Duration {
        let far = timing.net.rto().unwrap_or_default() * 2;
        far.max(self.shared.config.health_timeout)
    }

    /// Asks a live server's registry for the live servers; connects to the
    /// ones we have no connection to, up to the cap.
    async fn discover(&self) {
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
                .filter(|a| !state.servers.iter().any(|s| &s.address == a))
                .take(room)
                .collect()
        };
        self.connect_new(new).await;
    }

    /// Connects to and health-checks each address at once; adds the healthy
    /// ones to the live set. A second health check's round trip (the first
    /// includes opening the connection) is the server's first timing
    /// sample.
    async fn connect_new(&self, addresses: Vec<String>) {
        let config = self.shared.config.clone();
        let keepalive = self.shared.state.lock().unwrap().keepalive_timeout();
        let mut connecting = JoinSet::new();
        for address in addresses {
            let config = config.clone();
            connecting.spawn(async move {
                let endpoint = endpoint(&address, &config, keepalive).ok()?;
                let channel = endpoint.connect().await.ok()?;
                // The first check also waits for the connection to open
                // (over a distance, the TCP handshake's round trip): it
                // says the server serves; the second says how far it is.
                healthy(&channel, config.connect_timeout).await?;
                let rtt = healthy(&channel, config.connect_timeout).await?;
                Some((Server::new(address, channel), rtt))
            });
        }
        while let Some(joined) = connecting.join_next().await {
            let Ok(Some((server, rtt))) = joined else {
                continue;
            };
            let count = {
                let mut state = self.shared.state.lock().unwrap();
                if state.servers.iter().any(|s| s.address == server.address)
                    || state.servers.len() >= config.max_connections
                {
                    continue;
                }
                tracing::debug!(
                    server = server.address,
                    rtt_us = rtt.as_micros() as u64,
                    "connected"
                );
                state
                    .timing
                    .entry(server.address.clone())
                    .or_default()
                    .record_probe(rtt);
                state.servers.push(server);
                state.servers.len()
            };
            self.shared.live_count.send_replace(count);
        }
    }
}

/// The background task: refreshes every `config.refresh` (or at once when
/// woken) until the pool is dropped.
async fn background(shared: Weak<Shared>, wake: Arc<Notify>, mut shutdown: Shutdown) {
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
        // handle drops `Shared` and its `Stopper`, which stops `shutdown`.
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
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// An endpoint for `address`, with HTTP/2 keep-alive: a server that stops
/// answering PINGs for `keepalive_timeout` (hung, or its host gone without
/// a reset) has its connection closed, and its calls fail over, even when
/// no call is late.
fn endpoint(
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
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(keepalive_timeout)
        .keep_alive_while_idle(true))
}

/// The round trip of the server's `grpc.health.v1` check, if it answered
/// as serving within `timeout`.
async fn healthy(channel: &Channel, timeout: Duration) -> Option<Duration> {
    match check(channel, timeout).await {
        Check::Answered(rtt) => Some(rtt),
        Check::Refused | Check::Silent => None,
    }
}

/// A health check within `timeout`: serving, refused, or silent.
async fn check(channel: &Channel, timeout: Duration) -> Check {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_goes_elsewhere_than_the_last_says_why_the_calls_moved() {
        let mut state = State::default();
        assert_eq!(state.went_first_to("a"), None, "the first call");
        assert_eq!(state.went_first_to("a"), None);
        state.why_moved = Some(Move::CopyWon);
        assert_eq!(state.went_first_to("b"), Some(Move::CopyWon));
        // A reason is told once, and forgotten by a call that did not move.
        assert_eq!(
            state.went_first_to("a"),
            Some(Move::Back),
            "no reason noted"
        );
        state.why_moved = Some(Move::Down);
        assert_eq!(state.went_first_to("a"), None);
        assert_eq!(state.went_first_to("c"), Some(Move::Back));
    }
}
