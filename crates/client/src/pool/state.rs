//! What the pool knows of its servers ([`State`], behind one lock in
//! [`Shared`]): the connections, which one is current, their timings and
//! verdicts, the copy budget, and what a shared stall holds back.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use borbaman_shutdown::Stopper;
use tokio::sync::{Notify, watch};
use tonic::transport::Channel;

use super::budget::{Budget, Funds};
use super::decide::{
    Probe, Suspicion, busy_excused_until, on_the_beat, stall_trial_at, stall_trial_due,
};
use super::tuning::Tuning;

use super::*;

pub(super) struct Shared {
    pub(super) config: PoolConfig,
    /// Every address ever heard of: bootstrap, then the registry's. Tried
    /// again when no server is live.
    pub(super) state: Mutex<State>,
    /// Number of live servers; waiters watch it.
    pub(super) live_count: watch::Sender<usize>,
    /// Wakes the background task early (a server failed, a call waits).
    pub(super) wake: Arc<Notify>,
    /// Wakes the late calls a shared stall held back without a copy, when
    /// an answer on time ends the stall: they send their copies then, not
    /// at the stall's next try.
    pub(super) stall_over: Notify,
    /// Stops the background task: dropped with `Shared` (the last handle),
    /// which is a stop.
    pub(super) _stopper: Stopper,
}

/// Guarded by a std `Mutex`: every critical section is a few field updates,
/// never held across an `.await`.
#[derive(Default)]
pub(super) struct State {
    /// The pool's tuning (a copy of [`PoolConfig::tuning`]).
    pub(super) tuning: Tuning,
    pub(super) servers: Vec<Server>,
    pub(super) current: Option<String>,
    pub(super) known: Vec<String>,
    pub(super) failovers: u64,
    pub(super) waiting: u32,
    pub(super) database_unavailable: bool,
    pub(super) hedges: u64,
    pub(super) retries: u64,
    /// Every server's timing, by address; kept when a server goes, so it is
    /// known again when it comes back.
    pub(super) timing: HashMap<String, ServerTiming>,
    /// The hedge and retry budget.
    pub(super) budget: Budget,
    /// Two servers were slow together and no call has been answered on
    /// time since (see `pool::decide`).
    pub(super) shared_stall: bool,
    /// When the shared stall was last seen (declared, or a late copy
    /// confirmed it) or last tried with a copy ([`stall_trial_due`]).
    pub(super) stall_seen: Option<Instant>,
    /// Copies tried through the shared stall since it began.
    pub(super) stall_tries: u32,
    /// The game this client plays, if any: its server is chosen by
    /// [`pick_for_game`], so all its players share one.
    pub(super) game: Option<u64>,
    /// Servers that lost a hedge race or were left, kept out of the game's
    /// choice until the time given ([`State::cool_off`]).
    pub(super) cooling: Vec<(String, Instant)>,
    /// The server a copy last beat without moving calls away from it, and
    /// when ([`win_moves_calls`]); forgotten once it answers a call in time.
    pub(super) beaten: Option<(String, Instant)>,
    /// In a game, the game's server the player's calls left only because
    /// copies beat it twice ([`win_moves_calls`]): they go back to it when
    /// the server they went to says the player is alone there
    /// ([`ALONE_KEY`], [`back_when_alone`]).
    pub(super) left_on_win: Option<String>,
    /// When an answer saying the player was alone last sent it back.
    pub(super) alone_returned_at: Option<Instant>,
    /// Where the last call went first, and why the calls last moved
    /// (taken by the next call that goes elsewhere: [`CallInfo::moved`]).
    pub(super) first_server: Option<String>,
    pub(super) why_moved: Option<Move>,
    /// Servers a call went late on, their probe under way: every call in
    /// flight on one shares its probe, its verdict and its token (see
    /// [`Suspicion`]).
    pub(super) suspects: HashMap<String, Suspect>,
    /// Numbers the suspicions, so a verdict closes its own and no later one.
    pub(super) next_suspicion: u64,
    /// Servers whose answers said they queued calls for the database
    /// ([`BUSY_KEY`]): until when that is believed (`Tuning::busy_hold`), and how
    /// long the last such answer queued.
    pub(super) busy: HashMap<String, (Instant, Duration)>,
    /// When each server last answered a call: alive then, so the next
    /// background refresh need not health-check it (`Tuning::full_check_every`).
    pub(super) answered_at: HashMap<String, Instant>,
    /// Background refreshes so far.
    pub(super) refreshes: u64,
    /// How many servers the last registry answer listed (at most
    /// [`PoolConfig::max_connections`]); `None` before the first.
    pub(super) listed: Option<usize>,
    /// Servers this pool dropped, and when: each refresh tries them again
    /// directly for `Tuning::return_watch` (`pool::background`).
    pub(super) dropped: HashMap<String, Instant>,
    /// Dropped servers with a connection being tried now, one each.
    pub(super) returning: HashSet<String>,
}

/// An open [`Suspicion`] and where its verdict will be told.
pub(super) struct Suspect {
    pub(super) id: u64,
    pub(super) suspicion: Suspicion,
    pub(super) verdict: watch::Receiver<Probe>,
}

impl State {
    /// A copy of a late call goes out now: counted, a token spent if it is
    /// `paid` (not covered by its server's suspicion), and noted as the
    /// shared stall's try if it is one (`trial`).
    pub(super) fn copy_sent(&mut self, paid: bool, trial: bool, now: Instant) {
        if paid {
            self.budget.spend();
        }
        tracing::debug!(
            paid,
            trial,
            tokens_milli = self.budget.tokens_milli(),
            "copy sent"
        );
        if trial {
            self.stall_tried(now);
        }
        self.hedges += 1;
    }

    /// A call's first attempt goes to `address`: if the last call's went
    /// elsewhere, why the calls moved ([`Move::Back`] when nothing said).
    pub(super) fn went_first_to(&mut self, address: &str) -> Option<Move> {
        let why = self.why_moved.take();
        if self.first_server.as_deref() == Some(address) {
            return None;
        }
        // The address is copied only when the calls moved, not every call.
        let moved = self.first_server.replace(address.to_string()).is_some();
        moved.then(|| why.unwrap_or(Move::Back))
    }

    /// In a game, keeps `address` out of the game's choice for
    /// `Tuning::slow_cool_off`, to the next beat of the wall clock
    /// (`Tuning::beat`), so a game's players go back to it together; then
    /// the game's calls go back to it.
    pub(super) fn cool_off(&mut self, address: &str) {
        if self.game.is_some() {
            let until = on_the_beat_after(self.tuning.beat, self.tuning.slow_cool_off);
            self.cooling.retain(|(cooling, _)| cooling != address);
            self.cooling.push((address.to_string(), until));
        }
    }

    /// If `address` said lately that it queues calls for the database:
    /// until when that excuses the lateness of a call on it sent at `sent`
    /// ([`busy_excused_until`]). `None` when nothing excuses it now.
    pub(super) fn busy(&self, address: &str, sent: Instant, now: Instant) -> Option<Instant> {
        let (until, queued) = self.busy.get(address)?;
        if now >= *until {
            return None;
        }
        let excused = busy_excused_until(&self.tuning, sent, self.hedge_delay(address), *queued);
        (now < excused).then_some(excused)
    }

    /// What the budget says of the copy of a call sent to `address` at
    /// `sent`, late now ([`Budget::copy_funds`], with its server's hedge
    /// delay).
    pub(super) fn copy_funds(&self, address: &str, sent: Instant, now: Instant) -> Funds {
        let hedge_delay = self.hedge_delay(address);
        let net_rtt = self
            .timing
            .get(address)
            .and_then(|t| t.net.srtt())
            .unwrap_or_default();
        self.budget
            .copy_funds(now.saturating_duration_since(sent), hedge_delay, net_rtt)
    }

    /// Whether a late call held back by a shared stall may try a copy now
    /// (see `decide::stall_trial_due`).
    pub(super) fn stall_trial(&self, now: Instant) -> bool {
        self.shared_stall && stall_trial_due(&self.tuning, self.stall_seen, self.stall_tries, now)
    }

    /// When the shared stall's next try is due (see [`Self::stall_trial`]).
    pub(super) fn stall_trial_at(&self) -> Option<Instant> {
        stall_trial_at(&self.tuning, self.stall_seen, self.stall_tries)
    }

    /// A copy went out as a try of the shared stall: the next try waits its
    /// turn, longer each time.
    pub(super) fn stall_tried(&mut self, now: Instant) {
        self.stall_seen = Some(now);
        self.stall_tries += 1;
    }

    /// Two servers were seen slow together: a shared stall (again).
    pub(super) fn stall(&mut self) {
        self.shared_stall = true;
        self.stall_seen = Some(Instant::now());
    }

    /// A server's hedge delay, as [`Self::timing`] gives it, without a copy
    /// of its timing when it knows its own p95.
    pub(super) fn hedge_delay(&self, address: &str) -> Duration {
        match self.timing.get(address) {
            Some(timing) if timing.knows_its_p95() => timing.hedge_delay(),
            _ => self.timing(address).hedge_delay(),
        }
    }

    /// A server's timing; one with too few answers of its own borrows the
    /// others' work for its hedge delay ([`ServerTiming::borrow_work`]).
    pub(super) fn timing(&self, address: &str) -> ServerTiming {
        let mut timing = self
            .timing
            .get(address)
            .cloned()
            .unwrap_or_else(|| ServerTiming::new(&self.tuning));
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

    /// Whether `address` is one of the live servers.
    pub(super) fn is_live(&self, address: &str) -> bool {
        self.servers.iter().any(|s| s.address == address)
    }

    /// Four of the farthest known network RTOs, for a new connection's
    /// keep-alive timeout.
    pub(super) fn keepalive_timeout(&self) -> Duration {
        let farthest = self
            .timing
            .values()
            .filter_map(|t| t.net.rto())
            .max()
            .unwrap_or_default();
        let t = &self.tuning;
        (farthest * t.keepalive_timeout_rtos)
            .clamp(t.keepalive_timeout_floor, t.keepalive_timeout_cap)
    }

    /// The timing of `address`, created with the pool's tuning if none is
    /// known yet.
    pub(super) fn timing_mut(&mut self, address: &str) -> &mut ServerTiming {
        let tuning = self.tuning;
        self.timing
            .entry(address.to_string())
            .or_insert_with(|| ServerTiming::new(&tuning))
    }
}

#[derive(Clone)]
pub(super) struct Server {
    pub(super) address: String,
    pub(super) channel: Channel,
    /// When it will have been live in this pool (connected and answering
    /// its health check) for `Tuning::settle`, on the next beat: a running
    /// game goes back to it only from then on (`decide::game_server`).
    pub(super) settled_at: Instant,
    /// Set when the server is dropped (dead, hung, failed its health
    /// check): every attempt in flight on it leaves at once, without
    /// waiting for a deadline or a probe of its own.
    pub(super) down: Arc<watch::Sender<bool>>,
}

/// The moment `wait` from now, put off to the next `beat` of the wall
/// clock, which the pools of a game's players share.
pub(super) fn on_the_beat_after(beat: Duration, wait: Duration) -> Instant {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Instant::now() + on_the_beat(beat, wall, wait)
}

impl Server {
    pub(super) fn new(address: String, channel: Channel, tuning: &Tuning) -> Server {
        Server {
            address,
            channel,
            settled_at: on_the_beat_after(tuning.beat, tuning.settle),
            down: Arc::new(watch::Sender::new(false)),
        }
    }
}
