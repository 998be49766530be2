//! Ports for the processes this crate starts (PostgreSQL, etcd, Patroni),
//! which take a port number on their command line rather than a socket.
//!
//! A port the kernel picks (bind to port 0, close) comes from the ephemeral
//! range, which is also where every outgoing connection gets its local port:
//! between the pick and the daemon's bind (or a restart on the same port)
//! any test's client connection can take it. So ports are picked below the
//! ephemeral range, from a random start, where only listeners bind; the
//! kernel's pick is the fallback when that range is too small.
//!
//! Below that range the listeners are other processes of this crate (tests
//! running side by side), and a port free a moment ago may be one whose
//! daemon is between a stop and a restart (a Patroni member brought back
//! after a host loss). So a process claims each port it picks: an exclusive
//! lock on a file named after the port, held until the process exits; the
//! others skip a claimed port.

use std::fs::{File, OpenOptions};
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// The claims of this process, held (open and locked) until it exits.
static CLAIMS: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// Claims `port` for this process; false if another open claim holds it.
/// Where no claim can be written (no shared directory), every port counts
/// as unclaimed and the bind check alone decides, as before.
fn claim(port: u16) -> bool {
    let dir = std::env::temp_dir().join("borbaman-ports");
    if std::fs::create_dir_all(&dir).is_err() {
        return true;
    }
    let Ok(file) = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(port.to_string()))
    else {
        return true;
    };
    match file.try_lock() {
        Ok(()) => {
            CLAIMS.lock().unwrap_or_else(|e| e.into_inner()).push(file);
            true
        }
        Err(_) => false,
    }
}

/// The lowest port below the ephemeral range that is picked.
const FIRST: u16 = 10_000;

/// `n` distinct ports free on 127.0.0.1 a moment ago, below the ephemeral
/// range when it leaves room.
pub(crate) fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    // Held until all are picked, so that none is picked twice.
    let mut held = Vec::with_capacity(n);
    if ephemeral_low > FIRST + 2_000 {
        let (first, last) = (FIRST, ephemeral_low - 1);
        let span = u64::from(last - first) + 1;
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::from(d.subsec_nanos()))
            .unwrap_or_default()
            ^ (u64::from(std::process::id()) << 7);
        let start = seed % span;
        for k in 0..span {
            let port = first + ((start + k) % span) as u16;
            if let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
                if !claim(port) {
                    continue;
                }
                held.push(listener);
                if held.len() == n {
                    break;
                }
            }
        }
    }
    // Else (or if that range is full): ports the kernel picks.
    while held.len() < n {
        held.push(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?);
    }
    held.iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

/// One port, as [`free_ports`].
pub(crate) fn free_port() -> std::io::Result<u16> {
    Ok(free_ports(1)?[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ephemeral_low() -> u16 {
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(32768)
    }

    #[test]
    fn free_ports_are_distinct_and_below_the_ephemeral_range() {
        let ports = free_ports(12).unwrap();
        let mut sorted = ports.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 12);
        let low = ephemeral_low();
        if low > FIRST + 2_000 {
            assert!(
                ports.iter().all(|&p| (FIRST..low).contains(&p)),
                "{ports:?} not all in {FIRST}..{low}"
            );
        }
    }

    /// A port one process picked is not picked by another while the first
    /// lives, even with nothing bound to it (a daemon between a stop and
    /// its restart): the claim stands in for the other process here.
    #[test]
    fn a_picked_port_stays_claimed_while_nothing_listens_on_it() {
        let port = free_port().unwrap();
        // Nothing listens on `port` now; a second claim must still fail.
        assert!(
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok(),
            "{port} should be free to bind"
        );
        let low = ephemeral_low();
        if low > FIRST + 2_000 {
            assert!(!claim(port), "{port} was claimed a second time");
        }
    }

    #[test]
    fn one_port_is_below_the_ephemeral_range_too() {
        let port = free_port().unwrap();
        let low = ephemeral_low();
        if low > FIRST + 2_000 {
            assert!((FIRST..low).contains(&port), "{port} not in {FIRST}..{low}");
        }
    }
}
