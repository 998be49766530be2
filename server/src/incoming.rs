//! The accept loop: connection limits, a first-bytes timeout, an idle
//! timeout, eviction of idle connections when the server is full, and
//! back-off when file descriptors run out.
//!
//! tonic's own loop retries at once when `accept` fails, so a server out of
//! file descriptors spins a core. This one waits (10 ms, doubling to 1 s)
//! and says so in the log.
//!
//! A connection beyond the per-address limit is closed as soon as it is
//! accepted, before any byte is read. When the total is reached, the
//! newcomer is admitted and an idle connection (no call open) is closed
//! instead, chosen by [`pick_victim`]: one of the address that holds the
//! most connections, the longest idle of those. So a few silent connections
//! from each of many addresses cannot lock everyone else out; only when
//! every connection has a call open is a newcomer refused.
//!
//! A connection that sends nothing within the first-bytes timeout is
//! closed, and so is one with no call open for the idle timeout: calls are
//! counted per connection by [`TrackCalls`], a layer in front of every
//! service, which finds its connection's [`ConnState`] in the request (the
//! connection's [`PeerInfo`], which tonic puts in every request, under TLS
//! too). The pool of a real client health-checks each connection every
//! 500 ms, a call each time, so its connections are never idle this long;
//! a client that goes quiet for longer reconnects on its next call, as
//! tonic's channels do by themselves. (HTTP/2 keepalive PINGs, which the
//! server sends to find dead peers, are not calls and keep nothing open.)
//!
//! A connection that cannot make write progress for the write-stall
//! timeout is closed: a write (or flush) that has waited that long for
//! room in the socket's send buffer fails. The idle timeout cannot see such
//! a peer: it lives in `poll_read`, and HTTP/2 stops reading once it cannot
//! flush what it owes (the answers to a PING flood, for instance), so a
//! client that makes the server write and never reads would otherwise hold
//! its connection, and the bytes queued for it, forever; HTTP/2's own
//! keepalive GOAWAY waits for the same flush. The deadline's timer wakes
//! the connection's task, HTTP/2 tries to flush again and gets the error,
//! under TLS too (the TLS layer writes through [`Connection`]).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Sleep;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http;
use tonic::codegen::{Future, Service};
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::metrics::{Metrics, Refusal};

/// Limits on the connections a server accepts; `None` means unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub per_ip: Option<usize>,
    pub total: Option<usize>,
    /// A connection must send its first bytes within this time.
    pub first_bytes_timeout: Option<Duration>,
    /// A connection with no call open for this long is closed.
    pub idle_timeout: Option<Duration>,
    /// HTTP/2 PINGs the server sends on every connection, and how long it
    /// waits for the answer before it closes the connection: a peer that
    /// died without closing (power loss, a cable pulled) is found even
    /// while a call of its is open.
    pub keepalive: Option<(Duration, Duration)>,
    /// The longest a call may take, its request's upload included (a
    /// client that sends half a request and stops holds it no longer).
    pub call_timeout: Option<Duration>,
    /// Calls (HTTP/2 streams) open at once on one connection, announced
    /// in SETTINGS as MAX_CONCURRENT_STREAMS; more are refused with
    /// REFUSED_STREAM.
    pub max_streams: Option<u32>,
    /// A connection whose writes have made no progress for this long
    /// (the peer reads nothing) is closed.
    pub write_stall_timeout: Option<Duration>,
}

impl ConnectionLimits {
    /// No limit at all (for measurements of the server itself).
    pub const NONE: ConnectionLimits = ConnectionLimits {
        per_ip: None,
        total: None,
        first_bytes_timeout: None,
        idle_timeout: None,
        keepalive: None,
        call_timeout: None,
        max_streams: None,
        write_stall_timeout: None,
    };
}

/// The default stream limit per connection: a player's pool keeps at most
/// 8 calls in flight (plus a health check and a spectator's few), so no
/// real client comes near it, while an attacker's connection holds 32
/// calls' memory at most, not thousands.
pub const DEFAULT_MAX_STREAMS: u32 = 32;

/// The default write-stall timeout, as long as the idle timeout: a real
/// client reads all the time; a slow network drains a full send buffer in
/// far less.
pub const DEFAULT_WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(20);

/// The default idle timeout: 40 times the 500 ms between a pool's health
/// checks, so a client's warm connection is never closed, while a silent
/// one holds its slot for seconds, not forever.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(20);

/// One open connection's calls, shared by the connection and the calls.
#[derive(Debug)]
pub struct ConnState {
    born: Instant,
    /// Calls open now.
    calls: AtomicUsize,
    /// When the last call ended (or the connection was accepted), in
    /// milliseconds since `born`.
    quiet_since_ms: AtomicU64,
    /// Closed to admit another connection.
    evicted: AtomicBool,
    /// The connection's reader, to wake when it is evicted.
    waker: Mutex<Option<Waker>>,
}

impl ConnState {
    fn new() -> ConnState {
        ConnState {
            born: Instant::now(),
            calls: AtomicUsize::new(0),
            quiet_since_ms: AtomicU64::new(0),
            evicted: AtomicBool::new(false),
            waker: Mutex::new(None),
        }
    }

    /// How long the connection has had no call open; `None` while one is.
    fn idle_for(&self, now: Instant) -> Option<Duration> {
        if self.calls.load(Ordering::Acquire) > 0 {
            return None;
        }
        let quiet_since =
            self.born + Duration::from_millis(self.quiet_since_ms.load(Ordering::Acquire));
        Some(now.saturating_duration_since(quiet_since))
    }

    fn call_started(self: &Arc<Self>) -> CallGuard {
        self.calls.fetch_add(1, Ordering::AcqRel);
        CallGuard(self.clone())
    }

    fn evict(&self) {
        self.evicted.store(true, Ordering::Release);
        let waker = self.waker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn register(&self, cx: &Context<'_>) {
        let mut waker = self.waker.lock().unwrap_or_else(|e| e.into_inner());
        match waker.as_ref() {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => *waker = Some(cx.waker().clone()),
        }
    }
}

/// One open call; the connection is quiet from when the last one drops.
struct CallGuard(Arc<ConnState>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        let ms = self.0.born.elapsed().as_millis() as u64;
        self.0.quiet_since_ms.store(ms, Ordering::Release);
        self.0.calls.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What tonic puts in every request about its connection: the TCP peer
/// (re-inserted as [`TcpConnectInfo`] by [`TrackCalls`], so
/// `Request::remote_addr` works) and the connection's call count.
#[derive(Clone, Debug)]
pub struct PeerInfo {
    tcp: TcpConnectInfo,
    state: Arc<ConnState>,
}

/// A connection that may be closed to admit a newcomer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub id: u64,
    /// Connections its address holds.
    pub of_ip: usize,
    /// How long it has had no call open; `None` while one is.
    pub idle: Option<Duration>,
}

/// The connection to close so a newcomer fits: of those with no call open,
/// one whose address holds the most connections, the longest idle of
/// those; `None` if every connection has a call open.
pub fn pick_victim(candidates: impl IntoIterator<Item = Candidate>) -> Option<u64> {
    candidates
        .into_iter()
        .filter_map(|c| c.idle.map(|idle| (c.of_ip, idle, c.id)))
        .max()
        .map(|(_, _, id)| id)
}

/// Connections open now, per peer address and in total.
#[derive(Debug, Default)]
struct Open {
    per_ip: HashMap<IpAddr, usize>,
    total: usize,
    conns: HashMap<u64, (IpAddr, Arc<ConnState>)>,
    next_id: u64,
}

impl Open {
    fn remove(&mut self, id: u64) -> bool {
        let Some((ip, _)) = self.conns.remove(&id) else {
            return false;
        };
        self.total -= 1;
        if let Some(n) = self.per_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_ip.remove(&ip);
            }
        }
        true
    }
}

/// Admits or refuses new connections; shared by the slots it hands out.
#[derive(Debug)]
struct Admission {
    limits: ConnectionLimits,
    open: Mutex<Open>,
    /// Counts connections open and refused, if given.
    metrics: Option<Metrics>,
}

impl Admission {
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let of_ip = open.per_ip.get(&ip).copied().unwrap_or(0);
        let refused = || {
            if let Some(m) = &self.metrics {
                m.refused(Refusal::Connection);
            }
        };
        if self.limits.per_ip.is_some_and(|max| of_ip >= max) {
            refused();
            return None;
        }
        if self.limits.total.is_some_and(|max| open.total >= max) {
            let now = Instant::now();
            let victim = pick_victim(open.conns.iter().map(|(&id, (ip, state))| Candidate {
                id,
                of_ip: open.per_ip.get(ip).copied().unwrap_or(0),
                idle: state.idle_for(now),
            }));
            let Some(victim) = victim else {
                refused();
                return None;
            };
            if let Some((victim_ip, state)) = open.conns.get(&victim) {
                tracing::debug!(peer = %victim_ip, "closing an idle connection to admit a new one");
                state.evict();
            }
            open.remove(victim);
        }
        if let Some(m) = &self.metrics {
            m.connection_opened();
        }
        let id = open.next_id;
        open.next_id += 1;
        let state = Arc::new(ConnState::new());
        open.total += 1;
        *open.per_ip.entry(ip).or_default() += 1;
        open.conns.insert(id, (ip, state.clone()));
        Some(Slot {
            admission: self.clone(),
            id,
            state,
        })
    }
}

/// One admitted connection's place in the counts; freed when dropped
/// (unless it was evicted, which freed it at once).
#[derive(Debug)]
struct Slot {
    admission: Arc<Admission>,
    id: u64,
    state: Arc<ConnState>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.admission
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(self.id);
        if let Some(m) = &self.admission.metrics {
            m.connection_closed();
        }
    }
}

/// An accepted connection that holds its slot while it is open.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    slot: Slot,
    /// Until the first bytes arrive: when to give up on them.
    first_bytes: Option<Pin<Box<Sleep>>>,
    /// The idle timeout and when to look at the connection's calls next.
    idle: Option<(Duration, Pin<Box<Sleep>>)>,
    /// The write-stall deadline, armed while a write waits for room.
    stall: Option<WriteStall>,
}

/// The deadline of a write that waits for room in the send buffer.
#[derive(Debug)]
struct WriteStall {
    timeout: Duration,
    timer: Pin<Box<Sleep>>,
    /// Whether a write is waiting now (since the timer was last reset).
    waiting: bool,
}

impl WriteStall {
    fn new(timeout: Duration) -> WriteStall {
        WriteStall {
            timeout,
            timer: Box::pin(tokio::time::sleep(timeout)),
            waiting: false,
        }
    }

    /// After a write or flush was polled: progress disarms the deadline; a
    /// wait arms it (if it was not armed) and is an error once the
    /// deadline has passed. The timer is polled with the writer's context,
    /// so the writer is woken to find it out.
    fn check<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: &Poll<io::Result<T>>,
    ) -> Option<io::Error> {
        if polled.is_ready() {
            self.waiting = false;
            return None;
        }
        if !self.waiting {
            self.waiting = true;
            let deadline = tokio::time::Instant::now() + self.timeout;
            self.timer.as_mut().reset(deadline);
        }
        self.timer.as_mut().poll(cx).is_ready().then(|| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for the write-stall timeout",
            )
        })
    }
}

impl Connected for Connection {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        PeerInfo {
            tcp: self.stream.connect_info(),
            state: self.slot.state.clone(),
        }
    }
}

impl Connection {
    /// While the read waits: an error if the connection was evicted or has
    /// had no call open for the idle timeout, else `None` (and the timer
    /// re-armed to look again when the timeout could next run out).
    fn check_idle(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let state = &self.slot.state;
        state.register(cx);
        if state.evicted.load(Ordering::Acquire) {
            return Some(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed to admit another client (the server is full)",
            ));
        }
        let (timeout, timer) = self.idle.as_mut()?;
        while timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            let wait = match state.idle_for(now) {
                Some(idle) if idle >= *timeout => {
                    return Some(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no call on the connection for the idle timeout",
                    ));
                }
                Some(idle) => *timeout - idle,
                None => *timeout,
            };
            timer
                .as_mut()
                .reset(tokio::time::Instant::from_std(now + wait));
        }
        None
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.slot.state.evicted.load(Ordering::Acquire) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed to admit another client (the server is full)",
            )));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if polled.is_pending()
            && let Some(err) = self.check_idle(cx)
        {
            return Poll::Ready(Err(err));
        }
        let Some(deadline) = self.first_bytes.as_mut() else {
            return polled;
        };
        match polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => self.first_bytes = None,
            Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client sent nothing in time",
                )));
            }
            _ => {}
        }
        polled
    }
}

impl Connection {
    /// `polled`, or the write-stall error if the write has waited too long.
    fn unless_stalled<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match self.stall.as_mut().and_then(|s| s.check(cx, &polled)) {
            Some(err) => Poll::Ready(Err(err)),
            None => polled,
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.unless_stalled(cx, polled)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_flush(cx);
        self.unless_stalled(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_shutdown(cx);
        self.unless_stalled(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.unless_stalled(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// A layer in front of every service that counts each connection's open
/// calls (for the idle timeout and eviction) and puts the connection's
/// [`TcpConnectInfo`] in the request.
#[derive(Clone, Copy, Debug, Default)]
pub struct TrackCallsLayer;

impl<S> tower_layer::Layer<S> for TrackCallsLayer {
    type Service = TrackCalls<S>;

    fn layer(&self, inner: S) -> TrackCalls<S> {
        TrackCalls { inner }
    }
}

/// See [`TrackCallsLayer`].
#[derive(Clone, Debug)]
pub struct TrackCalls<S> {
    inner: S,
}

impl<S, B> Service<http::Request<B>> for TrackCalls<S>
where
    S: Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let peer = req.extensions().get::<PeerInfo>().cloned();
        let guard = peer.map(|peer| {
            let guard = peer.state.call_started();
            req.extensions_mut().insert(peer.tcp);
            guard
        });
        let call = self.inner.call(req);
        Box::pin(async move {
            let reply = call.await;
            drop(guard);
            reply
        })
    }
}

/// The stream of admitted connections that tonic serves.
pub type Incoming = ReceiverStream<io::Result<Connection>>;

/// Accepts on `listener` in a task of its own, which ends when the
/// returned stream is dropped.
pub fn accept(listener: TcpListener, limits: ConnectionLimits) -> Incoming {
    accept_counted(listener, limits, None)
}

/// [`accept`], counting the connections open and refused in `metrics`.
pub fn accept_counted(
    listener: TcpListener,
    limits: ConnectionLimits,
    metrics: Option<Metrics>,
) -> Incoming {
    let (tx, rx) = mpsc::channel(16);
    let admission = Arc::new(Admission {
        limits,
        open: Mutex::default(),
        metrics,
    });
    tokio::spawn(async move {
        let mut backoff = BACKOFF_MIN;
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = tx.closed() => return,
            };
            match accepted {
                Ok((stream, peer)) => {
                    backoff = BACKOFF_MIN;
                    if let Some(conn) = admit(&admission, stream, peer)
                        && tx.send(Ok(conn)).await.is_err()
                    {
                        return;
                    }
                }
                Err(err) if is_out_of_resources(&err) => {
                    tracing::warn!(error = %err, wait_ms = backoff.as_millis() as u64,
                        "cannot accept connections: out of file descriptors or memory; waiting");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
                // A connection that failed before it was accepted (reset,
                // aborted): nothing to do.
                Err(err) => tracing::debug!(error = %err, "accept failed"),
            }
        }
    });
    ReceiverStream::new(rx)
}

const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

fn admit(admission: &Arc<Admission>, stream: TcpStream, peer: SocketAddr) -> Option<Connection> {
    let Some(slot) = admission.admit(peer.ip()) else {
        tracing::debug!(%peer, "connection refused: too many connections");
        return None;
    };
    let _ = stream.set_nodelay(true);
    let first_bytes = admission
        .limits
        .first_bytes_timeout
        .map(|t| Box::pin(tokio::time::sleep(t)));
    let idle = admission
        .limits
        .idle_timeout
        .map(|t| (t, Box::pin(tokio::time::sleep(t))));
    let stall = admission.limits.write_stall_timeout.map(WriteStall::new);
    Some(Connection {
        stream,
        slot,
        first_bytes,
        idle,
        stall,
    })
}

fn is_out_of_resources(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Raises this process's soft limit on open files to its hard limit, so
/// the connection limits, not the default of 1024 descriptors, decide how
/// many clients a server holds. Returns the limit in force.
pub fn raise_open_files_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write `limit`.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                return Err(io::Error::last_os_error());
            }
            limit = raised;
        }
    }
    Ok(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(per_ip: usize, total: usize) -> Arc<Admission> {
        Arc::new(Admission {
            limits: ConnectionLimits {
                per_ip: Some(per_ip),
                total: Some(total),
                ..ConnectionLimits::NONE
            },
            open: Mutex::default(),
            metrics: None,
        })
    }

    #[test]
    fn slots_are_counted_per_address_and_freed_on_drop() {
        let admission = admission(2, 3);
        let a = IpAddr::from([10, 0, 0, 1]);
        let a1 = admission.admit(a).expect("first");
        let _a2 = admission.admit(a).expect("second");
        assert!(admission.admit(a).is_none(), "a third from one address");
        drop(a1);
        assert!(admission.admit(a).is_some(), "a freed slot is reused");
    }

    #[test]
    fn a_full_server_closes_an_idle_connection_for_a_newcomer() {
        let admission = admission(2, 3);
        let (a, b, c) = (
            IpAddr::from([10, 0, 0, 1]),
            IpAddr::from([10, 0, 0, 2]),
            IpAddr::from([10, 0, 0, 3]),
        );
        let a1 = admission.admit(a).unwrap();
        let _a1_call = a1.state.call_started();
        let a2 = admission.admit(a).unwrap();
        let b1 = admission.admit(b).unwrap();
        // Full: the newcomer gets in; the idle one of the address with the
        // most connections goes.
        let c1 = admission.admit(c).expect("admitted although full");
        assert!(
            a2.state.evicted.load(Ordering::Acquire),
            "a's idle one goes"
        );
        assert!(
            !a1.state.evicted.load(Ordering::Acquire),
            "not one with a call open"
        );
        assert!(!b1.state.evicted.load(Ordering::Acquire));
        drop(a2); // its connection closes: counted once
        assert_eq!(admission.open.lock().unwrap().total, 3);
        // Every connection busy: refused.
        let _b1_call = b1.state.call_started();
        let _c1_call = c1.state.call_started();
        assert!(admission.admit(IpAddr::from([10, 0, 0, 4])).is_none());
    }

    #[test]
    fn the_victim_is_idle_and_from_the_busiest_address() {
        let c = |id, of_ip, idle_ms: Option<u64>| Candidate {
            id,
            of_ip,
            idle: idle_ms.map(Duration::from_millis),
        };
        assert_eq!(
            pick_victim([c(1, 1, Some(9000)), c(2, 2, Some(10))]),
            Some(2)
        );
        assert_eq!(pick_victim([c(1, 2, Some(50)), c(2, 2, Some(10))]), Some(1));
        assert_eq!(pick_victim([c(1, 5, None), c(2, 1, Some(0))]), Some(2));
        assert_eq!(pick_victim([c(1, 5, None)]), None);
        assert_eq!(pick_victim([]), None);
    }
}
