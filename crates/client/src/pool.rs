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
//! every `Tuning::full_check_every` refreshes it does all of that; in between it
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

//!
//! The rooms: [`api`] (what callers see: the configuration, a call's
//! record, the pool's status, its errors), [`state`] (what the pool knows
//! of its servers), [`call`] (a call: its copies, hedges and failovers,
//! one attempt run as the pure state machine of [`attempt`]),
//! [`probe`] (is a late server hung or slow), [`background`] (discovery and
//! health), and the decisions apart from I/O in `decide`, `choice`,
//! `budget` and `rtt`.

mod api;
mod attempt;
mod background;
mod budget;
mod call;
mod choice;
mod decide;
mod probe;
mod rtt;
mod state;
mod tuning;
use std::cell::Cell;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use borbaman_proto::timing::{ALONE_KEY, BUSY_KEY, BUSY_QUEUED, COPY_KEY, TIMING_KEY};
use tokio::sync::{Notify, watch};
use tonic::transport::Channel;

pub use api::{CallInfo, Move, PoolConfig, PoolError, PoolStatus, ServerRtt};
use background::*;
use call::*;
use choice::{pick, pick_for_game};
use decide::{back_when_alone, game_server};
pub use rtt::ServerTiming;
use state::*;
pub use tuning::Tuning;

/// A cheap-to-clone handle to the pool. The background task stops when the
/// last handle is dropped.
#[derive(Clone)]
pub struct ServerPool {
    shared: Arc<Shared>,
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
            endpoint(address, &config, config.tuning.keepalive_timeout_floor)?;
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
        let tuning = config.tuning;
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(State {
                known: known.clone(),
                tuning,
                budget: budget::Budget::new(&tuning),
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
            .unwrap_or_else(|| ServerTiming::new(&state.tuning));
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
            state.dropped.insert(address.to_string(), Instant::now());
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
        state.timing_mut(address).record_call(rtt);
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
    /// late calls are not hedged for `Tuning::busy_hold` while that queue excuses
    /// their wait ([`State::busy`]).
    fn note_busy(&self, address: &str, metadata: &tonic::metadata::MetadataMap) {
        if let Some(value) = metadata.get(BUSY_KEY) {
            let queued = value
                .to_str()
                .ok()
                .and_then(|ms| ms.parse().ok())
                .map_or(BUSY_QUEUED, Duration::from_millis);
            let until = Instant::now() + self.shared.config.tuning.busy_hold;
            self.shared
                .state
                .lock()
                .unwrap()
                .busy
                .insert(address.to_string(), (until, queued));
        }
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
                &state.tuning,
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
        if state.is_live(&left) {
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
