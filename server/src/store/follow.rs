//! Following the PostgreSQL primary that Patroni names, without a restart.
//!
//! sqlx 0.9 connects a pool to one host and port (a multi-host URL does not
//! parse and `target_session_attrs` is ignored), so the store points its
//! pool at the primary itself:
//!
//! - With etcd's URLs ([`FollowOptions::etcd`]) a task watches Patroni's
//!   keys in etcd ([`crate::etcd`]): the leader key is the leader lock
//!   itself, so a new lock holder, and its PostgreSQL address from its
//!   member key, is known the moment etcd commits it. A broken watch is
//!   opened again on the next etcd member.
//! - A background task, owned by the store, asks every member's Patroni
//!   `GET /primary` concurrently every `interval` (every `backstop` while
//!   the watch is live), and at once when a call hits a database error or
//!   its deadline (a burst of errors makes one extra round, and rounds are
//!   at least [`MIN_ROUND_GAP`] apart). A round ends as soon as a member
//!   other than the followed one answers 200, without waiting for slow
//!   members; the leader's `/cluster` gives its PostgreSQL address. While
//!   the watch is live a round moves the pool only to a newer timeline
//!   ([`rest_may_move`]): during a handover the old leader answers 200
//!   until it has shut down, and must not win back the pool.
//! - Either way, when the member holding the leader lock changes the
//!   pool's connect options are pointed at it ([`step`] decides) and the
//!   pool is refilled with connections to it.
//! - Connections opened for an earlier primary are closed instead of used:
//!   idle ones when next acquired (`before_acquire`), busy ones when they
//!   come back (`after_release`), judged by their age against the moment of
//!   the switch, at the cost of an atomic load (no round trip). A connect
//!   that raced the switch is caught in `after_connect`, which compares the
//!   generation the connection was opened for (a custom setting sent in its
//!   startup options) with the current one, in the same round trip as the
//!   read-only check.
//! - `after_connect` also refuses a read-only session (in every mode, see
//!   `check_new_connection`), so a standby, a member still being
//!   promoted, or a demoted primary is never used.
//!
//! Patroni writes the leader key, and answers `/primary` with 200, as soon
//! as a member takes the lock: a few hundred milliseconds before its
//! PostgreSQL is promoted and a synchronous standby has attached. The pool
//! is pointed there at once. A new connection to it that is still
//! read-only is not handed out, nor dropped: it asks again on a short,
//! jittered schedule ([`promotion_poll_pause`]) until its session turns
//! read-write (a session of a standby does at the end of the promotion),
//! for at most the store's database deadline; and after a switch the
//! pool is refilled to its standing connections, retried on the same
//! schedule while the promotion lasts ([`refill`]). So the first commit
//! lands within tens of milliseconds of the new primary being able to
//! commit at all, with no pool backoff in between.
//!
//! Each switch is logged (info) with `learned_from` (`etcd-watch` or
//! `patroni-rest`), `switch_ms` (from asking `/primary`, or hearing from
//! the watch, to the pool pointing at the new primary) and
//! `without_primary_ms` (how long the old primary had gone unconfirmed),
//! and so is the first commit on the new primary, with `since_named_ms`.
//!
//! Only Patroni (its leader key, or its REST API) chooses the target. An old primary whose Patroni
//! died still accepts connections and reports itself read-write, but it no
//! longer holds the leader lock, and once a standby is promoted its commits
//! wait forever for a synchronous standby that has moved on. Anything that
//! asks PostgreSQL itself which member is writable can get stuck on it;
//! asking Patroni cannot.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use borbaman_shutdown::{Shutdown, Stopper};
use sqlx::Row;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::etcd::{self, ClusterKeys, DcsLeader, Endpoint};
use crate::patroni::{self, Member, MemberStatus, PgAddress};

/// Custom setting that records, in each connection's startup options,
/// which generation of the target it was opened for.
pub(super) const GENERATION_SETTING: &str = "borbaman.primary_generation";

/// What [`check_new_connection`] asks (`NULL` for a setting not sent).
const CHECK_SQL: &str = "SELECT current_setting('transaction_read_only'), \
                         current_setting('borbaman.primary_generation', true)";

/// Longest wait for etcd to answer a range or accept a watch.
const WATCH_REQUEST_TIMEOUT: Duration = Duration::from_millis(500);

/// Probe rounds triggered by errors are at least this far apart, so a
/// storm of failing calls cannot turn into a storm of REST requests.
pub const MIN_ROUND_GAP: Duration = Duration::from_millis(50);

/// Shortest pause before a connection to the new primary asks again
/// whether its promotion is over ([`promotion_poll_pause`]).
const PROMOTION_POLL_MIN: Duration = Duration::from_millis(10);

/// Spread of that pause above its minimum: connections of several servers
/// polling one member do not ask in step.
const PROMOTION_POLL_SPREAD: Duration = Duration::from_millis(20);

/// How long after a switch the refill keeps trying to open the pool's
/// standing connections to the new primary: longer than Patroni takes to
/// promote a member it named (well under a second here; see
/// docs/replicated-database.md). Past it, the heartbeat's top-up
/// ([`super::Store::keep_standing`]) reopens them once a commit goes
/// through.
const REFILL_FOR: Duration = Duration::from_secs(5);

/// The Patroni members to follow and how often to ask them.
#[derive(Clone, Debug)]
pub struct FollowOptions {
    /// Every member's REST API.
    pub members: Vec<Member>,
    /// Period of the `/primary` probe rounds without a live etcd watch.
    pub interval: Duration,
    /// Timeout of one REST request (connecting included).
    pub request_timeout: Duration,
    /// etcd's client URLs, to watch Patroni's leader key (empty: REST
    /// probes only).
    pub etcd: Vec<Endpoint>,
    /// Patroni's key prefix in etcd: `<namespace><scope>/`.
    pub etcd_prefix: String,
    /// Period of the `/primary` probe rounds while the watch is live: a
    /// backstop, since the watch names every new leader first.
    pub backstop: Duration,
}

impl FollowOptions {
    /// Probes every 100 ms, 100 ms per request; no etcd watch.
    pub fn new(members: Vec<Member>) -> FollowOptions {
        FollowOptions {
            members,
            interval: Duration::from_millis(100),
            request_timeout: Duration::from_millis(100),
            etcd: Vec::new(),
            etcd_prefix: etcd::DEFAULT_PREFIX.to_string(),
            backstop: DEFAULT_BACKSTOP,
        }
    }
}

/// [`FollowOptions::backstop`] by default.
pub const DEFAULT_BACKSTOP: Duration = Duration::from_secs(1);

/// Where the follower learned of a primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LearnedFrom {
    /// The watch on Patroni's leader key in etcd.
    EtcdWatch,
    /// A `/primary` probe of Patroni's REST API.
    PatroniRest,
}

impl LearnedFrom {
    /// As logged and in metrics' labels.
    pub fn as_str(self) -> &'static str {
        match self {
            LearnedFrom::EtcdWatch => "etcd-watch",
            LearnedFrom::PatroniRest => "patroni-rest",
        }
    }
}

/// The primary the store sends its transactions to, as Patroni named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Primary {
    /// Where its PostgreSQL listens: the pool's target.
    pub address: PgAddress,
    /// The member whose REST API answered `/primary` with 200.
    pub member: Member,
    /// Its timeline, from that answer.
    pub timeline: Option<u64>,
    /// Where the follower learned of it.
    pub learned_from: LearnedFrom,
}

/// A switch of primary, for the log of the first commit after it.
#[derive(Debug)]
struct Switched {
    asked_at: Instant,
    at: Instant,
    address: PgAddress,
}

/// State shared by the store, the pool's hooks and the probe task.
#[derive(Debug)]
pub(super) struct Shared {
    epoch: std::time::Instant,
    /// Longest a new connection to the named primary waits for its
    /// promotion (the store's database deadline).
    promotion_wait: Duration,
    /// The last generation whose primary was seen turn read-write (its
    /// promotion logged once).
    writable_generation: AtomicU64,
    /// Bumped at every switch; connections carry the value they were
    /// opened for in [`GENERATION_SETTING`].
    generation: AtomicU64,
    /// When the last switch happened, in ns after `epoch` (0: never).
    switched_at_ns: AtomicU64,
    nudge: Notify,
    primary: watch::Sender<Option<Primary>>,
    /// Armed at a switch; the first commit on a connection taken after it
    /// logs how long the switch took end to end.
    awaiting_first_commit: AtomicBool,
    /// The last switch: when the new primary was asked, when the pool was
    /// pointed at it, and where.
    switched: Mutex<Option<Switched>>,
}

impl Shared {
    /// `promotion_wait`: see [`check_new_connection`].
    pub(super) fn new(promotion_wait: Duration) -> Shared {
        Shared {
            epoch: std::time::Instant::now(),
            promotion_wait,
            writable_generation: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            switched_at_ns: AtomicU64::new(0),
            nudge: Notify::new(),
            primary: watch::channel(None).0,
            awaiting_first_commit: AtomicBool::new(false),
            switched: Mutex::new(None),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether a pooled connection of this `age` was opened after the last
    /// switch (else it may lead to the old primary and must be closed).
    pub(super) fn opened_for_current(&self, age: Duration) -> bool {
        let switched = self.switched_at_ns.load(Ordering::Acquire);
        if switched == 0 {
            return true;
        }
        let age_ns = u64::try_from(age.as_nanos()).unwrap_or(u64::MAX);
        self.now_ns().saturating_sub(age_ns) >= switched
    }

    /// Asks for a probe round now (debounced by the task).
    pub(super) fn nudge(&self) {
        self.nudge.notify_one();
    }

    /// A call committed on a connection taken from the pool at
    /// `acquired_at`. The first one taken after a switch (so leading to the
    /// new primary: older ones are retired on acquire) logs it; a call
    /// still running on the old primary does not count.
    pub(super) fn committed(&self, acquired_at: Instant) {
        if !self.awaiting_first_commit.load(Ordering::Relaxed) {
            return;
        }
        let Ok(switched) = self.switched.lock() else {
            return;
        };
        let Some(switched) = switched.as_ref() else {
            return;
        };
        if acquired_at >= switched.at && self.awaiting_first_commit.swap(false, Ordering::AcqRel) {
            tracing::info!(
                primary = %switched.address,
                since_switch_ms = switched.at.elapsed().as_millis() as u64,
                since_named_ms = switched.asked_at.elapsed().as_millis() as u64,
                "first commit on the new primary"
            );
        }
    }

    pub(super) fn primary(&self) -> Option<Primary> {
        self.primary.borrow().clone()
    }

    pub(super) fn subscribe(&self) -> watch::Receiver<Option<Primary>> {
        self.primary.subscribe()
    }

    /// A connection for `generation` found its primary writable after
    /// `polls` read-only answers: the first one per switch logs how long
    /// after the switch the promotion ended.
    fn promoted(&self, generation: u64, polls: u32) {
        if self
            .writable_generation
            .fetch_max(generation, Ordering::AcqRel)
            >= generation
        {
            return;
        }
        let since_switch_ms = self
            .switched
            .lock()
            .ok()
            .and_then(|s| s.as_ref().map(|s| s.at.elapsed().as_millis() as u64));
        tracing::info!(
            generation,
            polls,
            since_switch_ms,
            "the new primary is writable: its promotion ended"
        );
    }
}

/// What a new connection's answer to [`CHECK_SQL`] means.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Read-write, and opened for the current target: hand it out.
    Usable,
    /// Read-only, opened for the primary Patroni names now: the member is
    /// still being promoted; ask again on this connection shortly.
    Promoting,
    /// Not to be used, and why.
    Refused(String),
}

/// Judges a new connection by its `transaction_read_only` and the
/// generation it was opened for, against the current one (`None`: not
/// following Patroni, so a read-only session is a standby and nothing
/// says it is being promoted).
fn judge(read_only: &str, opened_for: Option<&str>, current: Option<u64>) -> Verdict {
    if let Some(current) = current
        && opened_for != Some(current.to_string().as_str())
    {
        return Verdict::Refused(format!(
            "refusing a connection opened for an earlier primary \
             (generation {}, now {current})",
            opened_for.unwrap_or("none")
        ));
    }
    match (read_only, current) {
        ("off", _) => Verdict::Usable,
        (_, Some(_)) => Verdict::Promoting,
        (read_only, None) => Verdict::Refused(refused_read_only(read_only)),
    }
}

fn refused_read_only(read_only: &str) -> String {
    format!("refusing a read-only session (transaction_read_only = {read_only}): not the primary")
}

/// The pause before asking a still read-only new primary again: 10 ms
/// plus `spread` (in `[0, 1)`, drawn at random) of 20 ms more.
fn promotion_poll_pause(spread: f64) -> Duration {
    PROMOTION_POLL_MIN + PROMOTION_POLL_SPREAD.mul_f64(spread.clamp(0.0, 1.0))
}

/// Checks a new connection before the pool hands it out ([`judge`]): one
/// opened for an earlier target while following Patroni is refused, and
/// so is a read-only session (a standby, a demoted primary), except on
/// the primary Patroni names now, which may still be being promoted: that
/// connection asks again every [`promotion_poll_pause`] until its session
/// is read-write, for at most [`Shared::promotion_wait`] (the pool's
/// acquire timeout may end it sooner). One round trip per question,
/// simple-query protocol; on `Err` the pool drops the connection and
/// tries again until its acquire timeout, reading the connect options
/// afresh each time. Nothing is written on a read-only session.
pub(super) async fn check_new_connection(
    conn: &mut PgConnection,
    follow: Option<&Shared>,
) -> Result<(), sqlx::Error> {
    let started = Instant::now();
    let mut polls = 0u32;
    loop {
        let row = sqlx::raw_sql(CHECK_SQL).fetch_one(&mut *conn).await?;
        let read_only: String = row.try_get(0)?;
        let opened_for: Option<String> = row.try_get(1)?;
        let current = follow.map(|shared| shared.generation.load(Ordering::Acquire));
        let (shared, generation) = match judge(&read_only, opened_for.as_deref(), current) {
            Verdict::Usable => {
                if let (Some(shared), Some(generation), true) = (follow, current, polls > 0) {
                    shared.promoted(generation, polls);
                }
                return Ok(());
            }
            Verdict::Refused(why) => return Err(sqlx::Error::Protocol(why)),
            Verdict::Promoting => match (follow, current) {
                (Some(shared), Some(generation)) => (shared, generation),
                _ => return Err(sqlx::Error::Protocol(refused_read_only(&read_only))),
            },
        };
        let pause = promotion_poll_pause(rand::random());
        if started.elapsed() + pause > shared.promotion_wait {
            return Err(sqlx::Error::Protocol(format!(
                "{} after {} ms waiting for its promotion",
                refused_read_only(&read_only),
                started.elapsed().as_millis()
            )));
        }
        if polls == 0 {
            tracing::debug!(
                generation,
                "the new primary is still read-only; asking again until its promotion ends"
            );
        }
        polls += 1;
        tokio::time::sleep(pause).await;
    }
}

/// The running probe task; it stops when the store closes or the last
/// handle is dropped (the stopper with it).
#[derive(Debug)]
pub(super) struct Follower {
    pub(super) shared: Arc<Shared>,
    stopper: Stopper,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Follower {
    /// Starts the probe task (needs a Tokio runtime). `base` are the
    /// pool's connect options; the task replaces their host and port.
    /// `standing`: the connections the pool is refilled to after a switch.
    pub(super) fn start(
        opts: FollowOptions,
        pool: PgPool,
        base: PgConnectOptions,
        shared: Arc<Shared>,
        standing: u32,
    ) -> Follower {
        let probe = Probe {
            opts,
            pool,
            base,
            standing,
            shared: shared.clone(),
            last_confirmed: None,
            watch_up: false,
        };
        let (stopper, stop) = borbaman_shutdown::channel();
        Follower {
            shared,
            stopper,
            task: Mutex::new(Some(tokio::spawn(probe.run(stop)))),
        }
    }

    /// Stops the probe task and waits until it ended.
    pub(super) async fn stop(&self) {
        self.stopper.stop();
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// The primary named by Patroni, waiting up to `timeout` for the first
    /// answer.
    pub(super) async fn wait_primary(&self, timeout: Duration) -> Option<Primary> {
        let mut rx = self.shared.subscribe();
        let named = tokio::time::timeout(timeout, rx.wait_for(|p| p.is_some())).await;
        match named {
            Ok(Ok(primary)) => primary.clone(),
            _ => None,
        }
    }
}

/// The probe loop's own state.
struct Probe {
    opts: FollowOptions,
    pool: PgPool,
    base: PgConnectOptions,
    /// The pool's standing connections, refilled after a switch.
    standing: u32,
    shared: Arc<Shared>,
    /// When the followed member was last confirmed (by a `/primary` 200
    /// or by the watch).
    last_confirmed: Option<Instant>,
    /// Whether the etcd watch is established.
    watch_up: bool,
}

/// What the watch task tells the probe loop.
#[derive(Debug)]
enum WatchNews {
    /// Watching from a fresh read of every key.
    Up,
    /// The watch broke; retrying on another etcd member.
    Down(String),
    /// The lock holder (or why none can be followed) after a change.
    Leader(Result<DcsLeader, String>),
}

/// What to do with a primary one of the sources names.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Already followed: note that it was confirmed.
    Confirm,
    /// The pool already points there (the URL's guess, or a first
    /// answer): name it without retiring connections.
    Name,
    /// Point the pool there and retire every connection to the old one.
    Switch,
    /// Not taken (see [`rest_may_move`]).
    Ignore,
}

/// Decides what a named primary changes. `target` is where the pool's
/// connections go now; `trusted` whether the source may move the pool.
fn step(current: Option<&Primary>, named: &Primary, target: &PgAddress, trusted: bool) -> Step {
    match current {
        Some(current) if current.address == named.address => Step::Confirm,
        _ if !trusted => Step::Ignore,
        _ if *target == named.address => Step::Name,
        _ => Step::Switch,
    }
}

/// Whether a `/primary` probe may move the pool. Without a live watch,
/// always. With one, only to a newer timeline than the followed one: the
/// watch names each lock holder when etcd commits it, while a probe
/// during a handover may catch the old leader's last 200; a strictly
/// newer timeline is a promotion the watch missed (a frozen etcd member).
fn rest_may_move(watch_up: bool, current: Option<&Primary>, timeline: Option<u64>) -> bool {
    if !watch_up {
        return true;
    }
    match current {
        None => true,
        Some(current) => {
            matches!((current.timeline, timeline), (Some(old), Some(new)) if new > old)
        }
    }
}

/// How long the watch task waits before trying the next etcd member:
/// briefly after one failure, longer once every member failed in a row.
fn watch_retry_delay(failures_in_a_row: usize, members: usize) -> Duration {
    if failures_in_a_row > 0 && failures_in_a_row.is_multiple_of(members.max(1)) {
        Duration::from_millis(500)
    } else {
        Duration::from_millis(20)
    }
}

impl Probe {
    async fn run(mut self, mut stop: Shutdown) {
        let mut tasks = JoinSet::new();
        let (tx, mut news) = mpsc::channel(16);
        let mut watching = !self.opts.etcd.is_empty();
        if watching {
            tasks.spawn(watch_leader(
                self.opts.etcd.clone(),
                self.opts.etcd_prefix.clone(),
                self.opts.request_timeout.max(WATCH_REQUEST_TIMEOUT),
                tx,
            ));
        } else {
            drop(tx);
        }
        // The watch task is aborted with this loop (`tasks` is dropped),
        // which ends at once when stopped.
        // A probe round runs beside the watch, never in its way: what the
        // watch says is acted on while a round waits for a slow member.
        let mut round: Option<Pin<Box<dyn Future<Output = RoundOutcome> + Send>>> = None;
        let mut last_started = Instant::now();
        let mut next_round = last_started;
        let mut nudged = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next_round), if round.is_none() => {
                    last_started = Instant::now();
                    nudged = false;
                    round = Some(Box::pin(ask_members(
                        self.opts.members.clone(),
                        self.opts.request_timeout,
                        self.shared.primary(),
                        self.watch_up,
                    )));
                }
                outcome = async { round.as_mut().expect("guarded").await }, if round.is_some() => {
                    round = None;
                    self.settle(outcome);
                    next_round = last_started
                        + if nudged { MIN_ROUND_GAP } else { self.round_period() };
                }
                // Errors left a permit: one more round (at least
                // MIN_ROUND_GAP after the last began), however many calls
                // failed.
                _ = self.shared.nudge.notified() => {
                    nudged = true;
                    next_round = next_round.min(last_started + MIN_ROUND_GAP);
                }
                heard = news.recv(), if watching => match heard {
                    Some(news) => self.hear(news),
                    // The watch task ended (it does not, short of a
                    // panic): the probes carry on alone.
                    None => {
                        watching = false;
                        self.watch_up = false;
                    }
                },
                _ = stop.recv() => return,
            }
        }
    }

    fn round_period(&self) -> Duration {
        if self.watch_up {
            self.opts.backstop.max(self.opts.interval)
        } else {
            self.opts.interval
        }
    }

    /// Acts on what the watch saw.
    fn hear(&mut self, news: WatchNews) {
        match news {
            WatchNews::Up => {
                if !self.watch_up {
                    tracing::info!("watching Patroni's leader key in etcd");
                }
                self.watch_up = true;
            }
            WatchNews::Down(why) => {
                if self.watch_up {
                    tracing::warn!(error = %why, "the etcd watch broke; probing Patroni's REST API meanwhile");
                }
                self.watch_up = false;
            }
            WatchNews::Leader(Err(why)) => {
                tracing::debug!(why, "etcd names no leader to follow");
            }
            WatchNews::Leader(Ok(leader)) => {
                let primary = Primary {
                    address: leader.address,
                    member: leader.member,
                    timeline: leader.timeline,
                    learned_from: LearnedFrom::EtcdWatch,
                };
                self.adopt(primary, Instant::now(), true);
            }
        }
    }

    /// Acts on a probe round's outcome.
    fn settle(&mut self, outcome: RoundOutcome) {
        match outcome {
            RoundOutcome::Nothing => {}
            RoundOutcome::Confirmed => self.last_confirmed = Some(Instant::now()),
            RoundOutcome::Named { primary, asked_at } => {
                // The watch may have moved the pool during the round.
                let trusted = rest_may_move(
                    self.watch_up,
                    self.shared.primary().as_ref(),
                    primary.timeline,
                );
                self.adopt(primary, asked_at, trusted);
            }
        }
    }

    /// Follows `primary` as [`step`] decides.
    fn adopt(&mut self, primary: Primary, asked_at: Instant, trusted: bool) {
        let current = self.shared.primary();
        let target = self.pool.connect_options();
        let target = PgAddress {
            host: target.get_host().to_string(),
            port: target.get_port(),
        };
        match step(current.as_ref(), &primary, &target, trusted) {
            Step::Ignore => {}
            Step::Confirm => {
                self.last_confirmed = Some(Instant::now());
                // A promotion ends in a new timeline: keep the newest.
                if let Some(current) = current
                    && primary.timeline > current.timeline
                {
                    self.shared.primary.send_replace(Some(Primary {
                        timeline: primary.timeline,
                        ..current
                    }));
                }
            }
            Step::Name => {
                tracing::info!(
                    primary = %primary.address,
                    member = %primary.member,
                    timeline = ?primary.timeline,
                    learned_from = primary.learned_from.as_str(),
                    "primary named by Patroni"
                );
                self.shared.primary.send_replace(Some(primary));
                self.last_confirmed = Some(Instant::now());
            }
            Step::Switch => {
                self.switch(primary, asked_at, current);
                self.last_confirmed = Some(Instant::now());
            }
        }
    }

    /// Points the pool at `primary` and retires connections to the old one.
    fn switch(&self, primary: Primary, asked_at: Instant, old: Option<Primary>) {
        let shared = &self.shared;
        // Order matters: a connect racing the switch either read the old
        // options (its generation is now stale: refused) or the new ones.
        let generation = shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
        shared
            .switched_at_ns
            .store(shared.now_ns().max(1), Ordering::Release);
        self.pool.set_connect_options(
            self.base
                .clone()
                .host(&primary.address.host)
                .port(primary.address.port)
                .options([(GENERATION_SETTING, generation)]),
        );
        let now = Instant::now();
        if let Ok(mut switched) = shared.switched.lock() {
            *switched = Some(Switched {
                asked_at,
                at: now,
                address: primary.address.clone(),
            });
        }
        shared.awaiting_first_commit.store(true, Ordering::Release);
        let from = old.as_ref().map_or_else(
            || "(the database URL's guess)".to_string(),
            |p| p.address.to_string(),
        );
        tracing::info!(
            %from,
            to = %primary.address,
            member = %primary.member,
            timeline = ?primary.timeline,
            learned_from = primary.learned_from.as_str(),
            generation,
            switch_ms = (now - asked_at).as_secs_f64() * 1e3,
            without_primary_ms = self.last_confirmed_before(asked_at),
            "following the new primary"
        );
        shared.primary.send_replace(Some(primary));
        tokio::spawn(refill(
            self.pool.clone(),
            self.shared.clone(),
            generation,
            self.standing,
        ));
    }

    /// How long the old primary had gone unconfirmed when the new one was
    /// first asked (None: no primary was confirmed before).
    fn last_confirmed_before(&self, asked_at: Instant) -> Option<u64> {
        self.last_confirmed
            .map(|at| asked_at.saturating_duration_since(at).as_millis() as u64)
    }
}

/// What one probe round found.
enum RoundOutcome {
    /// No member named one primary (or the one named was not taken).
    Nothing,
    /// The followed member still holds the lock.
    Confirmed,
    /// Another member holds it, and this is where its PostgreSQL is.
    Named { primary: Primary, asked_at: Instant },
}

/// One probe round: asks every member's `/primary` at once and, if
/// another member than `current`'s holds the lock (and a REST answer may
/// move the pool: [`rest_may_move`]), its `/cluster` for its address.
async fn ask_members(
    members: Vec<Member>,
    timeout: Duration,
    current: Option<Primary>,
    watch_up: bool,
) -> RoundOutcome {
    let asked_at = Instant::now();
    let mut asking = JoinSet::new();
    for member in members {
        asking.spawn(async move {
            let answer = patroni::ask_primary(&member, timeout).await;
            (member, answer)
        });
    }
    let mut leaders = Vec::new();
    while let Some(joined) = asking.join_next().await {
        let Ok((member, answer)) = joined else {
            continue;
        };
        match answer {
            Ok(Some(status)) => {
                let newcomer = current.as_ref().is_none_or(|p| p.member != member);
                leaders.push((member, status));
                // Another member holds the lock: act now rather than
                // wait for a slow member (a dead PostgreSQL can make
                // its Patroni answer late) to time out.
                if newcomer {
                    break;
                }
            }
            Ok(None) => {}
            Err(err) => tracing::debug!(%member, error = %err, "Patroni member did not answer"),
        }
    }
    drop(asking);
    tracing::trace!(
        elapsed_ms = asked_at.elapsed().as_secs_f64() * 1e3,
        leaders = ?leaders.iter().map(|(m, _)| m.to_string()).collect::<Vec<_>>(),
        "probe round"
    );
    let Some((member, status)) = choose(leaders, current.as_ref().map(|p| &p.member)) else {
        return RoundOutcome::Nothing;
    };
    if current.as_ref().is_some_and(|c| c.member == member) {
        return RoundOutcome::Confirmed;
    }
    if !rest_may_move(watch_up, current.as_ref(), status.timeline) {
        tracing::debug!(%member, timeline = ?status.timeline, "a /primary answer the etcd watch does not confirm; ignored");
        return RoundOutcome::Nothing;
    }
    match patroni::leader_address(&member, timeout).await {
        Ok(address) => RoundOutcome::Named {
            primary: Primary {
                address,
                member,
                timeline: status.timeline,
                learned_from: LearnedFrom::PatroniRest,
            },
            asked_at,
        },
        Err(err) => {
            tracing::warn!(%member, error = %err, "the new leader did not give its address");
            RoundOutcome::Nothing
        }
    }
}

/// The watch task: reads Patroni's keys from one etcd member, watches
/// them from there on (over one gRPC connection, see [`crate::etcd`]), and
/// reports each leader change; on any failure it moves on to the next
/// member. Ends when the probe loop is gone.
async fn watch_leader(
    endpoints: Vec<Endpoint>,
    prefix: String,
    timeout: Duration,
    tx: mpsc::Sender<WatchNews>,
) {
    let mut failures = 0usize;
    for endpoint in endpoints.iter().cycle() {
        let (err, was_up) = watch_once(endpoint, &prefix, timeout, &tx).await;
        if tx.is_closed() {
            return;
        }
        failures = if was_up { 1 } else { failures + 1 };
        tracing::debug!(%endpoint, error = %err, "etcd watch");
        if tx
            .send(WatchNews::Down(format!("{endpoint}: {err}")))
            .await
            .is_err()
        {
            return;
        }
        tokio::time::sleep(watch_retry_delay(failures, endpoints.len())).await;
    }
}

/// One watch on one member, until it breaks: the error, and whether it
/// was established.
async fn watch_once(
    endpoint: &Endpoint,
    prefix: &str,
    timeout: Duration,
    tx: &mpsc::Sender<WatchNews>,
) -> (etcd::EtcdError, bool) {
    let mut client = match etcd::connect(endpoint, timeout).await {
        Ok(client) => client,
        Err(err) => return (err, false),
    };
    let (revision, changes) = match etcd::range(&mut client, prefix, timeout).await {
        Ok(read) => read,
        Err(err) => return (err, false),
    };
    let mut keys = ClusterKeys::default();
    for change in &changes {
        keys.apply(change);
    }
    let mut watch = match etcd::Watch::start(&mut client, prefix, revision + 1, timeout).await {
        Ok(watch) => watch,
        Err(err) => return (err, false),
    };
    if tx.send(WatchNews::Up).await.is_err()
        || tx.send(WatchNews::Leader(keys.leader())).await.is_err()
    {
        return (etcd::EtcdError::Ended, true);
    }
    loop {
        let changes = match watch.next().await {
            Ok(changes) => changes,
            Err(err) => return (err, true),
        };
        let mut touched = false;
        for change in &changes {
            touched |= keys.apply(change);
        }
        if touched && tx.send(WatchNews::Leader(keys.leader())).await.is_err() {
            return (etcd::EtcdError::Ended, true);
        }
    }
}

/// Which of the members that answered `/primary` with 200 to follow: the
/// one with the highest timeline (a promotion starts a new one), the
/// current one on a tie, none if still ambiguous (two leaders for a moment
/// during a lock handover: the next round decides).
fn choose(
    mut leaders: Vec<(Member, MemberStatus)>,
    current: Option<&Member>,
) -> Option<(Member, MemberStatus)> {
    let top = leaders.iter().map(|(_, s)| s.timeline).max()?;
    leaders.retain(|(_, s)| s.timeline == top);
    if leaders.len() == 1 {
        return leaders.pop();
    }
    let names: Vec<String> = leaders.iter().map(|(m, _)| m.to_string()).collect();
    let kept = leaders.into_iter().find(|(m, _)| Some(m) == current);
    if kept.is_none() {
        tracing::debug!(members = ?names, "several members answer /primary; waiting");
    }
    kept
}

/// Opens the pool's `wanted` standing connections to the new primary of
/// `generation` at once: each acquire closes idle connections to the old
/// one (`before_acquire`) until it opens a new one, which waits for the
/// promotion ([`check_new_connection`]). Held together, then returned.
/// If an acquire fails (the promotion outlasted the acquire timeout), the
/// ones held go back to the calls and it starts again after a
/// [`promotion_poll_pause`], until the primary moves again or
/// [`REFILL_FOR`] has passed.
async fn refill(pool: PgPool, shared: Arc<Shared>, generation: u64, wanted: u32) {
    let until = Instant::now() + REFILL_FOR;
    loop {
        let mut held = Vec::with_capacity(wanted as usize);
        let mut failed = None;
        while held.len() < wanted as usize {
            match pool.acquire().await {
                Ok(conn) => held.push(conn),
                Err(err) => {
                    failed = Some(err);
                    break;
                }
            }
        }
        drop(held);
        let Some(err) = failed else {
            return;
        };
        let pause = promotion_poll_pause(rand::random());
        let moved = shared.generation.load(Ordering::Acquire) != generation;
        if moved || pool.is_closed() || Instant::now() + pause >= until {
            tracing::debug!(error = %err, moved, "refilling the pool after a switch: given up");
            return;
        }
        tracing::debug!(error = %err, "refilling the pool after a switch; trying again");
        tokio::time::sleep(pause).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(port: u16) -> Member {
        format!("http://127.0.0.1:{port}").parse().unwrap()
    }

    fn leader(port: u16, timeline: Option<u64>) -> (Member, MemberStatus) {
        (
            member(port),
            MemberStatus {
                state: Some("running".into()),
                role: Some("master".into()),
                timeline,
            },
        )
    }

    #[test]
    fn new_connections_are_asked_for_the_generation_they_carry() {
        assert!(CHECK_SQL.contains(&format!("'{GENERATION_SETTING}'")));
    }

    #[test]
    fn a_read_only_session_is_waited_on_only_on_the_primary_named_now() {
        // Read-write, for the current target (or not following): usable.
        assert_eq!(judge("off", Some("3"), Some(3)), Verdict::Usable);
        assert_eq!(judge("off", None, None), Verdict::Usable);
        // The named primary, still read-only: being promoted.
        assert_eq!(judge("on", Some("3"), Some(3)), Verdict::Promoting);
        // Not following: a read-only session is a standby, refused.
        assert!(
            matches!(judge("on", None, None), Verdict::Refused(why) if why.contains("read-only"))
        );
        // Opened for an earlier primary: refused, writable or not.
        for read_only in ["on", "off"] {
            assert!(matches!(
                judge(read_only, Some("2"), Some(3)),
                Verdict::Refused(why) if why.contains("earlier primary")
            ));
        }
        assert!(matches!(judge("off", None, Some(3)), Verdict::Refused(_)));
    }

    #[test]
    fn a_promotion_is_asked_after_again_within_tens_of_milliseconds_jittered() {
        assert_eq!(promotion_poll_pause(0.0), Duration::from_millis(10));
        assert_eq!(promotion_poll_pause(0.5), Duration::from_millis(20));
        assert_eq!(promotion_poll_pause(1.0), Duration::from_millis(30));
        assert_eq!(promotion_poll_pause(7.0), Duration::from_millis(30));
        let pauses: std::collections::HashSet<Duration> = (0..20)
            .map(|_| promotion_poll_pause(rand::random()))
            .collect();
        assert!(pauses.len() > 1, "the pauses are drawn at random");
    }

    #[test]
    fn the_single_leader_is_followed() {
        assert_eq!(choose(vec![], None), None);
        let (m, _) = choose(vec![leader(1, Some(3))], Some(&member(2))).unwrap();
        assert_eq!(m, member(1));
    }

    #[test]
    fn of_two_leaders_the_newer_timeline_wins_else_the_current_one_stays() {
        let two = vec![leader(1, Some(3)), leader(2, Some(4))];
        assert_eq!(choose(two, Some(&member(1))).unwrap().0, member(2));
        let tie = vec![leader(1, Some(4)), leader(2, Some(4))];
        assert_eq!(choose(tie.clone(), Some(&member(2))).unwrap().0, member(2));
        assert_eq!(choose(tie, Some(&member(3))), None);
        let unknown = vec![leader(1, None), leader(2, Some(1))];
        assert_eq!(choose(unknown, None).unwrap().0, member(2));
    }

    fn primary(port: u16, timeline: Option<u64>, learned_from: LearnedFrom) -> Primary {
        Primary {
            address: PgAddress {
                host: "127.0.0.1".into(),
                port,
            },
            member: member(port + 1000),
            timeline,
            learned_from,
        }
    }

    #[test]
    fn a_named_primary_is_confirmed_named_or_switched_to() {
        let a = primary(5001, Some(1), LearnedFrom::PatroniRest);
        let b = primary(5002, Some(1), LearnedFrom::EtcdWatch);
        // Already followed (whichever source says so): confirmed.
        assert_eq!(step(Some(&a), &a, &a.address, true), Step::Confirm);
        assert_eq!(step(Some(&a), &a, &a.address, false), Step::Confirm);
        // The first answer, where the pool already points: named only.
        assert_eq!(step(None, &a, &a.address, true), Step::Name);
        // Elsewhere: the pool moves and old connections go.
        assert_eq!(step(None, &b, &a.address, true), Step::Switch);
        assert_eq!(step(Some(&a), &b, &a.address, true), Step::Switch);
        // An untrusted source moves nothing.
        assert_eq!(step(Some(&a), &b, &a.address, false), Step::Ignore);
    }

    #[test]
    fn with_a_live_watch_a_probe_moves_the_pool_only_to_a_newer_timeline() {
        let followed = primary(5002, Some(4), LearnedFrom::EtcdWatch);
        // No watch: the probes decide, as before.
        assert!(rest_may_move(false, Some(&followed), Some(4)));
        assert!(rest_may_move(false, Some(&followed), None));
        // The old leader's last 200 during a handover: not followed back.
        assert!(!rest_may_move(true, Some(&followed), Some(4)));
        assert!(!rest_may_move(true, Some(&followed), Some(3)));
        assert!(!rest_may_move(true, Some(&followed), None));
        // A promotion the watch missed.
        assert!(rest_may_move(true, Some(&followed), Some(5)));
        // Nothing followed yet: the first answer counts.
        assert!(rest_may_move(true, None, None));
        let unknown = primary(5002, None, LearnedFrom::EtcdWatch);
        assert!(!rest_may_move(true, Some(&unknown), Some(9)));
    }

    #[test]
    fn a_broken_watch_moves_on_at_once_and_rests_after_every_member_failed() {
        assert_eq!(watch_retry_delay(1, 3), Duration::from_millis(20));
        assert_eq!(watch_retry_delay(2, 3), Duration::from_millis(20));
        assert_eq!(watch_retry_delay(3, 3), Duration::from_millis(500));
        assert_eq!(watch_retry_delay(4, 3), Duration::from_millis(20));
        assert_eq!(watch_retry_delay(1, 1), Duration::from_millis(500));
    }

    #[test]
    fn connections_older_than_the_switch_are_retired() {
        let shared = Shared::new(Duration::from_millis(500));
        assert!(shared.opened_for_current(Duration::from_secs(3600)));
        std::thread::sleep(Duration::from_millis(20));
        shared
            .switched_at_ns
            .store(shared.now_ns(), Ordering::Release);
        assert!(!shared.opened_for_current(Duration::from_millis(10)));
        assert!(!shared.opened_for_current(Duration::from_secs(3600)));
        std::thread::sleep(Duration::from_millis(20));
        assert!(shared.opened_for_current(Duration::from_millis(5)));
    }

    /// A stand-in for one member's Patroni REST API: `/primary` and
    /// `/cluster` as Patroni 3.0.2 answers them, or no answer at all once
    /// it "dies".
    struct FakePatroni {
        member: Member,
        leader: AtomicBool,
        alive: AtomicBool,
        timeline: AtomicU64,
        /// The PostgreSQL port `/cluster` gives for the leader.
        leader_port: AtomicU64,
    }

    impl FakePatroni {
        async fn start(leader: bool, leader_port: u16, timeline: u64) -> Arc<FakePatroni> {
            use hyper::server::conn::http1;
            use hyper::service::service_fn;
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let fake = Arc::new(FakePatroni {
                member: format!("http://{}", listener.local_addr().unwrap())
                    .parse()
                    .unwrap(),
                leader: AtomicBool::new(leader),
                alive: AtomicBool::new(true),
                timeline: AtomicU64::new(timeline),
                leader_port: AtomicU64::new(u64::from(leader_port)),
            });
            let serving = fake.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    if !serving.alive.load(Ordering::SeqCst) {
                        continue; // dropped unanswered
                    }
                    let fake = serving.clone();
                    tokio::spawn(async move {
                        let service = service_fn(move |req: hyper::Request<_>| {
                            let reply = fake.reply(req.uri().path());
                            async move { Ok::<_, std::convert::Infallible>(reply) }
                        });
                        let io = hyper_util::rt::TokioIo::new(stream);
                        let _ = http1::Builder::new().serve_connection(io, service).await;
                    });
                }
            });
            fake
        }

        fn reply(&self, path: &str) -> hyper::Response<http_body_util::Full<hyper::body::Bytes>> {
            let timeline = self.timeline.load(Ordering::SeqCst);
            let (status, body) = match path {
                "/primary" if self.leader.load(Ordering::SeqCst) => (
                    200,
                    format!(r#"{{"state": "running", "role": "master", "timeline": {timeline}}}"#),
                ),
                "/primary" => (
                    503,
                    format!(r#"{{"state": "running", "role": "replica", "timeline": {timeline}}}"#),
                ),
                "/cluster" => (
                    200,
                    format!(
                        r#"{{"members": [{{"name": "pg1", "role": "leader", "state": "running", "host": "127.0.0.1", "port": {}, "timeline": {timeline}}}]}}"#,
                        self.leader_port.load(Ordering::SeqCst)
                    ),
                ),
                _ => (404, String::new()),
            };
            hyper::Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(body.into())
                .unwrap()
        }
    }

    async fn wait_for_primary(store: &super::super::Store, port: u16) -> Primary {
        let mut updates = store.watch_primary().expect("following");
        let named = updates.wait_for(|p| p.as_ref().is_some_and(|p| p.address.port == port));
        tokio::time::timeout(Duration::from_secs(5), named)
            .await
            .expect("the store follows the member Patroni names")
            .unwrap()
            .clone()
            .unwrap()
    }

    /// The port of the server a connection from the store's pool leads to.
    async fn server_port(conn: &mut PgConnection) -> u16 {
        let port: i32 = sqlx::query_scalar("SELECT inet_server_port()")
            .fetch_one(conn)
            .await
            .unwrap();
        port as u16
    }

    /// Makes every session of `db` read-only, as on a standby, or
    /// read-write again, as at the end of a promotion: open sessions see
    /// it from their next statement on.
    async fn set_read_only(db: &mut PgConnection, read_only: bool) {
        let set = if read_only {
            "ALTER SYSTEM SET default_transaction_read_only = on"
        } else {
            "ALTER SYSTEM RESET default_transaction_read_only"
        };
        sqlx::raw_sql(set).execute(&mut *db).await.unwrap();
        sqlx::raw_sql("SELECT pg_reload_conf()")
            .execute(&mut *db)
            .await
            .unwrap();
    }

    /// Calls until one succeeds or `within` passes: when the first did.
    async fn first_success(store: &super::super::Store, within: Duration) -> Option<Instant> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if store.rankings(5).await.is_ok() {
                return Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    }

    /// A host loss as the servers see it: the primary is gone (here it
    /// stops; connecting to it is refused) while calls keep failing on it
    /// for 3 s, the lease Patroni waits out; then another member is named
    /// and stays read-only for 300 ms, its promotion. No call is served by
    /// it while it is read-only, and the first one is within tens of
    /// milliseconds of it turning read-write: nothing the outage set going
    /// (a connect backoff grown to seconds, holding the pool's places)
    /// stands in between.
    #[tokio::test]
    async fn after_a_host_loss_the_new_primary_serves_as_soon_as_its_promotion_ends() {
        use super::super::{Store, StoreOptions};
        use borbaman_cluster::{LocalPostgres, PgOptions};
        use sqlx::Connection;
        let opts = PgOptions {
            fsync: false,
            port: None,
        };
        let mut a = LocalPostgres::start_temp(opts).unwrap();
        let b = LocalPostgres::start_temp(opts).unwrap();
        for db in [&a, &b] {
            let plain = Store::connect(&db.url(), &StoreOptions::default()).unwrap();
            plain.migrate().await.unwrap();
            plain.close().await;
        }
        let mut admin = PgConnection::connect(&b.url()).await.unwrap();
        set_read_only(&mut admin, true).await;
        let m1 = FakePatroni::start(true, a.port(), 1).await;
        let m2 = FakePatroni::start(false, a.port(), 1).await;
        let store = Store::connect(
            &a.url(),
            &StoreOptions {
                min_connections: 3,
                max_connections: 3,
                follow: Some(FollowOptions {
                    interval: Duration::from_millis(50),
                    ..FollowOptions::new(vec![m1.member.clone(), m2.member.clone()])
                }),
                ..StoreOptions::default()
            },
        )
        .unwrap();
        wait_for_primary(&store, a.port()).await;
        store.warm_up().await.unwrap();
        store.rankings(5).await.unwrap();

        // The host is lost: its PostgreSQL and its Patroni.
        a.stop().unwrap();
        m1.alive.store(false, Ordering::SeqCst);
        let lease = Instant::now() + Duration::from_secs(3);
        while Instant::now() < lease {
            assert!(
                store.rankings(5).await.is_err(),
                "served by a stopped server"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // m2 takes the lock; its PostgreSQL is read-only for 300 ms more.
        m2.leader_port.store(u64::from(b.port()), Ordering::SeqCst);
        m2.timeline.store(2, Ordering::SeqCst);
        m2.leader.store(true, Ordering::SeqCst);
        wait_for_primary(&store, b.port()).await;
        assert_eq!(
            first_success(&store, Duration::from_millis(300)).await,
            None,
            "a call was served by a member still read-only"
        );
        set_read_only(&mut admin, false).await;
        let promoted = Instant::now();
        let served = first_success(&store, Duration::from_secs(10))
            .await
            .expect("the new primary serves calls once it is read-write");
        let after = served - promoted;
        assert!(
            after < Duration::from_millis(300),
            "the first call was served {after:?} after the promotion ended"
        );
        store.close().await;
    }

    /// Two read-write PostgreSQL servers stand in for an old and a new
    /// primary: the store goes where Patroni says, not where the URL
    /// points, and leaves the old one (still read-write, like an orphaned
    /// primary whose Patroni died) for good.
    #[tokio::test]
    async fn the_store_follows_the_primary_patroni_names_and_leaves_the_old_one() {
        use super::super::{Store, StoreOptions};
        use borbaman_cluster::{LocalPostgres, PgOptions};
        use sqlx::Connection;
        let opts = PgOptions {
            fsync: false,
            port: None,
        };
        let a = LocalPostgres::start_temp(opts).unwrap();
        let b = LocalPostgres::start_temp(opts).unwrap();
        for db in [&a, &b] {
            let plain = Store::connect(&db.url(), &StoreOptions::default()).unwrap();
            plain.migrate().await.unwrap();
            plain.close().await;
        }
        let m1 = FakePatroni::start(true, b.port(), 1).await;
        let m2 = FakePatroni::start(false, b.port(), 1).await;
        let store = Store::connect(
            &a.url(),
            &StoreOptions {
                min_connections: 3,
                // Five are held at once below, beside the one to the old
                // primary that is being closed.
                max_connections: 8,
                follow: Some(FollowOptions {
                    interval: Duration::from_millis(50),
                    ..FollowOptions::new(vec![m1.member.clone(), m2.member.clone()])
                }),
                ..StoreOptions::default()
            },
        )
        .unwrap();

        // The URL guesses a; Patroni names b.
        let primary = wait_for_primary(&store, b.port()).await;
        assert_eq!(primary.member, m1.member);
        assert_eq!(primary.timeline, Some(1));
        assert_eq!(store.primary(), Some(primary));
        store.migrate().await.unwrap();
        store.warm_up().await.unwrap();
        store.rankings(5).await.unwrap();
        let mut conn = store.pool().acquire().await.unwrap();
        assert_eq!(server_port(&mut conn).await, b.port());

        // b's Patroni dies (b itself stays up and read-write); m2 is
        // promoted and names a. A connection to b that is busy across the
        // switch is closed when it comes back, not reused.
        m1.alive.store(false, Ordering::SeqCst);
        m2.leader_port.store(u64::from(a.port()), Ordering::SeqCst);
        m2.timeline.store(2, Ordering::SeqCst);
        m2.leader.store(true, Ordering::SeqCst);
        let primary = wait_for_primary(&store, a.port()).await;
        assert_eq!(primary.member, m2.member);
        assert_eq!(primary.timeline, Some(2));
        drop(conn);
        let mut held = Vec::new();
        for _ in 0..5 {
            let mut conn = store.pool().acquire().await.unwrap();
            assert_eq!(
                server_port(&mut conn).await,
                a.port(),
                "a connection to the old primary was used"
            );
            held.push(conn);
        }
        drop(held);
        store.rankings(5).await.unwrap();

        // No connection of the store to b is left open.
        let mut watcher = PgConnection::connect(&b.url()).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let left: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'borbaman-server'",
            )
            .fetch_one(&mut watcher)
            .await
            .unwrap();
            if left == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{left} connections to the old primary stay open"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        store.close().await;
    }
}
