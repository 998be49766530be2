//! How much extra work a client may add: the retry and hedge budget, and
//! backoff with full jitter. Free of I/O.
//!
//! The numbers are [`Tuning`]'s fields.
//!
//! **Budget** (after gRPC's retry throttling, proposal A6, and Finagle's
//! retry budget): a token bucket per pool. Every call earns
//! `token_ratio_milli` thousandths of a token, up to `max_tokens`; every hedge and every
//! retry that could add load (a retry after a timeout, while the first copy
//! may still run) spends one, and is not made without one. So over any
//! stretch, hedges and such retries are at most a tenth of the calls plus
//! the burst: a slow or overloaded cluster is not sent more work because it
//! is slow. A retry after a server is known gone (its connection reset, or
//! it fails its health probe) is free: the call never ran there.
//!
//! **Reserve**: the last `reserve_tokens` are kept for a call that stays
//! late (`stays_late` hedge delays): a copy at the hedge delay spends
//! only the tokens above them. Copies at the hedge delay come in bursts
//! (a moment of machine-wide slowness makes every call a few milliseconds
//! late at once), and a burst had emptied a client's bucket just before
//! its server turned slow: its next seven calls could neither be copied
//! nor leave the server at their deadline, and each waited out the slow
//! server's 200 ms (a loopback `slow` run's maximum, 203.6 ms).
//!
//! **Backoff** (AWS Architecture Blog, "Exponential Backoff and Jitter"):
//! the n-th pause is uniform in [0, min(cap, base·2ⁿ)], so clients that
//! failed together (a database stall ends for everyone at once) come back
//! spread out instead of together. With the budget spent, the cap is
//! `throttled_cap`: the call still goes on, slowly.

use std::time::Duration;

use rand::Rng;

use super::tuning::Tuning;

/// A token, in the thousandths the bucket counts in.
const TOKEN_MILLI: u32 = 1000;

/// The token bucket.
#[derive(Clone, Debug)]
pub struct Budget {
    tokens_milli: u32,
    tuning: Tuning,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(&Tuning::DEFAULT)
    }
}

impl Budget {
    /// A full bucket, sized as `tuning` says.
    pub fn new(tuning: &Tuning) -> Budget {
        Budget {
            tokens_milli: tuning.max_tokens * TOKEN_MILLI,
            tuning: *tuning,
        }
    }

    /// A call starts: it earns its share.
    pub fn earn(&mut self) {
        let t = &self.tuning;
        self.tokens_milli =
            (self.tokens_milli + t.token_ratio_milli).min(t.max_tokens * TOKEN_MILLI);
    }

    /// Takes a token for a hedge or a retry; false (and nothing taken) when
    /// none is left.
    pub fn spend(&mut self) -> bool {
        if self.has_token() {
            self.tokens_milli -= TOKEN_MILLI;
            true
        } else {
            false
        }
    }

    /// Tokens left, in thousandths.
    pub fn tokens_milli(&self) -> u32 {
        self.tokens_milli
    }

    /// True while a token is left.
    pub fn has_token(&self) -> bool {
        self.tokens_milli >= TOKEN_MILLI
    }

    /// Whether the copy of a call late for `late_for` on a server whose
    /// hedge delay is `hedge_delay` may be paid for: now, once the call
    /// has stayed late (only the reserve is left, see [`stays_late`]), or
    /// not at all. `net_rtt`: the server's network round trip.
    pub fn copy_funds(
        &self,
        late_for: Duration,
        hedge_delay: Duration,
        net_rtt: Duration,
    ) -> Funds {
        let t = &self.tuning;
        let stays_late = stays_late(t, hedge_delay, net_rtt);
        let above_reserve = self.tokens_milli >= (t.reserve_tokens + 1) * TOKEN_MILLI;
        if above_reserve || (self.has_token() && late_for >= stays_late) {
            Funds::Now
        } else if self.has_token() {
            Funds::LateFor(stays_late)
        } else {
            Funds::None
        }
    }
}

/// How late a call must be before its copy may spend the reserve: its
/// network round trip and `stays_late` times the rest of its hedge delay
/// (the server's work and its spread), and never less than the hedge
/// delay. A moment of machine-wide slowness delays a call by a few
/// milliseconds whatever the distance; the network round trip is no part
/// of it. On loopback (a round trip of ~0.3 ms) that is about four hedge
/// delays, as it always was; 100 ms away it is the round trip and four
/// times the ~20 ms above it. Counted as four whole hedge delays, a far
/// server's was ~900 ms: the first call late on a server hung 100 ms away
/// held its copy until the probe found the server silent, a network RTO
/// after the hedge delay, and was answered after the hedge delay, that RTO
/// and the copy's round trip (671 ms where 2 × RTT + 100 ms is 500).
pub fn stays_late(t: &Tuning, hedge_delay: Duration, net_rtt: Duration) -> Duration {
    let above_network = hedge_delay.saturating_sub(net_rtt);
    (net_rtt + above_network.saturating_mul(t.stays_late)).max(hedge_delay)
}

/// What the budget says of a late call's copy ([`Budget::copy_funds`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Funds {
    Now,
    /// Once the call has been late for this long.
    LateFor(Duration),
    None,
}

/// The pause before the retry after `step` earlier ones (0 for the first):
/// full jitter under min(cap, base·2^step), the cap being `backoff_cap`
/// or, with `throttled`, `throttled_cap`. A server's pushback, when
/// longer, is obeyed as given.
pub fn backoff<R: Rng + ?Sized>(
    t: &Tuning,
    step: u32,
    throttled: bool,
    pushback: Option<Duration>,
    rng: &mut R,
) -> Duration {
    let cap = if throttled {
        t.throttled_cap
    } else {
        t.backoff_cap
    };
    let ceiling = t.backoff_base.saturating_mul(1u32 << step.min(20)).min(cap);
    let jittered = Duration::from_micros(rng.random_range(0..=ceiling.as_micros() as u64));
    match pushback {
        Some(pushback) if pushback > jittered => pushback,
        _ => jittered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const T: Tuning = Tuning::DEFAULT;
    const ZERO: Duration = Duration::ZERO;
    const MAX_TOKENS: u32 = T.max_tokens;
    const RESERVE_TOKENS: u32 = T.reserve_tokens;
    const STAYS_LATE: u32 = T.stays_late;
    const BACKOFF_BASE: Duration = T.backoff_base;
    pub(crate) const BACKOFF_CAP: Duration = T.backoff_cap;
    const THROTTLED_CAP: Duration = T.throttled_cap;

    #[test]
    fn hedges_and_retries_stay_under_a_tenth_of_the_calls() {
        let mut budget = Budget::default();
        let mut spent = 0;
        for _ in 0..1000 {
            budget.earn();
            // Every call wants a hedge and a retry: an overloaded cluster.
            spent += budget.spend() as u32;
            spent += budget.spend() as u32;
        }
        // The burst, then one in ten.
        assert!((100..=111).contains(&spent), "{spent}");
    }

    #[test]
    fn a_quiet_pool_can_hedge_a_burst_at_once() {
        let mut budget = Budget::default();
        assert!((0..10).all(|_| budget.spend()));
        assert!(!budget.spend() && !budget.has_token());
        for _ in 0..10 {
            budget.earn();
        }
        assert!(budget.spend(), "ten calls earn one hedge");
    }

    #[test]
    fn the_last_tokens_are_kept_for_a_call_that_stays_late() {
        let delay = Duration::from_millis(3);
        let mut budget = Budget::default();
        let late = delay * STAYS_LATE;
        // A burst of copies at the hedge delay spends down to the reserve.
        let mut at_delay = 0;
        while budget.copy_funds(delay, delay, ZERO) == Funds::Now {
            assert!(budget.spend());
            at_delay += 1;
        }
        assert_eq!(at_delay, MAX_TOKENS - RESERVE_TOKENS);
        assert_eq!(budget.copy_funds(delay, delay, ZERO), Funds::LateFor(late));
        // A call still late after four hedge delays spends the reserve.
        for _ in 0..RESERVE_TOKENS {
            assert_eq!(budget.copy_funds(late, delay, ZERO), Funds::Now);
            assert!(budget.spend());
        }
        assert_eq!(budget.copy_funds(late, delay, ZERO), Funds::None);
        // Ten calls earn one token back, for a call that stays late.
        for _ in 0..10 {
            budget.earn();
        }
        assert_eq!(budget.copy_funds(delay, delay, ZERO), Funds::LateFor(late));
        assert_eq!(budget.copy_funds(late * 2, delay, ZERO), Funds::Now);
    }

    #[test]
    fn a_far_servers_late_call_spends_the_reserve_a_few_of_its_work_lengths_after_its_hedge_delay()
    {
        let ms = Duration::from_millis;
        let mut budget = Budget::default();
        while budget.copy_funds(ms(225), ms(225), ms(205)) == Funds::Now {
            assert!(budget.spend());
        }
        // 100 ms away: a round trip of 205 ms and 20 ms above it. The
        // reserve is the call's 285 ms into it, not 900.
        assert_eq!(
            budget.copy_funds(ms(225), ms(225), ms(205)),
            Funds::LateFor(ms(285))
        );
        assert_eq!(budget.copy_funds(ms(285), ms(225), ms(205)), Funds::Now);
        // On loopback, four hedge delays as before, to within the round trip.
        assert_eq!(stays_late(&T, ms(3), ZERO), ms(12));
        let loopback = stays_late(&T, ms(3), Duration::from_micros(300));
        assert!(loopback > ms(11) && loopback <= ms(12), "{loopback:?}");
        // A hedge delay under the round trip: the round trip.
        assert_eq!(stays_late(&T, ms(200), ms(210)), ms(210));
    }

    #[test]
    fn backoff_grows_and_is_spread_out() {
        let mut rng = StdRng::seed_from_u64(3);
        for step in 0..12 {
            let ceiling = (BACKOFF_BASE * (1 << step)).min(BACKOFF_CAP);
            for _ in 0..50 {
                assert!(backoff(&T, step, false, None, &mut rng) <= ceiling);
            }
        }
        // Clients that failed together come back spread over the cap, not
        // together: 1000 of them at the cap fill every tenth of it.
        let mut tenths = [0u32; 10];
        for _ in 0..1000 {
            let pause = backoff(&T, 10, false, None, &mut rng);
            let tenth = (pause.as_micros() * 10 / (BACKOFF_CAP.as_micros() + 1)) as usize;
            tenths[tenth] += 1;
        }
        assert!(
            tenths.iter().all(|&n| (60..=140).contains(&n)),
            "{tenths:?}"
        );
        // Spent budget: up to a second.
        let longest = (0..200)
            .map(|_| backoff(&T, 10, true, None, &mut rng))
            .max()
            .unwrap();
        assert!(
            longest > BACKOFF_CAP && longest <= THROTTLED_CAP,
            "{longest:?}"
        );
    }

    #[test]
    fn a_servers_pushback_is_obeyed() {
        let mut rng = StdRng::seed_from_u64(5);
        let pushback = Duration::from_millis(700);
        for step in 0..5 {
            assert_eq!(backoff(&T, step, false, Some(pushback), &mut rng), pushback);
        }
        // A shorter pushback never makes the pause shorter than the backoff
        // would be: it is a floor.
        let short = Duration::from_micros(1);
        assert!(backoff(&T, 8, false, Some(short), &mut rng) >= short);
    }
}
