//! Call rate limits: token buckets in this server's memory.
//!
//! Acts, and reads of the caller's own game (`GetState`), are limited per
//! session (a token the cluster issued: checked before any bucket, so
//! made-up tokens cost no bucket at all); joins per peer address; the reads
//! that need no session (`ListGames`, `WatchState`, `GetReplay`,
//! `Rankings`) per peer address, each weighted by what it costs the
//! database ([`Read::cost`]). The buckets
//! live in one server's memory, so a client spreading its calls over `n`
//! servers gets up to `n` times the rate; that is enough to stop a flood
//! from one connection without a shared store on every call. A call over
//! its limit is refused before the store is asked, so it writes nothing.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::token::TokenHash;

/// The default of [`CallLimits::reads_per_ip_per_s`]: two spectators at
/// 20 Hz from one address, with room for their lists of live games.
pub const DEFAULT_READS_PER_IP_PER_S: u32 = 50;

/// The limits a server applies to calls; `None` means unlimited.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CallLimits {
    /// Acts per session per second (the bucket holds one second's worth).
    pub acts_per_s: Option<u32>,
    /// Joins per peer address per minute (the bucket holds one minute's
    /// worth).
    pub joins_per_ip_per_min: Option<u32>,
    /// Read units (see [`Read::cost`]) per peer address per second, for the
    /// reads that need no session (the bucket holds one second's worth). A
    /// spectator watching at 20 Hz spends 20.
    pub reads_per_ip_per_s: Option<u32>,
}

impl CallLimits {
    /// No limit at all (for measurements of the server itself).
    pub const NONE: CallLimits = CallLimits {
        acts_per_s: None,
        joins_per_ip_per_min: None,
        reads_per_ip_per_s: None,
    };
}

/// The reads limited per peer address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// One game's state.
    WatchState,
    /// The top rankings (at most 100 rows of one table).
    Rankings,
    /// Up to 100 live games, each a whole state.
    ListGames,
    /// A finished game and its whole log.
    GetReplay,
}

impl Read {
    /// What one call takes from its peer's bucket: about its database work,
    /// in units of one game's state read.
    pub fn cost(self) -> u32 {
        match self {
            Read::WatchState | Read::Rankings => 1,
            Read::ListGames => 5,
            Read::GetReplay => 10,
        }
    }
}

/// The rate limiters of one server; shared by its services.
#[derive(Debug)]
pub struct CallLimiter {
    acts: Option<RateLimiter<TokenHash>>,
    /// `GetState` per session, at the acts' rate.
    states: Option<RateLimiter<TokenHash>>,
    joins: Option<RateLimiter<IpAddr>>,
    reads: Option<RateLimiter<IpAddr>>,
}

impl CallLimiter {
    pub fn new(limits: CallLimits) -> CallLimiter {
        CallLimiter {
            acts: limits
                .acts_per_s
                .map(|n| RateLimiter::new(f64::from(n), Duration::from_secs(1))),
            states: limits
                .acts_per_s
                .map(|n| RateLimiter::new(f64::from(n), Duration::from_secs(1))),
            joins: limits
                .joins_per_ip_per_min
                .map(|n| RateLimiter::new(f64::from(n), Duration::from_secs(60))),
            reads: limits
                .reads_per_ip_per_s
                .map(|n| RateLimiter::new(f64::from(n), Duration::from_secs(1))),
        }
    }

    /// Whether the session may read its game's state now (and counts it).
    pub fn allow_state(&self, session: &TokenHash) -> bool {
        self.states
            .as_ref()
            .is_none_or(|l| l.allow(*session, Instant::now()))
    }

    /// Whether `peer` may make the sessionless read `read` now (and counts
    /// its cost if so). A call whose peer is unknown is not limited.
    pub fn allow_read(&self, peer: Option<IpAddr>, read: Read) -> bool {
        match (&self.reads, peer) {
            (Some(l), Some(ip)) => l.allow_n(ip, f64::from(read.cost()), Instant::now()),
            _ => true,
        }
    }

    /// Whether the session may act now (and counts the act if so).
    pub fn allow_act(&self, session: &TokenHash) -> bool {
        self.acts
            .as_ref()
            .is_none_or(|l| l.allow(*session, Instant::now()))
    }

    /// Whether `peer` may join now (and counts the join if so). A call
    /// whose peer is unknown is not limited.
    pub fn allow_join(&self, peer: Option<IpAddr>) -> bool {
        match (&self.joins, peer) {
            (Some(l), Some(ip)) => l.allow(ip, Instant::now()),
            _ => true,
        }
    }
}

/// A token bucket per key: up to `burst` calls at once, refilled at
/// `burst` per `period`.
#[derive(Debug)]
pub struct RateLimiter<K> {
    burst: f64,
    per_s: f64,
    buckets: Mutex<Buckets<K>>,
}

#[derive(Debug)]
struct Buckets<K> {
    map: HashMap<K, Bucket>,
    /// Size at which full buckets are next swept out.
    sweep_at: usize,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

const MIN_SWEEP: usize = 1024;

impl<K: Hash + Eq + Copy> RateLimiter<K> {
    pub fn new(burst: f64, period: Duration) -> RateLimiter<K> {
        RateLimiter {
            burst,
            per_s: burst / period.as_secs_f64(),
            buckets: Mutex::new(Buckets {
                map: HashMap::new(),
                sweep_at: MIN_SWEEP,
            }),
        }
    }

    /// Takes one token from `key`'s bucket at `now`, if it has one.
    pub fn allow(&self, key: K, now: Instant) -> bool {
        self.allow_n(key, 1.0, now)
    }

    /// Takes `n` tokens from `key`'s bucket at `now`, if it has them.
    pub fn allow_n(&self, key: K, n: f64, now: Instant) -> bool {
        // A std mutex: held for a few arithmetic operations, never across
        // an await.
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.map.len() >= buckets.sweep_at {
            // A full bucket is the same as no bucket: forget it, so the
            // map holds only keys active within the last period.
            let (burst, per_s) = (self.burst, self.per_s);
            buckets
                .map
                .retain(|_, b| refill(b, now, per_s, burst) < burst);
            buckets.sweep_at = (buckets.map.len() * 2).max(MIN_SWEEP);
        }
        let bucket = buckets.map.entry(key).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        if refill(bucket, now, self.per_s, self.burst) >= n {
            bucket.tokens -= n;
            true
        } else {
            false
        }
    }
}

/// Brings `bucket` to `now` and returns its tokens.
fn refill(bucket: &mut Bucket, now: Instant, per_s: f64, burst: f64) -> f64 {
    let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
    bucket.tokens = (bucket.tokens + elapsed * per_s).min(burst);
    bucket.at = bucket.at.max(now);
    bucket.tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_the_rate_holds() {
        let limiter = RateLimiter::new(40.0, Duration::from_secs(1));
        let t0 = Instant::now();
        let passed = (0..100).filter(|_| limiter.allow(1u8, t0)).count();
        assert_eq!(passed, 40);
        // Another key has its own bucket.
        assert!(limiter.allow(2u8, t0));
        // A quarter of a second later, a quarter of the burst is back.
        let t1 = t0 + Duration::from_millis(250);
        let passed = (0..100).filter(|_| limiter.allow(1u8, t1)).count();
        assert_eq!(passed, 10);
    }

    #[test]
    fn a_steady_20_hz_client_is_never_refused() {
        let limiter = RateLimiter::new(40.0, Duration::from_secs(1));
        let t0 = Instant::now();
        for i in 0..2_000u64 {
            // 20 Hz polling plus a move between each poll: 40 calls a second.
            let at = t0 + Duration::from_millis(25 * i);
            assert!(limiter.allow(7u8, at), "call {i}");
        }
    }

    #[test]
    fn idle_keys_are_forgotten() {
        let limiter = RateLimiter::new(2.0, Duration::from_secs(1));
        let t0 = Instant::now();
        for key in 0..MIN_SWEEP as u32 {
            assert!(limiter.allow(key, t0));
        }
        let later = t0 + Duration::from_secs(5);
        assert!(limiter.allow(u32::MAX, later));
        assert_eq!(limiter.buckets.lock().unwrap().map.len(), 1);
    }

    #[test]
    fn no_limit_allows_everything() {
        let limiter = CallLimiter::new(CallLimits::NONE);
        assert!((0..10_000).all(|_| limiter.allow_act(&[0; 32])));
        assert!((0..10_000).all(|_| limiter.allow_state(&[0; 32])));
        let ip = Some(IpAddr::from([127, 0, 0, 1]));
        assert!((0..10_000).all(|_| limiter.allow_join(ip)));
        assert!((0..10_000).all(|_| limiter.allow_read(ip, Read::GetReplay)));
    }

    #[test]
    fn reads_are_limited_per_address_by_cost() {
        let limiter = RateLimiter::new(50.0, Duration::from_secs(1));
        let t0 = Instant::now();
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        let cost = f64::from(Read::ListGames.cost());
        let passed = (0..100).filter(|_| limiter.allow_n(a, cost, t0)).count();
        assert_eq!(passed, 10, "50 units are 10 ListGames");
        assert!(
            !limiter.allow_n(a, 1.0, t0),
            "and then not even one WatchState"
        );
        assert!(limiter.allow_n(b, cost, t0), "another address has its own");
    }

    #[test]
    fn a_spectator_at_20_hz_is_never_limited() {
        let limiter = CallLimiter::new(CallLimits {
            reads_per_ip_per_s: Some(DEFAULT_READS_PER_IP_PER_S),
            ..CallLimits::NONE
        });
        let ip = IpAddr::from([10, 0, 0, 3]);
        let t0 = Instant::now();
        let reads = limiter.reads.as_ref().unwrap();
        let (watch, list) = (Read::WatchState.cost(), Read::ListGames.cost());
        for i in 0..2_000u64 {
            let at = t0 + Duration::from_millis(50 * i);
            assert!(reads.allow_n(ip, f64::from(watch), at), "watch {i}");
            // and the live games every second
            if i % 20 == 0 {
                assert!(reads.allow_n(ip, f64::from(list), at), "list {i}");
            }
        }
    }
}
