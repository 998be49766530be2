//! `TcpProxy`: a TCP forwarder on loopback that can be cut and healed, so a
//! fault can take one game server off its database while its clients still
//! reach it (a network partition between that server and PostgreSQL: a
//! gray failure, as the server's health check still says it serves).
//!
//! [`LocalCluster`](crate::LocalCluster) puts one in front of the database
//! for each server slot when asked to
//! ([`database_proxy`](crate::ClusterConfig::database_proxy)) and gives
//! that server the proxy's address in its database URL.
//!
//! - [`TcpProxy::cut`] closes every forwarded connection at once (the
//!   server's side ends with a reset; PostgreSQL sees its client go and
//!   rolls back whatever it was doing) and from then on resets each new
//!   connection as soon as it is accepted: the server's connection
//!   attempts fail at their first read, at once. (A partition that drops
//!   packets instead would leave them hanging until the server's acquire
//!   timeout; its callers' hedged copies go elsewhere before that.)
//! - [`TcpProxy::heal`] lets new connections through again; the ones cut
//!   stay closed, as after a real partition.
//!
//! Plain threads, no async runtime: an accept thread, and two threads per
//! forwarded connection that block on `read` and pass every byte on at
//! once (`TCP_NODELAY` on both legs). That adds two thread wake-ups to each
//! database round trip, which is why the cluster proxies only when a run
//! needs the fault.
//!
//! A proxy started with [`TcpProxy::with_wan`] emulates distance instead:
//! every byte waits a one-way delay each way, with jitter and rare stalls
//! as its [`WanSpec`] says (see [`delay`]). [`LocalCluster`](crate::LocalCluster)
//! puts such proxies in front of its game servers when asked
//! ([`wan`](crate::ClusterConfig::wan)); their upstream follows the server
//! when it is replaced ([`TcpProxy::set_upstream`]).

mod delay;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::wan::WanSpec;

use borbaman_shutdown::Stopper;

/// Longest wait for the upstream to accept a forwarded connection.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Buffer of one direction of one connection: a PostgreSQL message of a
/// game call fits, a bigger one takes several reads.
const BUFFER: usize = 16 * 1024;

/// A forwarder from a port on 127.0.0.1 to `upstream`. Dropping it closes
/// the listener and every connection.
pub struct TcpProxy {
    address: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    /// Stopped on drop.
    stopper: Stopper,
}

struct Shared {
    /// Where connections go; empty: they are refused (no server yet).
    upstream: Mutex<Vec<SocketAddr>>,
    /// The distance emulated, if any.
    wan: Option<WanSpec>,
    state: Mutex<State>,
    /// Stopped on drop: the accept thread ends at its next connection.
    stopping: borbaman_shutdown::Shutdown,
}

#[derive(Default)]
struct State {
    cut: bool,
    /// Both sockets of every open forwarded connection, by id, so that a
    /// cut can shut them down from outside their threads.
    links: HashMap<u64, [TcpStream; 2]>,
    next_id: u64,
    /// Connections reset because the proxy was cut, since it started.
    refused: u64,
}

impl TcpProxy {
    /// Listens on a free port of 127.0.0.1 and forwards each connection to
    /// `upstream` (`host:port`, resolved once, now).
    pub fn start(upstream: &str) -> std::io::Result<TcpProxy> {
        TcpProxy::listen(resolve(upstream)?, None)
    }

    /// A proxy that emulates the distance `wan` between its clients and
    /// `upstream` (`None`: no upstream yet, connections are refused until
    /// [`TcpProxy::set_upstream`]).
    pub fn with_wan(upstream: Option<&str>, wan: WanSpec) -> std::io::Result<TcpProxy> {
        let upstream = match upstream {
            Some(upstream) => resolve(upstream)?,
            None => Vec::new(),
        };
        TcpProxy::listen(upstream, Some(wan))
    }

    /// Sends new connections to `upstream` from now on (a server replaced
    /// on another port); open ones keep theirs.
    pub fn set_upstream(&self, upstream: &str) -> std::io::Result<()> {
        *self.shared.upstream.lock().unwrap() = resolve(upstream)?;
        Ok(())
    }

    /// The distance this proxy emulates, if any.
    pub fn wan(&self) -> Option<WanSpec> {
        self.shared.wan
    }

    fn listen(upstream: Vec<SocketAddr>, wan: Option<WanSpec>) -> std::io::Result<TcpProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let address = listener.local_addr()?;
        let (stopper, stopping) = borbaman_shutdown::channel();
        let shared = Arc::new(Shared {
            upstream: Mutex::new(upstream),
            wan,
            state: Mutex::new(State::default()),
            stopping,
        });
        let accept = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("proxy-{}", address.port()))
                .spawn(move || accept_loop(listener, shared))?
        };
        Ok(TcpProxy {
            address,
            shared,
            accept: Some(accept),
            stopper,
        })
    }

    /// Where clients connect: `127.0.0.1:<port>`.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Cuts the path: every open connection is closed at once, and new
    /// ones are reset until [`TcpProxy::heal`].
    pub fn cut(&self) {
        let links: Vec<[TcpStream; 2]> = {
            let mut state = self.shared.state.lock().unwrap();
            state.cut = true;
            state.links.drain().map(|(_, link)| link).collect()
        };
        for [client, upstream] in links {
            close(&client, true);
            close(&upstream, false);
        }
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.shared.state.lock().unwrap().cut = false;
    }

    pub fn is_cut(&self) -> bool {
        self.shared.state.lock().unwrap().cut
    }

    /// Connections forwarded now.
    pub fn open_connections(&self) -> usize {
        self.shared.state.lock().unwrap().links.len()
    }

    /// Connections reset because the path was cut, since the start.
    pub fn refused(&self) -> u64 {
        self.shared.state.lock().unwrap().refused
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.stopper.stop();
        self.cut();
        // The accept thread is blocked in accept(): a connection wakes it,
        // and it sees `stopping`.
        let _ = TcpStream::connect_timeout(&self.address, Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// `upstream`'s addresses, resolved now; at least one.
fn resolve(upstream: &str) -> std::io::Result<Vec<SocketAddr>> {
    let resolved: Vec<SocketAddr> = upstream.to_socket_addrs()?.collect();
    if resolved.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{upstream} resolves to no address"),
        ));
    }
    Ok(resolved)
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopping.is_shutdown() {
            return;
        }
        let Ok(client) = client else { continue };
        if shared.state.lock().unwrap().cut {
            refuse(&shared, client);
            continue;
        }
        // Connecting may take a while if the upstream is slow: not on the
        // accept thread, so other connections are not held up behind it.
        let shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("proxy-link".into())
            .spawn(move || forward(shared, client));
        if let Err(err) = spawned {
            eprintln!("proxy: cannot start a thread: {err}");
        }
    }
}

/// Resets a connection that arrived while the path is cut: dropped with a
/// zero linger, it ends with RST alone, and the peer's next read fails.
fn refuse(shared: &Shared, client: TcpStream) {
    shared.state.lock().unwrap().refused += 1;
    set_linger_zero(&client);
}

/// Connects `client` to the upstream and pumps bytes both ways until one
/// side closes or the proxy is cut.
fn forward(shared: Arc<Shared>, client: TcpStream) {
    let accepted = Instant::now();
    if let Some(wan) = shared.wan {
        // The handshake crosses the distance: over a real link the
        // connection opens a round trip after the SYN leaves (SYN, then
        // SYN-ACK). The kernel has already accepted it here, so the
        // upstream is reached a round trip later instead, and the client's
        // first bytes, waiting in the socket meanwhile, leave from then on.
        let mut rng = rand::rng();
        std::thread::sleep(wan.sample(&mut rng) + wan.sample(&mut rng));
        if shared.stopping.is_shutdown() {
            return;
        }
    }
    let addresses = shared.upstream.lock().unwrap().clone();
    let upstream = addresses
        .iter()
        .find_map(|addr| TcpStream::connect_timeout(addr, UPSTREAM_CONNECT_TIMEOUT).ok());
    let Some(upstream) = upstream else {
        if let Some(wan) = shared.wan {
            // A refusal (RST) crosses the distance both ways: the client
            // hears of it a round trip after it connected.
            let back = (accepted + wan.rtt()).saturating_duration_since(Instant::now());
            std::thread::sleep(back);
            set_linger_zero(&client);
            return;
        }
        close(&client, true);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let clones = (|| {
        Ok::<_, std::io::Error>((
            [client.try_clone()?, upstream.try_clone()?],
            upstream.try_clone()?,
            client.try_clone()?,
        ))
    })();
    let Ok((link, upstream_writer, client_writer)) = clones else {
        close(&client, true);
        close(&upstream, false);
        return;
    };
    let id = {
        let mut state = shared.state.lock().unwrap();
        if state.cut {
            // Cut while this connection was being set up.
            state.refused += 1;
            drop(state);
            close(&client, true);
            close(&upstream, false);
            return;
        }
        let id = state.next_id;
        state.next_id += 1;
        state.links.insert(id, link);
        id
    };
    if let Some(wan) = shared.wan {
        // The delayed link makes its own handles.
        drop((upstream_writer, client_writer));
        if let Err(err) = delay::run(shared.clone(), id, client, upstream, wan) {
            eprintln!("proxy: cannot start a delayed link: {err}");
            unlink(&shared, id);
        }
        return;
    }
    let back = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("proxy-back".into())
            .spawn(move || {
                pump(upstream, client_writer);
                unlink(&shared, id);
            })
    };
    if back.is_err() {
        unlink(&shared, id);
        close(&client, true);
        return;
    }
    pump(client, upstream_writer);
    unlink(&shared, id);
}

/// Copies `from` to `to` until `from` ends or either fails, then closes
/// both (PostgreSQL's protocol has no use for half-closed connections).
fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = vec![0u8; BUFFER];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

fn unlink(shared: &Shared, id: u64) {
    if let Some(link) = shared.state.lock().unwrap().links.remove(&id) {
        for socket in &link {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// Shuts `socket` down, which wakes any thread blocked reading it; with
/// `reset`, the peer gets a reset (RST) rather than an orderly close (FIN)
/// once the last handle is dropped, as when a path breaks.
fn close(socket: &TcpStream, reset: bool) {
    if reset {
        set_linger_zero(socket);
    }
    let _ = socket.shutdown(Shutdown::Both);
}

/// `SO_LINGER` with a zero timeout: closing the socket sends RST and drops
/// any unsent data.
fn set_linger_zero(socket: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket we own, with a pointer to a live
    // `linger` and its exact size.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// `url` with its `host:port` replaced by `address`: a PostgreSQL URL
/// (`postgres://user:pass@host:port/db?params`) pointed at a proxy. `None`
/// when the URL has no host to replace, or names its host in a parameter
/// (`?host=`), which the proxy would not see.
pub fn redirect_url(url: &str, address: SocketAddr) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    if tail
        .split_once('?')
        .is_some_and(|(_, query)| query.split('&').any(|p| p.starts_with("host=")))
    {
        return None;
    }
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((userinfo, hostport)) => (Some(userinfo), hostport),
        None => (None, authority),
    };
    // Several hosts (`h1,h2`) would need one proxy each.
    if hostport.is_empty() || hostport.contains(',') {
        return None;
    }
    let userinfo = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    Some(format!("{scheme}://{userinfo}{address}{tail}"))
}

/// `host:port` of a PostgreSQL URL (port 5432 when none is given), for
/// the proxy to forward to.
pub fn url_host_port(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if hostport.is_empty() || hostport.contains(',') {
        return None;
    }
    let has_port = match hostport.rfind(']') {
        // [v6] or [v6]:port
        Some(close) => hostport[close..].contains(':'),
        None => hostport.contains(':'),
    };
    Some(if has_port {
        hostport.to_string()
    } else {
        format!("{hostport}:5432")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;
    use std::time::Instant;

    /// An upstream that echoes every byte back, on its own threads.
    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut buffer = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buffer) {
                        if n == 0 || stream.write_all(&buffer[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        address
    }

    fn connect(proxy: &TcpProxy) -> TcpStream {
        let stream = TcpStream::connect(proxy.address()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream
    }

    /// Sends `text` and reads it back through the proxy.
    fn echo(stream: &mut TcpStream, text: &[u8]) -> std::io::Result<Vec<u8>> {
        stream.write_all(text)?;
        let mut back = vec![0u8; text.len()];
        stream.read_exact(&mut back)?;
        Ok(back)
    }

    /// True once a read on `stream` ends (closed or reset) within 5 s.
    fn is_closed(stream: &mut TcpStream) -> bool {
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        }
    }

    fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !condition() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn forwards_both_ways() {
        let proxy = TcpProxy::start(&echo_server().to_string()).unwrap();
        let mut a = connect(&proxy);
        let mut b = connect(&proxy);
        assert_eq!(echo(&mut a, b"hello").unwrap(), b"hello");
        assert_eq!(echo(&mut b, b"world").unwrap(), b"world");
        // More than one buffer's worth, in one write.
        let big: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        assert_eq!(echo(&mut a, &big).unwrap(), big);
        wait_for("both connections are counted", || {
            proxy.open_connections() == 2
        });
        drop(a);
        wait_for("a closed connection is forgotten", || {
            proxy.open_connections() == 1
        });
        assert!(!proxy.is_cut());
    }

    #[test]
    fn a_cut_closes_connections_and_refuses_new_ones_until_healed() {
        let proxy = TcpProxy::start(&echo_server().to_string()).unwrap();
        let mut before = connect(&proxy);
        assert_eq!(echo(&mut before, b"ping").unwrap(), b"ping");

        proxy.cut();
        assert!(proxy.is_cut());
        assert!(is_closed(&mut before), "an open connection is cut");
        assert_eq!(proxy.open_connections(), 0);
        for _ in 0..3 {
            // The handshake completes (the kernel accepts), then the proxy
            // resets: the first exchange fails, at once.
            let mut during = connect(&proxy);
            let started = Instant::now();
            assert!(echo(&mut during, b"ping").is_err(), "refused while cut");
            assert!(started.elapsed() < Duration::from_secs(1));
        }
        wait_for("refusals are counted", || proxy.refused() >= 3);

        proxy.heal();
        assert!(!proxy.is_cut());
        let mut after = connect(&proxy);
        assert_eq!(echo(&mut after, b"again").unwrap(), b"again");
        // The connection cut before stays closed.
        assert!(is_closed(&mut before));
    }

    #[test]
    fn an_unreachable_upstream_closes_the_connection() {
        // Bind then drop: a port where nothing listens.
        let gone = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let proxy = TcpProxy::start(&gone.to_string()).unwrap();
        let mut client = connect(&proxy);
        assert!(echo(&mut client, b"x").is_err());
    }

    #[test]
    fn dropping_the_proxy_stops_it() {
        let proxy = TcpProxy::start(&echo_server().to_string()).unwrap();
        let address = proxy.address();
        let mut open = connect(&proxy);
        drop(proxy);
        assert!(is_closed(&mut open));
        assert!(TcpStream::connect(address).is_err(), "no longer listening");
    }

    /// PostgreSQL behind a proxy that is cut: the session behind it ends at
    /// once, and the row lock it held goes with it (a partitioned server
    /// must not keep the games it was playing locked).
    #[test]
    fn a_cut_ends_the_database_session_behind_it_and_its_locks() {
        use crate::postgres::{DATABASE, LocalPostgres, PgOptions};
        use std::io::BufRead;
        use std::process::Stdio;

        let pg = LocalPostgres::start_temp(PgOptions {
            fsync: false,
            port: None,
        })
        .unwrap();
        let psql = |port: u16| {
            let mut cmd = pg.command("psql");
            let port = port.to_string();
            cmd.args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres"])
                .args(["-d", DATABASE, "-qtA", "-v", "ON_ERROR_STOP=1"]);
            cmd
        };
        let direct = |sql: &str| {
            let out = psql(pg.port()).args(["-c", sql]).output().unwrap();
            assert!(out.status.success(), "{sql}: {out:?}");
        };
        direct("CREATE TABLE held (id int PRIMARY KEY, v int); INSERT INTO held VALUES (1, 0)");

        let proxy = TcpProxy::start(&format!("127.0.0.1:{}", pg.port())).unwrap();
        let mut holder = psql(proxy.address().port())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = holder.stdin.take().unwrap();
        input
            .write_all(b"BEGIN;\nSELECT v FROM held WHERE id = 1 FOR UPDATE;\n")
            .unwrap();
        input.flush().unwrap();
        let mut output = std::io::BufReader::new(holder.stdout.take().unwrap());
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "0", "the row is locked through the proxy");

        proxy.cut();
        let started = Instant::now();
        direct("SET lock_timeout = '5s'; UPDATE held SET v = 1 WHERE id = 1");
        let waited = started.elapsed();
        assert!(
            waited < Duration::from_secs(1),
            "the lock went with the cut session: waited {waited:?}"
        );
        drop(input);
        let _ = holder.kill();
        let _ = holder.wait();
    }

    fn wan(text: &str) -> WanSpec {
        WanSpec::parse(text).unwrap()
    }

    #[test]
    fn a_wan_proxy_delays_every_byte_each_way() {
        let upstream = echo_server().to_string();
        let proxy = TcpProxy::with_wan(Some(&upstream), wan("40ms")).unwrap();
        assert_eq!(proxy.wan(), Some(wan("40ms")));
        let mut client = connect(&proxy);
        // Every exchange, the first included, takes a round trip.
        for _ in 0..4 {
            let started = Instant::now();
            assert_eq!(echo(&mut client, b"again").unwrap(), b"again");
            let rtt = started.elapsed();
            assert!(rtt >= Duration::from_millis(80), "round trip {rtt:?}");
            assert!(rtt < Duration::from_secs(2), "round trip {rtt:?}");
        }
        let big: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        assert_eq!(echo(&mut client, &big).unwrap(), big);
    }

    #[test]
    fn a_wan_proxy_opens_a_connection_a_round_trip_late() {
        let upstream = echo_server().to_string();
        let proxy = TcpProxy::with_wan(Some(&upstream), wan("40ms")).unwrap();
        let started = Instant::now();
        let mut client = connect(&proxy);
        // The handshake's round trip, then the exchange's.
        assert_eq!(echo(&mut client, b"first").unwrap(), b"first");
        let first = started.elapsed();
        assert!(
            first >= Duration::from_millis(160),
            "first exchange {first:?}"
        );
        // Open: a round trip each.
        let started = Instant::now();
        assert_eq!(echo(&mut client, b"next").unwrap(), b"next");
        let next = started.elapsed();
        assert!(
            next < first - Duration::from_millis(40),
            "{next:?} vs {first:?}"
        );
    }

    #[test]
    fn jitter_and_stalls_never_reorder_bytes() {
        let upstream = echo_server().to_string();
        let proxy = TcpProxy::with_wan(Some(&upstream), wan("10ms,10ms,stall=0.05")).unwrap();
        let mut client = connect(&proxy);
        let mut reader = client.try_clone().unwrap();
        let expected: Vec<u8> = (0..200u32).flat_map(|i| i.to_be_bytes()).collect();
        let sent = expected.clone();
        let writer = std::thread::spawn(move || {
            // Separate chunks, each with its own draw of the delay.
            for word in sent.chunks(4) {
                client.write_all(word).unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
            client
        });
        let mut back = vec![0u8; expected.len()];
        reader.read_exact(&mut back).unwrap();
        assert!(back == expected, "the bytes came back out of order");
        drop(writer.join().unwrap());
    }

    #[test]
    fn a_reset_upstream_resets_the_client_one_delay_later() {
        // An upstream that takes a request and dies with a reset, as a
        // killed server's kernel answers.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = listener.local_addr().unwrap().to_string();
        let (died_tx, died) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut byte = [0u8; 1];
            stream.read_exact(&mut byte).unwrap();
            set_linger_zero(&stream);
            drop(stream);
            died_tx.send(Instant::now()).unwrap();
        });
        let proxy = TcpProxy::with_wan(Some(&upstream), wan("50ms")).unwrap();
        let mut client = connect(&proxy);
        client.write_all(b"x").unwrap();
        let mut byte = [0u8; 1];
        let err = client.read(&mut byte).expect_err("the reset comes through");
        let after = died.recv().unwrap().elapsed();
        assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
        assert!(
            after >= Duration::from_millis(45),
            "reset seen {after:?} after it was sent"
        );
        wait_for("the reset link is forgotten", || {
            proxy.open_connections() == 0
        });
    }

    #[test]
    fn a_refused_connection_is_reset_a_round_trip_later_and_follows_a_new_upstream() {
        let gone = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let proxy = TcpProxy::with_wan(Some(&gone.to_string()), wan("30ms")).unwrap();
        let mut client = connect(&proxy);
        let started = Instant::now();
        let mut byte = [0u8; 1];
        let err = client.read(&mut byte).expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
        assert!(
            started.elapsed() >= Duration::from_millis(55),
            "{:?}",
            started.elapsed()
        );

        proxy.set_upstream(&echo_server().to_string()).unwrap();
        let mut client = connect(&proxy);
        assert_eq!(echo(&mut client, b"found").unwrap(), b"found");

        let unset = TcpProxy::with_wan(None, wan("1ms")).unwrap();
        let mut client = connect(&unset);
        assert!(echo(&mut client, b"x").is_err(), "no upstream: refused");
    }

    #[test]
    fn urls_are_pointed_at_the_proxy() {
        let proxy: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let cases = [
            (
                "postgres://postgres@127.0.0.1:5433/borbaman",
                Some("postgres://postgres@127.0.0.1:4000/borbaman"),
            ),
            (
                "postgresql://u:p%40ss@db.example:6543/b?sslmode=disable",
                Some("postgresql://u:p%40ss@127.0.0.1:4000/b?sslmode=disable"),
            ),
            ("postgres://db", Some("postgres://127.0.0.1:4000")),
            (
                "postgres://[::1]:5432/b",
                Some("postgres://127.0.0.1:4000/b"),
            ),
            ("postgres:///b?host=/run/postgresql", None),
            ("postgres://a:1,b:2/b", None),
            ("not a url", None),
        ];
        for (url, want) in cases {
            assert_eq!(redirect_url(url, proxy).as_deref(), want, "{url}");
        }
        assert_eq!(
            url_host_port("postgres://postgres@127.0.0.1:5433/borbaman").as_deref(),
            Some("127.0.0.1:5433")
        );
        assert_eq!(
            url_host_port("postgres://db.example/b").as_deref(),
            Some("db.example:5432")
        );
        assert_eq!(
            url_host_port("postgres://[::1]:7/b").as_deref(),
            Some("[::1]:7")
        );
        assert_eq!(
            url_host_port("postgres://[::1]/b").as_deref(),
            Some("[::1]:5432")
        );
    }
}
