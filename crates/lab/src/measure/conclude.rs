//! The end of a run: its headline figures printed in named parts, and the
//! verdicts (invariants, a closed loop's errors) that fail it.

use report::Summary;
use std::path::Path;

use super::*;

/// The most errors a closed-loop run may have, as a share of its calls,
/// for its goodput to stand as a capacity figure.
pub const MAX_CLOSED_LOOP_ERROR_SHARE: f64 = 0.01;

/// Why a run's figures do not stand, if they do not: a closed loop
/// (`interval_ms` 0) measures capacity, and one whose calls failed more
/// than [`MAX_CLOSED_LOOP_ERROR_SHARE`] measured its failures instead.
/// Refusals are not errors: they are the servers shedding load, and the
/// goodput already leaves them out.
pub fn too_many_errors(summary: &Summary) -> Option<String> {
    let share = summary.errors as f64 / summary.invocations.max(1) as f64;
    (summary.interval_ms == 0 && share > MAX_CLOSED_LOOP_ERROR_SHARE).then(|| {
        format!(
            "{} of {} calls ({:.1} %) failed with errors (more than {} %): this closed loop measured failures, not capacity; see errors_by_status in summary.json",
            summary.errors,
            summary.invocations,
            share * 100.0,
            MAX_CLOSED_LOOP_ERROR_SHARE * 100.0
        )
    })
}

/// The two phases of a closed loop's floor, for the closed-loop line:
/// each phase's median second and its slowest and fastest, so a reader
/// sees how steady the floor was.
fn floor_phases(floor: &capacity::CapacityFloor) -> String {
    let others = |cores: Option<f64>| match cores {
        Some(cores) => format!(", {cores:.2} cores to other processes"),
        None => String::new(),
    };
    let phase = |p: &capacity::PhaseRate| {
        format!(
            "{:.0}/s (seconds {:.0}–{:.0}{})",
            p.median_per_s,
            p.min_per_s,
            p.max_per_s,
            others(p.others_cores)
        )
    };
    format!(
        " (floor: median second before the run {}, after it {}; the run{})",
        phase(&floor.before),
        phase(&floor.after),
        match floor.run_others_cores {
            Some(_) => others(floor.run_others_cores),
            None => ": other processes not read".into(),
        }
    )
}

/// Prints the headline figures and fails, naming them, if invariants broke
/// or a closed loop had too many errors.
pub fn conclude(summary: &Summary, out: &Path) -> anyhow::Result<()> {
    print_throughput(summary);
    print_calls(summary);
    print_where_the_time_went(summary);
    print_costs(summary);
    print_faults_and_distances(summary);
    for line in summary.growth.iter().flat_map(|g| g.lines()) {
        println!("{line}");
    }
    println!("report written to {}", out.display());
    for note in &summary.notes {
        println!("note: {note}");
    }
    if let Some(invariants) = &summary.invariants {
        for check in &invariants.checks {
            let verdict = if check.ok { "ok  " } else { "FAIL" };
            println!("{verdict} {}: {}", check.name, check.detail);
        }
        let failed = invariants.failed();
        anyhow::ensure!(failed.is_empty(), "invariant failed: {}", failed.join("; "));
    }
    if let Some(why) = too_many_errors(summary) {
        anyhow::bail!(why);
    }
    if let Some(why) = summary.growth.as_ref().and_then(|g| g.error.as_ref()) {
        anyhow::bail!("the growth stopped short: {why}");
    }
    Ok(())
}

/// Goodput, and a closed loop's beside its same-run floor.
fn print_throughput(summary: &Summary) {
    println!(
        "goodput {:.1} answered calls/s of {:.1} calls/s sent; {} refused ({}), {} errors ({})",
        summary.goodput_per_s,
        summary.throughput_per_s,
        summary.refusals,
        counts(&summary.refusals_by_reason),
        summary.errors,
        counts(&summary.errors_by_status),
    );
    if summary.floor_txn_throughput_per_s > 0.0 {
        let phases = summary
            .floor_txn_throughput
            .as_ref()
            .map(floor_phases)
            .unwrap_or_default();
        let seconds = summary
            .goodput_seconds
            .as_ref()
            .map(|g| {
                format!(
                    "; goodput's median second {:.0}/s (seconds {:.0}–{:.0}), {}× the floor",
                    g.median_per_s,
                    g.min_per_s,
                    g.max_per_s,
                    summary.goodput_median_second_to_floor
                )
            })
            .unwrap_or_default();
        println!(
            "closed loop: goodput {:.0}/s against the same-run bare-transaction floor {:.0}/s: {}×{phases}{seconds}",
            summary.goodput_per_s, summary.floor_txn_throughput_per_s, summary.throughput_to_floor
        );
    }
}

/// The calls: RTT, jitter, floors, failovers and invariants' counts, the
/// inputs, the tail, and games split over servers.
fn print_calls(summary: &Summary) {
    println!(
        "{} invocations, {} errors; RTT p50 {} µs, p99 {} µs, p99.9 {} µs, max {} µs; \
         jitter max {} µs; floors p50: ping {} µs, transaction {} µs (act p50 {}× floor, p99 {}×); \
         {} faults, {} failovers (gap max {} ms), {} hedges ({:.2}%); \
         lost {}, duplicated {}, regressions {}",
        summary.invocations,
        summary.errors,
        summary.rtt_us.p50,
        summary.rtt_us.p99,
        summary.rtt_us.p999,
        summary.rtt_us.max,
        summary.jitter_us.max,
        summary.floor_ping_us.p50,
        summary.floor_db_txn_us.p50,
        summary.ratios.act_p50_to_floor,
        summary.ratios.act_p99_to_floor,
        summary.faults,
        summary.failovers,
        summary.failover_gap_ms.max,
        summary.hedges,
        summary.hedge_rate * 100.0,
        summary.lost_actions,
        summary.duplicate_actions,
        summary.state_regressions,
    );
    println!(
        "inputs: {} sent, {} applied; key to ack p50 {} µs, p99 {} µs, max {} µs{}",
        summary.inputs_sent,
        summary.inputs_applied,
        summary.input_to_apply_us.p50,
        summary.input_to_apply_us.p99,
        summary.input_to_apply_us.max,
        if summary.predicted {
            format!(
                "; predicted: {} mispredictions in {} reconciliations",
                summary.mispredictions, summary.reconciliations
            )
        } else {
            String::new()
        },
    );
    println!(
        "tail: RTT max {} µs beside the floor's max {} µs; {} calls ({:.3}%) slower than \
         the floor's p99.9 ({} µs)",
        summary.tail.rtt_max_us,
        summary.tail.floor_max_us,
        summary.tail.calls_over_floor_p999,
        summary.tail.fraction_over_floor_p999 * 100.0,
        summary.tail.floor_p999_us,
    );
    if summary.tail.stood_still_stretches > 0 {
        println!(
            "tail outside the machine's stops: RTT max {} µs in the calls in flight during none \
             of the {} stretches the machine stood still ({} calls were)",
            summary.tail.rtt_max_outside_stood_still_us,
            summary.tail.stood_still_stretches,
            summary.tail.calls_in_stood_still,
        );
    }
    if summary.split_games.windows > 0 {
        println!(
            "games split over servers (a game's acts answered by two in one 100 ms window): \
             {} of {} windows ({:.1}%){}",
            summary.split_games.split_windows,
            summary.split_games.windows,
            summary.split_games.split_share * 100.0,
            match summary.split_games.by_last_move.is_empty() {
                true => String::new(),
                false => format!(
                    "; split games' windows by their players' last move: {}",
                    summary
                        .split_games
                        .by_last_move
                        .iter()
                        .map(|(why, n)| format!("{why} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        );
    }
}

/// The slow calls by part, the stall windows, PostgreSQL and the machine.
fn print_where_the_time_went(summary: &Summary) {
    let a = &summary.attribution;
    println!(
        "slow calls (over {} µs): {} of {}; their time by part: {} (by main part: {}); \
         all calls: {}",
        a.slow_threshold_us,
        a.slow.calls,
        a.all.calls,
        a.slow.line(),
        counts(&a.slow.by_main_part),
        a.all.line(),
    );
    let w = &summary.stall_windows;
    println!(
        "stall windows: {} ({} ms in all), holding {} of {} slow calls{}",
        w.count,
        w.total_length_ms,
        w.slow_calls_in_windows,
        w.slow_calls,
        w.held_line(),
    );
    for window in w.windows.iter().take(PRINTED_WINDOWS) {
        println!("  {}", window_line(window));
    }
    if w.windows.len() > PRINTED_WINDOWS {
        println!(
            "  … {} more in summary.json (stall_windows)",
            w.windows.len() - PRINTED_WINDOWS
        );
    }
    if let Some(postgres) = &summary.postgres {
        println!("{}", postgres.line());
    }
    if let Some(machine) = &summary.machine {
        println!("{}", machine.line());
    }
}

/// What a call cost the database and the processes, and the CPU quotas.
fn print_costs(summary: &Summary) {
    if let Some(cost) = &summary.database_cost {
        println!(
            "database per call: {} B of WAL, {} writing transactions, {} of postgres CPU",
            cost.wal_bytes_per_call,
            cost.writing_transactions_per_call,
            cost.cpu_us_per_call
                .map_or("unknown".to_string(), |us| format!("{us} µs")),
        );
    }
    match (
        summary.bench_and_servers_cpu_us_per_call,
        summary.bench_cpu_us_per_call,
    ) {
        (Some(all), Some(bench)) => println!(
            "bench and servers per call: {all} µs of CPU (the bench {bench} µs, its servers {:.1} µs)",
            all - bench
        ),
        (Some(all), None) => println!("bench and servers per call: {all} µs of CPU"),
        _ => {}
    }
    for line in quota::describe(&summary.cpu_quotas) {
        println!("{line}");
    }
    for line in super::clusters::describe(&summary.clusters) {
        println!("{line}");
    }
}

/// Recovery after faults, the tail by fault, and each distance.
fn print_faults_and_distances(summary: &Summary) {
    if summary.faults > 0 {
        println!(
            "recovery (every client's first good act after a fault): p50 {} ms, p99 {} ms, \
             max {} ms over {} faults; after promotion p99 {} ms, after the new \
             primary's first commit p50 {} ms, p99 {} ms",
            summary.recovery_ms.p50,
            summary.recovery_ms.p99,
            summary.recovery_ms.max,
            summary.recovery_ms.samples,
            summary.recovery_after_promotion_ms.p99,
            summary.recovery_after_commit_ms.p50,
            summary.recovery_after_commit_ms.p99,
        );
        println!(
            "tail by fault: RTT max {} µs in the {} calls started during a fault or within \
             {} s of its end, {} µs in the {} started elsewhere",
            summary.fault_tail.in_faults_max_us,
            summary.fault_tail.in_faults_calls,
            faults::AFTER_RESTORED.as_secs(),
            summary.fault_tail.elsewhere_max_us,
            summary.fault_tail.elsewhere_calls,
        );
        for line in summary.fault_split.lines() {
            println!("{line}");
        }
    }
    for distance in &summary.distances {
        println!("{}", distance.line());
    }
}

/// Stall windows printed (the longest); `summary.json` lists more.
const PRINTED_WINDOWS: usize = 10;

/// One stall window, the floors and PostgreSQL beside it.
fn window_line(w: &attribution::StallWindow) -> String {
    let floor = |f: &attribution::FloorInWindow| match f.samples {
        0 => "no sample".to_string(),
        n => format!("max {} µs of {n}", f.max_us),
    };
    format!(
        "at {:.3} s for {} ms: {} slow ({} failed) of {} calls, {} games, {} servers, \
         max {} µs: {}; floor ping {}, transaction {}{}",
        w.start_us as f64 / 1e6,
        w.length_us / 1000,
        w.slow_calls,
        w.errors,
        w.calls,
        w.games,
        w.servers,
        w.max_rtt_us,
        w.parts.line(),
        floor(&w.floor_ping),
        floor(&w.floor_db_txn),
        match &w.postgres {
            Some(log) => format!("; postgres: {}", log.line()),
            None => String::new(),
        },
    ) + &match &w.machine {
        Some(m) => format!(
            "; machine: {}{}",
            m.line(),
            m.held_by(w.length_us)
                .map(|part| format!(" (held by the {part})"))
                .unwrap_or_default()
        ),
        None => String::new(),
    }
}

/// `a 3, b 1`, or `none`.
fn counts(by: &std::collections::BTreeMap<String, u64>) -> String {
    if by.is_empty() {
        return "none".into();
    }
    by.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}
