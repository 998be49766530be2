//! Every gRPC call, counted, timed and logged, by a wrapper around each
//! service ([`Observed`]).
//!
//! The wrapper sees the HTTP/2 request and the response head: the method is
//! the path's last segment, the outcome the `grpc-status` and
//! `borbaman-reason` of the answer (a unary call that succeeded carries its
//! status in the trailers, so a head without one is `OK`). Method names
//! outside the service's own list are counted as `unknown`, so no client can
//! make up labels. Each call also logs one event at debug level (target
//! `borbaman_server::calls`): service, method, game, duration and outcome.
//!
//! Code inside a call (the service, the store) notes what the head cannot
//! show through [`note_game`], [`note_gate_wait`], [`note_db`],
//! [`note_cas_retry`], [`note_cas_pause`] and [`note_queued`], into a task-local
//! [`CallNote`] (which a task the call spawns shares through
//! [`in_this_call`]); outside a call they do nothing. A client that sends the
//! metadata key [`TIMING_KEY`] gets that note back under the same key in
//! the answer's head, as a [`ServerTiming`] (gate, database, lost
//! compare-and-sets, and the call's total time in this server), to
//! attribute its tail latency. A call that queued for the database at
//! least [`BUSY_QUEUED`] (admission's line, then a pooled connection)
//! carries [`BUSY_KEY`] for every client: its server is at its bound, and
//! clients do not hedge calls on it.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use borbaman_proto::Reason;
use borbaman_proto::reason::REASON_KEY;
use tonic::body::Body;
use tonic::codegen::Service;
use tonic::codegen::http::{HeaderValue, Request, Response};
use tonic::server::NamedService;
use tonic::transport::server::TcpConnectInfo;

use super::{Metrics, Refusal};

pub use borbaman_proto::timing::{BUSY_KEY, BUSY_QUEUED, ServerTiming, TIMING_KEY};

/// The `Game` service's methods (a test checks them against the proto).
pub const GAME_METHODS: &[&str] = &[
    "Join",
    "Act",
    "GetState",
    "Leave",
    "Rankings",
    "GetReplay",
    "ListGames",
    "WatchState",
    "Ping",
];
pub const REGISTRY_METHODS: &[&str] = &["ListServers"];
pub const HEALTH_METHODS: &[&str] = &["Check", "Watch"];
pub const STATUS_METHODS: &[&str] = &["GetStatus"];

tokio::task_local! {
    static NOTE: Arc<CallNote>;
}

/// What a call's code notes while it runs (see the module docs).
#[derive(Debug, Default)]
pub struct CallNote {
    game: AtomicU64,
    gate_wait_us: AtomicU64,
    db_us: AtomicU64,
    cas_retries: AtomicU32,
    cas_us: AtomicU64,
    /// Time queued for the database: admission's line and the wait for a
    /// pooled connection.
    queued_us: AtomicU64,
    /// Its work has begun ([`begin`]).
    began: AtomicBool,
}

impl CallNote {
    /// What goes under [`TIMING_KEY`], the call having taken `total`.
    fn timing(&self, total: Option<Duration>) -> ServerTiming {
        ServerTiming {
            gate: Duration::from_micros(self.gate_wait_us.load(Relaxed)),
            db: Duration::from_micros(self.db_us.load(Relaxed)),
            cas_retries: self.cas_retries.load(Relaxed),
            cas: Duration::from_micros(self.cas_us.load(Relaxed)),
            total,
        }
    }
}

/// Called once the request is read, just before the call's work begins
/// (admission, the database): waits once, so that hyper, which looks for
/// the stream's reset only while a call waits, drops a call whose client
/// has already hung up. A server stopped for a while finds on resuming
/// the calls sent to it meanwhile, most of them answered by another
/// server and reset: hyper hands such a call to the service as soon as it
/// reads its HEADERS, and the reset that came in the same read is seen
/// only at the call's first wait. A call admitted at once never waited
/// before its work, which then ran to its end ([`to_the_end`]), its
/// database work for nobody. Waiting only for calls whose HEADERS came
/// well before the work (the server stopped between the two) missed most
/// of them: on resuming, HEADERS, body and reset are read together. A
/// call dropped here is counted as hung up on ([`Metrics::hung_up`]); one
/// whose client hangs up later, during its work, is carried out all the
/// same.
pub async fn begin() {
    tokio::task::yield_now().await;
    let _ = NOTE.try_with(|n| n.began.store(true, Relaxed));
}

/// The game this call is about (for its log event).
pub fn note_game(game_id: u64) {
    let _ = NOTE.try_with(|n| n.game.store(game_id, Relaxed));
}

/// Time this call waited behind its game's gate.
pub fn note_gate_wait(waited: Duration) {
    let _ = NOTE.try_with(|n| add_us(&n.gate_wait_us, waited));
}

/// Time this call spent in one database transaction attempt.
pub fn note_db(elapsed: Duration) {
    let _ = NOTE.try_with(|n| add_us(&n.db_us, elapsed));
}

/// This call's compare-and-set lost once and reads again: the database
/// time noted so far was thrown away, so it counts as the retry's cost,
/// not as database time.
pub fn note_cas_retry() {
    let _ = NOTE.try_with(|n| {
        n.cas_retries.fetch_add(1, Relaxed);
        n.cas_us.fetch_add(n.db_us.swap(0, Relaxed), Relaxed);
    });
}

/// Time this call paused after a lost compare-and-set before reading
/// again.
pub fn note_cas_pause(paused: Duration) {
    let _ = NOTE.try_with(|n| add_us(&n.cas_us, paused));
}

/// Time this call queued for the database: in admission's line for a
/// place, or for a pooled connection.
pub fn note_queued(waited: Duration) {
    let _ = NOTE.try_with(|n| add_us(&n.queued_us, waited));
}

fn add_us(counter: &AtomicU64, d: Duration) {
    counter.fetch_add(d.as_micros() as u64, Relaxed);
}

/// `work` noting into the current call's note, wherever it runs: a task
/// the call spawns (to finish its database work even if the call is
/// cancelled) is wrapped in this, so its time still reaches the call's
/// timing. Outside a call, `work` as it is.
pub fn in_this_call<F: Future>(work: F) -> impl Future<Output = F::Output> {
    let note = NOTE.try_with(Arc::clone).unwrap_or_default();
    NOTE.scope(note, work)
}

/// Runs `work` on a task of its own and waits for it: the work goes on to
/// its end even if this call is dropped (its client hung up: a hedge that
/// lost, a deadline that passed). Dropping a call in the middle of a
/// database transaction would close the connection with it (nothing tells
/// the connection where the dropped statement stopped), and the pool would
/// open a new one, a process start in PostgreSQL, just when a stall has made
/// calls late and hedges fire. The work notes into this call's note
/// ([`in_this_call`]). An `Err` is a panic in `work`.
pub async fn to_the_end<T: Send + 'static>(
    work: impl Future<Output = T> + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    tokio::spawn(in_this_call(work)).await
}

/// A service whose every call is counted, timed and logged.
#[derive(Clone, Debug)]
pub struct Observed<S> {
    inner: S,
    metrics: Metrics,
    methods: &'static [&'static str],
}

impl<S: NamedService> Observed<S> {
    /// Wraps `inner`, whose methods are `methods`.
    pub fn new(inner: S, metrics: Metrics, methods: &'static [&'static str]) -> Self {
        Observed {
            inner,
            metrics,
            methods,
        }
    }
}

impl<S: NamedService> NamedService for Observed<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<Request<Body>> for Observed<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + NamedService
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let started = Instant::now();
        let method = method_label(req.uri().path(), self.methods);
        let wants_timing = req.headers().contains_key(TIMING_KEY);
        let game_service = S::NAME == GAME_SERVICE;
        if game_service
            && method == "WatchState"
            && let Some(peer) = req
                .extensions()
                .get::<TcpConnectInfo>()
                .and_then(|info| info.remote_addr())
        {
            self.metrics.watched(peer);
        }
        // The service that was polled ready serves this call; its clone
        // is ready for the next (tower's usual swap).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let metrics = self.metrics.clone();
        let note = Arc::<CallNote>::default();
        // Only the `Game` service's calls say when their work begins.
        let unstarted =
            Unstarted(game_service.then(|| (note.clone(), metrics.clone(), S::NAME, method)));
        Box::pin(NOTE.scope(note, async move {
            let mut response = inner.call(req).await?;
            unstarted.answered();
            let elapsed = started.elapsed();
            let headers = response.headers();
            let code = code_label(headers.get("grpc-status"));
            let reason = reason_label(headers.get(REASON_KEY));
            metrics.call(S::NAME, method, code, reason, elapsed, game_service);
            match reason {
                r if r == Reason::RateLimited.as_str() => metrics.refused(Refusal::RateLimit),
                r if r == Reason::ServerFull.as_str() => metrics.refused(Refusal::ServerFull),
                _ => {}
            }
            NOTE.with(|note| {
                tracing::debug!(
                    target: "borbaman_server::calls",
                    service = S::NAME,
                    method,
                    game = note.game.load(Relaxed),
                    duration_us = elapsed.as_micros() as u64,
                    code,
                    reason,
                    "call"
                );
                // Written only for a client that asked (a benchmark): a
                // player's client does not, and every call would pay for it.
                if wants_timing
                    && let Ok(value) =
                        HeaderValue::from_str(&note.timing(Some(elapsed)).to_string())
                {
                    response.headers_mut().insert(TIMING_KEY, value);
                }
                let queued = Duration::from_micros(note.queued_us.load(Relaxed));
                if queued >= BUSY_QUEUED {
                    response
                        .headers_mut()
                        .insert(BUSY_KEY, HeaderValue::from(queued.as_millis() as u64));
                }
            });
            Ok(response)
        }))
    }
}

/// A call not answered yet: dropped before its work began ([`begin`]),
/// its client hung up first, and it is counted so ([`Metrics::hung_up`]).
struct Unstarted(Option<(Arc<CallNote>, Metrics, &'static str, &'static str)>);

impl Unstarted {
    fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for Unstarted {
    fn drop(&mut self) {
        let Some((note, metrics, service, method)) = self.0.take() else {
            return;
        };
        if note.began.load(Relaxed) {
            return;
        }
        tracing::debug!(
            target: "borbaman_server::calls",
            service,
            method,
            "hung up on before its work began: dropped"
        );
        metrics.hung_up(service, method);
    }
}

/// The `Game` service's full name.
const GAME_SERVICE: &str = "borbaman.v1.Game";

/// The method label of `path` (`/package.Service/Method`): the method if
/// it is one of `methods`, else `unknown`.
pub fn method_label(path: &str, methods: &'static [&'static str]) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or("");
    methods
        .iter()
        .find(|m| **m == name)
        .copied()
        .unwrap_or("unknown")
}

/// The canonical name of a `grpc-status` header; none means `OK`.
fn code_label(status: Option<&HeaderValue>) -> &'static str {
    let Some(status) = status else { return "OK" };
    let code = status
        .to_str()
        .ok()
        .and_then(|s| s.parse::<i32>().ok())
        .map(tonic::Code::from_i32)
        .unwrap_or(tonic::Code::Unknown);
    code_name(code)
}

/// gRPC's canonical upper-case code names.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// A `borbaman-reason` label: a known reason, `none`, or `other`.
fn reason_label(reason: Option<&HeaderValue>) -> &'static str {
    match reason {
        None => "none",
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|s| Reason::from_str(s).ok())
            .map(Reason::as_str)
            .unwrap_or("other"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_outside_the_list_are_unknown() {
        assert_eq!(method_label("/borbaman.v1.Game/Act", GAME_METHODS), "Act");
        assert_eq!(
            method_label("/borbaman.v1.Game/Exfiltrate", GAME_METHODS),
            "unknown"
        );
        assert_eq!(method_label("", GAME_METHODS), "unknown");
    }

    #[test]
    fn the_method_lists_match_the_proto() {
        let proto = include_str!("../../../proto/borbaman.proto");
        for (service, methods) in [
            ("Game", GAME_METHODS),
            ("Registry", REGISTRY_METHODS),
            ("Status", STATUS_METHODS),
        ] {
            let body = proto
                .split(&format!("service {service} {{"))
                .nth(1)
                .and_then(|rest| rest.split('}').next())
                .unwrap_or_else(|| panic!("service {service} not in the proto"));
            let declared: Vec<&str> = body
                .lines()
                .filter_map(|l| l.trim().strip_prefix("rpc "))
                .filter_map(|l| l.split('(').next())
                .map(str::trim)
                .collect();
            assert_eq!(declared, methods, "service {service}");
        }
    }

    #[test]
    fn outcomes_are_canonical_codes_and_known_reasons() {
        assert_eq!(code_label(None), "OK");
        assert_eq!(
            code_label(Some(&HeaderValue::from_static("14"))),
            "UNAVAILABLE"
        );
        assert_eq!(code_label(Some(&HeaderValue::from_static("x"))), "UNKNOWN");
        assert_eq!(reason_label(None), "none");
        assert_eq!(
            reason_label(Some(&HeaderValue::from_static("server-full"))),
            "server-full"
        );
        assert_eq!(
            reason_label(Some(&HeaderValue::from_static("made-up"))),
            "other"
        );
    }

    #[tokio::test]
    async fn notes_reach_the_call_and_nothing_outside_one() {
        note_game(7); // outside a call: ignored
        let timing = NOTE
            .scope(Arc::default(), async {
                note_game(42);
                note_gate_wait(Duration::from_micros(1500));
                note_db(Duration::from_micros(700));
                note_cas_retry();
                note_cas_pause(Duration::from_micros(200));
                // Work the call spawns notes into the same call.
                tokio::spawn(in_this_call(async {
                    note_db(Duration::from_micros(300));
                }))
                .await
                .unwrap();
                NOTE.with(|n| (n.game.load(Relaxed), n.timing(None).to_string()))
            })
            .await;
        assert_eq!(
            timing,
            (42, "gate=1.500;db=0.300;cas=1;cas_ms=0.900".to_string()),
            "the lost write's database time and the pause count as the retry's"
        );
    }
}
