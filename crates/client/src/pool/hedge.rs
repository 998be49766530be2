//! When to hedge: the delay after which a call that has not been answered
//! is also sent to a second server, derived from this client's recent
//! round trips.
//!
//! The delay is the p99 of the last [`WINDOW`] answered first attempts,
//! times [`MARGIN`], held between [`FLOOR`] and [`CAP`]. So on a healthy
//! cluster about one call in a hundred (those in the tail) is sent twice,
//! and a server that stops answering costs its callers one delay, not the
//! call deadline.
//!
//! - The floor (2 ms) keeps a quiet loopback cluster, whose p99 is below
//!   a millisecond, from hedging every scheduling hiccup: a second copy
//!   costs the database a write attempt, and each copy is a full call.
//! - The cap (40 ms) bounds what a hung or partitioned server costs a
//!   call: with a loopback round trip of a few milliseconds on top, the
//!   caller still has its answer within 50 ms.
//! - Until [`MIN_SAMPLES`] answers have been seen, the cap is used.
//!
//! Hedges are also rationed: every call earns [`BUDGET_PER_CALL`] of a
//! hedge, up to [`BUDGET_BURST`], and a hedge spends one. When a whole
//! cluster is slow (overloaded, not broken), hedging every call would
//! double its load and make it slower still; the budget keeps hedges near
//! a tenth of the calls at most, while a client whose server hangs still
//! hedges at once (and then stays on the server that answered).

use std::time::Duration;

/// Round trips remembered.
pub const WINDOW: usize = 256;
/// Answers needed before the window's percentile is trusted.
pub const MIN_SAMPLES: usize = 32;
pub const FLOOR: Duration = Duration::from_millis(2);
pub const CAP: Duration = Duration::from_millis(40);
/// Headroom over the p99, so that the tail of a healthy server is mostly
/// let through.
pub const MARGIN: f64 = 1.5;
/// Share of a hedge each call earns.
pub const BUDGET_PER_CALL: f64 = 0.1;
/// Hedges that can be spent at once after a quiet spell.
pub const BUDGET_BURST: f64 = 10.0;

/// The delay is recomputed after this many new samples (a sort of the
/// window costs a few microseconds; calls come every few milliseconds).
const RECOMPUTE_EVERY: usize = 16;

/// Recent round trips and the hedge delay they give.
#[derive(Clone, Debug)]
pub struct HedgeDelay {
    samples_us: Vec<u32>,
    next: usize,
    since_recompute: usize,
    delay: Duration,
    budget: f64,
}

impl Default for HedgeDelay {
    fn default() -> Self {
        HedgeDelay {
            samples_us: Vec::with_capacity(WINDOW),
            next: 0,
            since_recompute: 0,
            delay: CAP,
            budget: BUDGET_BURST,
        }
    }
}

impl HedgeDelay {
    /// The current delay.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// A call starts: it earns its share of a hedge.
    pub fn earn(&mut self) {
        self.budget = (self.budget + BUDGET_PER_CALL).min(BUDGET_BURST);
    }

    /// Takes one hedge from the budget; false when there is none left.
    pub fn spend(&mut self) -> bool {
        if self.budget >= 1.0 {
            self.budget -= 1.0;
            true
        } else {
            false
        }
    }

    /// Records the round trip of an attempt that answered.
    pub fn record(&mut self, rtt: Duration) {
        let us = u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX);
        if self.samples_us.len() < WINDOW {
            self.samples_us.push(us);
        } else {
            self.samples_us[self.next] = us;
            self.next = (self.next + 1) % WINDOW;
        }
        self.since_recompute += 1;
        if self.samples_us.len() >= MIN_SAMPLES && self.since_recompute >= RECOMPUTE_EVERY {
            self.since_recompute = 0;
            self.delay = self.compute();
        }
    }

    fn compute(&self) -> Duration {
        let mut sorted = self.samples_us.clone();
        sorted.sort_unstable();
        let p99 = sorted[(sorted.len() * 99).div_ceil(100) - 1];
        Duration::from_micros((f64::from(p99) * MARGIN) as u64).clamp(FLOOR, CAP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_follows_the_tail_between_floor_and_cap() {
        let mut h = HedgeDelay::default();
        assert_eq!(h.delay(), CAP, "no samples yet");
        // 1 ms calls with a 10 ms tail in three calls out of a hundred.
        for i in 0..WINDOW {
            let ms = if i % 100 >= 97 { 10 } else { 1 };
            h.record(Duration::from_millis(ms));
        }
        assert_eq!(h.delay(), Duration::from_millis(15));
        // A fast cluster: the floor.
        for _ in 0..WINDOW {
            h.record(Duration::from_micros(300));
        }
        assert_eq!(h.delay(), FLOOR);
        // A slow one: the cap.
        for _ in 0..WINDOW {
            h.record(Duration::from_millis(500));
        }
        assert_eq!(h.delay(), CAP);
    }

    #[test]
    fn hedges_are_rationed_to_a_tenth_of_the_calls() {
        let mut h = HedgeDelay::default();
        let mut spent = 0;
        for _ in 0..1000 {
            h.earn();
            if h.spend() {
                spent += 1;
            }
        }
        // The burst, then one in ten.
        assert!((100..=111).contains(&spent), "{spent}");
    }
}
