//! How far each server is: round-trip estimates in the manner of TCP
//! (RFC 6298), and the deadline, hedge delay and hung-probe deadline of a
//! call derived from them. Free of I/O: the pool feeds it samples.
//!
//! Two estimates per server, because a call's round trip is the network's
//! plus the server's work (a database transaction), and the two answer
//! different questions:
//!
//! - `net`, from `grpc.health.v1` checks on the warm connection (answered
//!   without touching the database): how far the server is. It bounds the
//!   probe that tells a hung server from a far one, and the hedge delay.
//! - `call`, from answered calls: how long this server takes to answer a
//!   call from here. It sets the call deadline.
//!
//! Both follow RFC 6298: the first sample R sets SRTT = R, RTTVAR = R/2;
//! each later one RTTVAR ← ¾·RTTVAR + ¼·|SRTT − R|, then SRTT ← ⅞·SRTT + ⅛·R.
//! SRTT + 4·RTTVAR ("RTO") is a round trip that is late.
//!
//! From them (the names are [`Tuning`]'s fields):
//!
//! - **call deadline** = max(`deadline_floor`, call RTO +
//!   `stall_allowance`), at most `deadline_cap`. A server is given its
//!   usual round trip and its variation, plus the length of a database stall
//!   a healthy server may sit in; on loopback that is the 150 ms the
//!   loopback figures were tuned with, at 100 ms one way about 340 ms.
//! - **slow deadline** (every server slow: the cause is shared) = max(
//!   `slow_deadline_floor`, 4 × the call deadline).
//! - **hedge delay** = the p95 of this client's last `window` answered
//!   calls to that server ("The Tail at Scale"), at least `hedge_floor`
//!   (a loopback cluster whose p95 is under a millisecond must not hedge
//!   every scheduling hiccup) and at most the network RTO plus
//!   `hedge_headroom` (the loopback cap of 40 ms, now counted above the
//!   round trip instead of from zero, so a far server is never hedged before
//!   its answer could arrive, and a hung near one costs ≤ 40 ms). Before
//!   `min_samples` answers of its own, a server's p95 is *borrowed*
//!   ([`ServerTiming::borrow_work`]): its own network SRTT plus the work
//!   above the network that the servers this client knows better take at
//!   their p95 (the longest of them), since every server does the same
//!   transactions on one database. A game moves between servers (a hedge
//!   won, a failover) and its first calls on a server it rarely used had
//!   the cap as their hedge delay, 41–45 ms on loopback: a server that
//!   turned slow then cost every such call that long before its copy left.
//!   With nothing to borrow from it is that cap.
//!
//!   **The jitter band.** Far away, a link's jitter spreads every call's
//!   round trip over a band (±10 % of 150 ms each way: 270–330 ms), and
//!   the p95 lies inside it: 5 % of the calls were late by the p95 alone,
//!   their copies could not win (a copy sent inside the band answers a
//!   whole round trip later than the first), and they spent the budget:
//!   at 150 ms the clients' hedges were 9.5 % of their calls, the budget's
//!   tenth, so when a server hung the first late call found the reserve
//!   only, held its copy ~75 ms, and one found no token at all and waited
//!   for the probe's verdict (1 028 ms where 2 × RTT + 100 ms is 700). So
//!   the hedge delay is never less than the window's median call and
//!   `jitter_band` times the window's spread above it (p95 − p50: the top
//!   of a triangular band, a normal one's p99.9), counting at most
//!   `jitter_band_tenths` tenths of the network SRTT: on loopback the
//!   spread is scheduling and the database, and the p95 rules as it did.
//!   (Three network RTTVARs, tried first, were too unsteady: health checks
//!   come every 0.5–2 s, and a client whose RTTVAR had sunk to ~5 ms
//!   hedged at 320 ms, inside the band, and spent its budget again.) A
//!   hung far server then costs the band's top and one round trip more,
//!   2 × RTT plus the jitter.
//! - **probe deadline** (a health check sent when a call is late) = network
//!   RTO + `probe_slack`, at least `probe_floor`: a server that cannot
//!   answer a health check within its own round trip plus scheduling slack
//!   is hung, not far.

use std::time::Duration;

use super::tuning::Tuning;

/// One RFC 6298 estimator.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rtt {
    srtt_us: f64,
    rttvar_us: f64,
    samples: u64,
}

impl Rtt {
    pub fn observe(&mut self, sample: Duration) {
        let r = sample.as_secs_f64() * 1e6;
        if self.samples == 0 {
            self.srtt_us = r;
            self.rttvar_us = r / 2.0;
        } else {
            self.rttvar_us = 0.75 * self.rttvar_us + 0.25 * (self.srtt_us - r).abs();
            self.srtt_us = 0.875 * self.srtt_us + 0.125 * r;
        }
        self.samples += 1;
    }

    /// The smoothed round trip; `None` before the first sample.
    pub fn srtt(&self) -> Option<Duration> {
        (self.samples > 0).then(|| micros(self.srtt_us))
    }

    /// The round trip's smoothed variation (zero before the first sample).
    pub fn rttvar(&self) -> Duration {
        micros(self.rttvar_us)
    }

    /// SRTT + 4·RTTVAR: a round trip longer than this is late.
    pub fn rto(&self) -> Option<Duration> {
        (self.samples > 0).then(|| micros(self.srtt_us + 4.0 * self.rttvar_us))
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }
}

fn micros(us: f64) -> Duration {
    Duration::from_micros(us.max(0.0) as u64)
}

/// Everything the pool knows about one server's timing.
#[derive(Clone, Debug, Default)]
pub struct ServerTiming {
    /// The numbers its deadlines are derived with.
    tuning: Tuning,
    /// From health checks: the network.
    pub net: Rtt,
    /// From answered calls: the network and the server's work.
    pub call: Rtt,
    samples_us: Vec<u32>,
    next: usize,
    since_recompute: usize,
    p95: Option<Duration>,
    /// The window's median, beside the p95.
    p50: Option<Duration>,
}

impl ServerTiming {
    /// Nothing known yet, deadlines derived with `tuning`.
    pub fn new(tuning: &Tuning) -> ServerTiming {
        ServerTiming {
            tuning: *tuning,
            ..ServerTiming::default()
        }
    }

    /// A health check on the warm connection answered after `rtt`.
    pub fn record_probe(&mut self, rtt: Duration) {
        self.net.observe(rtt);
    }

    /// A call attempt to this server answered after `rtt`.
    pub fn record_call(&mut self, rtt: Duration) {
        self.call.observe(rtt);
        let us = u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX);
        let t = &self.tuning;
        if self.samples_us.len() < t.window {
            self.samples_us.push(us);
        } else {
            self.samples_us[self.next] = us;
            self.next = (self.next + 1) % t.window;
        }
        self.since_recompute += 1;
        if self.samples_us.len() >= t.min_samples && self.since_recompute >= t.recompute_every {
            self.since_recompute = 0;
            let mut sorted = self.samples_us.clone();
            sorted.sort_unstable();
            let p95 = sorted[(sorted.len() * t.hedge_percentile).div_ceil(100) - 1];
            self.p95 = Some(Duration::from_micros(u64::from(p95)));
            self.p50 = Some(Duration::from_micros(u64::from(sorted[sorted.len() / 2])));
        }
    }

    /// How long a call attempt to this server waits before it is late for
    /// good (see the module docs).
    pub fn deadline(&self) -> Duration {
        let rto = self.call.rto().or(self.net.rto()).unwrap_or_default();
        let t = &self.tuning;
        (rto + t.stall_allowance).clamp(t.deadline_floor, t.deadline_cap)
    }

    /// The deadline once every server has been slow together.
    pub fn slow_deadline(&self) -> Duration {
        let t = &self.tuning;
        (self.deadline() * t.slow_deadline_factor).max(t.slow_deadline_floor)
    }

    /// After this long without an answer a call is late: it may be hedged,
    /// and the server is probed.
    pub fn hedge_delay(&self) -> Duration {
        let t = &self.tuning;
        let cap = self.net.rto().unwrap_or_default() + t.hedge_headroom;
        let cap = cap.min(self.deadline());
        match self.p95 {
            Some(p95) => p95
                .max(self.jitter_band_top())
                .clamp(t.hedge_floor, cap.max(t.hedge_floor)),
            None => cap,
        }
    }

    /// The top of the band a far link's jitter spreads calls over: the
    /// window's median and `jitter_band` times its spread above the median
    /// (p95 − p50), that counting at most `jitter_band_tenths` of the
    /// network SRTT (see the module docs). Zero before both are known.
    fn jitter_band_top(&self) -> Duration {
        let t = &self.tuning;
        let (Some(p50), Some(p95), Some(srtt)) = (self.p50, self.p95, self.net.srtt()) else {
            return Duration::ZERO;
        };
        let spread = p95.saturating_sub(p50);
        p50 + (spread * t.jitter_band).min(srtt * t.jitter_band_tenths / 10)
    }

    /// What this server's calls take above its network round trip at their
    /// p95: the server's work (a database transaction and the queue before
    /// it). `None` before `min_samples` answers or the first health check.
    pub fn work_p95(&self) -> Option<Duration> {
        Some(self.p95?.saturating_sub(self.net.srtt()?))
    }

    /// Whether this server's own answers set its hedge delay.
    pub fn knows_its_p95(&self) -> bool {
        self.p95.is_some()
    }

    /// Before this server has `min_samples` answers of its own, its p95
    /// is taken as its network SRTT plus `work`, what the better-known
    /// servers' calls take above their network (see the module docs and
    /// [`borrowed_work`]). Still clamped as [`Self::hedge_delay`] says.
    pub fn borrow_work(&mut self, work: Duration) {
        if self.p95.is_none()
            && let Some(srtt) = self.net.srtt()
        {
            self.p95 = Some(srtt + work);
        }
    }

    /// A health probe unanswered after this long means the server is hung.
    pub fn probe_deadline(&self) -> Duration {
        let t = &self.tuning;
        (self.net.rto().unwrap_or_default() + t.probe_slack).max(t.probe_floor)
    }
}

/// The work to lend a server that has too few answers of its own: the
/// longest [`ServerTiming::work_p95`] of the others (they share one
/// database, and the longest hedges least).
pub fn borrowed_work<'a>(others: impl IntoIterator<Item = &'a ServerTiming>) -> Option<Duration> {
    others.into_iter().filter_map(ServerTiming::work_p95).max()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Tuning = Tuning::DEFAULT;
    const DEADLINE_FLOOR: Duration = T.deadline_floor;
    const STALL_ALLOWANCE: Duration = T.stall_allowance;
    const DEADLINE_CAP: Duration = T.deadline_cap;
    const HEDGE_FLOOR: Duration = T.hedge_floor;
    const PROBE_FLOOR: Duration = T.probe_floor;
    const WINDOW: usize = T.window;
    const MIN_SAMPLES: usize = T.min_samples;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_estimator_follows_rfc_6298() {
        let mut rtt = Rtt::default();
        assert_eq!(rtt.srtt(), None);
        rtt.observe(ms(100));
        assert_eq!(rtt.srtt(), Some(ms(100)));
        assert_eq!(rtt.rttvar(), ms(50));
        assert_eq!(rtt.rto(), Some(ms(300)));
        rtt.observe(ms(200));
        // RTTVAR = 3/4·50 + 1/4·100 = 62.5; SRTT = 7/8·100 + 1/8·200 = 112.5.
        assert_eq!(rtt.rttvar(), Duration::from_micros(62_500));
        assert_eq!(rtt.srtt(), Some(Duration::from_micros(112_500)));
        // A steady link: the variation decays, SRTT converges.
        for _ in 0..200 {
            rtt.observe(ms(200));
        }
        assert!(rtt.srtt().unwrap().abs_diff(ms(200)) < ms(1));
        assert!(rtt.rttvar() < ms(1));
    }

    /// What the loopback figures were measured with stays: a 150 ms
    /// deadline, a hedge delay of at most ~40 ms.
    #[test]
    fn loopback_keeps_its_deadline_and_hedge_cap() {
        let mut t = ServerTiming::default();
        assert_eq!(t.deadline(), DEADLINE_FLOOR, "nothing known yet");
        t.record_probe(Duration::from_micros(300));
        for _ in 0..50 {
            t.record_probe(Duration::from_micros(250));
            t.record_call(ms(2));
        }
        assert_eq!(t.deadline(), DEADLINE_FLOOR);
        // A fast cluster: the floor (and the loopback's jitter band, a
        // tenth of its 0.25 ms round trip at most, changes nothing felt).
        let fast = t.hedge_delay();
        assert!(
            fast >= HEDGE_FLOOR && fast <= HEDGE_FLOOR + Duration::from_micros(25),
            "{fast:?}"
        );
        // A tail of 60 ms in 10 % of the calls: capped near 40 ms.
        for i in 0..WINDOW {
            t.record_call(ms(if i % 10 == 0 { 60 } else { 2 }));
        }
        let cap = t.hedge_delay();
        assert!(cap >= ms(40) && cap <= ms(42), "{cap:?}");
        assert_eq!(t.probe_deadline(), PROBE_FLOOR);
    }

    /// 100 ms one way (200 ms round trip, ±10 ms jitter): nothing that
    /// arrives in the normal spread is late.
    #[test]
    fn a_far_server_is_not_late_when_it_answers_in_its_round_trip() {
        let mut t = ServerTiming::default();
        for i in 0..200u64 {
            let jitter = (i * 7) % 21; // 0..=20 ms
            t.record_probe(ms(190 + jitter));
            t.record_call(ms(192 + jitter));
        }
        let longest = ms(212);
        assert!(t.hedge_delay() >= ms(205), "{:?}", t.hedge_delay());
        assert!(t.hedge_delay() <= t.deadline());
        assert!(
            t.deadline() > longest + STALL_ALLOWANCE,
            "{:?}",
            t.deadline()
        );
        assert!(t.deadline() < ms(450), "{:?}", t.deadline());
        assert!(t.slow_deadline() >= 4 * t.deadline());
        // A hung server is noticed within about one round trip more.
        assert!(t.probe_deadline() > longest, "{:?}", t.probe_deadline());
        assert!(t.probe_deadline() < ms(400), "{:?}", t.probe_deadline());
    }

    /// 150 ms one way, ±15 ms on each way (the round trip spread over
    /// 270–330 ms): the hedge delay sits at the band's top, so the jitter
    /// alone makes almost no call late (it made 5 % late at the p95), and
    /// no higher, so a hung server's call is copied within the band.
    #[test]
    fn a_far_servers_hedge_delay_sits_at_the_top_of_its_jitter_band() {
        let mut t = ServerTiming::default();
        let mut seed = 7u64;
        let mut jitter = || {
            // A small LCG: deterministic, spread over -15..=15 ms.
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % 30_001
        };
        let mut calls = Vec::new();
        for i in 0..WINDOW * 4 {
            let rtt = Duration::from_micros(270_000 + jitter() + jitter());
            // Health checks are few, and their variation says little: a
            // run of them close together (here, all alike) must not pull
            // the hedge delay into the band.
            if i % 20 == 0 {
                t.record_probe(ms(300));
            }
            let call = rtt + ms(1);
            t.record_call(call);
            calls.push(call);
        }
        let delay = t.hedge_delay();
        let late = calls.iter().filter(|c| **c > delay).count();
        assert!(
            late * 100 <= calls.len(),
            "{late} of {} calls late at {delay:?}",
            calls.len()
        );
        assert!(delay <= ms(336), "{delay:?}: past the band's top");
    }

    #[test]
    fn before_enough_calls_the_hedge_waits_for_the_round_trip_and_headroom() {
        let mut t = ServerTiming::default();
        t.record_probe(ms(200));
        // RTO = 200 + 4·100 = 600 ms, capped by the deadline (700 ms).
        assert_eq!(t.hedge_delay(), ms(640));
        assert_eq!(t.deadline(), ms(700));
        for _ in 0..MIN_SAMPLES - 1 {
            t.record_call(ms(201));
            assert!(t.hedge_delay() > ms(201), "{:?}", t.hedge_delay());
        }
    }

    /// A game that moves to a server it rarely used hedges there as soon as
    /// on the servers it knows, not after the 40 ms cap; a far server lent
    /// the near ones' work still waits for its own round trip.
    #[test]
    fn a_server_with_few_answers_borrows_the_others_work() {
        let mut known = ServerTiming::default();
        for _ in 0..50 {
            known.record_probe(Duration::from_micros(300));
            known.record_call(ms(4));
        }
        let work = known.work_p95().expect("enough answers");
        assert!(work > ms(3) && work < ms(4), "{work:?}");

        let mut near = ServerTiming::default();
        near.record_probe(Duration::from_micros(300));
        // A join's slow answer among its few: its own p95 would be it.
        near.record_call(ms(70));
        for _ in 0..5 {
            near.record_call(ms(4));
        }
        assert!(near.hedge_delay() >= ms(40), "the cap before borrowing");
        assert!(!near.knows_its_p95());
        near.borrow_work(borrowed_work([&known]).unwrap());
        assert_eq!(near.hedge_delay(), ms(4));

        let mut far = ServerTiming::default();
        far.record_probe(ms(200));
        far.borrow_work(work);
        let delay = far.hedge_delay();
        assert!(delay > ms(203) && delay < ms(205), "{delay:?}");

        // A server that knows its own p95 keeps it.
        let before = known.hedge_delay();
        let mut slow = ServerTiming::default();
        for _ in 0..50 {
            slow.record_probe(Duration::from_micros(300));
            slow.record_call(ms(30));
        }
        known.borrow_work(slow.work_p95().unwrap());
        assert_eq!(known.hedge_delay(), before);
        // The longest work is lent.
        assert_eq!(borrowed_work([&known, &slow]), slow.work_p95());
        // Nothing to borrow from: the cap stays.
        let mut alone = ServerTiming::default();
        alone.record_probe(Duration::from_micros(300));
        assert_eq!(borrowed_work([&alone]), None);
    }

    #[test]
    fn the_deadline_is_capped() {
        let mut t = ServerTiming::default();
        t.record_call(Duration::from_secs(30));
        assert_eq!(t.deadline(), DEADLINE_CAP);
    }
}
