//! Growing a running system (`bench --grow-at-s`): the run starts with
//! every partition on home, and at the given second the bench does what
//! an operator would: `db add-cluster` for each spare database cluster,
//! then `db rebalance` (one move at a time), through the same functions
//! as the command line ([`borbaman_server::store::grow`],
//! [`move_partition`]). Each move's start, end and read-only time are
//! kept, and [`GrowthReport`] sets the goodput before the growth against
//! the goodput after the last move, with the calls that failed while the
//! partitions moved; `goodput.svg` draws it second by second.

use std::time::Duration;

use anyhow::Context;
use borbaman_server::store::grow;
use borbaman_server::store::mover::{MoveReport, move_partition};
use borbaman_server::store::partitions::ClusterSpec;
use serde::Serialize;

use super::capacity::{SLICE, slices_of};
use super::record::{Invocation, RunClock};
use super::stats::{ratio, round2};
use crate::shutdown::Shutdown;

/// How long a run is held open after its last move when the moves ran
/// past the planned end, so that the goodput after them is measured.
pub const TAIL_AFTER_MOVES: Duration = Duration::from_secs(10);

/// What to grow, and when.
#[derive(Clone, Debug)]
pub struct GrowthPlan {
    /// Since the run's clock started (warm-up included).
    pub at: Duration,
    /// Home, as the servers are given it.
    pub home_url: String,
    /// The clusters to add, in order.
    pub clusters: Vec<SpareCluster>,
}

/// A database cluster that runs but holds no partition yet.
#[derive(Clone, Debug)]
pub struct SpareCluster {
    pub name: String,
    pub url: String,
    /// Its Patroni members' REST APIs, for a replicated one.
    pub patroni: Vec<String>,
}

/// One partition moved during the run. Times on the run's clock (since
/// its start, warm-up included, as `invocations.csv`'s `start_us`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PartitionMove {
    pub partition: u16,
    pub from: String,
    pub to: String,
    pub start_s: f64,
    pub end_s: f64,
    pub start_us: u64,
    pub end_us: u64,
    /// How long no cluster took the partition's writes (its games'
    /// calls waited), ms.
    pub read_only_ms: Option<f64>,
    /// How long the copy took, ms.
    pub copy_ms: Option<f64>,
    /// How long the partition was read-only on its source while the
    /// copy's snapshot was taken, ms.
    pub copy_read_only_ms: Option<f64>,
    /// Games deleted from the source afterwards.
    pub source_games_deleted: u64,
}

impl PartitionMove {
    fn of(report: &MoveReport, start_us: u64, end_us: u64) -> PartitionMove {
        let ms1 = |ms: Option<f64>| ms.map(|ms| (ms * 10.0).round() / 10.0);
        PartitionMove {
            partition: report.partition,
            from: report.source.clone(),
            to: report.target.clone(),
            start_s: seconds(start_us),
            end_s: seconds(end_us),
            start_us,
            end_us,
            read_only_ms: ms1(report.read_only_ms),
            copy_ms: ms1(report.copy_ms),
            copy_read_only_ms: ms1(report.copy_read_only_ms),
            source_games_deleted: report.source_games_deleted,
        }
    }
}

/// A cluster added during the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AddedCluster {
    pub name: String,
    /// Its number at home.
    pub number: i32,
    /// When `db add-cluster` started and returned, s on the run's clock.
    pub start_s: f64,
    pub end_s: f64,
}

/// What the growth did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Grown {
    /// When it began (the first `add-cluster`) and ended (the last move
    /// done), µs on the run's clock; `None` if it never began.
    pub started_us: Option<u64>,
    pub ended_us: u64,
    pub added: Vec<AddedCluster>,
    pub moves: Vec<PartitionMove>,
    /// Why it stopped short, if it did.
    pub error: Option<String>,
}

/// [`grow`] on a thread of its own, driven by the current runtime: the
/// store's futures are `Send`, but inside a spawned task the compiler
/// cannot prove it for every lifetime of the borrows they hold across an
/// `.await`, and blocking on them needs no proof.
pub async fn grow_beside(plan: GrowthPlan, clock: RunClock, stop: Shutdown) -> Grown {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(grow(plan, clock, stop)))
        .await
        .unwrap_or_else(|err| Grown {
            error: Some(format!("the growth's thread ended: {err}")),
            ..Grown::default()
        })
}

/// Waits until `plan.at`, then adds the clusters and rebalances, saying
/// each step on stderr. Never fails: what went wrong is in
/// [`Grown::error`] and the report.
pub async fn grow(plan: GrowthPlan, clock: RunClock, mut stop: Shutdown) -> Grown {
    let at = clock.started() + plan.at;
    tokio::select! {
        _ = tokio::time::sleep_until(at.into()) => {}
        _ = stop.recv() => {
            return Grown {
                error: Some("the run stopped before it was time to grow".into()),
                ..Grown::default()
            };
        }
    }
    let mut grown = Grown {
        started_us: Some(clock.now_us()),
        ..Grown::default()
    };
    if let Err(err) = carry_out(&plan, clock, &mut grown).await {
        let why = format!("{err:#}");
        eprintln!("growth: stopped: {why}");
        grown.error = Some(why);
    }
    grown.ended_us = clock.now_us();
    grown
}

/// `db add-cluster` for each spare, then `db rebalance`, one move at a
/// time; each step recorded in `grown` as it ends.
async fn carry_out(plan: &GrowthPlan, clock: RunClock, grown: &mut Grown) -> anyhow::Result<()> {
    for spare in &plan.clusters {
        let spec = format!("{}={}", spare.name, spare.url)
            .parse::<ClusterSpec>()
            .and_then(|spec| spec.with_patroni(&spare.patroni))
            .map_err(anyhow::Error::msg)?;
        let start_us = clock.now_us();
        let added = grow::add_cluster(&plan.home_url, &spec)
            .await
            .with_context(|| format!("adding cluster {}", spare.name))?;
        let end_us = clock.now_us();
        eprintln!(
            "growth: at {:.1} s cluster {} added (number {}) in {:.0} ms",
            seconds(start_us),
            added.name,
            added.number,
            (end_us - start_us) as f64 / 1000.0
        );
        grown.added.push(AddedCluster {
            name: added.name,
            number: added.number,
            start_s: seconds(start_us),
            end_s: seconds(end_us),
        });
    }
    let moves = grow::rebalance_plan(&plan.home_url).await?;
    eprintln!("growth: rebalancing: {} partitions to move", moves.len());
    for (i, (partition, to)) in moves.iter().enumerate() {
        let start_us = clock.now_us();
        let report = move_partition(&plan.home_url, *partition, to, &mut |line| {
            tracing::info!("{line}")
        })
        .await
        .with_context(|| format!("moving partition {partition} to {to}"))?;
        let moved = PartitionMove::of(&report, start_us, clock.now_us());
        eprintln!(
            "growth: move {} of {}: partition {} {} -> {} at {:.1}–{:.1} s, read-only {:.1} ms",
            i + 1,
            moves.len(),
            moved.partition,
            moved.from,
            moved.to,
            moved.start_s,
            moved.end_s,
            moved.read_only_ms.unwrap_or(0.0)
        );
        grown.moves.push(moved);
    }
    Ok(())
}

/// `summary.json`'s `growth`: the clusters added, every move, and the
/// goodput before the growth against after the last move. Times in
/// seconds on the run's clock (warm-up included).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GrowthReport {
    /// When the growth was due (`--grow-at-s` after the warm-up).
    pub grow_at_s: f64,
    /// When it began and ended (the last move done).
    pub started_s: Option<f64>,
    pub ended_s: f64,
    pub clusters_added: Vec<AddedCluster>,
    pub moves: Vec<PartitionMove>,
    /// The longest and the median read-only moment of a move, ms.
    pub read_only_max_ms: f64,
    pub read_only_median_ms: f64,
    /// Answered calls per second from the warm-up's end to the growth.
    pub goodput_before_per_s: f64,
    /// The best second of those.
    pub goodput_before_peak_second_per_s: f64,
    /// Answered calls per second from the last move's end (the growth's
    /// end, without moves) to the run's end, and for how long.
    pub goodput_after_per_s: f64,
    pub after_s: f64,
    /// `goodput_after_per_s` over `goodput_before_per_s`, and over the
    /// best second before.
    pub after_to_before: f64,
    pub after_to_before_peak_second: f64,
    /// The calls in flight at any moment of the growth (from the first
    /// `add-cluster` to the last move's end): how many, how many failed
    /// with an error, how many were refused, and the slowest one.
    pub calls_during: u64,
    pub errors_during: u64,
    pub refusals_during: u64,
    pub rtt_max_during_us: u64,
    /// Answered calls in each second of the run, from its start (warm-up
    /// included): what `goodput.svg` draws.
    pub goodput_by_second: Vec<f64>,
    /// Why the growth stopped short, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl GrowthReport {
    /// The report of `grown`, due at `at_us`, over a run's `records`
    /// whose warm-up ended at `warmup_us` and which ended at `end_us`.
    pub fn new(
        grown: &Grown,
        at_us: u64,
        records: &[Invocation],
        warmup_us: u64,
        end_us: u64,
    ) -> GrowthReport {
        let answered: Vec<u64> = records
            .iter()
            .filter(|r| r.is_ok())
            .map(Invocation::end_us)
            .collect();
        let rate = |from_us: u64, to_us: u64| {
            let n = answered
                .iter()
                .filter(|&&at| (from_us..to_us).contains(&at))
                .count();
            match to_us.saturating_sub(from_us) {
                0 => 0.0,
                span => round2(n as f64 / (span as f64 / 1e6)),
            }
        };
        let before_to_us = grown.started_us.unwrap_or(at_us).min(end_us);
        let before = rate(warmup_us, before_to_us);
        let peak = slices_of(answered.iter().copied(), warmup_us, before_to_us)
            .into_iter()
            .filter(|(_, length)| *length == SLICE)
            .map(|(n, _)| n as f64)
            .fold(0.0, f64::max);
        let after_from_us = grown
            .moves
            .last()
            .map_or(grown.ended_us, |m| m.end_us)
            .clamp(before_to_us, end_us);
        let after = rate(after_from_us, end_us);
        let during: Vec<&Invocation> = match grown.started_us {
            Some(from_us) => records
                .iter()
                .filter(|r| r.start_us <= grown.ended_us && r.end_us() >= from_us)
                .collect(),
            None => Vec::new(),
        };
        let mut read_only: Vec<f64> = grown.moves.iter().filter_map(|m| m.read_only_ms).collect();
        read_only.sort_by(f64::total_cmp);
        GrowthReport {
            grow_at_s: seconds(at_us),
            started_s: grown.started_us.map(seconds),
            ended_s: seconds(grown.ended_us),
            clusters_added: grown.added.clone(),
            moves: grown.moves.clone(),
            read_only_max_ms: read_only.last().copied().unwrap_or(0.0),
            read_only_median_ms: read_only.get(read_only.len() / 2).copied().unwrap_or(0.0),
            goodput_before_per_s: before,
            goodput_before_peak_second_per_s: peak,
            goodput_after_per_s: after,
            after_s: round2(end_us.saturating_sub(after_from_us) as f64 / 1e6),
            after_to_before: ratio(after, before),
            after_to_before_peak_second: ratio(after, peak),
            calls_during: during.len() as u64,
            errors_during: during.iter().filter(|r| r.is_error()).count() as u64,
            refusals_during: during.iter().filter(|r| r.refusal().is_some()).count() as u64,
            rtt_max_during_us: during.iter().map(|r| r.rtt_us).max().unwrap_or(0),
            goodput_by_second: slices_of(answered.iter().copied(), 0, end_us)
                .into_iter()
                .map(|(n, length)| round2(n as f64 / length.as_secs_f64()))
                .collect(),
            error: grown.error.clone(),
        }
    }

    /// The report's lines for the run's printout.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "growth: {} cluster(s) added at {} s, {} partitions moved by {:.1} s \
             (read-only max {:.1} ms, median {:.1} ms)",
            self.clusters_added.len(),
            self.started_s
                .map_or("(never)".to_string(), |s| format!("{s:.1}")),
            self.moves.len(),
            self.ended_s,
            self.read_only_max_ms,
            self.read_only_median_ms,
        )];
        lines.push(format!(
            "growth: goodput {:.0}/s before (best second {:.0}/s), {:.0}/s over the {:.1} s \
             after the last move: {}× (best second before: {}×); during the growth {} calls, \
             {} errors, {} refused, RTT max {} µs",
            self.goodput_before_per_s,
            self.goodput_before_peak_second_per_s,
            self.goodput_after_per_s,
            self.after_s,
            self.after_to_before,
            self.after_to_before_peak_second,
            self.calls_during,
            self.errors_during,
            self.refusals_during,
            self.rtt_max_during_us,
        ));
        for m in &self.moves {
            lines.push(format!(
                "  move: partition {:>2} {} -> {} at {:.1}–{:.1} s, read-only {} ms",
                m.partition,
                m.from,
                m.to,
                m.start_s,
                m.end_s,
                m.read_only_ms
                    .map_or("?".to_string(), |ms| format!("{ms:.1}")),
            ));
        }
        if let Some(why) = &self.error {
            lines.push(format!("growth stopped short: {why}"));
        }
        lines
    }
}

/// µs on the run's clock as seconds, to the millisecond.
fn seconds(us: u64) -> f64 {
    (us as f64 / 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::super::record::tests::act;
    use super::*;

    fn moved(partition: u16, start_s: u64, end_s: u64) -> PartitionMove {
        PartitionMove {
            partition,
            from: "home".into(),
            to: "c1".into(),
            start_s: start_s as f64,
            end_s: end_s as f64,
            start_us: start_s * 1_000_000,
            end_us: end_s * 1_000_000,
            read_only_ms: Some(partition as f64),
            ..PartitionMove::default()
        }
    }

    /// `per_s` answered calls a second over `[from_s, to_s)`, each 1 ms.
    fn calls(per_s: u64, from_s: u64, to_s: u64) -> Vec<Invocation> {
        let step = 1_000_000 / per_s;
        (from_s * per_s..to_s * per_s)
            .map(|i| act(0, i * step, 1_000))
            .collect()
    }

    #[test]
    fn goodput_before_is_up_to_the_growth_and_after_is_from_the_last_move() {
        // 100/s until the growth at 10 s, 150/s while it moves, 200/s
        // from the last move's end at 20 s to the end at 30 s.
        let mut records = calls(100, 0, 10);
        records.extend(calls(150, 10, 20));
        records.extend(calls(200, 20, 30));
        let mut failed = act(1, 12_000_000, 5_000);
        failed.status = "unavailable".into();
        records.push(failed);
        let mut refused = act(2, 8_000_000, 500);
        refused.status = "refused:server-full".into();
        records.push(refused);
        let grown = Grown {
            started_us: Some(10_000_000),
            ended_us: 20_000_000,
            moves: vec![moved(63, 11, 15), moved(62, 15, 20)],
            ..Grown::default()
        };
        let report = GrowthReport::new(&grown, 10_000_000, &records, 2_000_000, 30_000_000);
        assert_eq!(report.goodput_before_per_s, 100.0);
        assert_eq!(report.goodput_before_peak_second_per_s, 100.0);
        assert_eq!(report.goodput_after_per_s, 200.0);
        assert_eq!(report.after_s, 10.0);
        assert_eq!(report.after_to_before, 2.0);
        assert_eq!(report.errors_during, 1, "the failed call at 12 s");
        assert_eq!(report.refusals_during, 0, "the refusal came before");
        assert_eq!(report.rtt_max_during_us, 5_000);
        assert_eq!(report.read_only_max_ms, 63.0);
        assert_eq!(report.goodput_by_second.len(), 30);
        assert_eq!(report.goodput_by_second[25], 200.0);
        assert!(
            report.lines()[1].contains("2×"),
            "{}",
            report.lines().join("\n")
        );
    }

    #[test]
    fn a_growth_that_never_began_measures_nothing_during_it() {
        let records = calls(100, 0, 10);
        let grown = Grown {
            ended_us: 0,
            error: Some("the run stopped before it was time to grow".into()),
            ..Grown::default()
        };
        let report = GrowthReport::new(&grown, 8_000_000, &records, 1_000_000, 10_000_000);
        assert_eq!(report.calls_during, 0);
        assert_eq!(report.goodput_before_per_s, 100.0);
        assert!(report.lines().last().unwrap().contains("stopped short"));
    }
}
