//! The `Status` gRPC service: what a server says about itself in one
//! call, for `borbaman status`.
//!
//! Rates and quantiles over the last seconds come from a [`Window`] of
//! per-second snapshots of the call tally (see [`crate::metrics::Tally`]),
//! taken by [`window_task`]; the counts of games and players come from a
//! [`CensusCache`], one database read at most once a second however many
//! scrapes and status calls ask.
//!
//! The reply names the database's address, the build and the load, which
//! strangers need not see, so `Status` answers only a call that carries
//! the operator's token ([`OperatorToken`], `--operator-token`) in its
//! `authorization` header (`Bearer TOKEN`); without one set on the server
//! it answers no one. Either way a refusal is `PERMISSION_DENIED`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use borbaman_proto::pb;
use sha2::{Digest, Sha256};
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use crate::error::Error;
use crate::metrics::{self, Metrics, TallySnapshot};
use crate::store::{Census, ClusterCensus, Store};

/// Calls per second are counted over this much of the recent past.
pub const RATE_WINDOW: Duration = Duration::from_secs(10);
/// Quantiles and refusals cover this much.
pub const MINUTE: Duration = Duration::from_secs(60);
/// A census this young is answered without asking the database again.
const CENSUS_FRESH: Duration = Duration::from_secs(1);
/// Longest a status call or scrape waits for the census.
const CENSUS_TIMEOUT: Duration = Duration::from_millis(250);

/// The recent summary of one server's calls.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Recent {
    pub calls_per_s: f64,
    /// `None` without calls in the last minute.
    pub p99: Option<Duration>,
    pub refusals_last_minute: u64,
}

/// Per-second tally snapshots of the last minute, oldest first.
#[derive(Debug, Default)]
pub struct Window {
    snapshots: Mutex<VecDeque<TallySnapshot>>,
}

impl Window {
    /// Keeps `snap`, forgetting what is older than a minute before it.
    pub fn push(&self, snap: TallySnapshot) {
        let mut snaps = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
        while snaps
            .front()
            .is_some_and(|old| snap.at.duration_since(old.at) > MINUTE + Duration::from_secs(1))
        {
            snaps.pop_front();
        }
        snaps.push_back(snap);
    }

    /// The summary up to `now`.
    pub fn recent(&self, now: &TallySnapshot) -> Recent {
        let mut snaps = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
        recent(snaps.make_contiguous(), now)
    }
}

/// The summary of `history` (oldest first) up to `now`: the rate since the
/// oldest snapshot within [`RATE_WINDOW`], the p99 and refusals since the
/// oldest within [`MINUTE`]. With no history (a server just started), since
/// its start, when every count was zero.
pub fn recent(history: &[TallySnapshot], now: &TallySnapshot) -> Recent {
    let since = |window: Duration| {
        history
            .iter()
            .find(|s| now.at.saturating_duration_since(s.at) <= window)
    };
    let rate = match since(RATE_WINDOW) {
        Some(old) if now.at > old.at => {
            let calls = now.calls().saturating_sub(old.calls());
            calls as f64 / now.at.duration_since(old.at).as_secs_f64()
        }
        _ => 0.0,
    };
    let (buckets, refusals) = match since(MINUTE) {
        Some(old) => (
            metrics::delta(&now.buckets, &old.buckets),
            now.refusals.saturating_sub(old.refusals),
        ),
        None => (now.buckets.clone(), now.refusals),
    };
    Recent {
        calls_per_s: rate,
        p99: metrics::quantile(&metrics::CALL_BUCKETS, &buckets, 0.99).map(Duration::from_secs_f64),
        refusals_last_minute: refusals,
    }
}

/// Snapshots the tally into `window` every second until `stop`.
pub async fn window_task(
    metrics: Metrics,
    window: Arc<Window>,
    mut stop: borbaman_shutdown::Shutdown,
) {
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => window.push(metrics.tally()),
            _ = stop.recv() => return,
        }
    }
}

/// What the census found: every cluster's count, and their sum.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CensusReport {
    /// Every cluster's games and players together; `None` unless each
    /// cluster was counted now or within the last minute.
    pub total: Option<Census>,
    /// Home first.
    pub clusters: Vec<ClusterCensus>,
}

/// The counts the census has kept: each cluster's last one, and when the
/// last census every cluster answered was taken.
#[derive(Debug, Default)]
struct Kept {
    complete_at: Option<Instant>,
    report: CensusReport,
    by_cluster: HashMap<String, (Instant, Census)>,
}

/// Puts together a census taken `now`: a cluster that did not answer
/// shows its last count if it is under a minute old (so does the total),
/// else none (nor does the total). `kept` learns the new counts.
fn assemble(
    counted: Vec<ClusterCensus>,
    kept: &mut HashMap<String, (Instant, Census)>,
    now: Instant,
) -> CensusReport {
    let mut total = Some(Census::default());
    let clusters: Vec<ClusterCensus> = counted
        .into_iter()
        .map(|mut cluster| {
            match cluster.census {
                Some(census) => {
                    kept.insert(cluster.name.clone(), (now, census));
                }
                None => {
                    cluster.census = kept
                        .get(&cluster.name)
                        .filter(|(at, _)| now.saturating_duration_since(*at) < MINUTE)
                        .map(|(_, census)| *census);
                }
            }
            total = total.zip(cluster.census).map(|(sum, c)| sum + c);
            cluster
        })
        .collect();
    CensusReport {
        total: total.filter(|_| !clusters.is_empty()),
        clusters,
    }
}

/// The last census, refreshed on demand at most once a second.
#[derive(Debug)]
pub struct CensusCache {
    store: Store,
    kept: tokio::sync::Mutex<Kept>,
}

impl CensusCache {
    pub fn new(store: Store) -> CensusCache {
        CensusCache {
            store,
            kept: tokio::sync::Mutex::new(Kept::default()),
        }
    }

    pub fn metrics(&self) -> &Metrics {
        self.store.metrics()
    }

    /// A census at most a second old, asking every cluster if needed
    /// (briefly: a scrape must not hang on a database that is down). A
    /// cluster that does not answer keeps its count of the last minute.
    /// Each cluster's primary and partitions are as the server holds them
    /// now, never cached: a switch shows at once.
    pub async fn refresh(&self) -> CensusReport {
        let mut report = self.counted().await;
        let now = self.store.clusters_now();
        for cluster in &mut report.clusters {
            if let Some(held) = now.iter().find(|c| c.name == cluster.name) {
                cluster.primary = held.primary.clone();
                cluster.partitions = held.partitions;
            }
        }
        report
    }

    /// The census with the counts at most a second old.
    async fn counted(&self) -> CensusReport {
        let mut kept = self.kept.lock().await;
        if kept
            .complete_at
            .is_some_and(|at| at.elapsed() < CENSUS_FRESH)
        {
            return kept.report.clone();
        }
        let counted = self.store.census_by_cluster(CENSUS_TIMEOUT).await;
        let now = Instant::now();
        let every = counted.iter().all(|c| c.census.is_some());
        let report = assemble(counted, &mut kept.by_cluster, now);
        if let Some(total) = report.total {
            self.metrics().census(
                total.games_waiting,
                total.games_running,
                total.players_seated,
            );
        }
        // Asked again at once while a cluster is not answering.
        kept.complete_at = every.then_some(now);
        kept.report = report.clone();
        report
    }
}

/// The metadata key a `Status` call carries the token in.
pub const AUTHORIZATION: &str = "authorization";

/// The token an operator sets on the servers (`--operator-token`) and
/// gives `borbaman status`: at least [`OperatorToken::MIN_CHARS`]
/// printable ASCII characters, no blanks (it travels in a header).
#[derive(Clone, PartialEq, Eq)]
pub struct OperatorToken(Arc<str>);

impl OperatorToken {
    pub const MIN_CHARS: usize = 16;

    /// The header value a call carries: `Bearer TOKEN`.
    pub fn header_value(&self) -> String {
        format!("Bearer {}", self.0)
    }

    /// Whether `header` is `Bearer` and this token, compared in a time
    /// that does not depend on where they differ.
    fn admits(&self, header: Option<&str>) -> bool {
        let Some(given) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
            return false;
        };
        let (a, b) = (Sha256::digest(given.trim()), Sha256::digest(&*self.0));
        a.iter()
            .zip(b.iter())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
    }
}

impl std::str::FromStr for OperatorToken {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if !text.chars().all(|c| c.is_ascii_graphic()) {
            return Err("the operator token must be printable ASCII without blanks \
                        (e.g. the output of `openssl rand -hex 16`)"
                .into());
        }
        if text.len() < Self::MIN_CHARS {
            return Err(format!(
                "the operator token must be at least {} characters \
                 (e.g. the output of `openssl rand -hex 16`)",
                Self::MIN_CHARS
            ));
        }
        Ok(OperatorToken(text.into()))
    }
}

impl std::fmt::Debug for OperatorToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OperatorToken(..)")
    }
}

/// Whether a call with `header` may read the status, and if not, why.
pub fn check_operator(token: Option<&OperatorToken>, header: Option<&str>) -> Result<(), Error> {
    match token {
        None => Err(Error::OperatorOnly(
            "Status is for operators, and this server has no operator token: \
             start it with --operator-token (or BORBAMAN_OPERATOR_TOKEN)"
                .into(),
        )),
        Some(token) if token.admits(header) => Ok(()),
        Some(_) => Err(Error::OperatorOnly(
            "Status is for operators: give the servers' operator token \
             (borbaman status --operator-token, or BORBAMAN_OPERATOR_TOKEN)"
                .into(),
        )),
    }
}

/// The `Status` service.
#[derive(Clone, Debug)]
pub struct StatusService {
    server_id: Arc<str>,
    address: String,
    census: Arc<CensusCache>,
    window: Arc<Window>,
    operator_token: Option<OperatorToken>,
}

impl StatusService {
    pub fn new(
        server_id: Arc<str>,
        address: String,
        census: Arc<CensusCache>,
        window: Arc<Window>,
        operator_token: Option<OperatorToken>,
    ) -> Self {
        StatusService {
            server_id,
            address,
            census,
            window,
            operator_token,
        }
    }
}

#[tonic::async_trait]
impl pb::status_server::Status for StatusService {
    async fn get_status(
        &self,
        req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusReply>, Status> {
        let header = req
            .metadata()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        check_operator(self.operator_token.as_ref(), header)?;
        let report = self.census.refresh().await;
        let census = report.total;
        let metrics = self.census.metrics();
        let recent = self.window.recent(&metrics.tally());
        let (member, changes) = metrics.database_member_now();
        let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        let clusters = report
            .clusters
            .iter()
            .map(|c| pb::ClusterStatus {
                name: c.name.clone(),
                primary: c.primary.clone().unwrap_or_default(),
                partitions: u32::try_from(c.partitions).unwrap_or(u32::MAX),
                games_waiting: c.census.map(|c| count(c.games_waiting)),
                games_running: c.census.map(|c| count(c.games_running)),
                players_seated: c.census.map(|c| count(c.players_seated)),
            })
            .collect();
        Ok(Response::new(pb::StatusReply {
            server_id: self.server_id.to_string(),
            address: self.address.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: metrics::build_commit().to_string(),
            uptime_ms: metrics.uptime().as_millis() as u64,
            calls_per_s: recent.calls_per_s,
            p99_ms: recent.p99.map_or(0.0, |p| p.as_secs_f64() * 1000.0),
            database_member: member.unwrap_or_default(),
            database_member_changes: changes,
            database_writable: metrics.is_database_writable(),
            games_waiting: census.map(|c| count(c.games_waiting)),
            games_running: census.map(|c| count(c.games_running)),
            players_seated: census.map(|c| count(c.players_seated)),
            refusals_last_minute: recent.refusals_last_minute,
            connections_open: u32::try_from(metrics.connections_open().max(0)).unwrap_or(0),
            clusters,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(
        at: std::time::Instant,
        calls_in_first: u64,
        slow: u64,
        refusals: u64,
    ) -> TallySnapshot {
        let mut buckets = vec![0; metrics::CALL_BUCKETS.len() + 1];
        buckets[0] = calls_in_first;
        buckets[12] = slow; // 75-100 ms
        TallySnapshot {
            at,
            buckets,
            refusals,
        }
    }

    #[test]
    fn rates_cover_ten_seconds_and_quantiles_a_minute() {
        let t0 = std::time::Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        // 100 s of history: 1000 fast calls by t=40, then 50 calls/s, and
        // two slow calls a second from t=80 on.
        let history: Vec<TallySnapshot> = (0..=99u64)
            .map(|t| {
                let fast = 1000 + 50 * t.saturating_sub(40);
                let slow = 2 * t.saturating_sub(80);
                snap(s(t), fast, slow, t / 10)
            })
            .collect();
        let now = snap(s(100), 1000 + 50 * 60, 40, 10);
        let r = recent(&history, &now);
        // (50 × 10 fast + 20 slow) / 10 s.
        assert!((r.calls_per_s - 52.0).abs() < 1e-9, "{}", r.calls_per_s);
        // In the last minute 3000 fast and 40 slow calls: the slowest 1 %
        // are all slow ones, so p99 falls in their bucket.
        let p99 = r.p99.expect("calls");
        assert!(p99 > Duration::from_millis(75) && p99 <= Duration::from_millis(100));
        assert_eq!(r.refusals_last_minute, 10 - 4);
    }

    #[test]
    fn a_new_server_counts_from_zero() {
        let t0 = std::time::Instant::now();
        let r = recent(&[], &snap(t0, 5, 0, 2));
        assert_eq!(r.calls_per_s, 0.0);
        assert!(r.p99.unwrap() <= Duration::from_micros(500));
        assert_eq!(r.refusals_last_minute, 2);
        let idle = recent(
            &[snap(t0, 0, 0, 0)],
            &snap(t0 + Duration::from_secs(1), 0, 0, 0),
        );
        assert_eq!(idle.p99, None);
    }

    #[test]
    fn only_the_operators_token_reads_the_status() {
        let token: OperatorToken = "0123456789abcdef-operator".parse().unwrap();
        let header = token.header_value();
        assert!(check_operator(Some(&token), Some(&header)).is_ok());
        for wrong in [
            None,
            Some("0123456789abcdef-operator"),
            Some("Bearer 0123456789abcdef-operatoR"),
            Some("Bearer 0123456789abcdef-operato"),
            Some("Bearer "),
            Some("Basic 0123456789abcdef-operator"),
        ] {
            let err = check_operator(Some(&token), wrong).expect_err("refused");
            assert_eq!(Status::from(err).code(), tonic::Code::PermissionDenied);
        }
        // No token on the server: no one reads it, whatever they send.
        let err = check_operator(None, Some(&header)).unwrap_err();
        assert!(err.to_string().contains("--operator-token"), "{err}");
    }

    #[test]
    fn an_operator_token_is_long_and_printable() {
        assert!("short".parse::<OperatorToken>().unwrap_err().contains("16"));
        assert!(
            "with a blank in it, long enough"
                .parse::<OperatorToken>()
                .is_err()
        );
        assert!("0123456789abcdef".parse::<OperatorToken>().is_ok());
        let debug = format!("{:?}", "0123456789abcdef".parse::<OperatorToken>().unwrap());
        assert!(!debug.contains("0123"), "the token is not logged: {debug}");
    }

    fn cluster(name: &str, census: Option<(i64, i64, i64)>) -> ClusterCensus {
        ClusterCensus {
            name: name.into(),
            primary: Some("127.0.0.1:5432".into()),
            partitions: 32,
            census: census.map(|(w, r, p)| Census {
                games_waiting: w,
                games_running: r,
                players_seated: p,
            }),
        }
    }

    #[test]
    fn a_cluster_that_does_not_answer_keeps_its_count_for_a_minute() {
        let mut kept = HashMap::new();
        let t0 = Instant::now();
        let both = vec![
            cluster("home", Some((1, 2, 9))),
            cluster("c1", Some((0, 3, 12))),
        ];
        let report = assemble(both, &mut kept, t0);
        let total = report.total.expect("every cluster counted");
        assert_eq!(
            (
                total.games_waiting,
                total.games_running,
                total.players_seated
            ),
            (1, 5, 21)
        );
        assert_eq!(report.clusters[1].name, "c1");

        // c1 silent: its last count stands in, and the total with it.
        let silent = || vec![cluster("home", Some((0, 2, 8))), cluster("c1", None)];
        let report = assemble(silent(), &mut kept, t0 + Duration::from_secs(30));
        assert_eq!(report.clusters[1].census.unwrap().games_running, 3);
        assert_eq!(report.total.unwrap().players_seated, 20);

        // A minute later it is unknown, and so is the total; home is not.
        let report = assemble(silent(), &mut kept, t0 + Duration::from_secs(61));
        assert_eq!(report.clusters[1].census, None);
        assert_eq!(report.clusters[0].census.unwrap().players_seated, 8);
        assert_eq!(report.total, None);

        // A cluster never counted is unknown from the start.
        let report = assemble(vec![cluster("c2", None)], &mut HashMap::new(), t0);
        assert_eq!((report.total, report.clusters[0].census), (None, None));
    }

    #[test]
    fn the_window_forgets_what_is_older_than_a_minute() {
        let w = Window::default();
        let t0 = std::time::Instant::now();
        for t in 0..120 {
            w.push(snap(t0 + Duration::from_secs(t), t, 0, 0));
        }
        let len = w.snapshots.lock().unwrap().len();
        assert!((61..=62).contains(&len), "{len}");
    }
}
