//! The statistics every figure is made of: percentiles (HdrHistogram),
//! jitter, failover gaps, the time breakdown, and the measurements of a
//! run's records. Pure: records in, numbers out. The definitions are
//! stated once, in [`super::report`].

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::record::Invocation;

/// Percentiles of RTT, in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RttStats {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
    /// How many values these figures were computed from.
    pub samples: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JitterStats {
    pub mean: f64,
    pub max: u64,
    pub p99: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GapStats {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub samples: u64,
}

/// A floor measured in the same run, in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FloorStats {
    pub p50: u64,
    pub p99: u64,
    #[serde(default)]
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
    pub samples: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeBreakdown {
    pub normal_ms: f64,
    pub retry_ms: f64,
    pub other_ms: f64,
}

/// What the client-side records say, before floors and invariants are added.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Measurements {
    pub invocations: u64,
    /// Calls that neither were answered nor refused.
    pub errors: u64,
    /// Calls a server refused (admission control, rate limits), by reason.
    pub refusals: u64,
    pub refusals_by_reason: BTreeMap<String, u64>,
    /// RTT of the joins refused `server-full`: how soon a player is told.
    pub refused_join_rtt_us: RttStats,
    pub warmup_invocations: u64,
    pub rtt_us: RttStats,
    /// RTT of `Act` calls only: the calls the game makes on every tick.
    pub act_rtt_us: RttStats,
    pub jitter_us: JitterStats,
    pub failovers: u64,
    pub failover_gap_ms: GapStats,
    pub failover_notice_ms: GapStats,
    pub failover_retry_ms: GapStats,
    /// Copies sent to a second server, and their share of the calls.
    pub hedges: u64,
    pub hedge_rate: f64,
    /// Calls answered by the hedged copy.
    pub hedges_won: u64,
    pub tick_late_us: FloorStats,
    pub time_breakdown: TimeBreakdown,
    /// Invocations per second over the measured span, answered or not.
    pub throughput_per_s: f64,
    /// Answered calls per second over the measured span: the capacity.
    pub goodput_per_s: f64,
    /// Invocations per server address (load balancing at a glance).
    pub per_server: BTreeMap<String, u64>,
    /// Errors by status (the gRPC code, or what the pool gave up on).
    pub errors_by_status: BTreeMap<String, u64>,
}

/// A latency histogram from 1 µs to an hour at three significant figures.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// Percentiles come from the histogram (three significant figures); max and
/// mean are exact.
pub fn rtt_stats(values: impl IntoIterator<Item = u64>) -> RttStats {
    let Some(d) = Distribution::of(values) else {
        return RttStats::default();
    };
    RttStats {
        p50: d.quantile(0.50),
        p90: d.quantile(0.90),
        p99: d.quantile(0.99),
        p999: d.quantile(0.999),
        max: d.max,
        mean: d.mean(),
        samples: d.histogram.len(),
    }
}

pub fn floor_stats(values: impl IntoIterator<Item = u64>) -> FloorStats {
    let Some(d) = Distribution::of(values) else {
        return FloorStats::default();
    };
    FloorStats {
        p50: d.quantile(0.50),
        p99: d.quantile(0.99),
        p999: d.quantile(0.999),
        max: d.max,
        mean: d.mean(),
        samples: d.histogram.len(),
    }
}

/// p50, p99 and max of durations given in milliseconds (fault recovery).
pub fn ms_stats(values_ms: impl IntoIterator<Item = f64>) -> GapStats {
    gap_stats(
        values_ms
            .into_iter()
            .map(|ms| (ms * 1000.0).max(0.0) as u64),
    )
}

/// p50, p99 and max in milliseconds of durations given in microseconds.
pub(crate) fn gap_stats(values_us: impl IntoIterator<Item = u64>) -> GapStats {
    match Distribution::of(values_us) {
        None => GapStats::default(),
        Some(d) => GapStats {
            p50: us_to_ms(d.quantile(0.50)),
            p99: us_to_ms(d.quantile(0.99)),
            max: us_to_ms(d.max),
            samples: d.histogram.len(),
        },
    }
}

/// A histogram plus the exact max and sum, which it only approximates.
struct Distribution {
    histogram: Histogram<u64>,
    max: u64,
    sum: u128,
}

impl Distribution {
    /// `None` when there are no values.
    fn of(values: impl IntoIterator<Item = u64>) -> Option<Distribution> {
        let mut d = Distribution {
            histogram: histogram(),
            max: 0,
            sum: 0,
        };
        for v in values {
            // HdrHistogram's lowest value is 1: sub-microsecond counts as 1.
            d.histogram.saturating_record(v.max(1));
            d.max = d.max.max(v);
            d.sum += u128::from(v);
        }
        (!d.histogram.is_empty()).then_some(d)
    }

    /// The value at quantile `q`, never above the exact max.
    fn quantile(&self, q: f64) -> u64 {
        self.histogram.value_at_quantile(q).min(self.max)
    }

    fn mean(&self) -> f64 {
        round2(self.sum as f64 / self.histogram.len() as f64)
    }
}

/// The RTT a player felt for a call: from its start to the reply, the pool's
/// retries on other servers included.
pub fn effective_rtt_us(r: &Invocation) -> u64 {
    r.rtt_us
}

/// |RTT_i − RTT_(i−1)| between consecutive successful calls of each client.
pub fn jitters_us(records: &[Invocation]) -> Vec<u64> {
    let mut by_client: BTreeMap<u32, Vec<&Invocation>> = BTreeMap::new();
    for r in records.iter().filter(|r| !r.warmup && r.is_ok()) {
        by_client.entry(r.client).or_default().push(r);
    }
    let mut jitters = Vec::new();
    for calls in by_client.values_mut() {
        calls.sort_by_key(|r| r.start_us);
        jitters.extend(
            calls
                .windows(2)
                .map(|w| effective_rtt_us(w[1]).abs_diff(effective_rtt_us(w[0]))),
        );
    }
    jitters
}

pub fn time_breakdown(records: &[Invocation]) -> TimeBreakdown {
    let (mut normal_us, mut retry_us, mut other_us) = (0u64, 0u64, 0u64);
    for r in records.iter().filter(|r| !r.warmup) {
        if let Some(gap_us) = r.failover_gap_us() {
            retry_us += gap_us;
            other_us += r.rtt_us - gap_us;
        } else if r.is_ok() {
            normal_us += r.rtt_us;
        } else {
            other_us += r.rtt_us;
        }
    }
    TimeBreakdown {
        normal_ms: us_to_ms(normal_us),
        retry_ms: us_to_ms(retry_us),
        other_ms: us_to_ms(other_us),
    }
}

pub fn measure(records: &[Invocation]) -> Measurements {
    let measured: Vec<&Invocation> = records.iter().filter(|r| !r.warmup).collect();
    let ok = || measured.iter().copied().filter(|r| r.is_ok());

    let jitter_us = match Distribution::of(jitters_us(records)) {
        None => JitterStats::default(),
        Some(d) => JitterStats {
            mean: d.mean(),
            max: d.max,
            p99: d.quantile(0.99),
        },
    };

    let failover_gap_ms = gap_stats(measured.iter().filter_map(|r| r.failover_gap_us()));
    let splits: Vec<(u64, u64)> = measured
        .iter()
        .filter_map(|r| r.failover_split_us())
        .collect();
    let failover_notice_ms = gap_stats(splits.iter().map(|s| s.0));
    let failover_retry_ms = gap_stats(splits.iter().map(|s| s.1));

    let span_us = match (
        measured.iter().map(|r| r.start_us).min(),
        measured.iter().map(|r| r.end_us()).max(),
    ) {
        (Some(first), Some(last)) if last > first => last - first,
        _ => 0,
    };
    let mut per_server = BTreeMap::new();
    let mut errors_by_status = BTreeMap::new();
    let mut refusals_by_reason = BTreeMap::new();
    for r in &measured {
        *per_server.entry(r.server.clone()).or_default() += 1;
        if let Some(reason) = r.refusal() {
            *refusals_by_reason.entry(reason.to_string()).or_default() += 1;
        } else if !r.is_ok() {
            *errors_by_status.entry(r.status.clone()).or_default() += 1;
        }
    }
    let per_s = |calls: usize| {
        if span_us == 0 {
            0.0
        } else {
            round2(calls as f64 * 1e6 / span_us as f64)
        }
    };

    Measurements {
        invocations: measured.len() as u64,
        errors: measured.iter().filter(|r| r.is_error()).count() as u64,
        refusals: refusals_by_reason.values().sum(),
        refusals_by_reason,
        refused_join_rtt_us: rtt_stats(
            measured
                .iter()
                .filter(|r| {
                    r.call == super::record::CallKind::Join
                        && r.refusal() == Some(borbaman_proto::Reason::ServerFull.as_str())
                })
                .map(|r| r.rtt_us),
        ),
        warmup_invocations: (records.len() - measured.len()) as u64,
        rtt_us: rtt_stats(ok().map(effective_rtt_us)),
        act_rtt_us: rtt_stats(
            ok().filter(|r| r.call == super::record::CallKind::Act)
                .map(effective_rtt_us),
        ),
        jitter_us,
        failovers: measured.iter().filter(|r| r.failed_over).count() as u64,
        hedges: measured.iter().map(|r| u64::from(r.hedges)).sum(),
        hedge_rate: if measured.is_empty() {
            0.0
        } else {
            (measured.iter().map(|r| u64::from(r.hedges)).sum::<u64>() as f64
                / measured.len() as f64
                * 10_000.0)
                .round()
                / 10_000.0
        },
        hedges_won: measured.iter().filter(|r| r.hedge_won).count() as u64,
        failover_gap_ms,
        failover_notice_ms,
        failover_retry_ms,
        tick_late_us: floor_stats(measured.iter().map(|r| r.tick_late_us)),
        time_breakdown: time_breakdown(records),
        throughput_per_s: per_s(measured.len()),
        goodput_per_s: per_s(ok().count()),
        per_server,
        errors_by_status,
    }
}

/// Points of the empirical CDF of `values`: (value, fraction of values ≤ it),
/// one point per distinct value, at most `max_points` of them (thinned evenly,
/// always keeping the last, so the curve still reaches 1).
pub fn ecdf(values: &[u64], max_points: usize) -> Vec<(u64, f64)> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let n = sorted.len() as f64;
    let mut points: Vec<(u64, f64)> = Vec::new();
    for (i, v) in sorted.iter().enumerate() {
        let fraction = (i + 1) as f64 / n;
        match points.last_mut() {
            Some(last) if last.0 == *v => last.1 = fraction,
            _ => points.push((*v, fraction)),
        }
    }
    if points.len() > max_points.max(2) {
        let step = points.len() as f64 / max_points.max(2) as f64;
        let last = *points.last().unwrap();
        let mut thinned: Vec<(u64, f64)> = (0..max_points.max(2) - 1)
            .map(|k| points[(k as f64 * step) as usize])
            .collect();
        thinned.push(last);
        thinned.dedup_by_key(|p| p.0);
        points = thinned;
    }
    points
}

pub fn us_to_ms(us: u64) -> f64 {
    round3(us as f64 / 1000.0)
}

/// `a / b` rounded to two decimals, or 0 when `b` is 0.
pub fn ratio(a: f64, b: f64) -> f64 {
    if b <= 0.0 { 0.0 } else { round2(a / b) }
}

pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
