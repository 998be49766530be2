//! A call's server-side timing, as a server reports it to a client that
//! asks: the client sends the metadata key [`TIMING_KEY`] (any value) and
//! the answer's head carries [`ServerTiming`] under the same key, as
//! `gate=0.012;db=0.734;cas=1;cas_ms=0.410;total=1.302` (milliseconds, and
//! compare-and-set retries). Benchmarks use it to attribute each slow call
//! to its parts; a player's client need not ask.
//!
//! The format is defined here once, for the server that writes it and the
//! clients that read it. Unknown keys are skipped and missing ones read as
//! absent, so either side can add a part without breaking the other.

use std::fmt;
use std::time::Duration;

/// Request metadata key asking for the call's server timing, and the
/// answer's key carrying it.
pub const TIMING_KEY: &str = "borbaman-timing";

/// Answer metadata key a server sets, for every client, on a game call
/// that queued in it for the database (a place under admission control,
/// then a pooled connection) at least [`BUSY_QUEUED`]: the value is the
/// wait in whole milliseconds. The server's database work is at its bound:
/// a copy of a late call sent to another server of the cluster would queue
/// the same way there (they share one database), so clients do not hedge
/// calls on a busy server (see the pool's `decide` rules).
pub const BUSY_KEY: &str = "borbaman-busy";

/// Answer metadata key a server sets on a game call of a running game
/// whose other connected players have not called it lately: the caller is
/// alone on this server, its game-mates' calls go to another. A pool that
/// left its game's server only because copies sent here won twice goes
/// back to that server (see the pool's `decide::back_when_alone`), so a
/// moment of slowness does not split a game over two servers. The value
/// is `1`.
pub const ALONE_KEY: &str = "borbaman-alone";

/// Request metadata key a client sets on a hedged copy of a call (the
/// value is `1`): the copy's server does not count it as its player's
/// calls coming there (see [`ALONE_KEY`]), since the player's calls still
/// go to another server.
pub const COPY_KEY: &str = "borbaman-copy";

/// The least queueing that makes an answer busy: a wait for a connection
/// shorter than this is a handover between two calls, not a queue.
pub const BUSY_QUEUED: std::time::Duration = std::time::Duration::from_millis(2);

/// Where one call's time went inside the server that answered it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerTiming {
    /// Waiting behind earlier calls on the same game (the game's gate).
    pub gate: Duration,
    /// In database transactions whose work was kept: connection acquire
    /// and statements, transient retries included.
    pub db: Duration,
    /// Compare-and-set writes that lost to another call and were read
    /// again.
    pub cas_retries: u32,
    /// What those lost writes cost: the database time thrown away and the
    /// pauses before reading again.
    pub cas: Duration,
    /// From the request's head reaching the server to the answer's head
    /// leaving it; `None` from a server that does not say.
    pub total: Option<Duration>,
}

impl ServerTiming {
    /// Reads a header value; `None` when it is not one (no part parses).
    pub fn parse(value: &str) -> Option<ServerTiming> {
        let mut timing = ServerTiming::default();
        let mut any = false;
        for part in value.split(';') {
            let Some((key, number)) = part.split_once('=') else {
                continue;
            };
            let ms = || {
                number
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|ms| ms.is_finite() && *ms >= 0.0)
                    .map(|ms| Duration::from_micros((ms * 1000.0).round() as u64))
            };
            let parsed = match key.trim() {
                "gate" => ms().map(|d| timing.gate = d),
                "db" => ms().map(|d| timing.db = d),
                "cas_ms" => ms().map(|d| timing.cas = d),
                "total" => ms().map(|d| timing.total = Some(d)),
                "cas" => number.trim().parse().ok().map(|n| timing.cas_retries = n),
                _ => None,
            };
            any |= parsed.is_some();
        }
        any.then_some(timing)
    }
}

impl fmt::Display for ServerTiming {
    /// The header value: milliseconds with three decimals, written from
    /// whole microseconds (the same text as `{:.3}` of the milliseconds,
    /// without formatting a float on every call that asks).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gate={};db={};cas={};cas_ms={}",
            Ms(self.gate),
            Ms(self.db),
            self.cas_retries,
            Ms(self.cas)
        )?;
        if let Some(total) = self.total {
            write!(f, ";total={}", Ms(total))?;
        }
        Ok(())
    }
}

/// A duration as milliseconds with three decimals (whole microseconds).
struct Ms(Duration);

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0.as_micros();
        write!(f, "{}.{:03}", us / 1000, us % 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timing_round_trips_through_its_header_value() {
        let timing = ServerTiming {
            gate: Duration::from_micros(12),
            db: Duration::from_micros(734),
            cas_retries: 1,
            cas: Duration::from_micros(410),
            total: Some(Duration::from_micros(1302)),
        };
        let value = timing.to_string();
        assert_eq!(value, "gate=0.012;db=0.734;cas=1;cas_ms=0.410;total=1.302");
        assert_eq!(ServerTiming::parse(&value), Some(timing));
    }

    #[test]
    fn milliseconds_are_written_as_a_float_with_three_decimals_would_be() {
        for us in [0u64, 1, 9, 10, 999, 1000, 1001, 1302, 99_999, 123_456_789] {
            let d = Duration::from_micros(us);
            assert_eq!(
                Ms(d).to_string(),
                format!("{:.3}", us as f64 / 1000.0),
                "{us} µs"
            );
        }
    }

    #[test]
    fn an_older_or_newer_server_is_read_for_what_it_says() {
        let older = ServerTiming::parse("gate=1.500;db=1.000;cas=1").unwrap();
        assert_eq!(older.gate, Duration::from_micros(1500));
        assert_eq!(older.cas_retries, 1);
        assert_eq!(older.total, None);
        let newer = ServerTiming::parse("db=2;queue=7.5").unwrap();
        assert_eq!(newer.db, Duration::from_millis(2));
        assert_eq!(ServerTiming::parse("nonsense"), None);
        assert_eq!(ServerTiming::parse("db=-1;gate=x"), None);
    }
}
