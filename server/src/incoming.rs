//! The accept loop: connection limits, a first-bytes timeout, and back-off
//! when file descriptors run out.
//!
//! tonic's own loop retries at once when `accept` fails, so a server out of
//! file descriptors spins a core. This one waits (10 ms, doubling to 1 s)
//! and says so in the log. A connection beyond the limits (per peer address,
//! or in total) is closed as soon as it is accepted, before any byte is
//! read, and the connections already open are served as before; a slot
//! frees when its connection closes. A connection that sends nothing
//! within the first-bytes timeout is closed, so idle sockets cannot hold
//! the slots.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Sleep;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::metrics::{Metrics, Refusal};

/// Limits on the connections a server accepts; `None` means unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub per_ip: Option<usize>,
    pub total: Option<usize>,
    /// A connection must send its first bytes within this time.
    pub first_bytes_timeout: Option<Duration>,
}

impl ConnectionLimits {
    /// No limit at all (for measurements of the server itself).
    pub const NONE: ConnectionLimits = ConnectionLimits {
        per_ip: None,
        total: None,
        first_bytes_timeout: None,
    };
}

/// Connections open now, per peer address and in total.
#[derive(Debug, Default)]
struct Open {
    per_ip: HashMap<IpAddr, usize>,
    total: usize,
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
        if self.limits.total.is_some_and(|max| open.total >= max)
            || self.limits.per_ip.is_some_and(|max| of_ip >= max)
        {
            if let Some(m) = &self.metrics {
                m.refused(Refusal::Connection);
            }
            return None;
        }
        if let Some(m) = &self.metrics {
            m.connection_opened();
        }
        open.total += 1;
        *open.per_ip.entry(ip).or_default() += 1;
        Some(Slot {
            admission: self.clone(),
            ip,
        })
    }
}

/// One admitted connection's place in the counts; freed when dropped.
#[derive(Debug)]
struct Slot {
    admission: Arc<Admission>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self
            .admission
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        open.total -= 1;
        if let Some(m) = &self.admission.metrics {
            m.connection_closed();
        }
        if let Some(n) = open.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.per_ip.remove(&self.ip);
            }
        }
    }
}

/// An accepted connection that holds its slot while it is open.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    _slot: Slot,
    /// Until the first bytes arrive: when to give up on them.
    first_bytes: Option<Pin<Box<Sleep>>>,
}

impl Connected for Connection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
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

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
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
    Some(Connection {
        stream,
        _slot: slot,
        first_bytes,
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

    #[test]
    fn slots_are_counted_per_address_and_in_total_and_freed_on_drop() {
        let admission = Arc::new(Admission {
            limits: ConnectionLimits {
                per_ip: Some(2),
                total: Some(3),
                first_bytes_timeout: None,
            },
            open: Mutex::default(),
            metrics: None,
        });
        let a = IpAddr::from([10, 0, 0, 1]);
        let b = IpAddr::from([10, 0, 0, 2]);
        let a1 = admission.admit(a).expect("first");
        let _a2 = admission.admit(a).expect("second");
        assert!(admission.admit(a).is_none(), "a third from one address");
        let _b1 = admission.admit(b).expect("another address");
        assert!(admission.admit(b).is_none(), "over the total");
        drop(a1);
        assert!(admission.admit(a).is_some(), "a freed slot is reused");
    }
}
