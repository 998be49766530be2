//! What a server counts about itself, for Prometheus and `borbaman status`.
//!
//! [`Metrics`] is a cheap-to-clone handle on one server's
//! [`prometheus::Registry`] (one per server, not a process-wide global: a
//! test or `borbaman play` runs several servers in one process). The
//! pieces that count:
//!
//! - [`calls`]: every gRPC call, by service, method, code and
//!   `borbaman-reason`, with its latency; refusals for load or rate.
//! - the store: database transaction and connection-wait latency, CAS
//!   retries, time queued behind a game's gate, retention deletes.
//! - the server: connections open, the database member written to, whether
//!   it is writable, and the games, seats and spectators counted on demand.
//!
//! Names follow Prometheus' conventions (`borbaman_…_seconds`, `_total`);
//! every label takes a bounded set of values: no game id, token or peer
//! address ever becomes a label. [`http`] serves the text format on
//! `--metrics-listen`.

pub mod calls;
pub mod http;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Latency buckets of calls, in seconds: 0.5 ms to 5 s, finer where the
/// game lives (a call takes ~1 ms on a quiet machine, a tick is 50 ms).
pub const CALL_BUCKETS: [f64; 21] = [
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15,
    0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0,
];

/// Buckets of the database's and the gates' waits: 50 µs up, finer below a
/// millisecond, where a connection wait or a gate normally is.
const WAIT_BUCKETS: [f64; 17] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1,
    0.2, 0.5, 1.0, 5.0,
];

/// How long a spectator counts after its last `WatchState` on this server.
const SPECTATOR_WINDOW: Duration = Duration::from_secs(10);

/// Why a server refused work before doing it; the `kind` label of
/// `borbaman_refusals_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A session or address over its call rate (`rate-limited`).
    RateLimit,
    /// A connection closed at accept: over the per-address or total limit.
    Connection,
    /// Admission control: the server takes no more work now
    /// (`server-full`).
    ServerFull,
}

impl Refusal {
    pub const ALL: [Refusal; 3] = [Refusal::RateLimit, Refusal::Connection, Refusal::ServerFull];

    pub const fn as_str(self) -> &'static str {
        match self {
            Refusal::RateLimit => "rate_limit",
            Refusal::Connection => "connection",
            Refusal::ServerFull => "server_full",
        }
    }
}

/// A server's metrics; clones share them.
#[derive(Clone, Debug)]
pub struct Metrics {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    registry: Registry,
    started: Instant,
    calls: IntCounterVec,
    calls_hung_up: IntCounterVec,
    call_seconds: HistogramVec,
    refusals: IntCounterVec,
    db_seconds: HistogramVec,
    db_acquire_seconds: Histogram,
    cas_retries: IntCounter,
    gate_wait_seconds: Histogram,
    gate_lingers: IntCounterVec,
    connections_open: IntGauge,
    games: IntGaugeVec,
    players_seated: IntGauge,
    spectators: IntGauge,
    db_member: IntGaugeVec,
    db_member_changes: IntCounter,
    db_leader_learned: IntCounterVec,
    db_writable: IntGauge,
    retention_deleted: IntCounterVec,
    retention_passes: IntCounterVec,
    retention_last_success: Gauge,
    /// Game calls and refusals, for `borbaman status`'s recent window.
    tally: Tally,
    /// The database member now written to (the label set to 1).
    member: Mutex<Option<String>>,
    /// Peers that watched a game lately, and when they last did.
    watchers: Mutex<HashMap<SocketAddr, Instant>>,
}

/// Counts of the `Game` service's calls per latency bucket, and of
/// refusals, read by [`crate::status`] to compute recent rates and
/// quantiles without parsing the registry.
#[derive(Debug)]
pub struct Tally {
    /// Per [`CALL_BUCKETS`] bucket (not cumulative), then one for "over".
    buckets: [AtomicU64; CALL_BUCKETS.len() + 1],
    refusals: AtomicU64,
}

/// A copy of a [`Tally`] at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct TallySnapshot {
    pub at: Instant,
    pub buckets: Vec<u64>,
    pub refusals: u64,
}

impl TallySnapshot {
    pub fn calls(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

impl Tally {
    fn new() -> Tally {
        Tally {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            refusals: AtomicU64::new(0),
        }
    }

    fn observe(&self, seconds: f64) {
        let i = CALL_BUCKETS.partition_point(|&bound| bound < seconds);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> TallySnapshot {
        TallySnapshot {
            at: Instant::now(),
            buckets: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            refusals: self.refusals.load(Ordering::Relaxed),
        }
    }
}

/// The `q` quantile (0–1) of calls counted per bucket of `bounds` (one
/// more count than bounds: the last is over the last bound), interpolated
/// linearly inside its bucket the way Prometheus' `histogram_quantile`
/// does. `None` without calls; the last bound when it falls past it.
pub fn quantile(bounds: &[f64], counts: &[u64], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut below = 0u64;
    for (i, &count) in counts.iter().enumerate() {
        if count > 0 && (below + count) as f64 >= rank {
            let Some(&upper) = bounds.get(i) else {
                return bounds.last().copied();
            };
            let lower = if i == 0 { 0.0 } else { bounds[i - 1] };
            let within = (rank - below as f64) / count as f64;
            return Some(lower + (upper - lower) * within);
        }
        below += count;
    }
    bounds.last().copied()
}

/// Bucket-wise `later - earlier` (counters never go back).
pub fn delta(later: &[u64], earlier: &[u64]) -> Vec<u64> {
    later
        .iter()
        .zip(earlier.iter().chain(std::iter::repeat(&0)))
        .map(|(l, e)| l.saturating_sub(*e))
        .collect()
}

/// The version and git commit this binary was built from.
pub fn build_commit() -> &'static str {
    env!("BORBAMAN_GIT_COMMIT")
}

/// Makes the metrics of one registry, each registered as it is made.
struct Maker<'a>(&'a Registry);

impl Maker<'_> {
    fn register<C: prometheus::core::Collector + Clone + 'static>(&self, metric: C) -> C {
        self.0
            .register(Box::new(metric.clone()))
            .expect("metric names are unique and valid");
        metric
    }

    fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.register(IntCounter::new(name, help).expect("valid"))
    }

    fn counters(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.register(IntCounterVec::new(Opts::new(name, help), labels).expect("valid"))
    }

    fn gauge(&self, name: &str, help: &str) -> IntGauge {
        self.register(IntGauge::new(name, help).expect("valid"))
    }

    fn gauges(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.register(IntGaugeVec::new(Opts::new(name, help), labels).expect("valid"))
    }

    fn float_gauge(&self, name: &str, help: &str) -> Gauge {
        self.register(Gauge::new(name, help).expect("valid"))
    }

    fn histogram(&self, name: &str, help: &str, buckets: &[f64]) -> Histogram {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        self.register(Histogram::with_opts(opts).expect("valid"))
    }

    fn histograms(&self, name: &str, help: &str, buckets: &[f64], labels: &[&str]) -> HistogramVec {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        self.register(HistogramVec::new(opts, labels).expect("valid"))
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A new set of metrics in a registry of its own.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let make = Maker(&registry);
        let calls = make.counters(
            "borbaman_calls_total",
            "gRPC calls answered, by service, method, status code and borbaman-reason",
            &["service", "method", "code", "reason"],
        );
        let calls_hung_up = make.counters(
            "borbaman_calls_hung_up_total",
            "Calls not carried out because their client hung up before the server \
             began them (a stopped server's backlog), by service and method",
            &["service", "method"],
        );
        let call_seconds = make.histograms(
            "borbaman_call_duration_seconds",
            "Time from a call's arrival to its answer, by service, method and status code",
            &CALL_BUCKETS,
            &["service", "method", "code"],
        );
        let refusals = make.counters(
            "borbaman_refusals_total",
            "Work refused before it was done: rate limits, connection limits, admission",
            &["kind"],
        );
        let db_seconds = make.histograms(
            "borbaman_db_transaction_duration_seconds",
            "One attempt of a call's database transaction (its statements and commit)",
            &CALL_BUCKETS,
            &["outcome", "cluster"],
        );
        let db_acquire_seconds = make.histogram(
            "borbaman_db_acquire_duration_seconds",
            "Wait for a pooled database connection",
            &WAIT_BUCKETS,
        );
        let cas_retries = make.counter(
            "borbaman_cas_retries_total",
            "Compare-and-set writes that lost to another call and read again",
        );
        let gate_wait_seconds = make.histogram(
            "borbaman_gate_wait_seconds",
            "Time a call queued behind earlier calls on its game in this server",
            &WAIT_BUCKETS,
        );
        let gate_lingers = make.counters(
            "borbaman_gate_lingers_total",
            "Waits of a call holding its game's gate for the game's other callers, \
             by whether another caller queued meanwhile (gained yes or no)",
            &["gained"],
        );
        let connections_open =
            make.gauge("borbaman_connections_open", "Client connections open now");
        let games = make.gauges(
            "borbaman_games",
            "Games active in the last 10 s, by phase (the whole cluster's, as this server \
             reads them from the database: aggregate with max, not sum)",
            &["phase"],
        );
        let players_seated = make.gauge(
            "borbaman_players_seated",
            "Players seated in waiting or running games, active in the last 10 s (cluster-wide)",
        );
        let spectators = make.gauge(
            "borbaman_spectators",
            "Connections that watched a game through this server in the last 10 s",
        );
        let db_member = make.gauges(
            "borbaman_database_member_info",
            "The database member this server writes to (1), by host:port",
            &["member"],
        );
        let db_member_changes = make.counter(
            "borbaman_database_member_changes_total",
            "Times the database member written to changed (Patroni named another primary)",
        );
        let db_leader_learned = make.counters(
            "borbaman_database_leader_learned_total",
            "New primaries followed, by where they were learned from \
             (etcd-watch: Patroni's leader key; patroni-rest: a /primary probe)",
            &["from"],
        );
        let db_writable = make.gauge(
            "borbaman_database_writable",
            "1 while this server's registry heartbeats commit, 0 while they fail",
        );
        let retention_deleted = make.counters(
            "borbaman_retention_deleted_rows_total",
            "Rows the retention job deleted, by what they were",
            &["what"],
        );
        let retention_passes = make.counters(
            "borbaman_retention_passes_total",
            "Passes of the retention job run on this server, by outcome",
            &["outcome"],
        );
        let retention_last_success = make.float_gauge(
            "borbaman_retention_last_success_timestamp_seconds",
            "When a retention pass last succeeded on this server (0: never)",
        );
        make.gauges(
            "borbaman_build_info",
            "The version and git commit the server was built from (always 1)",
            &["version", "commit"],
        )
        .with_label_values(&[env!("CARGO_PKG_VERSION"), build_commit()])
        .set(1);
        make.float_gauge(
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch, in seconds",
        )
        .set(unix_seconds(SystemTime::now()));
        // Zero series exist from the start, so rate() and alerts see them.
        for kind in Refusal::ALL {
            refusals.with_label_values(&[kind.as_str()]);
        }
        for outcome in ["ok", "error"] {
            retention_passes.with_label_values(&[outcome]);
        }
        for gained in ["yes", "no"] {
            gate_lingers.with_label_values(&[gained]);
        }
        for from in ["etcd-watch", "patroni-rest"] {
            db_leader_learned.with_label_values(&[from]);
        }
        Metrics {
            inner: Arc::new(Inner {
                registry,
                started: Instant::now(),
                calls,
                calls_hung_up,
                call_seconds,
                refusals,
                db_seconds,
                db_acquire_seconds,
                cas_retries,
                gate_wait_seconds,
                gate_lingers,
                connections_open,
                games,
                players_seated,
                spectators,
                db_member,
                db_member_changes,
                db_leader_learned,
                db_writable,
                retention_deleted,
                retention_passes,
                retention_last_success,
                tally: Tally::new(),
                member: Mutex::new(None),
                watchers: Mutex::default(),
            }),
        }
    }

    /// The text exposition format of every metric.
    pub fn encode(&self) -> Vec<u8> {
        self.count_spectators();
        let mut out = Vec::with_capacity(16 * 1024);
        TextEncoder::new()
            .encode(&self.inner.registry.gather(), &mut out)
            .expect("writing to a Vec cannot fail");
        out
    }

    /// How long ago this server started.
    pub fn uptime(&self) -> Duration {
        self.inner.started.elapsed()
    }

    /// The `Game` service's calls and the refusals so far.
    pub fn tally(&self) -> TallySnapshot {
        self.inner.tally.snapshot()
    }

    /// A call answered with `code` (and `reason`, if any) after `elapsed`.
    /// `game_call` marks the `Game` service's, which `borbaman status`
    /// summarises.
    pub fn call(
        &self,
        service: &str,
        method: &str,
        code: &str,
        reason: &str,
        elapsed: Duration,
        game_call: bool,
    ) {
        let seconds = elapsed.as_secs_f64();
        self.inner
            .calls
            .with_label_values(&[service, method, code, reason])
            .inc();
        self.inner
            .call_seconds
            .with_label_values(&[service, method, code])
            .observe(seconds);
        if game_call {
            self.inner.tally.observe(seconds);
        }
    }

    /// A call whose client hung up before this server began it: dropped
    /// unanswered, nothing done.
    pub fn hung_up(&self, service: &str, method: &str) {
        self.inner
            .calls_hung_up
            .with_label_values(&[service, method])
            .inc();
    }

    /// Work refused before it was done. Admission control (`server-full`)
    /// that refuses outside the `Game` service's calls counts here; a call
    /// answered `rate-limited` or `server-full` is counted by [`calls`]
    /// already.
    pub fn refused(&self, kind: Refusal) {
        self.inner
            .refusals
            .with_label_values(&[kind.as_str()])
            .inc();
        self.inner.tally.refusals.fetch_add(1, Ordering::Relaxed);
    }

    /// One attempt of a database transaction on database cluster
    /// `cluster` (`home`, or a name of `borbaman db clusters`) ended after
    /// `elapsed`.
    pub fn db_attempt(&self, elapsed: Duration, ok: bool, cluster: &str) {
        let outcome = if ok { "ok" } else { "error" };
        self.inner
            .db_seconds
            .with_label_values(&[outcome, cluster])
            .observe(elapsed.as_secs_f64());
    }

    /// A pooled connection came after `waited`.
    pub fn db_acquired(&self, waited: Duration) {
        self.inner.db_acquire_seconds.observe(waited.as_secs_f64());
    }

    pub fn cas_retry(&self) {
        self.inner.cas_retries.inc();
    }

    /// A call waited `waited` for its game's gate.
    pub fn gate_waited(&self, waited: Duration) {
        self.inner.gate_wait_seconds.observe(waited.as_secs_f64());
    }

    /// A call holding its game's gate waited for the game's other
    /// callers; `gained`: one queued meanwhile.
    pub fn gate_lingered(&self, gained: bool) {
        let gained = if gained { "yes" } else { "no" };
        self.inner.gate_lingers.with_label_values(&[gained]).inc();
    }

    pub fn connection_opened(&self) {
        self.inner.connections_open.inc();
    }

    pub fn connection_closed(&self) {
        self.inner.connections_open.dec();
    }

    pub fn connections_open(&self) -> i64 {
        self.inner.connections_open.get()
    }

    /// The games waiting and running and the players seated, as the
    /// database holds them now.
    pub fn census(&self, games_waiting: i64, games_running: i64, players_seated: i64) {
        let games = &self.inner.games;
        games.with_label_values(&["waiting"]).set(games_waiting);
        games.with_label_values(&["running"]).set(games_running);
        self.inner.players_seated.set(players_seated);
    }

    /// A connection watched a game.
    pub fn watched(&self, peer: SocketAddr) {
        let mut watchers = self
            .inner
            .watchers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        watchers.insert(peer, Instant::now());
    }

    /// Forgets watchers older than the window; sets and returns the gauge.
    pub fn count_spectators(&self) -> i64 {
        let mut watchers = self
            .inner
            .watchers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        watchers.retain(|_, at| at.elapsed() < SPECTATOR_WINDOW);
        let n = watchers.len() as i64;
        self.inner.spectators.set(n);
        n
    }

    /// The database member now written to (`host:port`); counts a change
    /// when it differs from the last one.
    pub fn database_member(&self, member: &str) {
        let mut current = self.inner.member.lock().unwrap_or_else(|e| e.into_inner());
        if current.as_deref() == Some(member) {
            return;
        }
        if let Some(old) = current.take() {
            let _ = self.inner.db_member.remove_label_values(&[&old]);
            self.inner.db_member_changes.inc();
        }
        self.inner.db_member.with_label_values(&[member]).set(1);
        *current = Some(member.to_string());
    }

    /// A new primary was followed, learned from `from` (`etcd-watch` or
    /// `patroni-rest`).
    pub fn database_leader_learned(&self, from: &str) {
        self.inner
            .db_leader_learned
            .with_label_values(&[from])
            .inc();
    }

    /// The member [`Metrics::database_member`] last named, and how many
    /// times it changed.
    pub fn database_member_now(&self) -> (Option<String>, u64) {
        let current = self.inner.member.lock().unwrap_or_else(|e| e.into_inner());
        (current.clone(), self.inner.db_member_changes.get())
    }

    /// Whether heartbeats commit (the database is reachable and writable).
    pub fn database_writable(&self, writable: bool) {
        self.inner.db_writable.set(i64::from(writable));
    }

    pub fn is_database_writable(&self) -> bool {
        self.inner.db_writable.get() == 1
    }

    /// One pass of the retention job succeeded, deleting these rows by
    /// kind.
    pub fn retention_deleted(&self, rows: &[(&str, i64)]) {
        for &(what, n) in rows {
            if n > 0 {
                self.inner
                    .retention_deleted
                    .with_label_values(&[what])
                    .inc_by(n as u64);
            }
        }
        self.inner.retention_passes.with_label_values(&["ok"]).inc();
        self.inner
            .retention_last_success
            .set(unix_seconds(SystemTime::now()));
    }

    /// One pass of the retention job failed.
    pub fn retention_failed(&self) {
        self.inner
            .retention_passes
            .with_label_values(&["error"])
            .inc();
    }
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_inside_the_bucket() {
        let bounds = [0.001, 0.01, 0.1];
        // 100 calls: 90 under 1 ms, 9 in 1-10 ms, 1 in 10-100 ms.
        let counts = [90, 9, 1, 0];
        assert_eq!(quantile(&bounds, &counts, 0.5), Some(0.001 * 50.0 / 90.0));
        let p99 = quantile(&bounds, &counts, 0.99).unwrap();
        assert!((p99 - 0.01).abs() < 1e-12, "{p99}");
        let max = quantile(&bounds, &counts, 1.0).unwrap();
        assert!((max - 0.1).abs() < 1e-12, "{max}");
        assert_eq!(quantile(&bounds, &[0, 0, 0, 0], 0.99), None);
        // Past the last bound: the last bound, as Prometheus says.
        assert_eq!(quantile(&bounds, &[0, 0, 0, 5], 0.5), Some(0.1));
    }

    #[test]
    fn deltas_are_per_bucket_and_never_negative() {
        assert_eq!(delta(&[5, 7, 9], &[1, 7, 10]), vec![4, 0, 0]);
        assert_eq!(delta(&[5, 7], &[]), vec![5, 7]);
    }

    #[test]
    fn tally_buckets_match_the_histogram_bounds() {
        let tally = Tally::new();
        tally.observe(0.0004); // first bucket
        tally.observe(0.0005); // on a bound: that bucket (le)
        tally.observe(0.004); // 3-5 ms
        tally.observe(9.0); // over 5 s
        let snap = tally.snapshot();
        assert_eq!(snap.buckets[0], 2);
        assert_eq!(snap.buckets[4], 1);
        assert_eq!(snap.buckets[CALL_BUCKETS.len()], 1);
        assert_eq!(snap.calls(), 4);
    }

    #[test]
    fn a_member_change_is_counted_and_the_old_label_goes() {
        let m = Metrics::new();
        m.database_member("10.0.0.1:5432");
        m.database_member("10.0.0.1:5432");
        assert_eq!(m.database_member_now().1, 0);
        m.database_member("10.0.0.2:5432");
        assert_eq!(
            m.database_member_now(),
            (Some("10.0.0.2:5432".to_string()), 1)
        );
        let text = String::from_utf8(m.encode()).unwrap();
        assert!(text.contains(r#"borbaman_database_member_info{member="10.0.0.2:5432"} 1"#));
        assert!(!text.contains("10.0.0.1"), "{text}");
    }

    #[test]
    fn every_refusal_kind_has_a_series_from_the_start() {
        let text = String::from_utf8(Metrics::new().encode()).unwrap();
        for kind in Refusal::ALL {
            let series = format!(r#"borbaman_refusals_total{{kind="{}"}} 0"#, kind.as_str());
            assert!(text.contains(&series), "{series} missing");
        }
        assert!(text.contains("borbaman_build_info{"));
    }
}
