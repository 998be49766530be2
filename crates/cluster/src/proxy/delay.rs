//! The delayed links of a [`TcpProxy`](super::TcpProxy) that emulates
//! distance ([`TcpProxy::with_wan`](super::TcpProxy::with_wan)): every
//! chunk read from one side is written to the other once its delay, drawn
//! by [`WanSpec::sample`], has passed, and never before the chunk ahead of
//! it (TCP's order: a late chunk holds up the ones behind it).
//!
//! Four threads a connection, one reader and one writer each way, joined
//! by a queue of timed chunks: the reader stamps each chunk with its
//! release time as it arrives, the writer sleeps until then. The end of a
//! side crosses the distance too, in order behind the data: an orderly
//! close (FIN) as a close, a reset (RST) as a reset, so a client whose
//! server was killed sees its connection reset one delay later, as it
//! would over a real link, rather than hang. A write that fails (the
//! destination is gone) is sent back as a reset the same way.
//!
//! The TCP handshake crosses the distance too: the kernel completes it
//! before the proxy sees the connection, so the proxy reaches the upstream
//! only a round trip after it accepted, and the client's first bytes wait
//! in the socket until then. A new connection's first exchange so takes
//! two round trips, as over a real link (SYN/SYN-ACK, then the exchange).
//! A refused connection (no server behind the proxy) is reset a round trip
//! after it opened, when a real `connect` would have failed.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Instant;

use super::{BUFFER, Shared, set_linger_zero};
use crate::wan::WanSpec;

/// Stack of a link thread: its buffer is on the heap, so a small one does.
const THREAD_STACK: usize = 64 * 1024;

/// A link thread's name and body.
type Job = (&'static str, Box<dyn FnOnce() + Send>);

/// What a reader hands its writer.
enum Chunk {
    Data(Vec<u8>),
    /// The side ended: with a reset (`true`) or an orderly close.
    End {
        reset: bool,
    },
}

struct Timed {
    release: Instant,
    chunk: Chunk,
}

/// Forgets the link in the proxy's table (without closing it) when the
/// last of its threads ends, or at once on a reset: the table holds a
/// handle to each socket, and the reset (RST) leaves only when the last
/// handle closes.
struct Link {
    shared: Arc<Shared>,
    id: u64,
}

impl Link {
    fn forget(&self) {
        self.shared.state.lock().unwrap().links.remove(&self.id);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.forget();
    }
}

/// Pumps `client` ⇄ `upstream` with `wan`'s delays until both sides end;
/// returns once both sides have ended (this thread runs one of the four).
pub(super) fn run(
    shared: Arc<Shared>,
    id: u64,
    client: TcpStream,
    upstream: TcpStream,
    wan: WanSpec,
) -> std::io::Result<()> {
    let link = Arc::new(Link { shared, id });
    let (up_tx, up_rx) = channel::<Timed>();
    let (down_tx, down_rx) = channel::<Timed>();
    let threads: [Job; 3] = [
        ("wan-up-read", {
            let (from, tx, link) = (client.try_clone()?, up_tx.clone(), link.clone());
            Box::new(move || read_side(from, tx, wan, link))
        }),
        ("wan-up-write", {
            let (to, back, link) = (upstream.try_clone()?, down_tx.clone(), link.clone());
            Box::new(move || write_side(up_rx, to, back, wan, link))
        }),
        ("wan-down-read", {
            let link = link.clone();
            Box::new(move || read_side(upstream, down_tx, wan, link))
        }),
    ];
    for (name, body) in threads {
        std::thread::Builder::new()
            .name(name.into())
            .stack_size(THREAD_STACK)
            .spawn(body)?;
    }
    write_side(down_rx, client, up_tx, wan, link);
    Ok(())
}

/// Reads `from` and queues each chunk with its release time, then its end.
fn read_side(mut from: TcpStream, queue: Sender<Timed>, wan: WanSpec, _link: Arc<Link>) {
    let mut rng = rand::rng();
    let mut buffer = vec![0u8; BUFFER];
    loop {
        let chunk = match from.read(&mut buffer) {
            Ok(0) => Chunk::End { reset: false },
            Ok(n) => Chunk::Data(buffer[..n].to_vec()),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => Chunk::End { reset: true },
        };
        let end = matches!(chunk, Chunk::End { .. });
        let timed = Timed {
            release: Instant::now() + wan.sample(&mut rng),
            chunk,
        };
        if queue.send(timed).is_err() || end {
            return;
        }
    }
}

/// Writes each queued chunk to `to` at its release time (never before the
/// chunk ahead of it), then passes the end on. A failed write is sent `back` as a reset, one delay later.
fn write_side(
    queue: Receiver<Timed>,
    mut to: TcpStream,
    back: Sender<Timed>,
    wan: WanSpec,
    link: Arc<Link>,
) {
    for Timed { release, chunk } in queue {
        let wait = release.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        match chunk {
            Chunk::Data(bytes) => {
                if to.write_all(&bytes).is_err() {
                    let _ = back.send(Timed {
                        release: Instant::now() + wan.delay,
                        chunk: Chunk::End { reset: true },
                    });
                    // Wake the reader of the broken side, if it still reads.
                    let _ = to.shutdown(Shutdown::Read);
                    return;
                }
            }
            Chunk::End { reset: false } => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Chunk::End { reset: true } => {
                // RST, not FIN: a zero linger, then the last handle closes
                // once this side's reader (woken here) has ended.
                set_linger_zero(&to);
                let _ = to.shutdown(Shutdown::Read);
                link.forget();
                return;
            }
        }
    }
}
