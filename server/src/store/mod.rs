//! The store: the only module that speaks SQL.
//!
//! A game server holds nothing between calls; every call is a read and at
//! most one write against PostgreSQL (a compare-and-set, see [`play`]; a
//! join that seats a player is one short transaction). [`Store`] is a
//! cheap-to-clone handle on a connection pool that runs them with a
//! deadline: a call that cannot finish in time (database down, stalled, or
//! locked) fails with [`Error::Unavailable`] instead of hanging; a
//! compare-and-set that lost to another call reads and writes again at once
//! (counted, see [`Store::cas_retries`]; calls on one game through one
//! server take turns instead, see [`gates`]); and conflicts (serialization
//! failures, deadlocks, lock timeouts, connections closed by a database
//! restart) are retried inside the deadline with a small backoff. Every
//! mutating call is idempotent (sessions remember their last sequence
//! number), so a retry after an unknown commit outcome is safe.
//!
//! A call that cannot finish by its deadline may have left its connection
//! inside a statement that never returns, typically a `COMMIT` waiting for
//! a synchronous standby that is gone. Such a connection is dropped, never
//! returned to the pool (sqlx would ping it on return, and the ping would
//! wait behind the `COMMIT`) and never cancelled: a cancel request during
//! the synchronous-replication wait makes PostgreSQL report the commit as
//! done although no standby may have it, and `statement_timeout` does not
//! end that wait. The call's outcome is then unknown, which the retry by
//! sequence number resolves.
//!
//! Every new connection must be read-write (a standby is never used).
//! With [`StoreOptions::follow`] the store also follows the primary that
//! Patroni names ([`follow`]).
//!
//! While following Patroni the store keeps its `min_connections` open
//! itself ([`Store::warm_up`], [`Store::keep_standing`], and the refill
//! after a switch of primary), not through sqlx's own upkeep of a pool's
//! minimum: that upkeep runs whenever the pool loses a connection, retries
//! a refused connect (or a new connection refused as read-only) for up to
//! 300 s with a pause that doubles from 10 ms up to a minute, and holds one
//! of the pool's places all the while. After a host loss every place was
//! held that way, asleep for seconds, while the calls waited for a place
//! and the new primary was long writable.
//!
//! - [`play`]: join, act, leave, state and rankings.
//! - [`servers`]: the registry of live servers.
//! - [`spectate`]: any game by its id, and the live games, for spectators.
//! - [`audit`]: invariant checks and the bare-transaction floor, for bench
//!   and chaos runs.
//! - [`follow`]: following a Patroni-managed primary.
//! - [`names`]: who holds which name.
//! - [`keys`]: the cluster's key for session tokens.
//! - [`retention`]: deleting old finished and abandoned games, on one
//!   server at a time.
//! - [`grow`]: adding a cluster and planning the moves that fill it.

pub mod audit;
mod census;
pub mod follow;
mod gates;
pub mod grow;
pub mod keys;
pub mod mover;
mod moves;
pub mod names;
pub mod partitions;
pub mod play;
mod queries;
pub mod replay;
pub mod retention;
pub mod servers;
pub mod spectate;
pub mod standing;
mod tuning;

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sqlx::Connection;
use sqlx::Postgres;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use tokio::sync::watch;
use tokio::time::Instant;

use borbaman_game::{ROUND_TICKS, TICK_MS};

use crate::error::Error;
use crate::metrics::{self, Metrics};
use follow::{Follower, Shared};
use tuning::*;

pub use census::{Census, ClusterCensus};
pub use follow::{FollowOptions, LearnedFrom, Primary};
pub use play::{
    ActCall, Acted, Identity, Input, Joined, LeaveCall, Left, Ranking, Roster, Snapshot,
};
pub use servers::LiveServer;
pub use tuning::{DEFAULT_NAME_HOLD, DEFAULT_WARM_UP_PACE};

/// Schema migrations, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// How the store talks to the database.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Deadline of one call, retries included; also the connections'
    /// `statement_timeout`.
    pub db_timeout: Duration,
    /// Longest wait for a pooled connection (or a new one while the
    /// database refuses connections), capped by `db_timeout`: how fast a
    /// call fails while the database is down.
    pub acquire_timeout: Duration,
    /// A transaction left idle this long (its server hung or was stopped
    /// in a join, holding the lobby's lock) is ended by the database,
    /// releasing the lock for the other servers. Keep it short: a frozen
    /// server may have several joins queued on the lobby, and each holds
    /// the lock this long in turn. Our own transactions are idle for
    /// microseconds between statements; if one is ended by mistake the call
    /// is retried. Also the longest a compare-and-set write may land after
    /// its read, by the database clock: a server stalled longer between the
    /// two reads again rather than commit what it computed at an old tick.
    pub idle_txn_timeout: Duration,
    /// Connections in the pool.
    pub max_connections: u32,
    /// Connections opened at start-up ([`Store::warm_up`]) and kept open
    /// (reopened after an outage: [`Store::keep_standing`]).
    /// When a server dies its clients fail over to the others all at once;
    /// a survivor that then had to open connections would pay a process
    /// start in PostgreSQL per connection, on the failover's critical path.
    pub min_connections: u32,
    /// Pause between two of those connections at start-up ([`warm_up_pause`]):
    /// each one is a process start in PostgreSQL and the first plans of the
    /// game calls' statements on it, CPU the running servers' calls wait
    /// for on a small machine when a replacement opens them all at once.
    pub warm_up_pace: Duration,
    /// A player seated in a waiting game who has made no call that writes
    /// (a join or an `Act`) for this long loses the seat to the next
    /// joiner, so a crashed client does not start a game with a player who
    /// never moves. Clients in a lobby act (idle) well within it.
    pub lobby_seat_ttl: Duration,
    /// Normal play before sudden death in the games this server creates
    /// (stored in each game, so every server plays it out the same).
    pub round: Duration,
    /// Follow the primary named by these Patroni members instead of the
    /// database URL's host and port (then only the first guess).
    pub follow: Option<FollowOptions>,
    /// How long a name an identity let go of (by joining with another)
    /// stays its own before anyone may take it (see [`names`]).
    pub name_hold: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            db_timeout: Duration::from_millis(500),
            acquire_timeout: Duration::from_millis(250),
            idle_txn_timeout: Duration::from_millis(50),
            max_connections: 6,
            min_connections: 6,
            warm_up_pace: DEFAULT_WARM_UP_PACE,
            lobby_seat_ttl: Duration::from_millis(3000),
            round: Duration::from_millis(u64::from(ROUND_TICKS * TICK_MS)),
            follow: None,
            name_hold: DEFAULT_NAME_HOLD,
        }
    }
}

/// How long start-up waits before opening the standing connection
/// numbered `opened` (0 for the first): nothing for the first, `pace`
/// before each other, so their start-up work in PostgreSQL is spread out
/// instead of landing on the running servers' calls in one burst.
pub fn warm_up_pause(opened: u32, pace: Duration) -> Duration {
    if opened == 0 { Duration::ZERO } else { pace }
}

/// A round length in whole ticks, as a game stores it.
fn round_ticks(round: Duration) -> Result<u16, Error> {
    let ticks = round.as_millis() / u128::from(TICK_MS);
    u16::try_from(ticks).ok().filter(|&t| t > 0).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "a round must last {TICK_MS} ms to {} s, got {} ms",
            u64::from(u16::MAX) * u64::from(TICK_MS) / 1000,
            round.as_millis()
        ))
    })
}

/// What one compare-and-set attempt came to (see [`Store::cas`]).
pub(crate) enum Cas<T, R> {
    /// Written, or nothing to write.
    Done(T),
    /// Nothing written: another call wrote first. With the caller's read
    /// done again after that commit, when the write returned it.
    Missed(Option<R>),
    /// Nothing written, and nothing lost: the attempt was decided on what
    /// this server knew of the game and would write nothing; read the game
    /// and decide again.
    ReadFirst,
}

/// The one compare-and-set loop: which read each attempt (a read, then a
/// write that matches only if nothing changed since the read) starts
/// from, and what a lost write costs. A caller runs
///
/// ```text
/// let mut cas = CasLoop::new(known);
/// loop {
///     let read = cas.start().unwrap_or(/* read */);
///     if let Some(done) = cas.after(store, /* write on `read` */).await? {
///         break done;
///     }
/// }
/// ```
///
/// The first attempt starts from `first` (what the server knows of the
/// game, if anything); after a lost write, from the read that write
/// returned, unless the pause after the loss was a sleep (see
/// [`Store::lost`]), after which a fresh read is worth more; otherwise it
/// reads. Runs inside [`Store::retrying`], whose deadline bounds it too.
/// (A loop in the caller rather than a function taking the attempt as a
/// closure: an async closure that borrows the attempt's connection makes
/// the call's future not `Send`.)
pub(crate) struct CasLoop<R> {
    next: Option<R>,
    retries: u32,
}

impl<R> CasLoop<R> {
    pub(crate) fn new(first: Option<R>) -> CasLoop<R> {
        CasLoop {
            next: first,
            retries: 0,
        }
    }

    /// The writes lost so far.
    pub(crate) fn missed(&self) -> u32 {
        self.retries
    }

    /// The read the next attempt starts from; `None`: it reads.
    pub(crate) fn start(&mut self) -> Option<R> {
        self.next.take()
    }

    /// What an attempt came to: `Some` when it wrote, `None` to attempt
    /// again. A lost write is counted, and fails the call (as a transient
    /// failure) after [`MAX_CAS_ATTEMPTS`].
    pub(crate) async fn after<T>(
        &mut self,
        store: &Store,
        attempt: Cas<T, R>,
    ) -> Result<Option<T>, Error> {
        match attempt {
            Cas::Done(done) => Ok(Some(done)),
            Cas::ReadFirst => Ok(None),
            Cas::Missed(again) => {
                self.retries += 1;
                if !store.lost(self.retries).await? {
                    self.next = again;
                }
                Ok(None)
            }
        }
    }
}

/// Handle on the database; clones share the pool.
#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
    /// Connection options without the per-call timeouts, for migrations.
    plain: PgConnectOptions,
    db_timeout: Duration,
    lobby_seat_ttl_ms: i64,
    /// [`StoreOptions::name_hold`] in milliseconds.
    name_hold_ms: i64,
    round_ticks: u16,
    /// [`StoreOptions::warm_up_pace`].
    warm_up_pace: Duration,
    /// [`StoreOptions::min_connections`]: the connections kept open (by
    /// the store alone while following Patroni, see the module docs).
    standing: u32,
    /// Following Patroni's primary (`None`: the URL's host and port).
    follow: Option<Arc<Follower>>,
    /// [`StoreOptions::idle_txn_timeout`] in microseconds: how long after
    /// its read a compare-and-set write may land.
    max_write_lag_us: i64,
    /// Compare-and-set writes that lost to another call and were retried,
    /// by all clones of this store.
    cas_retries: Arc<AtomicU64>,
    /// A top-up of the standing connections is running
    /// ([`Store::keep_standing`]).
    topping_up: Arc<AtomicBool>,
    /// Calls writing one game through this server take turns.
    gates: Arc<play::CallGates>,
    /// What this server knows of the games it just wrote.
    known: Arc<play::KnownGames>,
    /// Where database latency, CAS retries and gate waits are counted.
    metrics: Metrics,
    /// The other clusters and the partition map, on a home store with
    /// several clusters (see [`partitions`]); `None`: every game is here.
    partitions: Option<Arc<partitions::Partitions>>,
    /// This is the home cluster's store (rankings are written in a game's
    /// finishing statement) and not another's (they go to its outbox).
    home: bool,
    /// Told when a game finished on a cluster other than home, so its
    /// results are folded into the rankings soon.
    finished: Arc<tokio::sync::Notify>,
    /// The partitions this cluster holds (new games take one); empty: any.
    held: Arc<std::sync::RwLock<Vec<u16>>>,
    /// This cluster's name (`home`, or as home lists it), for the metrics.
    cluster: Arc<str>,
}

impl Store {
    /// Builds the pool. Connections open lazily, so this succeeds while the
    /// database is down; the first call (or [`Store::migrate`]) finds out.
    /// With [`StoreOptions::follow`] it starts the probe task, so it must
    /// then run inside a Tokio runtime.
    pub fn connect(url: &str, opts: &StoreOptions) -> Result<Store, Error> {
        if opts.follow.as_ref().is_some_and(|f| f.members.is_empty()) {
            return Err(Error::InvalidArgument(
                "no Patroni members to follow".into(),
            ));
        }
        let timeout_ms = opts.db_timeout.as_millis().max(1);
        let idle_ms = opts.idle_txn_timeout.as_millis().max(1);
        let plain = PgConnectOptions::from_str(url)
            .map_err(|e| Error::InvalidArgument(format!("bad database URL: {e}")))?
            .application_name("borbaman-server");
        let connect = plain.clone().options([
            ("statement_timeout", format!("{timeout_ms}ms")),
            (
                "idle_in_transaction_session_timeout",
                format!("{idle_ms}ms"),
            ),
            // Every call runs the same few prepared statements with
            // different ids: plan them once per connection, not per call.
            ("plan_cache_mode", "force_generic_plan".to_string()),
        ]);
        let shared = opts
            .follow
            .as_ref()
            .map(|_| Arc::new(Shared::new(opts.db_timeout)));
        let standing = opts.min_connections.min(opts.max_connections);
        let guard = shared.clone();
        let mut pool_opts = PgPoolOptions::new()
            .max_connections(opts.max_connections)
            // While following Patroni the store keeps its standing
            // connections itself: sqlx's upkeep of a minimum holds places
            // asleep through a failover (module docs).
            .min_connections(if shared.is_some() { 0 } else { standing })
            .acquire_timeout(opts.acquire_timeout.min(opts.db_timeout))
            // A ping per acquire would add a round trip to every call; a
            // dead connection fails its first statement instead, and the
            // call is retried on another one.
            .test_before_acquire(false)
            // Once per new connection, never per call.
            .after_connect(move |conn, _meta| {
                let guard = guard.clone();
                Box::pin(async move { follow::check_new_connection(conn, guard.as_deref()).await })
            });
        if let Some(shared) = &shared {
            let (on_acquire, on_release) = (shared.clone(), shared.clone());
            pool_opts = pool_opts
                .before_acquire(move |_conn, meta| {
                    let current = on_acquire.opened_for_current(meta.age);
                    Box::pin(std::future::ready(Ok(current)))
                })
                .after_release(move |_conn, meta| {
                    let current = on_release.opened_for_current(meta.age);
                    Box::pin(std::future::ready(Ok(current)))
                });
        }
        let base = connect.clone();
        let connect = match &shared {
            Some(_) => connect.options([(follow::GENERATION_SETTING, 0)]),
            None => connect,
        };
        let pool = pool_opts.connect_lazy_with(connect);
        let follow = match (&opts.follow, shared) {
            (Some(follow_opts), Some(shared)) => Some(Arc::new(Follower::start(
                follow_opts.clone(),
                pool.clone(),
                base,
                shared,
                standing,
            ))),
            _ => None,
        };
        Ok(Store {
            pool,
            plain,
            db_timeout: opts.db_timeout,
            lobby_seat_ttl_ms: i64::try_from(opts.lobby_seat_ttl.as_millis()).unwrap_or(i64::MAX),
            name_hold_ms: i64::try_from(opts.name_hold.as_millis()).unwrap_or(i64::MAX),
            round_ticks: round_ticks(opts.round)?,
            warm_up_pace: opts.warm_up_pace,
            standing,
            follow,
            max_write_lag_us: i64::try_from(opts.idle_txn_timeout.as_micros()).unwrap_or(i64::MAX),
            cas_retries: Arc::new(AtomicU64::new(0)),
            topping_up: Arc::default(),
            gates: Arc::new(play::CallGates::default().lingering(LINGER)),
            known: Arc::default(),
            metrics: Metrics::new(),
            partitions: None,
            home: true,
            finished: Arc::default(),
            held: Arc::default(),
            cluster: partitions::HOME.into(),
        })
    }

    /// Counts this store's database latency, CAS retries, gate waits and
    /// retention deletes in `metrics`. Call before cloning the store.
    pub fn with_metrics(mut self, metrics: Metrics) -> Store {
        self.gates = Arc::new(play::CallGates::observed(metrics.clone()).lingering(LINGER));
        self.metrics = metrics;
        self
    }

    /// From now on the call holding a game's gate does not wait for the
    /// game's other players while `crowded` says calls wait for admission
    /// (the server's admission control), so a game's place is not held
    /// with nothing of it in the database while other games wait for one.
    pub fn not_lingering_when(&self, crowded: impl Fn() -> bool + Send + Sync + 'static) {
        self.gates.not_lingering_when(Box::new(crowded));
    }

    /// The metrics this store counts into.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The primary Patroni named and the pool now targets; `None` before
    /// the first answer, and always when not following Patroni.
    pub fn primary(&self) -> Option<Primary> {
        self.follow.as_ref().and_then(|f| f.shared.primary())
    }

    /// Changes of [`Store::primary`], when following Patroni.
    pub fn watch_primary(&self) -> Option<watch::Receiver<Option<Primary>>> {
        self.follow.as_ref().map(|f| f.shared.subscribe())
    }

    /// Applies the embedded migrations. Safe when several servers start at
    /// once (the migrator serialises them with an advisory lock; start-up
    /// only, never on the per-call path). Runs on a connection of its own,
    /// without the per-call timeouts: a migration, or waiting for another
    /// server's, may take longer than a call.
    /// When following Patroni, it runs on the primary Patroni names, and
    /// fails (for the caller to retry) until a member has named one.
    pub async fn migrate(&self) -> Result<(), sqlx::migrate::MigrateError> {
        let target = match &self.follow {
            None => self.plain.clone(),
            Some(follow) => {
                let primary = follow.wait_primary(PRIMARY_WAIT).await.ok_or_else(|| {
                    sqlx::Error::Configuration("no Patroni member names a primary yet".into())
                })?;
                self.plain
                    .clone()
                    .host(&primary.address.host)
                    .port(primary.address.port)
            }
        };
        let mut conn =
            tokio::time::timeout(MIGRATE_CONNECT_WAIT, PgConnection::connect_with(&target))
                .await
                .map_err(|_| {
                    sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "no answer from the database within {} s",
                            MIGRATE_CONNECT_WAIT.as_secs()
                        ),
                    ))
                })??;
        let result = MIGRATOR.run(&mut conn).await;
        let _ = conn.close().await;
        result
    }

    /// Opens the pool's `min_connections`, one at a time and
    /// [`StoreOptions::warm_up_pace`] apart ([`warm_up_pause`]), and plans
    /// the game calls' and a join's statements ([`warm_statements`]) on
    /// each, so the first calls (and the burst of calls failing over from a
    /// dead server) find them open and planned. Start-up only, before the server registers;
    /// the store keeps that many open afterwards ([`Store::keep_standing`]).
    pub async fn warm_up(&self) -> Result<(), Error> {
        let wanted = self.standing;
        let mut held: Vec<PoolConnection<Postgres>> = Vec::with_capacity(wanted as usize);
        while self.pool.size() < wanted && (held.len() as u32) < wanted {
            tokio::time::sleep(warm_up_pause(held.len() as u32, self.warm_up_pace)).await;
            let mut conn = self.pool.acquire().await?;
            plan_warm_statements(&mut conn).await?;
            held.push(conn);
        }
        Ok(())
    }

    /// The underlying pool (for audits and benchmarks).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Stops following Patroni and closes every connection.
    pub async fn close(&self) {
        if let Some(follow) = &self.follow {
            follow.stop().await;
        }
        self.pool.close().await;
    }

    /// Compare-and-set writes retried so far because another call had
    /// written the game (or the session) since their read.
    pub fn cas_retries(&self) -> u64 {
        self.cas_retries.load(Ordering::Relaxed)
    }

    /// A compare-and-set write lost to another call, for the `retry`-th
    /// time in this call: counts it, gives up (as a transient failure)
    /// after [`MAX_CAS_ATTEMPTS`] writes, else pauses (see [`cas_pause`]).
    /// Returns whether the pause was a sleep, long enough for a read made
    /// before it to be worth doing again.
    async fn lost(&self, retry: u32) -> Result<bool, Error> {
        self.cas_retries.fetch_add(1, Ordering::Relaxed);
        self.metrics.cas_retry();
        metrics::calls::note_cas_retry();
        tracing::debug!(retry, "compare-and-set lost to another call; reading again");
        if retry >= MAX_CAS_ATTEMPTS {
            return Err(Error::Transient(format!(
                "the game changed before each of {retry} writes"
            )));
        }
        let paused = Instant::now();
        let slept = cas_pause(retry).await;
        metrics::calls::note_cas_pause(paused.elapsed());
        Ok(slept)
    }

    /// A connection from the pool for one attempt of a call (see
    /// [`Lease`]).
    async fn lease(&self) -> Result<Lease, Error> {
        let asked = Instant::now();
        let conn = self.pool.acquire().await.map_err(Error::from_acquire)?;
        let waited = asked.elapsed();
        self.metrics.db_acquired(waited);
        metrics::calls::note_queued(waited);
        Ok(Lease {
            conn: Some(conn),
            acquired_at: Instant::now(),
        })
    }

    /// Runs `op` (one whole transaction, on a [`Lease`]d connection) until
    /// it succeeds, fails for good, runs out of attempts, or the deadline
    /// passes. An attempt cut at the deadline is dropped, and with it the
    /// connection it holds.
    async fn retrying<T, F, Fut>(&self, mut op: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let deadline = Instant::now() + self.db_timeout;
        let mut backoff = FIRST_BACKOFF;
        let mut attempts = 1;
        loop {
            let attempt = Instant::now();
            let outcome = tokio::time::timeout_at(deadline, op()).await;
            let elapsed = attempt.elapsed();
            self.metrics
                .db_attempt(elapsed, matches!(outcome, Ok(Ok(_))), &self.cluster);
            metrics::calls::note_db(elapsed);
            match outcome {
                Err(_elapsed) => return Err(self.timed_out()),
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(err)) if err.is_transient() && attempts < MAX_ATTEMPTS => {
                    tracing::debug!(attempt = attempts, error = %err, "retrying transaction");
                    self.on_database_error(&err);
                    let jitter = rand::random_range(0..=backoff.as_micros() as u64);
                    let pause = backoff / 2 + Duration::from_micros(jitter / 2);
                    if Instant::now() + pause >= deadline {
                        return Err(self.timed_out());
                    }
                    tokio::time::sleep(pause).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    attempts += 1;
                }
                Ok(Err(err)) => {
                    self.on_database_error(&err);
                    return Err(err);
                }
            }
        }
    }

    /// `sql`, or its variant for a cluster other than home when it may
    /// finish a game: results go to the cluster's outbox, not to rankings
    /// (see [`partitions`]).
    fn outboxed(&self, sql: &'static str) -> &'static str {
        if self.home {
            sql
        } else if sql == queries::WRITE_CALLS {
            queries::WRITE_CALLS_OUTBOX
        } else if sql == queries::WRITE_ADVANCE {
            queries::WRITE_ADVANCE_OUTBOX
        } else {
            sql
        }
    }

    /// A game finished here: on a cluster other than home its results wait
    /// in the outbox, to be folded soon.
    fn game_finished(&self) {
        if !self.home {
            self.finished.notify_one();
        }
    }

    /// A lost connection or an unreachable database may mean the primary
    /// moved: look it up now rather than at the next probe round.
    fn on_database_error(&self, err: &Error) {
        if let Some(follow) = &self.follow
            && (err.is_connection_lost() || matches!(err, Error::Unavailable(_)))
        {
            follow.shared.nudge();
        }
    }

    fn timed_out(&self) -> Error {
        if let Some(follow) = &self.follow {
            follow.shared.nudge();
        }
        Error::Unavailable(format!(
            "no answer within {} ms; try again",
            self.db_timeout.as_millis()
        ))
    }
}

/// A connection lent to one attempt. Unless given back after the attempt
/// finished, it is detached from the pool and dropped: the attempt was cut
/// at the deadline (or the call was cancelled) and the connection may be
/// stuck in a statement, or the connection is broken. Dropping closes the
/// socket; nothing is sent, neither a ping nor a cancel request (see the
/// module docs), and the pool opens a replacement.
///
/// The one way a call gets a connection. Closing it is also what ends a
/// transaction cut anywhere: sqlx's `begin` dropped while its `BEGIN` is
/// in flight leaves the connection in a transaction sqlx does not know
/// of; back in the pool, the autocommitted statements of later calls on
/// it (an Act's compare-and-set write) would run inside that transaction,
/// answered but never committed. (Two jobs hold connections otherwise:
/// retention keeps one detached for its advisory lock, and the standing
/// connections are opened, not lent.)
struct Lease {
    conn: Option<PoolConnection<Postgres>>,
    acquired_at: Instant,
}

impl Lease {
    fn conn(&mut self) -> &mut PgConnection {
        self.conn
            .as_mut()
            .expect("a lease holds its connection until settled")
    }

    /// Ends the attempt with `result`: the connection goes back to the pool
    /// unless the error says it is lost.
    fn settle<T>(mut self, result: Result<T, Error>) -> Result<T, Error> {
        if !matches!(&result, Err(err) if err.is_connection_lost()) {
            self.conn.take();
        }
        result
    }

    /// [`Lease::settle`] for an attempt that ends in a `COMMIT`: a success
    /// is noted for the log of the first commit after a switch of primary.
    fn settle_commit<T>(self, store: &Store, result: Result<T, Error>) -> Result<T, Error> {
        let acquired_at = self.acquired_at;
        let result = self.settle(result);
        if result.is_ok()
            && let Some(follow) = &store.follow
        {
            follow.shared.committed(acquired_at);
        }
        result
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            drop(conn.detach());
        }
    }
}

/// The pause before compare-and-set retry `retry` (1 = the first): random,
/// up to 50 µs × 2^retry, at most [`MAX_CAS_PAUSE`]. A miss means another
/// call has just committed, so the first retries go at once: tokio's timer
/// counts whole milliseconds, and a pause under one is a yield to the
/// other tasks. Later ones spread out, so calls that keep crossing part.
/// Returns whether it slept.
async fn cas_pause(retry: u32) -> bool {
    let cap = (50u64 << retry.min(16)).min(MAX_CAS_PAUSE.as_micros() as u64);
    let pause = Duration::from_micros(rand::random_range(0..=cap));
    if pause < Duration::from_millis(1) {
        tokio::task::yield_now().await;
        false
    } else {
        tokio::time::sleep(pause).await;
        true
    }
}

/// The statements planned on every standing connection at warm-up: the
/// game calls' ([`queries::HOT`]) and a join's ([`queries::JOIN`]).
fn warm_statements() -> Vec<&'static str> {
    queries::HOT.iter().chain(queries::JOIN).copied().collect()
}

/// Prepares each of [`warm_statements`] on `conn`, into the connection's
/// statement cache where the calls find it, and has PostgreSQL build its
/// generic plan: `EXPLAIN EXECUTE` with every parameter NULL plans without
/// running anything (nor writing: a plain `EXPLAIN` of an `INSERT` or an
/// `UPDATE` does not execute it), and the connections plan generically
/// (`plan_cache_mode`), so the values do not matter.
async fn plan_warm_statements(conn: &mut PgConnection) -> Result<(), Error> {
    use sqlx::Executor as _;
    let statements = warm_statements();
    for sql in &statements {
        conn.prepare(sqlx::SqlSafeStr::into_sql_str(*sql)).await?;
    }
    let prepared: Vec<(String, i32)> = sqlx::query_as(
        "SELECT name, cardinality(parameter_types) FROM pg_prepared_statements \
         WHERE statement = ANY($1)",
    )
    .bind(&statements)
    .fetch_all(&mut *conn)
    .await?;
    // One round trip for all the plans: a start-up on a busy machine waits
    // for a core at each.
    let explain: String = prepared
        .iter()
        .map(|(name, params)| match *params {
            0 => format!("EXPLAIN (COSTS OFF) EXECUTE {name};"),
            n => format!(
                "EXPLAIN (COSTS OFF) EXECUTE {name}({});",
                vec!["NULL"; n as usize].join(", ")
            ),
        })
        .collect();
    sqlx::raw_sql(sqlx::AssertSqlSafe(explain))
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// A migrated store on a throwaway PostgreSQL of its own, for tests (the
/// database goes when the returned handle is dropped).
#[cfg(test)]
pub(crate) async fn temp_store() -> (borbaman_cluster::LocalPostgres, Store) {
    let pg = borbaman_cluster::LocalPostgres::start_temp(borbaman_cluster::PgOptions {
        fsync: false,
        port: None,
    })
    .expect("starting a throwaway PostgreSQL");
    let store = Store::connect(&pg.url(), &StoreOptions::default()).expect("connecting the store");
    store.migrate().await.expect("migrating");
    (pg, store)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn lazy_store(timeout_ms: u64) -> Store {
        // Port 1 on loopback: nothing listens, connections are refused.
        Store::connect(
            "postgres://postgres@127.0.0.1:1/borbaman",
            &StoreOptions {
                db_timeout: Duration::from_millis(timeout_ms),
                ..StoreOptions::default()
            },
        )
        .unwrap()
    }

    #[tokio::test]
    async fn transient_errors_are_retried_then_succeed() {
        let store = lazy_store(500);
        let calls = AtomicU32::new(0);
        let got = store
            .retrying(|| async {
                if calls.fetch_add(1, Ordering::SeqCst) < 3 {
                    Err(Error::Transient("deadlock detected (40P01)".into()))
                } else {
                    Ok(7)
                }
            })
            .await
            .unwrap();
        assert_eq!(got, 7);
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn permanent_errors_are_not_retried_and_attempts_are_bounded() {
        let store = lazy_store(2000);
        let calls = AtomicU32::new(0);
        let err = store
            .retrying(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(Error::PermissionDenied("no".into()))
            })
            .await
            .unwrap_err();
        assert!(matches!(err, Error::PermissionDenied(_)));
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        calls.store(0, Ordering::SeqCst);
        let err = store
            .retrying(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(Error::Transient("40001".into()))
            })
            .await
            .unwrap_err();
        assert!(err.is_transient());
        assert_eq!(calls.load(Ordering::SeqCst), MAX_ATTEMPTS);
    }

    /// Runs `attempt` (given the read it starts from, the attempt number
    /// from 1) in a [`CasLoop`] from `first`.
    async fn run_cas<T>(
        store: &Store,
        first: Option<&'static str>,
        mut attempt: impl FnMut(Option<&'static str>, u32) -> Result<Cas<T, &'static str>, Error>,
    ) -> Result<T, Error> {
        let mut cas = CasLoop::new(first);
        let mut n = 0;
        loop {
            n += 1;
            let outcome = attempt(cas.start(), n)?;
            if let Some(done) = cas.after(store, outcome).await? {
                return Ok(done);
            }
        }
    }

    #[tokio::test]
    async fn a_lost_compare_and_set_is_retried_counted_and_bounded() {
        let store = lazy_store(2000);
        let got = run_cas(&store, None, |_, n| {
            Ok(if n <= 3 {
                Cas::Missed(None)
            } else {
                Cas::Done(7)
            })
        })
        .await
        .unwrap();
        assert_eq!(got, 7);
        assert_eq!(store.cas_retries(), 3);

        // A write that never matches gives up, as a transient failure.
        let mut attempts = 0;
        let err = run_cas(&store, None, |_, n| {
            attempts = n;
            Ok::<Cas<(), _>, Error>(Cas::Missed(None))
        })
        .await
        .unwrap_err();
        assert!(err.is_transient(), "{err:?}");
        assert_eq!(attempts, MAX_CAS_ATTEMPTS);
        assert_eq!(store.cas_retries(), 3 + u64::from(MAX_CAS_ATTEMPTS));

        // Errors are not the compare-and-set's to retry.
        let mut attempts = 0;
        let err = run_cas(&store, None, |_, n| {
            attempts = n;
            Err::<Cas<(), _>, _>(Error::PermissionDenied("no".into()))
        })
        .await
        .unwrap_err();
        assert!(matches!(err, Error::PermissionDenied(_)));
        assert_eq!(attempts, 1);
    }

    /// Each attempt starts from the read it is handed: the first from
    /// what the server knew, the next from the read the lost write
    /// returned; after a `ReadFirst` it reads, and that is no loss.
    #[tokio::test]
    async fn a_compare_and_set_hands_each_attempt_the_read_to_start_from() {
        let store = lazy_store(2000);
        let mut given = Vec::new();
        let got = run_cas(&store, Some("known"), |read, n| {
            given.push(read);
            Ok(match n {
                1 => Cas::ReadFirst,
                2 => Cas::Missed(Some("returned by the lost write")),
                _ => Cas::Done(n),
            })
        })
        .await
        .unwrap();
        assert_eq!(got, 3);
        assert_eq!(
            given,
            [Some("known"), None, Some("returned by the lost write")],
            "the first retry only yields, so the returned read is still fresh"
        );
        assert_eq!(store.cas_retries(), 1, "a read-first is not a lost write");
    }

    #[tokio::test]
    async fn a_stalled_call_is_cut_at_the_deadline() {
        let store = lazy_store(100);
        let started = std::time::Instant::now();
        let err = store
            .retrying(|| async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                Ok(())
            })
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Unavailable(_)));
        assert!(started.elapsed() < Duration::from_millis(1000));
    }

    #[tokio::test]
    async fn warm_up_opens_the_minimum_connections_before_any_call() {
        use borbaman_cluster::{LocalPostgres, PgOptions};
        let pg = LocalPostgres::start_temp(PgOptions {
            fsync: false,
            port: None,
        })
        .unwrap();
        let store = Store::connect(
            &pg.url(),
            &StoreOptions {
                min_connections: 3,
                ..StoreOptions::default()
            },
        )
        .unwrap();
        // Migrations run on a connection of their own, not the pool's.
        store.migrate().await.unwrap();
        assert_eq!(store.pool().size(), 0, "connections open lazily");
        store.warm_up().await.unwrap();
        assert_eq!(store.pool().size(), 3);
        // Connections go back to the pool in a task of their own.
        let returned = async {
            while store.pool().num_idle() < 3 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(2), returned)
            .await
            .expect("kept open and idle, ready for calls");
        assert_eq!(store.pool().size(), 3);
        store.close().await;
    }

    /// A server stalled (CPU-starved, not hung) for longer than the idle
    /// timeout between two statements loses its transaction: that is for
    /// the store to retry on another connection, not an internal error.
    #[tokio::test]
    async fn a_transaction_ended_by_the_idle_timeout_is_retried() {
        use borbaman_cluster::{LocalPostgres, PgOptions};
        let pg = LocalPostgres::start_temp(PgOptions {
            fsync: false,
            port: None,
        })
        .unwrap();
        let store = Store::connect(
            &pg.url(),
            &StoreOptions {
                idle_txn_timeout: Duration::from_millis(20),
                ..StoreOptions::default()
            },
        )
        .unwrap();
        let mut tx = store.pool().begin().await.unwrap();
        sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        let err = sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap_err();
        let err = Error::from(err);
        assert!(err.is_transient(), "{err:?}");
        drop(tx);
        store.close().await;
    }

    /// A standby (here: a server whose sessions are read-only) is never
    /// used: new connections to it are refused, and calls fail as
    /// unavailable instead of with a write error.
    #[tokio::test]
    async fn a_read_only_server_is_refused_until_it_is_writable() {
        let (pg, store) = crate::store::temp_store().await;
        let mut admin = PgConnection::connect(&pg.url()).await.unwrap();
        sqlx::query("ALTER DATABASE borbaman SET default_transaction_read_only = on")
            .execute(&mut admin)
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let err = store.rankings(5).await.unwrap_err();
        assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
        assert!(started.elapsed() < Duration::from_millis(1000));
        assert_eq!(store.pool().size(), 0, "no read-only connection is kept");
        sqlx::query("ALTER DATABASE borbaman RESET default_transaction_read_only")
            .execute(&mut admin)
            .await
            .unwrap();
        store.rankings(5).await.unwrap();
        store.close().await;
    }

    #[test]
    fn the_first_standing_connection_opens_at_once_the_others_a_pace_apart() {
        let pace = Duration::from_millis(25);
        assert_eq!(warm_up_pause(0, pace), Duration::ZERO);
        assert_eq!(warm_up_pause(1, pace), pace);
        assert_eq!(warm_up_pause(7, pace), pace);
        assert_eq!(warm_up_pause(3, Duration::ZERO), Duration::ZERO);
    }

    /// A warmed store with `min_connections` standing connections, each
    /// held: its backend's start time and how many of the game calls'
    /// statements it holds with a generic plan built.
    async fn standing_connections(store: &Store, min: u32) -> Vec<(f64, i64)> {
        let mut held = Vec::new();
        let mut seen = Vec::new();
        for _ in 0..min {
            let mut conn = store.pool().acquire().await.unwrap();
            let row: (f64, i64) = sqlx::query_as(
                "SELECT extract(epoch FROM a.backend_start)::float8, \
                        (SELECT count(*) FROM pg_prepared_statements p \
                         WHERE p.statement = ANY($1) AND p.generic_plans > 0) \
                 FROM pg_stat_activity a WHERE a.pid = pg_backend_pid()",
            )
            .bind(warm_statements())
            .fetch_one(&mut *conn)
            .await
            .unwrap();
            seen.push(row);
            held.push(conn);
        }
        seen
    }

    fn warm_store_options(min: u32, pace_ms: u64) -> StoreOptions {
        StoreOptions {
            min_connections: min,
            max_connections: min,
            warm_up_pace: Duration::from_millis(pace_ms),
            ..StoreOptions::default()
        }
    }

    #[tokio::test]
    async fn warm_up_plans_the_game_calls_and_joins_statements_on_every_standing_connection() {
        let pg = borbaman_cluster::LocalPostgres::start_temp(borbaman_cluster::PgOptions {
            fsync: false,
            port: None,
        })
        .unwrap();
        let store = Store::connect(&pg.url(), &warm_store_options(3, 0)).unwrap();
        store.migrate().await.unwrap();
        store.warm_up().await.unwrap();
        assert_eq!(store.pool().size(), 3);
        for (_, planned) in standing_connections(&store, 3).await {
            assert_eq!(
                planned,
                warm_statements().len() as i64,
                "a standing connection without a plan for every game-call and join statement"
            );
        }
        store.close().await;
    }

    #[tokio::test]
    async fn warm_up_opens_the_standing_connections_a_pace_apart() {
        let pg = borbaman_cluster::LocalPostgres::start_temp(borbaman_cluster::PgOptions {
            fsync: false,
            port: None,
        })
        .unwrap();
        let pace = Duration::from_millis(60);
        let store = Store::connect(&pg.url(), &warm_store_options(4, 60)).unwrap();
        store.migrate().await.unwrap();
        store.warm_up().await.unwrap();
        let mut started: Vec<f64> = standing_connections(&store, 4)
            .await
            .into_iter()
            .map(|(at, _)| at)
            .collect();
        started.sort_by(f64::total_cmp);
        for pair in started.windows(2) {
            let gap = Duration::from_secs_f64(pair[1] - pair[0]);
            assert!(
                gap >= pace,
                "two standing connections opened {gap:?} apart, under the {pace:?} pace: {started:?}"
            );
        }
        store.close().await;
    }

    /// Truncating a table takes an ACCESS EXCLUSIVE lock, which every game
    /// call would wait behind: a vacuum of `games` must keep its pages.
    #[tokio::test]
    async fn a_vacuum_of_the_games_keeps_their_pages() {
        let (_pg, store) = temp_store().await;
        let size = "SELECT pg_relation_size('games')";
        let mut conn = store.pool().acquire().await.unwrap();
        sqlx::query(
            "INSERT INTO games (state, phase) SELECT '\\x00', 3 FROM generate_series(1, 2000)",
        )
        .execute(&mut *conn)
        .await
        .unwrap();
        sqlx::query("DELETE FROM games")
            .execute(&mut *conn)
            .await
            .unwrap();
        let before: i64 = sqlx::query_scalar(size)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert!(before > 8192, "the rows filled several pages");
        sqlx::query("VACUUM games")
            .execute(&mut *conn)
            .await
            .unwrap();
        let after: i64 = sqlx::query_scalar(size)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(
            after, before,
            "a vacuum removed pages of games, under an ACCESS EXCLUSIVE lock"
        );
        drop(conn);
        store.close().await;
    }

    #[tokio::test]
    async fn warm_up_fails_fast_while_the_database_is_unreachable() {
        let store = lazy_store(300);
        let started = std::time::Instant::now();
        assert!(store.warm_up().await.is_err());
        assert!(started.elapsed() < Duration::from_millis(1000));
    }

    #[tokio::test]
    async fn an_unreachable_database_fails_fast_with_unavailable() {
        let store = lazy_store(300);
        let started = std::time::Instant::now();
        let err = store.rankings(10).await.unwrap_err();
        assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
        assert!(started.elapsed() < Duration::from_millis(1000));
    }
}
