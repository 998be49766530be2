//! The capacity floor of a closed-loop run, from one-second slices, and
//! the run's goodput counted the same way.
//!
//! A closed loop (`bench --interval-ms 0`) is judged against what the same
//! database commits of bare transactions of a game call's shape with as
//! many connections and nothing else in the way. On a two-core machine that
//! the run itself saturates, that rate moves by a factor of two from one
//! second to the next as other work (a build, the first autovacuum round,
//! a WAL segment being created) takes the cores or the disk for a moment:
//! a single average over the phase is as noisy as its worst second. So the
//! floor is counted per slice, and a phase's rate is its **median slice**:
//! what the database sustains most of the time, not a dip and not a burst.
//!
//! The floor is measured twice, on the idle cluster right before the
//! workload (for [`BEFORE`]) and right after it (for as long as the
//! workload ran), and the run is judged against the
//! **higher** of the two medians: a machine that was busier during one
//! phase makes the floor lower there, never the goodput look better than
//! the database can do. Both phases and their slices go in `summary.json`
//! so a reader can see the spread.
//!
//! The run is judged on its goodput over the whole measured window (every
//! dip in it counts against the game); its median second is reported
//! beside it, to set against the floor's median second like for like.

use std::time::Duration;

use serde::Serialize;

use super::pgview::LogCounts;

/// Length of one slice: long enough to hold thousands of transactions,
/// short enough that a 15 s phase has fifteen of them to take a median of.
pub const SLICE: Duration = Duration::from_secs(1);

/// The phase before the run: short, so that the run that follows stays
/// ahead of PostgreSQL's first autovacuum round (about 30 s after a fresh
/// database starts, which analyzes the game's tables and so replans every
/// server's statements) and the round lands in the phase after the run,
/// where one slow second does not move a median. Five seconds still give
/// a median that shows when the machine was busier after the run.
pub const BEFORE: Duration = Duration::from_secs(5);

/// A slice shorter than this share of [`SLICE`] (the tail of a phase) is
/// too short to count on its own; it still counts in the mean.
const MIN_SLICE_SHARE: f64 = 0.5;

/// One phase of the bare-transaction throughput floor.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PhaseRate {
    /// Transactions committed per second in each slice, in order.
    pub slices_per_s: Vec<f64>,
    /// The median slice: the phase's rate.
    pub median_per_s: f64,
    /// The slowest and fastest slice.
    pub min_per_s: f64,
    pub max_per_s: f64,
    /// Everything committed over the whole phase's time (what the floor
    /// reported before it was sliced).
    pub mean_per_s: f64,
    /// When the phase ran, µs from the start of the run (negative before
    /// it), and what PostgreSQL's log says happened meanwhile (an
    /// autovacuum, a checkpoint): set by the caller, which has the clock
    /// and the log.
    pub start_us: i64,
    pub end_us: i64,
    pub postgres: Option<LogCounts>,
    /// Cores other processes kept busy on average meanwhile (neither the
    /// bench, its servers nor PostgreSQL: another build, a test). `None`
    /// where `/proc` cannot be read.
    pub others_cores: Option<f64>,
}

impl PhaseRate {
    /// From the transactions committed in each slice and how long each
    /// slice lasted. Slices shorter than half a [`SLICE`] count only in
    /// the mean; with no whole slice at all the median is the mean.
    pub fn from_slices(slices: &[(u64, Duration)]) -> PhaseRate {
        let committed: u64 = slices.iter().map(|(n, _)| n).sum();
        let elapsed: f64 = slices.iter().map(|(_, d)| d.as_secs_f64()).sum();
        let mean_per_s = if elapsed > 0.0 {
            committed as f64 / elapsed
        } else {
            0.0
        };
        let slices_per_s: Vec<f64> = slices
            .iter()
            .filter(|(_, d)| d.as_secs_f64() >= SLICE.as_secs_f64() * MIN_SLICE_SHARE)
            .map(|(n, d)| round2(*n as f64 / d.as_secs_f64()))
            .collect();
        let mut sorted = slices_per_s.clone();
        sorted.sort_by(f64::total_cmp);
        let median_per_s = match sorted.len() {
            0 => mean_per_s,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        PhaseRate {
            min_per_s: sorted.first().copied().unwrap_or(mean_per_s),
            max_per_s: sorted.last().copied().unwrap_or(mean_per_s),
            median_per_s: round2(median_per_s),
            mean_per_s: round2(mean_per_s),
            slices_per_s,
            ..PhaseRate::default()
        }
    }
}

/// Counts events (calls answered, at µs from the start of the run) per
/// [`SLICE`] from `from_us` to `to_us`: whole slices, then the remainder.
/// Events outside the span are not counted. With it the goodput of a run
/// is judged second by second, as its floor is.
pub fn slices_of(
    at_us: impl IntoIterator<Item = u64>,
    from_us: u64,
    to_us: u64,
) -> Vec<(u64, Duration)> {
    let slice_us = SLICE.as_micros() as u64;
    let span_us = to_us.saturating_sub(from_us);
    let whole = span_us / slice_us;
    let tail_us = span_us % slice_us;
    let mut counts = vec![0u64; (whole + u64::from(tail_us > 0)) as usize];
    for at in at_us {
        if (from_us..to_us).contains(&at) {
            counts[((at - from_us) / slice_us) as usize] += 1;
        }
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let length_us = if (i as u64) < whole {
                slice_us
            } else {
                tail_us
            };
            (n, Duration::from_micros(length_us))
        })
        .collect()
}

/// Both phases of a closed loop's capacity floor, and the floor itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CapacityFloor {
    /// On the idle cluster, right before the workload.
    pub before: PhaseRate,
    /// Right after the workload, on the database the run left behind.
    pub after: PhaseRate,
    /// The higher of the two medians: the floor the run is judged against.
    pub floor_per_s: f64,
    /// How far apart the two phases' medians are, as a share of the
    /// higher: a large spread says the machine changed under the run.
    pub phase_spread: f64,
    /// The same as the phases' `others_cores`, over the workload (warm-up
    /// included), for the reader to compare.
    pub run_others_cores: Option<f64>,
}

impl CapacityFloor {
    pub fn new(before: PhaseRate, after: PhaseRate) -> CapacityFloor {
        let floor_per_s = before.median_per_s.max(after.median_per_s);
        let low = before.median_per_s.min(after.median_per_s);
        let phase_spread = if floor_per_s > 0.0 {
            ((floor_per_s - low) / floor_per_s * 1000.0).round() / 1000.0
        } else {
            0.0
        };
        CapacityFloor {
            before,
            after,
            floor_per_s,
            phase_spread,
            run_others_cores: None,
        }
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(counts: &[u64]) -> Vec<(u64, Duration)> {
        counts.iter().map(|&n| (n, SLICE)).collect()
    }

    #[test]
    fn a_phase_is_its_median_slice_not_its_dips() {
        // Two seconds halved by something else on the machine.
        let rate = PhaseRate::from_slices(&secs(&[3000, 3100, 1500, 2900, 1400, 3050, 3000]));
        assert_eq!(rate.median_per_s, 3000.0);
        assert_eq!(rate.min_per_s, 1400.0);
        assert_eq!(rate.max_per_s, 3100.0);
        assert!(
            rate.mean_per_s < 2700.0,
            "the mean keeps the dips: {rate:?}"
        );
        assert_eq!(rate.slices_per_s.len(), 7);
    }

    #[test]
    fn an_even_count_takes_the_middle_two() {
        let rate = PhaseRate::from_slices(&secs(&[1000, 2000, 3000, 4000]));
        assert_eq!(rate.median_per_s, 2500.0);
    }

    #[test]
    fn a_short_tail_counts_in_the_mean_only() {
        let mut slices = secs(&[2000, 2000, 2000]);
        // 10 transactions in the last 100 ms: 100/s, no slice of its own.
        slices.push((10, Duration::from_millis(100)));
        let rate = PhaseRate::from_slices(&slices);
        assert_eq!(rate.slices_per_s, vec![2000.0, 2000.0, 2000.0]);
        assert_eq!(rate.median_per_s, 2000.0);
        assert_eq!(rate.mean_per_s, round2(6010.0 / 3.1));
    }

    #[test]
    fn a_slice_is_rated_over_its_own_length() {
        // The ticker woke late: 1 500 transactions in 1.5 s is 1 000/s.
        let rate = PhaseRate::from_slices(&[(1500, Duration::from_millis(1500))]);
        assert_eq!(rate.slices_per_s, vec![1000.0]);
    }

    #[test]
    fn a_phase_too_short_for_a_slice_is_its_mean() {
        let rate = PhaseRate::from_slices(&[(120, Duration::from_millis(400))]);
        assert_eq!(rate.median_per_s, 300.0);
        assert!(rate.slices_per_s.is_empty());
        assert_eq!(PhaseRate::from_slices(&[]), PhaseRate::default());
    }

    #[test]
    fn events_fall_in_their_own_second() {
        let slices = slices_of(
            [1_000_000, 1_999_999, 2_000_000, 3_100_000, 900_000],
            1_000_000,
            3_500_000,
        );
        assert_eq!(
            slices,
            vec![(2, SLICE), (1, SLICE), (1, Duration::from_millis(500)),],
            "the event before the span is left out"
        );
        assert!(slices_of([5], 10, 10).is_empty());
    }

    #[test]
    fn the_floor_is_the_higher_phase() {
        let low = PhaseRate::from_slices(&secs(&[1900, 1900, 1900]));
        let high = PhaseRate::from_slices(&secs(&[3000, 3000, 3000]));
        for floor in [
            CapacityFloor::new(low.clone(), high.clone()),
            CapacityFloor::new(high.clone(), low.clone()),
        ] {
            assert_eq!(floor.floor_per_s, 3000.0);
            assert_eq!(floor.phase_spread, 0.367);
        }
        assert_eq!(
            CapacityFloor::new(PhaseRate::default(), PhaseRate::default()).phase_spread,
            0.0
        );
    }
}
