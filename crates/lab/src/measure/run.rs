//! One measured run, phase by phase: the pools, the floors on the idle
//! cluster, the workload (the clients, the injector, a floor prober per
//! distance, the machine's sampler and the database's readings around
//! it), the invariant checks, and the summary's parts; then every output
//! written to the run's directory.

use crate::shutdown::{self, Shutdown};
use anyhow::Context;
use attribution::{Attribution, StallWindows};
use borbaman_client::pool::{PoolConfig, ServerPool};
use distance::{DistanceReport, link_of_client};
use faults::FaultEvent;
use floors::DbFloor;
use pgview::PostgresView;
use plot::{FaultMark, Reference};
use record::{Recorder, RunClock};
use report::{FloorRatios, SplitGames, Summary, Tail, floor_stats, measure};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::task::JoinHandle;
use workload::{Progress, WorkloadConfig};

use super::dbs::{
    connect_one, count_rows, db_clusters_now, partition_map, read_costs, read_stats, total_cost,
};
use super::progress::progress_bar;
use super::*;

/// One pool for the floors at each distance (through the same proxies as
/// the clients there), and one per client as every player has.
async fn connect_pools(
    plan: &RunPlan,
    target: &Target,
) -> anyhow::Result<(Vec<ServerPool>, Vec<ServerPool>)> {
    let links: Vec<Option<usize>> = match target.wan.len() {
        0 => vec![None],
        n => (0..n).map(Some).collect(),
    };
    // Which distance could not connect, when one cannot (a pool whose
    // health checks time out below the round trip).
    let at = |link: Option<usize>| match link.and_then(|l| target.wan.get(l)) {
        Some(distance) => format!(" at {} one way", distance.link),
        None => String::new(),
    };
    let mut floor_pools = Vec::new();
    for &link in &links {
        let pool = ServerPool::connect(&target.servers, target.pool_at(link))
            .await
            .with_context(|| format!("connecting the floor prober{}", at(link)))?;
        floor_pools.push(pool);
    }
    let mut pools = Vec::new();
    for client in 0..plan.workload.clients {
        let link = link_of_client(client, target.wan.len());
        // Every answer carries its server's timing, for the attribution.
        let config = PoolConfig {
            server_timing: true,
            ..target.pool_at(link)
        };
        let pool = ServerPool::connect(&target.servers, config)
            .await
            .with_context(|| format!("connecting client {client}{}", at(link)))?;
        pools.push(pool);
    }

    Ok((floor_pools, pools))
}

/// The transaction floor's connection, and both floors measured on the
/// idle cluster at each distance (the transaction floor once, with the
/// first distance's pings).
async fn idle_floors(
    plan: &RunPlan,
    target: &Target,
    floor_pools: &[ServerPool],
    notes: &mut Vec<String>,
) -> anyhow::Result<(Option<DbFloor>, Vec<floors::FloorSamples>)> {
    let mut db_floor = match &target.database_url {
        Some(url) => Some(
            DbFloor::open(url)
                .await
                .context("opening the transaction floor")?,
        ),
        None => {
            notes.push(
                "no database URL: no transaction floor and no invariant checks \
                 (pass --database-url)"
                    .into(),
            );
            None
        }
    };
    let mut idle = Vec::new();
    for (i, pool) in floor_pools.iter().enumerate() {
        // The transaction floor once, with the first distance's pings.
        let db = if i == 0 { db_floor.as_mut() } else { None };
        idle.push(
            floors::measure_idle(&pool.live_channels(), db, plan.floor_samples)
                .await
                .context("measuring the floors")?,
        );
    }

    Ok((db_floor, idle))
}

/// The inputs sent and applied, the predictions, the faults by kind and
/// the clients' recovery after them.
fn fill_inputs_and_recovery(
    summary: &mut Summary,
    plan: &RunPlan,
    logs: &[workload::ClientLog],
    faults: &[FaultEvent],
) {
    let sessions = || logs.iter().flat_map(|l| &l.sessions);
    summary.inputs_sent = sessions().map(|s| s.inputs_sent).sum();
    summary.inputs_applied = sessions().map(|s| s.inputs_applied).sum();
    summary.predicted = plan.workload.predict;
    summary.reconciliations = sessions().map(|s| s.reconciled).sum();
    summary.mispredictions = sessions().map(|s| s.mispredicted).sum();
    summary.input_to_apply_us = floor_stats(
        logs.iter()
            .flat_map(|l| l.input_to_apply_us.iter().copied()),
    );
    for fault in faults {
        *summary
            .faults_by_kind
            .entry(fault.kind.to_string())
            .or_default() += 1;
    }
    summary.recovery_ms = report::ms_stats(faults.iter().filter_map(|f| f.recovered_ms));
    summary.recovery_after_promotion_ms = report::ms_stats(
        faults
            .iter()
            .filter_map(|f| Some(f.recovered_ms? - f.promoted_ms?)),
    );
    summary.recovery_after_commit_ms = report::ms_stats(
        faults
            .iter()
            .filter_map(|f| Some((f.recovered_ms? - f.committing_ms?).max(0.0))),
    );
}

/// Each distance's calls beside its own floor.
fn distances(
    plan: &RunPlan,
    target: &Target,
    probed: &[floors::FloorSamples],
    records: &[record::Invocation],
    summary: &Summary,
) -> Vec<DistanceReport> {
    target
        .wan
        .iter()
        .zip(probed)
        .enumerate()
        .map(|(i, (distance, samples))| {
            let clients: Vec<u32> = (0..plan.workload.clients)
                .filter(|&c| link_of_client(c, target.wan.len()) == Some(i))
                .collect();
            DistanceReport::new(
                &distance.link,
                &clients,
                records,
                &samples.ping_us,
                &summary.floor_db_txn_us,
            )
        })
        .collect()
}

/// When the workload ran: its clock, how long (warm-up included) and the
/// warm-up's end.
#[derive(Clone, Copy)]
struct RunWindow {
    clock: RunClock,
    ran: Duration,
    warmup_us: u64,
}

/// One phase of the closed loop's floor: its rate, when it ran, and how
/// many cores other processes took meanwhile.
type FloorPhase = (capacity::PhaseRate, Instant, Instant, Option<f64>);

/// A closed loop's goodput beside the same-run bare-transaction floor,
/// measured before and after the workload.
fn fill_capacity(
    summary: &mut Summary,
    before: FloorPhase,
    after: FloorPhase,
    run_others_cores: Option<f64>,
    records: &[record::Invocation],
    run: RunWindow,
) {
    let phase = |(mut rate, from, to, others): FloorPhase| {
        rate.start_us = run.clock.offset_us(from);
        rate.end_us = run.clock.offset_us(to);
        rate.others_cores = others;
        rate
    };
    let mut floor = capacity::CapacityFloor::new(phase(before), phase(after));
    floor.run_others_cores = run_others_cores;
    summary.floor_txn_throughput_per_s = floor.floor_per_s;
    // Capacity is what was answered: refusals and errors are not.
    let to_floor =
        |rate: f64| (rate / floor.floor_per_s.max(f64::MIN_POSITIVE) * 1000.0).round() / 1000.0;
    summary.throughput_to_floor = to_floor(summary.goodput_per_s);
    let answered = records
        .iter()
        .filter(|r| !r.warmup && r.is_ok())
        .map(|r| r.end_us());
    let seconds = capacity::PhaseRate::from_slices(&capacity::slices_of(
        answered,
        run.warmup_us,
        run.clock.us(run.clock.started() + run.ran),
    ));
    summary.goodput_median_second_to_floor = to_floor(seconds.median_per_s);
    summary.goodput_seconds = Some(seconds);
    summary.floor_txn_throughput = Some(floor);
}

/// What a run's slow calls are read against: the calls, the floor
/// probers' samples, the machine's readings, PostgreSQL's statistics, and
/// when the run started and ended.
struct RunEvidence<'a> {
    records: &'a [record::Invocation],
    probed: &'a [floors::FloorSamples],
    readings: &'a [machine::Reading],
    stats_before: Option<&'a pgview::Snapshot>,
    stats_after: Option<&'a pgview::Snapshot>,
    run_started_unix_ms: i64,
    warmup_us: u64,
    run_end_us: u64,
}

/// The slow calls by part and the stall windows, each with the floors,
/// PostgreSQL's log and the machine beside it; keeps the database's logs,
/// the machine's readings and PostgreSQL's statistics in `OUT/logs/`.
fn attribute_stalls(
    summary: &mut Summary,
    plan: &RunPlan,
    target: &Target,
    ev: &RunEvidence,
) -> anyhow::Result<()> {
    let threshold_us =
        attribution::slow_threshold_us(summary.ratios.floor_p50_us, summary.ratios.floor_p99_us);
    let network_us = summary.floor_ping_us.p50;
    summary.attribution = Attribution::new(ev.records, threshold_us, network_us);
    let mut windows = attribution::stall_windows(
        ev.records,
        threshold_us,
        network_us,
        &ev.probed.iter().flat_map(|s| s.pings()).collect::<Vec<_>>(),
        &ev.probed
            .iter()
            .flat_map(|s| s.db_txns())
            .collect::<Vec<_>>(),
    );
    let log_dir = plan.out.join("logs");
    let database_logs = target.database_logs.as_ref().map(|logs| logs());
    let log = database_logs
        .filter(|f| !f.is_empty())
        .map(|files| keep_database_logs(&files, &log_dir, ev.run_started_unix_ms));
    if let Some((_, events)) = &log {
        if let Some(floor) = summary.floor_txn_throughput.as_mut() {
            for phase in [&mut floor.before, &mut floor.after] {
                phase.postgres = Some(pgview::LogCounts::within(
                    events,
                    phase.start_us,
                    phase.end_us,
                ));
            }
        }
        for window in &mut windows {
            window.postgres = Some(pgview::LogCounts::within(
                events,
                window.start_us as i64 - pgview::LEAD_US,
                window.end_us() as i64,
            ));
        }
    }
    for window in &mut windows {
        window.machine = Some(machine::MachineInWindow::within(
            ev.readings,
            window.start_us,
            window.end_us(),
        ));
    }
    summary.machine = Some(machine::MachineView::new(ev.readings, ev.warmup_us));
    std::fs::create_dir_all(&log_dir).ok();
    let machine_csv = log_dir.join("machine.csv");
    std::fs::write(&machine_csv, machine::csv(ev.readings))
        .with_context(|| format!("cannot write {}", machine_csv.display()))?;
    if let (Some(before), Some(after)) = (ev.stats_before, ev.stats_after) {
        let mut view = PostgresView::between(before, after);
        if let Some((copied, events)) = log {
            view.log = Some(pgview::LogCounts::within(
                &events,
                ev.warmup_us as i64,
                ev.run_end_us as i64,
            ));
            view.log_files = copied;
        }
        summary.postgres = Some(view);
    }
    for (name, stats) in [("before", ev.stats_before), ("after", ev.stats_after)] {
        if let Some(stats) = stats {
            std::fs::create_dir_all(&log_dir).ok();
            let path = log_dir.join(format!("pg_stat_{name}.json"));
            std::fs::write(&path, serde_json::to_string_pretty(stats)? + "\n")
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    let slow_calls = summary.attribution.slow.calls
        + ev.records
            .iter()
            .filter(|r| !r.warmup && r.is_error() && r.rtt_us > threshold_us)
            .count() as u64;
    summary.stall_windows = StallWindows::new(windows, slow_calls);
    Ok(())
}

/// Seconds a run whose invariants fail keeps its databases up before it
/// goes on (and stops its local cluster), so the failure can be looked
/// at with its data.
const KEEP_ON_FAILURE: &str = "BORBAMAN_KEEP_ON_FAILURE";

/// [`KEEP_ON_FAILURE`], if set to a whole number of seconds (at most a day).
fn keep_on_failure() -> Option<std::time::Duration> {
    let secs: u64 = std::env::var(KEEP_ON_FAILURE).ok()?.trim().parse().ok()?;
    Some(std::time::Duration::from_secs(secs.min(86_400)))
}

/// The invariant checks, on every database cluster's primary as the run
/// ends (a replicated database's primary may have moved); `None` without
/// a database.
async fn check_invariants(
    target: &Target,
    logs: &[workload::ClientLog],
) -> anyhow::Result<Option<invariants::InvariantReport>> {
    let mut clusters = db_clusters_now(target).await;
    if let (Some(current), Some(home)) = (&target.final_database_url, clusters.first_mut()) {
        let current = current.clone();
        home.url = tokio::task::spawn_blocking(move || current()).await?;
    }
    if clusters.is_empty() {
        return Ok(None);
    }
    let mut dbs = Vec::new();
    for cluster in &clusters {
        let db = connect_one(&cluster.url).await.with_context(|| {
            format!(
                "connecting to the database (cluster {}) to check invariants",
                cluster.name
            )
        })?;
        dbs.push(db);
    }
    let report = invariants::check_clusters(&dbs, logs)
        .await
        .context("checking invariants")?;
    if !report.failed().is_empty()
        && let Some(keep) = keep_on_failure()
    {
        eprintln!(
            "invariant failed: the databases stay up for {} s ({KEEP_ON_FAILURE}), \
             then the run goes on and stops them; Ctrl-C stops them now",
            keep.as_secs()
        );
        for cluster in &clusters {
            eprintln!("  database cluster {}: {}", cluster.name, cluster.url);
        }
        tokio::time::sleep(keep).await;
    }
    for db in dbs {
        db.close().await;
    }
    Ok(Some(report))
}

/// Lost, duplicated and regressed actions: from the invariant checks, or,
/// without a database, the regressions the clients saw.
fn fill_invariants(
    summary: &mut Summary,
    invariants: Option<invariants::InvariantReport>,
    logs: &[workload::ClientLog],
) {
    if let Some(report) = invariants {
        summary.lost_actions = report.actions.lost;
        summary.duplicate_actions = report.actions.duplicated;
        summary.state_regressions = report.state_regressions;
        summary.invariants_ok = report.failed().is_empty();
        summary.games_played = report.games;
        summary.invariants = Some(report);
    } else {
        summary.state_regressions = logs
            .iter()
            .flat_map(|l| &l.sessions)
            .map(|s| s.regressions)
            .sum();
    }
}

/// A running fault injector: its faults once the run ends.
type InjectorRun = JoinHandle<Result<Vec<FaultEvent>, tokio::task::JoinError>>;

/// Starts the fault injector, if any. With one, the run ends a calm after
/// its last fault is over (and no sooner than planned), not at a fixed
/// time: a fault that ran late still has its recovery measured, and a run
/// need not leave room for the slowest fault after each one. Returns its
/// task and when the clients stop.
fn start_injector(
    plan: &RunPlan,
    injector: Option<Injector>,
    clock: RunClock,
    stop: &Shutdown,
) -> (Option<InjectorRun>, Shutdown) {
    match injector {
        Some(start) => {
            let faults = start(clock, stop.clone());
            let planned_end = clock.started() + plan.workload.total;
            let tail = plan.tail_after_faults;
            let (ender, end) = shutdown::channel();
            let task = tokio::spawn(async move {
                let faults = faults.await;
                let end = run_end(planned_end, Instant::now(), tail);
                tokio::time::sleep_until(end.into()).await;
                ender.stop();
                faults
            });
            (Some(task), end)
        }
        // Without faults the clients stop at the planned end. (Not on a
        // stopper of their own: dropping it would stop them at once.)
        None => (None, stop.clone()),
    }
}

/// Starts the growth, if the plan has one: the run then ends
/// [`growth::TAIL_AFTER_MOVES`] after its last move, and never before
/// the planned end. Returns its task and when the clients stop (`end`
/// without a growth).
fn start_growth(
    plan: &RunPlan,
    clock: RunClock,
    stop: &Shutdown,
    end: Shutdown,
) -> (Option<JoinHandle<growth::Grown>>, Shutdown) {
    let Some(growth) = plan.growth.clone() else {
        return (None, end);
    };
    let planned_end = clock.started() + plan.workload.total;
    let (ender, end) = shutdown::channel();
    let stop = stop.clone();
    let task = tokio::spawn(async move {
        let grown = growth::grow_beside(growth, clock, stop).await;
        let end = run_end(planned_end, Instant::now(), growth::TAIL_AFTER_MOVES);
        tokio::time::sleep_until(end.into()).await;
        ender.stop();
        grown
    });
    (Some(task), end)
}

/// CPU readings around each phase and the workload: how many cores other
/// processes took meanwhile, the usual reason a floor moves.
fn cpu_now(target: &Target) -> machine::CpuReading {
    let database = target
        .database_pids
        .as_ref()
        .and_then(|pids| dbcost::cpu_of(&pids()));
    let ours = dbcost::cpu_of(&[std::process::id()]);
    machine::CpuReading::now(ours, database)
}

/// What the workload phase of a run leaves: its clock, the clients' logs
/// and calls, the faults, the floor probers' samples, the machine's
/// readings, and the database's cost and statistics around it.
struct Ran {
    clock: RunClock,
    run_started_unix_ms: i64,
    logs: Vec<workload::ClientLog>,
    records: Vec<record::Invocation>,
    faults: Vec<FaultEvent>,
    probed: Vec<floors::FloorSamples>,
    readings: Vec<machine::Reading>,
    run_end_us: u64,
    /// What the clients ran for, warm-up included.
    ran: Duration,
    table_rows: Vec<report::TableRows>,
    costs: (Option<dbcost::Reading>, Option<dbcost::Reading>),
    /// The database clusters at the end of the workload, and each one's
    /// readings before and after it.
    db_clusters: Vec<DbClusterNow>,
    cluster_costs: Vec<(Option<dbcost::Reading>, Option<dbcost::Reading>)>,
    stats: (Option<pgview::Snapshot>, Option<pgview::Snapshot>),
    cpu_quotas: Vec<quota::QuotaUse>,
    bench_cpu: Option<Duration>,
    run_others_cores: Option<f64>,
    run_cpu: Option<Duration>,
    /// What a run that grew did (`RunPlan::growth`).
    grown: Option<growth::Grown>,
}

/// The workload: the clients (and the injector, if any) beside a floor
/// prober per distance, the machine's sampler and the database's readings
/// around it.
async fn run_workload(
    plan: &RunPlan,
    target: &Target,
    floor_pools: &[ServerPool],
    pools: Vec<ServerPool>,
    db_floor: Option<DbFloor>,
    injector: Option<Injector>,
) -> anyhow::Result<Ran> {
    let clock = RunClock::start();
    let sampler = machine::MachineSampler::start(clock.started());
    let run_started_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let (stopper, stop) = shutdown::channel();
    let recorder = Recorder::new();
    let progress = Arc::new(Progress::default());
    // The probers measure the measured window only, beside the clients:
    // one per distance, the first with the transaction floor.
    let mut db_floor = db_floor;
    let probers: Vec<_> = floor_pools
        .iter()
        .map(|pool| {
            tokio::spawn(floors::probe(
                pool.clone(),
                db_floor.take(),
                clock,
                clock.started() + plan.workload.warmup,
                // A closed loop has no interval: probe at the game's 20 Hz.
                plan.workload.interval.max(Duration::from_millis(50)),
                stop.clone(),
            ))
        })
        .collect();
    let workload_config = WorkloadConfig {
        until_stopped: injector.is_some() || plan.growth.is_some(),
        ..plan.workload.clone()
    };
    let (injector, end) = start_injector(plan, injector, clock, &stop);
    let (growth, end) = start_growth(plan, clock, &stop, end);
    let bar = progress_bar(plan, clock, progress.clone(), stop.clone());

    // A connection to each database cluster (home first), for its
    // counters, statistics and rows around the workload.
    let db_clusters = db_clusters_now(target).await;
    let mut cost_dbs = Vec::new();
    for cluster in &db_clusters {
        cost_dbs.push(connect_one(&cluster.url).await.ok());
    }
    let costs_before = read_costs(&cost_dbs, &db_clusters).await;
    let stats_before = read_stats(&cost_dbs).await;
    let census = (!cost_dbs.is_empty() && cost_dbs.iter().all(Option::is_some)).then(|| {
        let dbs = cost_dbs.iter().flatten().cloned().collect();
        tokio::spawn(count_rows(dbs, clock, stop.clone()))
    });
    let groups = || target.cpu_groups.as_ref().map(|g| g()).unwrap_or_default();
    let groups_run = groups();
    let cpu_run = cpu_now(target);
    let bench_cpu_run = dbcost::cpu_of_process(std::process::id());
    let logs = workload::run(&workload_config, pools, clock, &recorder, &progress, end).await;
    let cpu_ran = cpu_now(target);
    let cpu_quotas = quota::between(&groups_run, &groups(), clock.started().elapsed());
    let bench_cpu = match (bench_cpu_run, dbcost::cpu_of_process(std::process::id())) {
        (Some(from), Some(to)) => Some(to.saturating_sub(from)),
        _ => None,
    };
    let run_others_cores = cpu_run.others_cores(&cpu_ran);
    let run_cpu = cpu_run.ours(&cpu_ran);
    stopper.stop();
    // What the clients ran for, warm-up included: the plan's total, or
    // more when the run was held open for a late fault.
    let ran = clock.started().elapsed().max(plan.workload.total);
    let table_rows = match census {
        Some(task) => task.await?,
        None => Vec::new(),
    };
    // A failed-over database answers on another member: no reading then.
    // Its processes are read again (a member brought back is a new one).
    let db_clusters = match db_clusters_now(target).await {
        now if now.len() == cost_dbs.len() => now,
        _ => db_clusters,
    };
    let costs_after = read_costs(&cost_dbs, &db_clusters).await;
    let stats_after = read_stats(&cost_dbs).await;
    for db in cost_dbs.into_iter().flatten() {
        db.close().await;
    }
    let (cost_before, cost_after) = (total_cost(&costs_before), total_cost(&costs_after));
    let cluster_costs = costs_before.into_iter().zip(costs_after).collect();
    let run_end_us = clock.now_us();
    let readings = sampler.stop();
    let mut probed = Vec::new();
    let mut db_floor = None;
    for prober in probers {
        let (samples, db) = prober.await?;
        probed.push(samples);
        db_floor = db_floor.or(db);
    }
    let mut faults = match injector {
        Some(task) => task.await??,
        None => Vec::new(),
    };
    let grown = match growth {
        Some(task) => Some(task.await?),
        None => None,
    };
    bar.await?;
    if let Some(db_floor) = db_floor {
        db_floor.close().await;
    }

    let records = recorder.snapshot();
    faults::fill_recovery(&mut faults, &records);
    Ok(Ran {
        clock,
        run_started_unix_ms,
        logs,
        records,
        faults,
        probed,
        readings,
        run_end_us,
        ran,
        table_rows,
        costs: (cost_before, cost_after),
        db_clusters,
        cluster_costs,
        stats: (stats_before, stats_after),
        cpu_quotas,
        bench_cpu,
        run_others_cores,
        run_cpu,
        grown,
    })
}

/// The RTT's ratios to the floors, the tail (outside the machine's stops
/// too), the tail by fault, and games split over servers.
fn fill_tail(
    summary: &mut Summary,
    records: &[record::Invocation],
    readings: &[machine::Reading],
    faults: &[FaultEvent],
) {
    summary.ratios = FloorRatios::new(
        &summary.rtt_us,
        &summary.act_rtt_us,
        &summary.floor_ping_us,
        &summary.floor_db_txn_us,
    );
    summary.tail = Tail::new(records, &summary.floor_ping_us, &summary.floor_db_txn_us);
    summary
        .tail
        .outside(records, &machine::stood_still_stretches(readings));
    summary.fault_tail = faults::FaultTail::new(faults, records);
    summary.fault_split = faults::FaultSplit::new(faults, records);
    summary.split_games = SplitGames::new(records);
}

/// What a call cost the database (WAL, writing transactions, its CPU),
/// and the bench's and its servers' CPU per call; warm-up calls included,
/// as the readings bracket the whole workload.
fn fill_costs(
    summary: &mut Summary,
    records: &[record::Invocation],
    (cost_before, cost_after): (Option<dbcost::Reading>, Option<dbcost::Reading>),
    (run_cpu, bench_cpu): (Option<Duration>, Option<Duration>),
) {
    if let (Some(before), Some(after)) = (cost_before, cost_after) {
        // Warm-up calls included: the readings bracket the whole workload.
        summary.database_cost = Some(dbcost::DatabaseCost::between(
            &before,
            &after,
            records.len() as u64,
        ));
    }
    // Warm-up calls included, as the readings bracket the workload.
    let per_call =
        |cpu: Duration| (cpu.as_micros() as f64 / records.len() as f64 * 10.0).round() / 10.0;
    if !records.is_empty() {
        summary.bench_and_servers_cpu_us_per_call = run_cpu.map(per_call);
        summary.bench_cpu_us_per_call = bench_cpu.map(per_call);
    }
}

/// One measured run against `target`: floors on the idle cluster, then the
/// clients (and the injector, if any) beside a floor prober, then the
/// invariant checks; writes every output to `plan.out`.
pub async fn run_measured(
    plan: &RunPlan,
    target: &Target,
    injector: Option<Injector>,
) -> anyhow::Result<Summary> {
    anyhow::ensure!(
        injector.is_none() || plan.growth.is_none(),
        "a run either injects faults or grows, not both"
    );
    std::fs::create_dir_all(&plan.out)
        .with_context(|| format!("cannot create {}", plan.out.display()))?;
    let started_at_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut notes = Vec::new();
    let load_before = load_average();
    let (floor_pools, pools) = connect_pools(plan, target).await?;

    let (db_floor, idle) = idle_floors(plan, target, &floor_pools, &mut notes).await?;

    // A closed loop's capacity floor, first phase: on the idle cluster
    // (see `capacity` for why it is short).
    let closed_loop_url = closed_loop_urls(plan, target).await;
    let before_for = (plan.workload.total - plan.workload.warmup).min(capacity::BEFORE);
    // CPU readings around each phase and the workload: how many cores
    // other processes took meanwhile, the usual reason a floor moves.
    let cpu_now = || cpu_now(target);
    // One phase of the floor: its rate, when it ran, and how many cores
    // other processes took meanwhile.
    let floor_phase = |urls: Vec<String>, duration: Duration, when: &'static str| {
        let cpu_now = &cpu_now;
        let (clients, games) = (plan.workload.clients, plan.games);
        async move {
            let (from, cpu) = (Instant::now(), cpu_now());
            let rate = floors::txn_throughput(&urls, clients, games, duration)
                .await
                .with_context(|| format!("measuring the bare-transaction throughput {when}"))?;
            anyhow::Ok((rate, from, Instant::now(), cpu.others_cores(&cpu_now())))
        }
    };
    let floor_before = match &closed_loop_url {
        Some(url) => Some(floor_phase(url.clone(), before_for, "before the run").await?),
        None => None,
    };

    let Ran {
        clock,
        run_started_unix_ms,
        logs,
        records,
        faults,
        probed,
        readings,
        run_end_us,
        ran,
        table_rows,
        costs: (cost_before, cost_after),
        db_clusters,
        cluster_costs,
        stats: (stats_before, stats_after),
        cpu_quotas,
        bench_cpu,
        run_others_cores,
        run_cpu,
        grown,
    } = run_workload(plan, target, &floor_pools, pools, db_floor, injector).await?;
    // The second phase, right after the workload, for as long as it ran.
    let floor_after = match &closed_loop_url {
        Some(url) => {
            Some(floor_phase(url.clone(), ran - plan.workload.warmup, "after the run").await?)
        }
        None => None,
    };
    let warmup_us = record::duration_us(plan.workload.warmup);
    let invariants = check_invariants(target, &logs).await?;

    // With several distances, the floors pool every distance's pings (the
    // clients are spread over them evenly); each distance has its own below.
    let all = |samples: &[floors::FloorSamples], of: fn(&floors::FloorSamples) -> &Vec<u64>| {
        floor_stats(samples.iter().flat_map(|s| of(s).iter().copied()))
    };
    notes.extend(failed_pings_note(&probed, &idle));
    let mut summary = Summary {
        faults: faults.len() as u64,
        floor_ping_us: all(&probed, |s| &s.ping_us),
        floor_db_txn_us: all(&probed, |s| &s.db_txn_us),
        floor_idle_ping_us: all(&idle, |s| &s.ping_us),
        floor_idle_db_txn_us: all(&idle, |s| &s.db_txn_us),
        warmup_s: plan.workload.warmup.as_secs_f64(),
        duration_s: (ran - plan.workload.warmup).as_secs_f64(),
        clients: plan.workload.clients,
        games: plan.games,
        games_finished: finished_games(&logs),
        pool_failovers: logs.iter().map(|l| l.pool_failovers).sum(),
        interval_ms: plan.workload.interval.as_millis() as u64,
        servers: target.servers.clone(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        git_head: git_head(),
        started_at_unix_s,
        run_started_unix_ms,
        load_average_1m: [load_before, load_average()],
        table_rows,
        ..Summary::default()
    }
    .with_measurements(measure(&records));
    fill_inputs_and_recovery(&mut summary, plan, &logs, &faults);
    if let (Some(before), Some(after)) = (floor_before, floor_after) {
        let run = RunWindow {
            clock,
            ran,
            warmup_us,
        };
        fill_capacity(&mut summary, before, after, run_others_cores, &records, run);
    }
    fill_tail(&mut summary, &records, &readings, &faults);
    let evidence = RunEvidence {
        records: &records,
        probed: &probed,
        readings: &readings,
        stats_before: stats_before.as_ref(),
        stats_after: stats_after.as_ref(),
        run_started_unix_ms,
        warmup_us,
        run_end_us,
    };
    attribute_stalls(&mut summary, plan, target, &evidence)?;
    summary.distances = distances(plan, target, &probed, &records, &summary);
    fill_costs(
        &mut summary,
        &records,
        (cost_before, cost_after),
        (run_cpu, bench_cpu),
    );
    summary.cpu_quotas = cpu_quotas;
    if db_clusters.len() > 1 {
        let map = partition_map(&db_clusters).await;
        summary.clusters =
            clusters::figures(&map, &records, &faults, summary.duration_s, &cluster_costs);
    }
    if let (Some(grown), Some(growth)) = (&grown, &plan.growth) {
        summary.growth = Some(growth::GrowthReport::new(
            grown,
            record::duration_us(growth.at),
            &records,
            warmup_us,
            record::duration_us(ran),
        ));
    }
    fill_invariants(&mut summary, invariants, &logs);
    notes.push(warmup_note(plan, &summary));
    summary.notes = notes;

    write_outputs(&plan.out, &records, &summary, &faults, warmup_us)?;
    Ok(summary)
}

/// The database clusters' URLs for a closed loop's capacity floor (with
/// `--interval-ms 0` on a database this run can reach); `None` otherwise.
async fn closed_loop_urls(plan: &RunPlan, target: &Target) -> Option<Vec<String>> {
    match (&target.database_url, plan.workload.interval.is_zero()) {
        (Some(_), true) => Some(
            db_clusters_now(target)
                .await
                .into_iter()
                .map(|c| c.url)
                .collect(),
        ),
        _ => None,
    }
}

/// The note on floor pings that failed (a server down or hung), if any.
fn failed_pings_note(
    probed: &[floors::FloorSamples],
    idle: &[floors::FloorSamples],
) -> Option<String> {
    let ping_failed: u64 = probed.iter().chain(idle).map(|s| s.ping_failed).sum();
    (ping_failed > 0).then(|| {
        format!(
            "{ping_failed} floor pings failed or went unanswered (a server down or hung) \
             and are left out of the floors"
        )
    })
}

/// The note on the warm-up's calls.
fn warmup_note(plan: &RunPlan, summary: &Summary) -> String {
    format!(
        "warm-up: calls started in the first {} s ({} calls) are in invocations.csv \
         (warmup=true) but in no figure",
        plan.workload.warmup.as_secs(),
        summary.warmup_invocations
    )
}

fn write_outputs(
    out: &Path,
    records: &[record::Invocation],
    summary: &Summary,
    faults: &[FaultEvent],
    warmup_us: u64,
) -> anyhow::Result<()> {
    record::write_csv(&out.join("invocations.csv"), records)?;
    let json = serde_json::to_string_pretty(summary)?;
    std::fs::write(out.join("summary.json"), json + "\n")
        .with_context(|| format!("cannot write {}", out.join("summary.json").display()))?;
    let references = [
        Reference {
            value_us: summary.floor_ping_us.p50,
            label: format!("ping floor p50 {} µs", summary.floor_ping_us.p50),
        },
        Reference {
            value_us: summary.floor_db_txn_us.p50,
            label: format!("transaction floor p50 {} µs", summary.floor_db_txn_us.p50),
        },
        Reference {
            value_us: summary.ratios.floor_p50_us,
            label: format!("ping + transaction p50 {} µs", summary.ratios.floor_p50_us),
        },
    ];
    let references: Vec<Reference> = references.into_iter().filter(|r| r.value_us > 0).collect();
    plot::write_ecdf_svg(&out.join("ecdf.svg"), records, &references)?;
    let marks: Vec<FaultMark> = faults
        .iter()
        .filter(|f| f.at_us >= warmup_us)
        .map(|f| FaultMark {
            at_us: f.at_us,
            label: f.kind.to_string(),
        })
        .collect();
    plot::write_rtt_svg(&out.join("rtt.svg"), records, &marks)?;
    if let Some(growth) = &summary.growth {
        plot::write_goodput_svg(&out.join("goodput.svg"), growth, warmup_us)?;
    }
    if !faults.is_empty() {
        record::write_csv(&out.join("faults.csv"), faults)?;
    }
    Ok(())
}

/// Copies the database's log files into `log_dir` (those not already
/// there) and reads their events onto the run's clock. Returns the copies'
/// names and the events; a file that cannot be read is left out (and
/// said so in the log).
fn keep_database_logs(
    files: &[PathBuf],
    log_dir: &Path,
    run_started_unix_ms: i64,
) -> (Vec<String>, Vec<(i64, pgview::LogEvent)>) {
    let mut kept = Vec::new();
    let mut events = Vec::new();
    for file in files {
        let text = match std::fs::read(file) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => {
                tracing::warn!("cannot read PostgreSQL's log {}: {e}", file.display());
                continue;
            }
        };
        let inside = file.starts_with(log_dir);
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "postgres.log".into());
        let kept_at = if inside {
            file.clone()
        } else {
            let copy = log_dir.join(&name);
            if let Err(e) =
                std::fs::create_dir_all(log_dir).and_then(|_| std::fs::write(&copy, &text))
            {
                tracing::warn!("cannot copy PostgreSQL's log to {}: {e}", copy.display());
            }
            copy
        };
        kept.push(
            kept_at
                .strip_prefix(log_dir)
                .unwrap_or(&kept_at)
                .display()
                .to_string(),
        );
        events.extend(pgview::events(&text, run_started_unix_ms));
    }
    (kept, events)
}

/// When a run with faults ends: `tail` after its last fault was over
/// (`faults_over`), and never before the planned end.
pub fn run_end(planned: Instant, faults_over: Instant, tail: Duration) -> Instant {
    planned.max(faults_over + tail)
}

/// The 1-minute load average (0 where /proc/loadavg is missing): this
/// machine is shared, and a run beside someone's build says so here.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Games the clients saw finish with a winner or a draw.
fn finished_games(logs: &[workload::ClientLog]) -> u64 {
    let finished: std::collections::HashSet<u64> = logs
        .iter()
        .flat_map(|l| &l.sessions)
        .filter(|s| s.finished)
        .map(|s| s.game_id)
        .collect();
    finished.len() as u64
}

/// HEAD of the repository the command runs in, if any.
fn git_head() -> Option<String> {
    let output = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Logs warnings to stderr unless `RUST_LOG` says otherwise; a no-op when a
/// subscriber is already installed.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
