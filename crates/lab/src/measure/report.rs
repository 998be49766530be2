//! Turns per-invocation records into the figures of `summary.json`:
//! percentiles (HdrHistogram), jitter, failover gaps and the time breakdown.
//!
//! Everything here is pure: records in, numbers out, so every figure is
//! unit-tested against hand-computed values.
//!
//! Definitions, stated once:
//! - an *invocation* is one call a client made after the warm-up;
//! - the RTT of a call runs from its start to the reply, retries on other
//!   servers included (what the player felt);
//! - jitter is |RTT_i − RTT_(i−1)| between consecutive successful calls of
//!   the same client;
//! - a failover gap runs from the start of the failed try to the successful
//!   reply;
//! - time breakdown, like the original's pie chart: `normal_ms` is time in
//!   calls that went through at once, `retry_ms` is time in failed-over calls
//!   from the start of the failed attempt to the reply, `other_ms` is the
//!   rest: calls that failed outright, and time a failed-over call spent
//!   before its failed attempt (backing off while the database was away);
//! - a failover gap splits into *noticing* the failure (from the failed
//!   attempt to the start of the attempt that answered) and the *retry*
//!   (that attempt);
//! - tick lateness is how late a client started a call after it was due: the
//!   client's own scheduling delay, which is in no RTT;
//! - goodput is the calls answered with a result per second; a *refusal* (a
//!   server turned the call away with a reason: `server-full`,
//!   `rate-limited`) and an *error* (anything else that was not an answer)
//!   are counted apart, and neither is capacity.

use std::collections::BTreeMap;

use serde::Serialize;

use super::record::{CallKind, Invocation};
pub use super::stats::*;

/// RTT against the floors measured in the same run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FloorRatios {
    /// Ping p50 + bare transaction p50: the least a game call can take.
    pub floor_p50_us: u64,
    /// Ping p99 + bare transaction p99.
    pub floor_p99_us: u64,
    /// Act RTT p50 / floor p50 (target ≤ 1.5).
    pub act_p50_to_floor: f64,
    /// Act RTT p99 / floor p99 (target ≤ 3).
    pub act_p99_to_floor: f64,
    /// Every call's RTT p50 / floor p50.
    pub rtt_p50_to_floor: f64,
    pub rtt_p99_to_floor: f64,
}

impl FloorRatios {
    pub fn new(all: &RttStats, act: &RttStats, ping: &FloorStats, txn: &FloorStats) -> FloorRatios {
        let floor_p50_us = ping.p50 + txn.p50;
        let floor_p99_us = ping.p99 + txn.p99;
        FloorRatios {
            floor_p50_us,
            floor_p99_us,
            act_p50_to_floor: ratio(act.p50 as f64, floor_p50_us as f64),
            act_p99_to_floor: ratio(act.p99 as f64, floor_p99_us as f64),
            rtt_p50_to_floor: ratio(all.p50 as f64, floor_p50_us as f64),
            rtt_p99_to_floor: ratio(all.p99 as f64, floor_p99_us as f64),
        }
    }
}

/// The run's tail beside the machine's own, so a reader can tell the
/// project's tail from the machine's: a floor (a bare `Ping` plus a bare
/// transaction of a game call's shape, measured beside the workload) has a
/// tail too, and calls slower than the floor's p99.9 are the ones the
/// machine alone does not explain.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Tail {
    /// The slowest successful call.
    pub rtt_max_us: u64,
    /// Ping max + transaction max: the slowest the floor itself was.
    pub floor_max_us: u64,
    /// Ping p99.9 + transaction p99.9.
    pub floor_p999_us: u64,
    /// Successful calls slower than `floor_p999_us`, and their share.
    pub calls_over_floor_p999: u64,
    pub fraction_over_floor_p999: f64,
    /// Stretches of the measured run in which the machine stood still
    /// (`machine::stood_still_stretches`: the host stopped it), the
    /// successful calls in flight during one, and the slowest successful
    /// call in flight during none: the tail the machine's stops do not
    /// explain.
    pub stood_still_stretches: u64,
    pub calls_in_stood_still: u64,
    pub rtt_max_outside_stood_still_us: u64,
}

impl Tail {
    pub fn new(records: &[Invocation], ping: &FloorStats, txn: &FloorStats) -> Tail {
        let rtts: Vec<u64> = records
            .iter()
            .filter(|r| !r.warmup && r.is_ok())
            .map(effective_rtt_us)
            .collect();
        let floor_p999_us = ping.p999 + txn.p999;
        let over = match floor_p999_us {
            // No floor measured: nothing to compare with.
            0 => 0,
            floor => rtts.iter().filter(|&&rtt| rtt > floor).count() as u64,
        };
        Tail {
            rtt_max_us: rtts.iter().copied().max().unwrap_or(0),
            floor_max_us: ping.max + txn.max,
            floor_p999_us,
            calls_over_floor_p999: over,
            fraction_over_floor_p999: match rtts.len() {
                0 => 0.0,
                n => (over as f64 / n as f64 * 1e5).round() / 1e5,
            },
            ..Tail::default()
        }
    }

    /// Sets the tail outside the `stretches` (from, to: µs since the start
    /// of the run) in which the machine stood still.
    pub fn outside(&mut self, records: &[Invocation], stretches: &[(u64, u64)]) {
        let measured: Vec<&Invocation> =
            records.iter().filter(|r| !r.warmup && r.is_ok()).collect();
        let first = measured.iter().map(|r| r.start_us).min().unwrap_or(0);
        let in_stretch = |r: &Invocation| {
            stretches
                .iter()
                .any(|&(from, to)| r.start_us < to && r.end_us() > from)
        };
        self.stood_still_stretches = stretches.iter().filter(|&&(_, to)| to > first).count() as u64;
        self.calls_in_stood_still = measured.iter().filter(|r| in_stretch(r)).count() as u64;
        self.rtt_max_outside_stood_still_us = measured
            .iter()
            .filter(|r| !in_stretch(r))
            .map(|r| effective_rtt_us(r))
            .max()
            .unwrap_or(0);
    }
}

/// Games split over servers: in how many 100 ms windows of the measured
/// run some game's acts were answered by two servers or more, each act
/// counted only when its first attempt answered it (a copy's win or a
/// retry is one call's detour, not where the player is). The players of a
/// split game reach its row from two servers, which race for it
/// (compare-and-sets lost, row locks waited for); a game stays whole while
/// its players move together.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SplitGames {
    /// Windows with at least one such act.
    pub windows: u64,
    /// Of them, those where a game was split.
    pub split_windows: u64,
    pub split_share: f64,
    /// Each split game's window by the last move of one of its players'
    /// calls to another server before the window ended (`Invocation::moved`:
    /// `copy-won`, `down`, `back`, …; `none` when no move was recorded):
    /// what split the game.
    pub by_last_move: BTreeMap<String, u64>,
}

/// The length of a [`SplitGames`] window.
pub const SPLIT_WINDOW_US: u64 = 100_000;

impl SplitGames {
    pub fn new(records: &[Invocation]) -> SplitGames {
        let mut by_window: BTreeMap<u64, BTreeMap<u64, std::collections::BTreeSet<&str>>> =
            BTreeMap::new();
        for r in records.iter().filter(|r| {
            !r.warmup && r.is_ok() && r.call == CallKind::Act && r.attempts == 1 && !r.hedge_won
        }) {
            by_window
                .entry(r.start_us / SPLIT_WINDOW_US)
                .or_default()
                .entry(r.game)
                .or_default()
                .insert(r.server.as_str());
        }
        let windows = by_window.len() as u64;
        let split_windows = by_window
            .values()
            .filter(|games| games.values().any(|servers| servers.len() > 1))
            .count() as u64;
        // Each game's moves, in order of the calls that made them.
        let mut moves: BTreeMap<u64, Vec<(u64, &str)>> = BTreeMap::new();
        for r in records.iter().filter(|r| !r.moved.is_empty()) {
            moves
                .entry(r.game)
                .or_default()
                .push((r.start_us, r.moved.as_str()));
        }
        moves.values_mut().for_each(|m| m.sort_unstable());
        let mut by_last_move = BTreeMap::new();
        for (window, games) in &by_window {
            let end = (window + 1) * SPLIT_WINDOW_US;
            for (game, _) in games.iter().filter(|(_, servers)| servers.len() > 1) {
                let last = moves.get(game).and_then(|m| {
                    let before = m.partition_point(|(at, _)| *at < end);
                    before.checked_sub(1).map(|i| m[i].1)
                });
                *by_last_move
                    .entry(last.unwrap_or("none").to_string())
                    .or_default() += 1;
            }
        }
        SplitGames {
            windows,
            split_windows,
            by_last_move,
            split_share: match windows {
                0 => 0.0,
                n => (split_windows as f64 / n as f64 * 1e4).round() / 1e4,
            },
        }
    }
}

/// Row counts of the tables at one moment of a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TableRows {
    /// Seconds since the run started.
    pub at_s: f64,
    pub rows: std::collections::BTreeMap<String, i64>,
}

/// `summary.json`: the names the issue fixes first, then extras.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub invocations: u64,
    /// Calls that were neither answered nor refused.
    pub errors: u64,
    /// Answered calls per second: what the cluster did, refusals and
    /// errors left out.
    pub goodput_per_s: f64,
    /// Calls a server refused with a reason (`server-full`, `rate-limited`),
    /// counted apart from errors.
    pub refusals: u64,
    pub refusals_by_reason: BTreeMap<String, u64>,
    pub rtt_us: RttStats,
    pub jitter_us: JitterStats,
    pub faults: u64,
    pub failovers: u64,
    pub failover_gap_ms: GapStats,
    /// Closed-loop runs (`--interval-ms 0`): bare transactions of a game
    /// call's shape committed per second by as many connections as there
    /// are clients, on the same database, for the same time, right before
    /// and right after the workload (the median one-second slice of each
    /// phase, the higher phase); and `goodput_per_s` (answered calls only)
    /// over it.
    pub floor_txn_throughput_per_s: f64,
    pub throughput_to_floor: f64,
    /// How `floor_txn_throughput_per_s` was found: the bare-transaction
    /// throughput right before and right after the workload, each the
    /// median of its one-second slices (all listed), and the higher taken.
    pub floor_txn_throughput: Option<super::capacity::CapacityFloor>,
    /// Closed loops: the calls answered in each second of the measured
    /// window, their median, and that median over the floor (like for
    /// like with the floor's median second; `throughput_to_floor`, over
    /// the whole window, is the one a run is judged on).
    pub goodput_seconds: Option<super::capacity::PhaseRate>,
    pub goodput_median_second_to_floor: f64,
    /// Copies of a call sent to a second server because the first was slow
    /// (hedges), and their share of the measured calls.
    pub hedges: u64,
    pub hedge_rate: f64,
    pub hedges_won: u64,
    pub lost_actions: u64,
    pub duplicate_actions: u64,
    pub state_regressions: u64,
    /// Inputs (actions) the clients sent, and of them acknowledged as
    /// applied (inputs of a session its client lost are not applied).
    pub inputs_sent: u64,
    pub inputs_applied: u64,
    /// From an input's key press to the reply that acknowledged it, over
    /// the inputs sent after the warm-up, µs.
    pub input_to_apply_us: FloorStats,
    /// `--predict`: the clients predicted their own inputs as the terminal
    /// does; states from the server that replaced a prediction's base, and
    /// of them those that moved the player from where it was predicted.
    pub predicted: bool,
    pub reconciliations: u64,
    pub mispredictions: u64,
    /// Bare `Game.Ping`, measured beside the workload.
    pub floor_ping_us: FloorStats,
    /// Bare `SELECT … FOR UPDATE` + `UPDATE` + `COMMIT`, beside the workload.
    pub floor_db_txn_us: FloorStats,
    pub time_breakdown: TimeBreakdown,

    // Extras.
    /// Every invariant and whether it held.
    pub invariants_ok: bool,
    pub invariants: Option<super::invariants::InvariantReport>,
    pub act_rtt_us: RttStats,
    /// RTT of the joins refused `server-full`.
    pub refused_join_rtt_us: RttStats,
    pub ratios: FloorRatios,
    pub tail: Tail,
    /// A chaos run's slowest calls during its faults and elsewhere.
    pub fault_tail: super::faults::FaultTail,
    /// A chaos run's server faults, each one's calls split by where they
    /// were first sent: to the faulted server, or to the others.
    pub fault_split: super::faults::FaultSplit,
    /// Games split over servers (see [`SplitGames`]).
    pub split_games: SplitGames,
    /// The slow calls' time by part, beside every call's
    /// (`measure::attribution`).
    pub attribution: super::attribution::Attribution,
    /// Slow calls clustered in time, with the floor probes and
    /// PostgreSQL's log in the same moments.
    pub stall_windows: super::attribution::StallWindows,
    /// The machine's CPU and disk pressure over the measured run
    /// (`/proc/pressure`), and its disk stalls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<super::machine::MachineView>,
    /// PostgreSQL's statistics and log over the run (a local cluster, or
    /// a `--database-url` whose statistics can be read).
    pub postgres: Option<super::pgview::PostgresView>,
    /// What each call of the workload cost the database (the floor
    /// prober's transactions, one per 50 ms, included).
    pub database_cost: Option<super::dbcost::DatabaseCost>,
    /// CPU this process and the servers it started (a local cluster's)
    /// spent per call of the workload, warm-up included: what the game and
    /// its bots take from the cores the database shares.
    pub bench_and_servers_cpu_us_per_call: Option<f64>,
    /// Of that, this process's own (the bench: its clients' pools, the
    /// recording), without the servers it started.
    pub bench_cpu_us_per_call: Option<f64>,
    /// The local cluster's CPU quotas and what the capped processes used
    /// of them over the workload (warm-up included).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cpu_quotas: Vec<super::quota::QuotaUse>,
    /// The same floors on the idle cluster, before the workload started.
    pub floor_idle_ping_us: FloorStats,
    pub floor_idle_db_txn_us: FloorStats,
    /// The failover gap split in two: from the failed attempt to the start
    /// of the attempt that answered, then that attempt.
    pub failover_notice_ms: GapStats,
    pub failover_retry_ms: GapStats,
    /// How late the clients started their calls after they were due (their
    /// own scheduling delay; not in any RTT).
    pub tick_late_us: FloorStats,
    /// Calls in the first `warmup_s` seconds are in the CSV but left out of
    /// every figure here.
    pub warmup_s: f64,
    pub warmup_invocations: u64,
    /// The measured window, after the warm-up.
    pub duration_s: f64,
    pub clients: u32,
    pub games: u32,
    /// Games seen to finish (winner or draw) by the clients.
    pub games_finished: u64,
    /// Games the clients played in (from the database).
    pub games_played: u64,
    /// Times the clients' pools abandoned their current server (`failovers`
    /// counts the calls that failed over; a server found dead by the
    /// background health check is left before any call fails).
    pub pool_failovers: u64,
    pub interval_ms: u64,
    pub servers: Vec<String>,
    pub throughput_per_s: f64,
    pub per_server: BTreeMap<String, u64>,
    pub errors_by_status: BTreeMap<String, u64>,
    pub faults_by_kind: BTreeMap<String, u64>,
    /// Over the run's faults: from injection until every client had a
    /// successful `Act` started after it (`recovered_ms` in faults.csv).
    pub recovery_ms: GapStats,
    /// Database faults with a promotion: from the new primary answering as
    /// primary (Patroni's `/primary`) until every client's first successful
    /// `Act` after the fault.
    pub recovery_after_promotion_ms: GapStats,
    /// The same from the new primary's first commit (writable, synchronous
    /// standby attached): the servers' and clients' own share.
    pub recovery_after_commit_ms: GapStats,
    pub command: String,
    /// HEAD of the git repository the command ran in (the binary may have
    /// been built from an older commit).
    pub git_head: Option<String>,
    /// Unix time the run started.
    pub started_at_unix_s: u64,
    /// Unix time, ms, of the measured run's clock's zero: every `at` of a
    /// stall window, a fault or `invocations.csv`'s `start_us` counts from
    /// it, so a trace taken beside the run (`perf record -k mono`, a
    /// database's log) can be set against them.
    #[serde(default)]
    pub run_started_unix_ms: i64,
    /// The machine's 1-minute load average before and after the run.
    pub load_average_1m: [f64; 2],
    /// Rows of every table at the start, every minute of the run and at
    /// the end (with a database URL): with a short `--retention` they stay
    /// flat however long the run.
    pub table_rows: Vec<TableRows>,
    /// Anything a reader should know (a floor that could not be measured…).
    pub notes: Vec<String>,
    /// Each emulated distance (`--wan`, `--wan-mix`) and its clients'
    /// figures beside the network's own RTT; empty on loopback.
    pub distances: Vec<super::distance::DistanceReport>,
    /// With games partitioned over several database clusters
    /// (`--db-clusters`), each cluster's figures; empty with one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<super::clusters::ClusterFigures>,
    /// A run that grew (`bench --grow-at-s`): the clusters added, every
    /// partition moved, and the goodput before and after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub growth: Option<super::growth::GrowthReport>,
}

impl Summary {
    /// Fills the figures that come from the client records.
    pub fn with_measurements(mut self, m: Measurements) -> Summary {
        self.invocations = m.invocations;
        self.errors = m.errors;
        self.refusals = m.refusals;
        self.refusals_by_reason = m.refusals_by_reason;
        self.refused_join_rtt_us = m.refused_join_rtt_us;
        self.goodput_per_s = m.goodput_per_s;
        self.warmup_invocations = m.warmup_invocations;
        self.rtt_us = m.rtt_us;
        self.act_rtt_us = m.act_rtt_us;
        self.jitter_us = m.jitter_us;
        self.failovers = m.failovers;
        self.hedges = m.hedges;
        self.hedge_rate = m.hedge_rate;
        self.hedges_won = m.hedges_won;
        self.failover_gap_ms = m.failover_gap_ms;
        self.failover_notice_ms = m.failover_notice_ms;
        self.failover_retry_ms = m.failover_retry_ms;
        self.tick_late_us = m.tick_late_us;
        self.time_breakdown = m.time_breakdown;
        self.throughput_per_s = m.throughput_per_s;
        self.per_server = m.per_server;
        self.errors_by_status = m.errors_by_status;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::tests::act;
    use super::*;

    #[test]
    fn percentiles_of_one_to_a_thousand() {
        let stats = rtt_stats(1..=1000);
        // HdrHistogram at three significant figures is exact below 2048.
        assert_eq!(stats.p50, 500);
        assert_eq!(stats.p90, 900);
        assert_eq!(stats.p99, 990);
        assert_eq!(stats.p999, 999);
        assert_eq!(stats.max, 1000);
        assert_eq!(stats.mean, 500.5);
        assert_eq!(stats.samples, 1000);
    }

    #[test]
    fn large_values_keep_three_significant_figures() {
        let stats = rtt_stats([1_234_567u64]);
        assert!(stats.max.abs_diff(1_234_567) <= 1_235, "{}", stats.max);
        assert_eq!(rtt_stats(std::iter::empty()), RttStats::default());
    }

    #[test]
    fn jitter_is_per_client_and_in_start_order() {
        // Client 0: 100, 300, 200 -> jitters 200, 100.
        // Client 1: 1000, 1000 -> jitter 0. Interleaving must not mix them.
        let records = vec![
            act(0, 0, 100),
            act(1, 5, 1000),
            act(0, 50_000, 300),
            act(1, 50_005, 1000),
            act(0, 100_000, 200),
        ];
        let mut j = jitters_us(&records);
        j.sort_unstable();
        assert_eq!(j, [0, 100, 200]);
        let m = measure(&records);
        assert_eq!(m.jitter_us.max, 200);
        assert_eq!(m.jitter_us.mean, 100.0);
    }

    #[test]
    fn warmup_and_errors_are_left_out_of_latency() {
        let mut warm = act(0, 0, 9_000);
        warm.warmup = true;
        let mut failed = act(0, 20, 7_000);
        failed.status = "unavailable".into();
        let records = vec![warm, failed, act(0, 10_000, 100), act(0, 20_000, 300)];
        let m = measure(&records);
        assert_eq!(m.invocations, 3);
        assert_eq!(m.warmup_invocations, 1);
        assert_eq!(m.errors, 1);
        assert_eq!(m.errors_by_status["unavailable"], 1);
        assert_eq!(m.rtt_us.max, 300);
        assert_eq!(m.rtt_us.samples, 2);
        assert_eq!(m.jitter_us.max, 200, "only successful calls count");
    }

    #[test]
    fn failover_gaps_and_time_breakdown() {
        // A call that failed over at once: 3 ms from the failed attempt to
        // the reply on another server.
        let mut over = act(0, 0, 3_000);
        over.failed_over = true;
        over.attempts = 2;
        over.first_failure_us = Some(0);
        over.last_attempt_us = Some(1_000);
        // One that backed off 2 ms (database away) before its failed attempt.
        let mut late = act(1, 0, 9_000);
        late.failed_over = true;
        late.attempts = 3;
        late.first_failure_us = Some(2_000);
        // A call that failed outright after 5 ms.
        let mut failed = act(2, 0, 5_000);
        failed.status = "unavailable".into();
        failed.failed_over = true;
        let records = vec![over, late, failed, act(3, 0, 4_000)];
        let m = measure(&records);

        assert_eq!(m.failovers, 3);
        assert_eq!(
            m.failover_gap_ms.samples, 2,
            "only recovered calls have a gap"
        );
        assert_eq!(m.failover_gap_ms.max, 7.0);
        assert!(
            (m.failover_gap_ms.p50 - 3.0).abs() < 0.01,
            "{:?}",
            m.failover_gap_ms
        );
        assert_eq!(
            m.time_breakdown,
            TimeBreakdown {
                normal_ms: 4.0,
                retry_ms: 10.0,
                other_ms: 7.0,
            }
        );
        assert_eq!(m.rtt_us.max, 9_000);
        assert_eq!(m.errors, 1);
        // Only the first call says when its answering attempt started:
        // noticed after 1 ms, answered 2 ms later.
        assert_eq!(m.failover_notice_ms.samples, 1);
        assert_eq!(m.failover_notice_ms.max, 1.0);
        assert_eq!(m.failover_retry_ms.max, 2.0);
    }

    #[test]
    fn goodput_counts_answered_calls_and_refusals_are_not_errors() {
        // Four calls over 100 ms (the last ends at 100 ms): one answered
        // act, one join refused server-full, one act rate-limited, one act
        // failed.
        let mut refused = act(1, 0, 4_000);
        refused.call = super::super::record::CallKind::Join;
        refused.status = "refused:server-full".into();
        let mut limited = act(2, 10_000, 100);
        limited.status = "refused:rate-limited".into();
        let mut failed = act(3, 20_000, 80_000);
        failed.status = "Unavailable".into();
        let records = vec![act(0, 0, 100), refused, limited, failed];
        let m = measure(&records);
        assert_eq!(m.invocations, 4);
        assert_eq!(m.throughput_per_s, 40.0);
        assert_eq!(m.goodput_per_s, 10.0, "only the answered call counts");
        assert_eq!(m.errors, 1);
        assert_eq!(m.errors_by_status.len(), 1);
        assert_eq!(m.errors_by_status["Unavailable"], 1);
        assert_eq!(m.refusals, 2);
        assert_eq!(m.refusals_by_reason["server-full"], 1);
        assert_eq!(m.refusals_by_reason["rate-limited"], 1);
        assert_eq!(m.refused_join_rtt_us.max, 4_000);
        assert_eq!(m.refused_join_rtt_us.samples, 1);
        assert_eq!(m.rtt_us.samples, 1, "latency is of answered calls only");
    }

    #[test]
    fn tick_lateness_is_reported_apart_from_rtt() {
        let mut late = act(0, 50_000, 100);
        late.tick_late_us = 7_000;
        let records = vec![act(0, 0, 100), late];
        let m = measure(&records);
        assert_eq!(m.tick_late_us.max, 7_000);
        assert_eq!(m.rtt_us.max, 100, "lateness is not in the RTT");
    }

    #[test]
    fn ecdf_is_monotone_and_ends_at_one() {
        let values: Vec<u64> = (0..10_000u64).map(|i| (i * 7919) % 5000 + 1).collect();
        for max_points in [3, 100, 100_000] {
            let points = ecdf(&values, max_points);
            assert!(points.len() <= max_points.max(5000));
            assert!(
                points
                    .windows(2)
                    .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
            );
            assert_eq!(points.last().unwrap(), &(5000, 1.0));
            assert!(points[0].1 > 0.0);
        }
        assert_eq!(ecdf(&[5, 1, 5, 3], 10), vec![(1, 0.25), (3, 0.5), (5, 1.0)]);
        assert!(ecdf(&[], 10).is_empty());
    }

    #[test]
    fn the_tail_counts_calls_slower_than_the_floors_p999() {
        let records: Vec<Invocation> = [100, 200, 900, 1500, 5000]
            .into_iter()
            .enumerate()
            .map(|(i, rtt)| super::super::record::tests::act(0, i as u64 * 50_000, rtt))
            .collect();
        let ping = FloorStats {
            p999: 300,
            max: 400,
            ..FloorStats::default()
        };
        let txn = FloorStats {
            p999: 700,
            max: 2000,
            ..FloorStats::default()
        };
        let tail = Tail::new(&records, &ping, &txn);
        assert_eq!(tail.rtt_max_us, 5000);
        assert_eq!(tail.floor_max_us, 2400);
        assert_eq!(tail.floor_p999_us, 1000);
        assert_eq!(tail.calls_over_floor_p999, 2);
        assert_eq!(tail.fraction_over_floor_p999, 0.4);
        // Without a floor nothing is counted as over it.
        let none = Tail::new(&records, &FloorStats::default(), &FloorStats::default());
        assert_eq!(none.calls_over_floor_p999, 0);

        // The 5 ms call was in flight while the machine stood still: the
        // tail outside the stops is the next slowest.
        let mut tail = tail;
        tail.outside(&records, &[(199_000, 203_000)]);
        assert_eq!(tail.rtt_max_outside_stood_still_us, 1500);
        assert_eq!(
            (tail.stood_still_stretches, tail.calls_in_stood_still),
            (1, 1)
        );
        assert_eq!(tail.rtt_max_us, 5000, "the whole tail is kept");
        tail.outside(&records, &[]);
        assert_eq!(tail.rtt_max_outside_stood_still_us, 5000);
        assert_eq!(tail.calls_in_stood_still, 0);
    }

    #[test]
    fn a_game_answered_by_two_servers_in_one_window_is_split() {
        use super::super::record::tests::act;
        let on = |client, start_us, server: &str| Invocation {
            server: server.into(),
            ..act(client, start_us, 1_000)
        };
        let records = vec![
            // Window 0: both players on one server.
            on(0, 10_000, "a"),
            on(1, 20_000, "a"),
            // Window 1: the second player's act answered by another, its
            // calls moved there after a copy's second win.
            on(0, 110_000, "a"),
            Invocation {
                moved: "copy-won".into(),
                ..on(1, 120_000, "b")
            },
            // Window 2: a copy's win elsewhere is a detour, not a split.
            on(0, 210_000, "a"),
            Invocation {
                hedge_won: true,
                ..on(1, 220_000, "b")
            },
            // Window 3: another game on another server is no split.
            on(0, 310_000, "a"),
            Invocation {
                game: 2,
                ..on(1, 320_000, "b")
            },
            // Window 4: split again, its last move since a return to the
            // game's server.
            Invocation {
                moved: "back".into(),
                ..on(1, 405_000, "a")
            },
            on(0, 410_000, "c"),
        ];
        assert_eq!(
            SplitGames::new(&records),
            SplitGames {
                windows: 5,
                split_windows: 2,
                split_share: 0.4,
                by_last_move: [("back".into(), 1), ("copy-won".into(), 1)].into(),
            }
        );
        assert_eq!(SplitGames::new(&[]).split_share, 0.0);
    }

    #[test]
    fn ratios_guard_against_a_missing_floor() {
        assert_eq!(ratio(3.0, 2.0), 1.5);
        assert_eq!(ratio(3.0, 0.0), 0.0);
    }
}
