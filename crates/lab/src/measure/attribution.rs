//! Where the slow calls' time went, and when they came: each call's RTT
//! split into its parts ([`Parts`]), totals by part for the slow calls and
//! for all ([`Attribution`]), and the slow calls clustered in time into
//! stall windows ([`StallWindow`]) set beside what the floor probe saw in
//! the same moments.
//!
//! The parts of a call, which add up to its RTT:
//! - `backoff`: the pool slept between attempts (its backoff, a server's
//!   pushback, waiting for a live server);
//! - `retry`: attempts that failed before the one that answered;
//! - `hedge_wait`: a hedged copy answered, and this is how long the call
//!   waited on the first server before sending it;
//! - of the request that was answered, from the server's own timing
//!   (`borbaman-timing`): `gate` (queued behind the game's earlier calls),
//!   `db` (database work kept: connection, statements), `cas` (writes that
//!   lost a compare-and-set, and the pauses before reading again), and
//!   `server_other` (the rest of the server's handler);
//! - `network`: up to the ping floor's p50 of what lies outside the
//!   server's handler;
//! - `unattributed`: the rest outside the handler: queues in either side's
//!   runtime or transport, a busy CPU; also everything a server did not
//!   account for (no timing in its answer).
//!
//! Everything here is pure, records in and figures out.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::record::Invocation;
use super::stats::{FloorStats, floor_stats};

/// The slowest a call may be and still not count as slow, when no floor
/// was measured.
pub const SLOW_WITHOUT_FLOOR_US: u64 = 20_000;

/// Slow calls whose spans come closer than this belong to one window.
pub const WINDOW_GAP_US: u64 = 250_000;

/// A window needs this many slow calls…
pub const WINDOW_MIN_SLOW_CALLS: usize = 3;

/// …on at least this many games: one game's bad luck is no stall.
pub const WINDOW_MIN_GAMES: usize = 2;

/// Most windows listed in `summary.json` (the longest-lasting first); the
/// count of all is kept.
pub const WINDOWS_LISTED: usize = 50;

/// A call is slow above `max(3 × floor p50, floor p99)`, the floor being
/// a bare ping plus a bare transaction measured beside the workload.
pub fn slow_threshold_us(floor_p50_us: u64, floor_p99_us: u64) -> u64 {
    match (3 * floor_p50_us).max(floor_p99_us) {
        0 => SLOW_WITHOUT_FLOOR_US,
        t => t,
    }
}

/// One call's RTT, or a sum of them, by part, in microseconds (see the
/// module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parts {
    pub network_us: u64,
    pub gate_us: u64,
    pub db_us: u64,
    pub cas_us: u64,
    pub server_other_us: u64,
    pub hedge_wait_us: u64,
    pub retry_us: u64,
    pub backoff_us: u64,
    pub unattributed_us: u64,
}

impl Parts {
    /// Splits `r`'s RTT; `network_us` is the ping floor's p50.
    pub fn of(r: &Invocation, network_us: u64) -> Parts {
        let rtt = r.rtt_us;
        let sent = r.answer_sent_us.min(rtt);
        let backoff = r.backoff_us.min(sent);
        // The attempt that answered started after the failed ones and
        // the sleeps; a winning hedge was sent later within it.
        let attempt_start = r.last_attempt_us.unwrap_or(backoff).clamp(backoff, sent);
        let hedge_wait = if r.hedge_won { sent - attempt_start } else { 0 };
        let mut parts = Parts {
            backoff_us: backoff,
            hedge_wait_us: hedge_wait,
            retry_us: sent - backoff - hedge_wait,
            ..Parts::default()
        };
        // The answered request itself, as its server told it.
        let mut left = rtt - sent;
        let mut take = |us: Option<u64>| {
            let us = us.unwrap_or(0).min(left);
            left -= us;
            us
        };
        parts.gate_us = take(r.server_gate_us);
        parts.db_us = take(r.server_db_us);
        parts.cas_us = take(r.server_cas_us);
        if let Some(total) = r.server_total_us {
            let accounted = parts.gate_us + parts.db_us + parts.cas_us;
            parts.server_other_us = take(Some(total.saturating_sub(accounted)));
        }
        parts.network_us = take(Some(network_us));
        parts.unattributed_us = left;
        parts
    }

    pub fn total_us(&self) -> u64 {
        self.named().iter().map(|(_, us)| us).sum()
    }

    /// Each part with its name, in the order the report prints them.
    pub fn named(&self) -> [(&'static str, u64); 9] {
        [
            ("network", self.network_us),
            ("gate", self.gate_us),
            ("db", self.db_us),
            ("cas", self.cas_us),
            ("server_other", self.server_other_us),
            ("hedge_wait", self.hedge_wait_us),
            ("retry", self.retry_us),
            ("backoff", self.backoff_us),
            ("unattributed", self.unattributed_us),
        ]
    }

    /// The part that took the most time.
    pub fn main_part(&self) -> &'static str {
        self.named()
            .iter()
            .max_by_key(|(_, us)| *us)
            .map_or("none", |(name, _)| name)
    }

    fn add(&mut self, other: &Parts) {
        self.network_us += other.network_us;
        self.gate_us += other.gate_us;
        self.db_us += other.db_us;
        self.cas_us += other.cas_us;
        self.server_other_us += other.server_other_us;
        self.hedge_wait_us += other.hedge_wait_us;
        self.retry_us += other.retry_us;
        self.backoff_us += other.backoff_us;
        self.unattributed_us += other.unattributed_us;
    }
}

/// Totals by part over a set of calls.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PartTotals {
    pub calls: u64,
    /// Their RTTs added up, ms.
    pub rtt_ms: f64,
    /// Each part added up, ms, and its share of `rtt_ms`.
    pub parts_ms: BTreeMap<String, f64>,
    pub share: BTreeMap<String, f64>,
    /// Calls the server told its timing for (the rest are unattributed).
    pub with_server_timing: u64,
    /// Calls by the part that took most of each.
    pub by_main_part: BTreeMap<String, u64>,
    /// Compare-and-set retries, hedges sent and failed attempts among them.
    pub cas_retries: u64,
    pub hedges: u64,
    pub retried_attempts: u64,
}

impl PartTotals {
    fn of<'a>(calls: impl IntoIterator<Item = &'a Invocation>, network_us: u64) -> PartTotals {
        let mut sum = Parts::default();
        let mut totals = PartTotals::default();
        let mut rtt_us = 0u64;
        for r in calls {
            let parts = Parts::of(r, network_us);
            sum.add(&parts);
            rtt_us += r.rtt_us;
            totals.calls += 1;
            totals.with_server_timing += u64::from(r.server_db_us.is_some());
            *totals
                .by_main_part
                .entry(parts.main_part().to_string())
                .or_default() += 1;
            totals.cas_retries += u64::from(r.server_cas_retries.unwrap_or(0));
            totals.hedges += u64::from(r.hedges);
            totals.retried_attempts += u64::from(r.attempts.saturating_sub(1));
        }
        totals.rtt_ms = ms(rtt_us);
        for (name, us) in sum.named() {
            totals.parts_ms.insert(name.into(), ms(us));
            let share = if rtt_us == 0 {
                0.0
            } else {
                (us as f64 / rtt_us as f64 * 1000.0).round() / 1000.0
            };
            totals.share.insert(name.into(), share);
        }
        totals
    }

    /// `db 61% gate 20% …`: the parts over 1 % of the time, largest first.
    pub fn line(&self) -> String {
        let mut parts: Vec<(&String, &f64)> =
            self.share.iter().filter(|(_, s)| **s >= 0.01).collect();
        parts.sort_by(|a, b| b.1.total_cmp(a.1));
        let parts: Vec<String> = parts
            .iter()
            .map(|(name, share)| format!("{name} {:.0}%", *share * 100.0))
            .collect();
        match parts.is_empty() {
            true => "none".into(),
            false => parts.join(", "),
        }
    }
}

/// `summary.json`'s `attribution`: the slow calls' time by part, beside
/// every call's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    /// Calls slower than this are slow (see [`slow_threshold_us`]).
    pub slow_threshold_us: u64,
    /// The network part: the ping floor's p50.
    pub network_floor_us: u64,
    pub slow: PartTotals,
    pub all: PartTotals,
}

impl Attribution {
    /// Over the measured, answered calls.
    pub fn new(records: &[Invocation], threshold_us: u64, network_us: u64) -> Attribution {
        let answered = || records.iter().filter(|r| !r.warmup && r.is_ok());
        Attribution {
            slow_threshold_us: threshold_us,
            network_floor_us: network_us,
            slow: PartTotals::of(answered().filter(|r| r.rtt_us > threshold_us), network_us),
            all: PartTotals::of(answered(), network_us),
        }
    }
}

/// One floor sample: when it started (µs since the start of the run) and
/// how long it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub at_us: u64,
    pub rtt_us: u64,
}

/// What a floor probe saw during a window: the samples that overlapped it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FloorInWindow {
    pub samples: u64,
    pub p50_us: u64,
    pub max_us: u64,
}

impl FloorInWindow {
    fn of(samples: &[Sample], start_us: u64, end_us: u64) -> FloorInWindow {
        let stats: FloorStats = floor_stats(
            samples
                .iter()
                .filter(|s| s.at_us <= end_us && s.at_us + s.rtt_us >= start_us)
                .map(|s| s.rtt_us),
        );
        FloorInWindow {
            samples: stats.samples,
            p50_us: stats.p50,
            max_us: stats.max,
        }
    }
}

/// A stretch of time in which slow calls came together on several games.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StallWindow {
    /// From the start of the first slow call to the end of the last, µs
    /// since the start of the run.
    pub start_us: u64,
    pub length_us: u64,
    pub slow_calls: u64,
    /// Of the slow calls, those that failed (no parts: the call never
    /// got its answer).
    pub errors: u64,
    /// Every call that started in the window, slow or not.
    pub calls: u64,
    pub games: u64,
    pub servers: u64,
    pub max_rtt_us: u64,
    /// The answered slow calls' time by part.
    pub parts: PartTotals,
    /// The floor probes in the same moments.
    pub floor_ping: FloorInWindow,
    pub floor_db_txn: FloorInWindow,
    /// PostgreSQL's log in the same moments (when it was read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres: Option<super::pgview::LogCounts>,
    /// The machine's CPU and disk pressure in the same moments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<super::machine::MachineInWindow>,
}

impl StallWindow {
    pub fn end_us(&self) -> u64 {
        self.start_us + self.length_us
    }
}

/// Groups slow calls (measured, not refused, slower than `threshold_us`)
/// whose spans come within [`WINDOW_GAP_US`] of each other, keeps the
/// groups of at least [`WINDOW_MIN_SLOW_CALLS`] calls on at least
/// [`WINDOW_MIN_GAMES`] games, and sets each beside the floor samples of
/// the same moments. In time order.
pub fn stall_windows(
    records: &[Invocation],
    threshold_us: u64,
    network_us: u64,
    ping: &[Sample],
    db_txn: &[Sample],
) -> Vec<StallWindow> {
    let mut slow: Vec<&Invocation> = records
        .iter()
        .filter(|r| !r.warmup && r.refusal().is_none() && r.rtt_us > threshold_us)
        .collect();
    slow.sort_by_key(|r| r.start_us);
    let mut groups: Vec<Vec<&Invocation>> = Vec::new();
    let mut end = 0u64;
    for r in slow {
        match groups.last_mut() {
            Some(group) if r.start_us <= end + WINDOW_GAP_US => group.push(r),
            _ => groups.push(vec![r]),
        }
        end = match groups.last().map(Vec::len) {
            Some(1) => r.end_us(),
            _ => end.max(r.end_us()),
        };
    }
    groups
        .into_iter()
        .filter(|g| {
            let games: BTreeSet<u64> = g.iter().map(|r| r.game).collect();
            g.len() >= WINDOW_MIN_SLOW_CALLS && games.len() >= WINDOW_MIN_GAMES
        })
        .map(|g| {
            let start_us = g.iter().map(|r| r.start_us).min().unwrap_or(0);
            let end_us = g.iter().map(|r| r.end_us()).max().unwrap_or(start_us);
            StallWindow {
                start_us,
                length_us: end_us - start_us,
                slow_calls: g.len() as u64,
                errors: g.iter().filter(|r| r.is_error()).count() as u64,
                calls: records
                    .iter()
                    .filter(|r| !r.warmup && (start_us..=end_us).contains(&r.start_us))
                    .count() as u64,
                games: g.iter().map(|r| r.game).collect::<BTreeSet<_>>().len() as u64,
                servers: g.iter().map(|r| &r.server).collect::<BTreeSet<_>>().len() as u64,
                max_rtt_us: g.iter().map(|r| r.rtt_us).max().unwrap_or(0),
                parts: PartTotals::of(g.iter().copied().filter(|r| r.is_ok()), network_us),
                floor_ping: FloorInWindow::of(ping, start_us, end_us),
                floor_db_txn: FloorInWindow::of(db_txn, start_us, end_us),
                postgres: None,
                machine: None,
            }
        })
        .collect()
}

/// `summary.json`'s `stall_windows`: how many, how much of the slow calls
/// they hold, and the windows themselves.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StallWindows {
    pub count: u64,
    /// Slow calls inside a window, of all slow calls.
    pub slow_calls_in_windows: u64,
    pub slow_calls: u64,
    /// Windows' lengths added up, ms.
    pub total_length_ms: f64,
    /// The longest-lasting [`WINDOWS_LISTED`], in time order.
    pub windows: Vec<StallWindow>,
    /// How many windows each part of the machine held (`host`, `io`,
    /// `cpu`, or `neither`: see `MachineInWindow::held_by`); empty when
    /// the machine was not read.
    #[serde(default)]
    pub held_by: std::collections::BTreeMap<String, u64>,
    /// What held the window with the slowest call of all windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowest_held_by: Option<String>,
}

impl StallWindows {
    pub fn new(windows: Vec<StallWindow>, slow_calls: u64) -> StallWindows {
        let mut listed = windows.clone();
        listed.sort_by_key(|w| std::cmp::Reverse(w.length_us));
        listed.truncate(WINDOWS_LISTED);
        listed.sort_by_key(|w| w.start_us);
        let holder = |w: &StallWindow| {
            w.machine
                .as_ref()
                .map(|m| m.held_by(w.length_us).unwrap_or("neither").to_string())
        };
        let mut held_by = std::collections::BTreeMap::new();
        for holder in windows.iter().filter_map(holder) {
            *held_by.entry(holder).or_insert(0) += 1;
        }
        StallWindows {
            count: windows.len() as u64,
            slow_calls_in_windows: windows.iter().map(|w| w.slow_calls).sum(),
            slow_calls,
            total_length_ms: ms(windows.iter().map(|w| w.length_us).sum()),
            slowest_held_by: windows.iter().max_by_key(|w| w.max_rtt_us).and_then(holder),
            held_by,
            windows: listed,
        }
    }

    /// `held by the host 5, the io 1, neither 2; the slowest by the host`,
    /// or nothing when the machine was not read.
    pub fn held_line(&self) -> String {
        if self.held_by.is_empty() {
            return String::new();
        }
        let parts: Vec<String> = self
            .held_by
            .iter()
            .map(|(part, n)| match part.as_str() {
                "neither" => format!("neither {n}"),
                part => format!("the {part} {n}"),
            })
            .collect();
        let slowest = match self.slowest_held_by.as_deref() {
            Some("neither") => "; the slowest by neither".to_string(),
            Some(part) => format!("; the slowest by the {part}"),
            None => String::new(),
        };
        format!("; held by {}{slowest}", parts.join(", "))
    }
}

fn ms(us: u64) -> f64 {
    (us as f64 / 10.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::record::tests::act;

    fn timed(mut r: Invocation, gate: u64, db: u64, cas: u64, total: u64) -> Invocation {
        r.server_gate_us = Some(gate);
        r.server_db_us = Some(db);
        r.server_cas_retries = Some(u32::from(cas > 0));
        r.server_cas_us = Some(cas);
        r.server_total_us = Some(total);
        r
    }

    #[test]
    fn a_plain_call_splits_into_the_servers_parts_the_network_and_the_rest() {
        // 30 ms: 5 behind the gate, 18 in the database, 2 elsewhere in the
        // server (25 in all), 0.3 of network, 4.7 unexplained.
        let r = timed(act(0, 0, 30_000), 5_000, 18_000, 0, 25_000);
        let parts = Parts::of(&r, 300);
        assert_eq!(
            parts,
            Parts {
                network_us: 300,
                gate_us: 5_000,
                db_us: 18_000,
                server_other_us: 2_000,
                unattributed_us: 4_700,
                ..Parts::default()
            }
        );
        assert_eq!(parts.total_us(), 30_000);
        assert_eq!(parts.main_part(), "db");
    }

    #[test]
    fn a_won_hedge_splits_into_the_wait_before_it_and_the_copy() {
        // The first server sat on it for 12 ms; the copy took 3 ms.
        let mut r = timed(act(0, 0, 15_000), 0, 2_000, 0, 2_500);
        r.hedges = 1;
        r.hedge_won = true;
        r.answer_sent_us = 12_000;
        let parts = Parts::of(&r, 200);
        assert_eq!(parts.hedge_wait_us, 12_000);
        assert_eq!(parts.retry_us, 0);
        assert_eq!(parts.db_us, 2_000);
        assert_eq!(parts.server_other_us, 500);
        assert_eq!(parts.network_us, 200);
        assert_eq!(parts.unattributed_us, 300);
        assert_eq!(parts.main_part(), "hedge_wait");
    }

    #[test]
    fn a_retry_after_backoff_splits_into_the_failed_attempt_the_sleep_and_the_answer() {
        // Failed attempt 0..8 ms, slept 10 ms, answered attempt 18..20 ms.
        let mut r = timed(act(0, 0, 20_000), 0, 1_000, 0, 1_500);
        r.attempts = 2;
        r.failed_over = true;
        r.first_failure_us = Some(0);
        r.last_attempt_us = Some(18_000);
        r.answer_sent_us = 18_000;
        r.backoff_us = 10_000;
        let parts = Parts::of(&r, 200);
        assert_eq!(parts.backoff_us, 10_000);
        assert_eq!(parts.retry_us, 8_000);
        assert_eq!(parts.hedge_wait_us, 0);
        assert_eq!(parts.total_us(), 20_000);
    }

    #[test]
    fn parts_never_exceed_the_rtt_even_when_the_server_says_more() {
        // Clocks differ: the server's total is longer than the client saw.
        let r = timed(act(0, 0, 1_000), 300, 900, 200, 5_000);
        let parts = Parts::of(&r, 500);
        assert_eq!(parts.total_us(), 1_000);
        assert_eq!((parts.gate_us, parts.db_us, parts.cas_us), (300, 700, 0));
        // No timing at all: network, then unattributed.
        let parts = Parts::of(&act(0, 0, 1_000), 300);
        assert_eq!((parts.network_us, parts.unattributed_us), (300, 700));
    }

    #[test]
    fn totals_add_the_slow_calls_apart_from_all() {
        let records = vec![
            timed(act(0, 0, 1_000), 0, 500, 0, 600),
            timed(act(1, 0, 40_000), 30_000, 5_000, 0, 36_000),
            timed(act(2, 0, 50_000), 0, 10_000, 30_000, 41_000),
        ];
        let a = Attribution::new(&records, 20_000, 100);
        assert_eq!(a.slow.calls, 2);
        assert_eq!(a.all.calls, 3);
        assert_eq!(a.slow.parts_ms["gate"], 30.0);
        assert_eq!(a.slow.parts_ms["cas"], 30.0);
        assert_eq!(a.slow.cas_retries, 1);
        assert_eq!(a.slow.by_main_part["gate"], 1);
        assert_eq!(a.slow.by_main_part["cas"], 1);
        assert_eq!(a.all.parts_ms["db"], 15.5);
        assert_eq!(a.slow.rtt_ms, 90.0);
        assert!(
            a.slow.line().starts_with("cas 33%, gate 33%"),
            "{}",
            a.slow.line()
        );
    }

    #[test]
    fn the_threshold_is_three_floor_medians_or_the_floor_p99() {
        assert_eq!(slow_threshold_us(1_000, 2_000), 3_000);
        assert_eq!(slow_threshold_us(1_000, 9_000), 9_000);
        assert_eq!(slow_threshold_us(0, 0), SLOW_WITHOUT_FLOOR_US);
    }

    #[test]
    fn slow_calls_on_several_games_close_in_time_make_one_window() {
        let on = |game: u64, client: u32, start_ms: u64, rtt_ms: u64| {
            let mut r = act(client, start_ms * 1000, rtt_ms * 1000);
            r.game = game;
            r
        };
        let records = vec![
            // A stall at 1 s: three games, spans chained within 250 ms.
            on(1, 0, 1_000, 60),
            on(2, 4, 1_010, 90),
            on(3, 8, 1_200, 30),
            on(1, 1, 1_020, 2), // fast, inside
            failed(on(2, 5, 1_100, 100)),
            // One game's slow calls alone at 3 s: no stall.
            on(1, 0, 3_000, 50),
            on(1, 1, 3_010, 50),
            on(1, 2, 3_020, 50),
            // Two slow calls at 5 s on two games: too few.
            on(1, 0, 5_000, 50),
            on(2, 4, 5_000, 50),
            // A slow call 1 s after the first stall starts another group.
            on(4, 12, 2_000, 40),
        ];
        fn failed(mut r: Invocation) -> Invocation {
            r.status = "unavailable".into();
            r
        }
        let ping = [
            Sample {
                at_us: 1_050_000,
                rtt_us: 9_000,
            },
            Sample {
                at_us: 900_000,
                rtt_us: 200,
            },
        ];
        let txn = [Sample {
            at_us: 1_100_000,
            rtt_us: 15_000,
        }];
        let windows = stall_windows(&records, 20_000, 100, &ping, &txn);
        assert_eq!(windows.len(), 1, "{windows:#?}");
        let w = &windows[0];
        assert_eq!(w.start_us, 1_000_000);
        assert_eq!(w.end_us(), 1_230_000);
        assert_eq!((w.slow_calls, w.errors, w.calls, w.games), (4, 1, 5, 3));
        assert_eq!(w.parts.calls, 3, "a failed call has no parts");
        assert_eq!(w.max_rtt_us, 100_000);
        assert_eq!(
            w.floor_ping.samples, 1,
            "the ping before the window is not in it"
        );
        assert_eq!(w.floor_ping.max_us, 9_000);
        assert_eq!(w.floor_db_txn.max_us, 15_000);
        let listed = StallWindows::new(windows, 10);
        assert_eq!(
            (
                listed.count,
                listed.slow_calls_in_windows,
                listed.slow_calls
            ),
            (1, 4, 10)
        );
        assert!(listed.held_by.is_empty(), "the machine was not read");
        assert_eq!(listed.held_line(), "");
    }

    #[test]
    fn the_windows_say_which_part_of_the_machine_held_them() {
        use super::super::machine::MachineInWindow;
        let window = |start_ms: u64, max_ms: u64, machine: MachineInWindow| StallWindow {
            start_us: start_ms * 1000,
            length_us: 100_000,
            max_rtt_us: max_ms * 1000,
            machine: Some(machine),
            ..StallWindow::default()
        };
        let host = MachineInWindow {
            steal_ms: 80.0,
            cpu_pressure_ms: 90.0,
            ..MachineInWindow::default()
        };
        let disk = MachineInWindow {
            io_pressure_ms: 70.0,
            ..MachineInWindow::default()
        };
        let windows = vec![
            window(1_000, 40, host),
            window(2_000, 90, host),
            window(3_000, 60, disk),
            window(4_000, 30, MachineInWindow::default()),
        ];
        let listed = StallWindows::new(windows, 20);
        assert_eq!(listed.held_by.get("host"), Some(&2), "{:?}", listed.held_by);
        assert_eq!(listed.held_by.get("io"), Some(&1));
        assert_eq!(listed.held_by.get("neither"), Some(&1));
        assert_eq!(listed.slowest_held_by.as_deref(), Some("host"));
        assert_eq!(
            listed.held_line(),
            "; held by the host 2, the io 1, neither 1; the slowest by the host"
        );
    }
}
