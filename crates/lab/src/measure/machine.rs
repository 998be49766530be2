//! The machine's own view of a run: Linux's pressure stall information
//! (`/proc/pressure/cpu` and `/proc/pressure/io`, "PSI"), read every
//! [`PERIOD`] on a thread of its own beside the clients, and set beside
//! each stall window ([`MachineInWindow`]) and over the whole run
//! ([`MachineView`]).
//!
//! PSI counts the time in which some task was ready to run but waited for a
//! CPU (`cpu some`), waited for the disk (`io some`), or in which every
//! runnable task waited for the disk (`io full`). So a stall window tells
//! on its own which of three it was:
//!
//! - **io**: the disk held every commit at once. Seen on this project's
//!   machines as a WAL flush of ~150 ms while the CPUs were idle: four
//!   games' writes and the floor probe's `COMMIT` all ended in the same
//!   millisecond, with `io some` at 100 % and `cpu some` at 0 for the
//!   150 ms before. No setting of the game reaches it.
//! - **cpu**: the two cores were busy (the moment a fault's backends exit
//!   and pools reconnect, a burst of copies).
//! - **host**: the hypervisor ran something else on this machine's cores
//!   (`/proc/stat`'s steal time): every process here waited at once, the
//!   bare floor probes as much as the game, and nothing inside the machine
//!   shows why. Some hypervisors also stop the whole machine for 20–50 ms
//!   without counting it as steal: the sampler wakes late while the cores,
//!   by `/proc/stat`, were mostly idle ("stood still"). Shown on this
//!   project's machines by `perf record -a -F 999 -k mono` beside a run:
//!   for the 22 ms of such a window both cores' 1 kHz sampling timers
//!   fired 4–5 times instead of ~45, and the run's slowest call was as
//!   long as the gap. That too is the host's.
//! - **neither**: something inside the processes (a lock, a gate, a queue).
//!
//! The thread also notes how late its own wake-ups come: a 10 ms sleep
//! that wakes 100 ms later means nothing on the machine ran (for it).
//! Without `/proc/pressure` (kernels before 4.20, or PSI off) only that is
//! kept.

use crate::shutdown::{self, Stopper};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How often the machine is read.
pub const PERIOD: Duration = Duration::from_millis(10);

/// A stretch of samples with the disk holding some task for at least this
/// share of the time is an "io stall" ([`MachineView::io_stalls`]).
const IO_STALL_SHARE: f64 = 0.8;

/// ...lasting at least this long.
const IO_STALL_MIN_US: u64 = 30_000;

/// One reading: time since the start of the run and the counters'
/// totals (µs since boot); `None` where the kernel has no PSI.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    pub at_us: u64,
    pub cpu_some_us: Option<u64>,
    pub io_some_us: Option<u64>,
    pub io_full_us: Option<u64>,
    /// CPU time the hypervisor gave to others, summed over the cores, µs
    /// since boot (`/proc/stat`, in 10 ms ticks).
    pub steal_us: Option<u64>,
    /// Busy CPU time of every core, µs since boot (`/proc/stat`, in 10 ms
    /// ticks): tells a late wake-up on busy cores from a machine that
    /// stood still.
    pub busy_us: Option<u64>,
}

/// Reads `/proc/pressure/*` and `/proc/stat` every [`PERIOD`] until stopped.
pub struct MachineSampler {
    stopper: Stopper,
    thread: JoinHandle<Vec<Reading>>,
}

impl MachineSampler {
    /// Starts reading, times measured from `started` (the run's clock).
    pub fn start(started: Instant) -> MachineSampler {
        let (stopper, stopped) = shutdown::channel();
        let thread = std::thread::Builder::new()
            .name("machine-sampler".into())
            .spawn(move || {
                let mut readings = Vec::with_capacity(8192);
                while !stopped.is_shutdown() {
                    readings.push(read(started));
                    std::thread::sleep(PERIOD);
                }
                readings
            })
            .expect("spawning a thread");
        MachineSampler { stopper, thread }
    }

    /// Stops reading and returns every reading, in time order.
    pub fn stop(self) -> Vec<Reading> {
        self.stopper.stop();
        self.thread.join().unwrap_or_default()
    }
}

fn read(started: Instant) -> Reading {
    let cpu = std::fs::read_to_string("/proc/pressure/cpu").ok();
    let io = std::fs::read_to_string("/proc/pressure/io").ok();
    let stat = std::fs::read_to_string("/proc/stat").ok();
    Reading {
        at_us: Instant::now()
            .saturating_duration_since(started)
            .as_micros() as u64,
        cpu_some_us: cpu.as_deref().and_then(|t| total(t, "some")),
        io_some_us: io.as_deref().and_then(|t| total(t, "some")),
        io_full_us: io.as_deref().and_then(|t| total(t, "full")),
        steal_us: stat
            .as_deref()
            .and_then(steal_ticks)
            .map(|t| t * (1_000_000 / CLOCK_TICKS_PER_S)),
        busy_us: stat
            .as_deref()
            .and_then(busy_ticks)
            .map(|t| t * (1_000_000 / CLOCK_TICKS_PER_S)),
    }
}

/// The `total=` of the line starting with `kind` in a PSI file:
/// `some avg10=0.00 avg60=0.00 avg300=0.00 total=1234`.
pub fn total(text: &str, kind: &str) -> Option<u64> {
    text.lines()
        .find(|line| line.split_whitespace().next() == Some(kind))?
        .split_whitespace()
        .find_map(|field| field.strip_prefix("total="))?
        .parse()
        .ok()
}

/// CPU time spent so far by the whole machine (busy, on every core), by
/// this run and by its database, to tell how many cores other processes took while a
/// floor was measured (see [`CpuReading::others_cores`]).
#[derive(Clone, Copy, Debug)]
pub struct CpuReading {
    at: Instant,
    machine_busy_us: Option<u64>,
    own_us: Option<u64>,
    /// The database's processes (a local cluster's only), as
    /// [`super::dbcost`] reads them.
    database_us: Option<u64>,
}

impl CpuReading {
    /// `ours`: this process and the processes it started (the game
    /// servers of a local cluster); `database`: PostgreSQL's processes.
    pub fn now(ours: Option<Duration>, database: Option<Duration>) -> CpuReading {
        CpuReading {
            at: Instant::now(),
            machine_busy_us: std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|t| busy_ticks(&t))
                .map(|t| t * (1_000_000 / CLOCK_TICKS_PER_S)),
            own_us: ours.map(|d| d.as_micros() as u64),
            database_us: database.map(|d| d.as_micros() as u64),
        }
    }

    /// CPU this run (this process, its servers) spent from `self` to
    /// `later`.
    pub fn ours(&self, later: &CpuReading) -> Option<Duration> {
        Some(Duration::from_micros(
            later.own_us?.saturating_sub(self.own_us?),
        ))
    }

    /// Cores busy on average from `self` to `later` with work that was
    /// neither this run's (this process, its servers) nor the database's:
    /// another build, a test. `None` where `/proc` or the database's
    /// processes cannot be read.
    pub fn others_cores(&self, later: &CpuReading) -> Option<f64> {
        let wall_us = later.at.saturating_duration_since(self.at).as_micros() as f64;
        let delta = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
        let busy = delta(self.machine_busy_us, later.machine_busy_us)?;
        let own = delta(self.own_us, later.own_us)?;
        let database = delta(self.database_us, later.database_us)?;
        let others = busy.saturating_sub(own + database) as f64;
        (wall_us > 0.0).then(|| (others / wall_us * 100.0).round() / 100.0)
    }
}

/// Linux reports CPU time in ticks of `USER_HZ`, which its ABI fixes at
/// 100 a second.
const CLOCK_TICKS_PER_S: u64 = 100;

/// Busy ticks of every core from `/proc/stat`'s `cpu` line: user, nice,
/// system, irq, softirq and steal (idle and iowait are not busy).
pub fn busy_ticks(stat: &str) -> Option<u64> {
    let f = cpu_ticks(stat)?;
    Some(f.first()? + f.get(1)? + f.get(2)? + f.get(5)? + f.get(6)? + f.get(7).unwrap_or(&0))
}

/// The numbers of `/proc/stat`'s `cpu` line (every core together), in
/// its order: user, nice, system, idle, iowait, irq, softirq, steal, …
fn cpu_ticks(stat: &str) -> Option<Vec<u64>> {
    stat.lines()
        .find(|l| l.starts_with("cpu "))?
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect()
}

/// Steal ticks of every core from `/proc/stat`'s `cpu` line (its eighth
/// number): time a core was ready to run here and the hypervisor ran
/// something else.
pub fn steal_ticks(stat: &str) -> Option<u64> {
    cpu_ticks(stat)?.get(7).copied()
}

/// What the machine did between two moments of the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineInWindow {
    /// Time some task waited for a CPU, ms.
    pub cpu_pressure_ms: f64,
    /// Time some task waited for the disk, ms.
    pub io_pressure_ms: f64,
    /// Time every runnable task waited for the disk, ms.
    pub io_full_ms: f64,
    /// The longest the sampler's own 10 ms sleep overran, ms.
    pub sampler_late_max_ms: f64,
    /// CPU time the hypervisor took from this machine's cores, summed
    /// over them, ms (counted in 10 ms ticks).
    #[serde(default)]
    pub steal_ms: f64,
    /// Time the machine stood still, ms: the sampler's intervals that
    /// overran by at least [`STOOD_STILL_LATE`] while the cores were busy
    /// less than half of them ([`stood_still_us`]).
    #[serde(default)]
    pub stood_still_ms: f64,
}

impl MachineInWindow {
    /// Between `from_us` and `to_us` (time since the start of the run),
    /// counted over the readings that cover it.
    pub fn within(readings: &[Reading], from_us: u64, to_us: u64) -> MachineInWindow {
        let first = readings
            .iter()
            .rposition(|r| r.at_us <= from_us)
            .unwrap_or(0);
        let last = readings
            .iter()
            .position(|r| r.at_us >= to_us)
            .unwrap_or(readings.len().saturating_sub(1));
        let Some(span) = readings.get(first..=last) else {
            return MachineInWindow::default();
        };
        let delta = |f: fn(&Reading) -> Option<u64>| match (span.first(), span.last()) {
            (Some(a), Some(b)) => match (f(a), f(b)) {
                (Some(a), Some(b)) => b.saturating_sub(a) as f64 / 1000.0,
                _ => 0.0,
            },
            _ => 0.0,
        };
        MachineInWindow {
            cpu_pressure_ms: round1(delta(|r| r.cpu_some_us)),
            io_pressure_ms: round1(delta(|r| r.io_some_us)),
            io_full_ms: round1(delta(|r| r.io_full_us)),
            steal_ms: round1(delta(|r| r.steal_us)),
            stood_still_ms: round1(
                stood_still_stretches(span)
                    .iter()
                    .map(|(from, to)| to - from)
                    .sum::<u64>() as f64
                    / 1000.0,
            ),
            sampler_late_max_ms: round1(
                span.windows(2)
                    .map(|w| late_us(&w[0], &w[1]))
                    .max()
                    .unwrap_or(0) as f64
                    / 1000.0,
            ),
        }
    }

    /// Which of the machine's parts held the window, if any did: the host
    /// when it took the equivalent of one core, or stopped the machine,
    /// for at least half of `length_us` (a stolen moment shows as CPU
    /// pressure too, so it is named first); else the larger pressure when
    /// it covers at least half of `length_us`.
    pub fn held_by(&self, length_us: u64) -> Option<&'static str> {
        let half = length_us as f64 / 2000.0;
        let host = self.steal_ms + self.stood_still_ms;
        if host >= half && host > 0.0 {
            Some("host")
        } else if self.io_pressure_ms >= half && self.io_pressure_ms >= self.cpu_pressure_ms {
            Some("io")
        } else if self.cpu_pressure_ms >= half {
            Some("cpu")
        } else {
            None
        }
    }

    pub fn line(&self) -> String {
        format!(
            "io {} ms (all tasks {} ms), cpu {} ms, stolen by the host {} ms, stood still {} ms, sampler late ≤ {} ms",
            self.io_pressure_ms,
            self.io_full_ms,
            self.cpu_pressure_ms,
            self.steal_ms,
            self.stood_still_ms,
            self.sampler_late_max_ms
        )
    }
}

/// How much later than [`PERIOD`] the second reading came.
fn late_us(a: &Reading, b: &Reading) -> u64 {
    b.at_us
        .saturating_sub(a.at_us)
        .saturating_sub(PERIOD.as_micros() as u64)
}

/// A sampler's interval this much longer than [`PERIOD`] (a whole period
/// missed) may be a machine that stood still: under it, a wake-up's
/// ordinary lateness. `/proc/stat` counts in 10 ms ticks, so an interval
/// of ~20 ms with no tick on a busy task is at the edge of what it can
/// tell: the stretches of 20–50 ms it found were checked against `perf`
/// (both cores without a sample for 22 and 47 ms); one of 20 ms was not
/// (one core kept its samples).
const STOOD_STILL_LATE: Duration = Duration::from_millis(10);

/// The interval from `a` to `b` (µs), if the machine stood still in it:
/// the sampler woke at least [`STOOD_STILL_LATE`] late while the `cores`
/// were busy less than half of it (so no work here held the sampler from
/// its core: the host held every core, and did not count it as steal).
/// 0 otherwise, or without `/proc/stat`.
fn stood_still_us(a: &Reading, b: &Reading, cores: f64) -> u64 {
    let elapsed = b.at_us.saturating_sub(a.at_us);
    match (a.busy_us, b.busy_us) {
        (Some(x), Some(y))
            if late_us(a, b) >= STOOD_STILL_LATE.as_micros() as u64
                && (y.saturating_sub(x) as f64) < cores * elapsed as f64 / 2.0 =>
        {
            elapsed
        }
        _ => 0,
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// `summary.json`'s `machine`: pressure over the measured run, and the
/// stretches in which the disk held the machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineView {
    /// Whether the kernel reports pressure (`/proc/pressure`).
    pub psi: bool,
    pub readings: u64,
    /// Shares of the measured run in which some task waited.
    pub cpu_pressure_share: f64,
    pub io_pressure_share: f64,
    /// CPU time the hypervisor took, as a share of the run's core time
    /// (both cores), and the most it took in any 100 ms, ms.
    #[serde(default)]
    pub steal_share: f64,
    #[serde(default)]
    pub steal_max_100ms_ms: f64,
    /// The stretches in which the machine stood still (see
    /// [`MachineInWindow::stood_still_ms`]): how many, the longest, ms.
    #[serde(default)]
    pub stood_still: u64,
    #[serde(default)]
    pub stood_still_longest_ms: f64,
    /// Stretches of ≥ 30 ms in which some task waited for the disk ≥ 80 %
    /// of the time: how many, the longest, and all of them added up.
    pub io_stalls: u64,
    pub io_stall_longest_ms: f64,
    pub io_stall_total_ms: f64,
    /// The longest the sampler's 10 ms sleep overran, ms.
    pub sampler_late_max_ms: f64,
}

impl MachineView {
    /// Over the readings from `from_us` on (the measured run).
    pub fn new(readings: &[Reading], from_us: u64) -> MachineView {
        let run: Vec<&Reading> = readings.iter().filter(|r| r.at_us >= from_us).collect();
        let psi = run.iter().any(|r| r.io_some_us.is_some());
        let whole = match (run.first(), run.last()) {
            (Some(a), Some(b)) => MachineInWindow::within(readings, a.at_us, b.at_us),
            _ => MachineInWindow::default(),
        };
        let length_ms = match (run.first(), run.last()) {
            (Some(a), Some(b)) => (b.at_us - a.at_us) as f64 / 1000.0,
            _ => 0.0,
        };
        let share = |ms: f64| {
            if length_ms > 0.0 {
                (ms / length_ms * 1000.0).round() / 1000.0
            } else {
                0.0
            }
        };
        let stalls = io_stalls(&run);
        let still: Vec<u64> = stood_still_stretches(readings)
            .iter()
            .filter(|(from, _)| *from >= from_us)
            .map(|(from, to)| to - from)
            .collect();
        MachineView {
            psi,
            readings: run.len() as u64,
            cpu_pressure_share: share(whole.cpu_pressure_ms),
            io_pressure_share: share(whole.io_pressure_ms),
            steal_share: share(whole.steal_ms / cores()),
            steal_max_100ms_ms: round1(steal_max_us(&run, 100_000) as f64 / 1000.0),
            stood_still: still.len() as u64,
            stood_still_longest_ms: round1(
                still.iter().copied().max().unwrap_or(0) as f64 / 1000.0,
            ),
            io_stalls: stalls.len() as u64,
            io_stall_longest_ms: round1(stalls.iter().copied().max().unwrap_or(0) as f64 / 1000.0),
            io_stall_total_ms: round1(stalls.iter().sum::<u64>() as f64 / 1000.0),
            sampler_late_max_ms: whole.sampler_late_max_ms,
        }
    }

    pub fn line(&self) -> String {
        if !self.psi {
            return format!(
                "machine: no pressure information (/proc/pressure); sampler late ≤ {} ms",
                self.sampler_late_max_ms
            );
        }
        format!(
            "machine: some task waited for a CPU {:.1} % and for the disk {:.1} % of the run; \
             {} disk stalls of ≥ 30 ms (longest {} ms, {} ms in all); \
             the host took {:.1} % of the cores (at most {} ms in 100 ms) and stopped the machine {} times (longest {} ms); sampler late ≤ {} ms",
            self.cpu_pressure_share * 100.0,
            self.io_pressure_share * 100.0,
            self.io_stalls,
            self.io_stall_longest_ms,
            self.io_stall_total_ms,
            self.steal_share * 100.0,
            self.steal_max_100ms_ms,
            self.stood_still,
            self.stood_still_longest_ms,
            self.sampler_late_max_ms
        )
    }
}

/// The machine's cores, for shares of its CPU time.
fn cores() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

/// The most steal (µs, summed over the cores) between two readings at most
/// `span_us` apart.
fn steal_max_us(run: &[&Reading], span_us: u64) -> u64 {
    let mut most = 0;
    let mut from = 0;
    for to in 0..run.len() {
        while run[to].at_us.saturating_sub(run[from].at_us) > span_us {
            from += 1;
        }
        if let (Some(a), Some(b)) = (run[from].steal_us, run[to].steal_us) {
            most = most.max(b.saturating_sub(a));
        }
    }
    most
}

/// The lengths (µs) of the stretches of consecutive readings in which some
/// task waited for the disk at least [`IO_STALL_SHARE`] of the time,
/// [`IO_STALL_MIN_US`] or longer.
fn io_stalls(run: &[&Reading]) -> Vec<u64> {
    let mut stalls = Vec::new();
    let mut current = 0u64;
    for pair in run.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let elapsed = b.at_us.saturating_sub(a.at_us);
        let waited = match (a.io_some_us, b.io_some_us) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => 0,
        };
        if elapsed > 0 && waited as f64 >= IO_STALL_SHARE * elapsed as f64 {
            current += elapsed;
        } else {
            if current >= IO_STALL_MIN_US {
                stalls.push(current);
            }
            current = 0;
        }
    }
    if current >= IO_STALL_MIN_US {
        stalls.push(current);
    }
    stalls
}

/// The stretches (from, to: µs since the start of the run) in which the
/// machine stood still ([`stood_still_us`]), in time order.
pub fn stood_still_stretches(readings: &[Reading]) -> Vec<(u64, u64)> {
    readings
        .windows(2)
        .filter(|w| stood_still_us(&w[0], &w[1], cores()) > 0)
        .map(|w| (w[0].at_us, w[1].at_us))
        .collect()
}

/// The readings as CSV, for `OUT/logs/machine.csv`: time since the start of
/// the run and the five counters (empty where the kernel has none).
pub fn csv(readings: &[Reading]) -> String {
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    let mut out = String::from(
        "at_us,cpu_some_total_us,io_some_total_us,io_full_total_us,steal_total_us,busy_total_us\n",
    );
    for r in readings {
        out.push_str(&format!(
            "{},{},{},{},{},{}\n",
            r.at_us,
            opt(r.cpu_some_us),
            opt(r.io_some_us),
            opt(r.io_full_us),
            opt(r.steal_us),
            opt(r.busy_us)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPU: &str = "some avg10=1.00 avg60=2.00 avg300=3.00 total=5000\n\
                       full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";

    #[test]
    fn the_machines_busy_time_is_read_from_proc_stat() {
        let stat = "cpu  100 5 40 9000 70 1 2 3 0 0\ncpu0 50 2 20 4500 35 0 1 1 0 0\n";
        // user + nice + system + irq + softirq + steal; not idle, not iowait.
        assert_eq!(busy_ticks(stat), Some(100 + 5 + 40 + 1 + 2 + 3));
        assert_eq!(busy_ticks("intr 1 2 3\n"), None);
    }

    #[test]
    fn others_are_what_neither_this_process_nor_the_database_used() {
        let at = Instant::now();
        let reading = |after: Duration, busy, own, db| CpuReading {
            at: at + after,
            machine_busy_us: Some(busy),
            own_us: Some(own),
            database_us: db,
        };
        let from = reading(Duration::ZERO, 0, 0, Some(0));
        // 2 s: the machine busy 3.2 core-seconds, 0.8 of them ours and
        // 1.2 the database's: others took 1.2 s, 0.6 of a core.
        let to = reading(Duration::from_secs(2), 3_200_000, 800_000, Some(1_200_000));
        assert_eq!(from.others_cores(&to), Some(0.6));
        let unknown = reading(Duration::from_secs(2), 3_200_000, 800_000, None);
        assert_eq!(
            from.others_cores(&unknown),
            None,
            "without the database's CPU"
        );
    }

    #[test]
    fn the_totals_are_read_from_psi_lines() {
        assert_eq!(total(CPU, "some"), Some(5000));
        assert_eq!(total(CPU, "full"), Some(0));
        assert_eq!(total(CPU, "other"), None);
        assert_eq!(total("", "some"), None);
        assert_eq!(total("some avg10=1.00 total=x", "some"), None);
    }

    /// Readings every 10 ms; from 100 to 250 ms some task waits for the
    /// disk the whole time (a WAL flush), from 400 to 450 ms for a CPU;
    /// after a 60 ms pause at 500 ms, from 610 to 640 ms (its clock) the
    /// host takes 15 ms of the two cores' 20 every 10 ms.
    fn run() -> Vec<Reading> {
        let (mut cpu, mut io, mut full, mut steal) = (0u64, 0u64, 0u64, 0u64);
        let mut busy = 0u64;
        (0..=60u64)
            .map(|i| {
                let at_us = i * 10_000;
                // A fifth of a core busy, and none while the machine stood still.
                if i != 50 {
                    busy += 2_000;
                }
                if i > 10 && i <= 25 {
                    io += 10_000;
                    full += 6_000;
                }
                if i > 40 && i <= 45 {
                    cpu += 9_000;
                }
                if i > 54 && i <= 58 {
                    steal += 15_000;
                    cpu += 10_000;
                }
                if i == 50 {
                    // A sleep that overran: nothing ran for 60 ms.
                    return Reading {
                        at_us: at_us + 60_000,
                        cpu_some_us: Some(cpu),
                        io_some_us: Some(io),
                        io_full_us: Some(full),
                        steal_us: Some(steal),
                        busy_us: Some(busy),
                    };
                }
                Reading {
                    at_us: if i > 50 { at_us + 60_000 } else { at_us },
                    cpu_some_us: Some(cpu),
                    io_some_us: Some(io),
                    io_full_us: Some(full),
                    steal_us: Some(steal),
                    busy_us: Some(busy),
                }
            })
            .collect()
    }

    #[test]
    fn a_window_says_whether_the_disk_or_the_cpus_held_it() {
        let readings = run();
        let flush = MachineInWindow::within(&readings, 120_000, 240_000);
        assert_eq!(flush.io_pressure_ms, 120.0, "{flush:?}");
        assert_eq!(flush.io_full_ms, 72.0);
        assert_eq!(flush.cpu_pressure_ms, 0.0);
        assert_eq!(flush.held_by(120_000), Some("io"));

        let busy = MachineInWindow::within(&readings, 400_000, 450_000);
        assert_eq!(busy.cpu_pressure_ms, 45.0, "{busy:?}");
        assert_eq!(busy.held_by(50_000), Some("cpu"));

        let calm = MachineInWindow::within(&readings, 300_000, 380_000);
        assert_eq!(calm.held_by(80_000), None, "{calm:?}");
        assert_eq!(calm.sampler_late_max_ms, 0.0);

        let paused = MachineInWindow::within(&readings, 480_000, 560_000);
        assert_eq!(paused.sampler_late_max_ms, 60.0, "{paused:?}");
        assert_eq!(paused.steal_ms, 0.0);
        // ...with the cores idle: the machine stood still, the host's.
        assert_eq!(paused.stood_still_ms, 70.0, "{paused:?}");
        assert_eq!(paused.held_by(80_000), Some("host"));
        assert!(
            paused.line().contains("stood still 70 ms"),
            "{}",
            paused.line()
        );
        assert_eq!(flush.stood_still_ms, 0.0);

        // The host's moment is CPU pressure too, and named for the host.
        let stolen = MachineInWindow::within(&readings, 600_000, 650_000);
        assert_eq!(stolen.steal_ms, 60.0, "{stolen:?}");
        assert!(stolen.cpu_pressure_ms >= 25.0, "{stolen:?}");
        assert_eq!(stolen.held_by(50_000), Some("host"));
        assert!(stolen.line().contains("stolen by the host 60 ms"));
    }

    #[test]
    fn a_late_sampler_on_busy_cores_is_not_a_machine_standing_still() {
        let at = |at_us, busy_us| Reading {
            at_us,
            busy_us,
            ..Reading::default()
        };
        // 30 ms late, the cores idle: stood still for the whole interval.
        assert_eq!(
            stood_still_us(&at(0, Some(0)), &at(40_000, Some(0)), 2.0),
            40_000
        );
        // As late with every core busy: the work here held the sampler.
        assert_eq!(
            stood_still_us(&at(0, Some(0)), &at(40_000, Some(80_000)), 2.0),
            0
        );
        // On time, or late by less than a wake-up's ordinary lateness.
        assert_eq!(
            stood_still_us(&at(0, Some(0)), &at(10_200, Some(0)), 2.0),
            0
        );
        assert_eq!(
            stood_still_us(&at(0, Some(0)), &at(19_000, Some(0)), 2.0),
            0
        );
        // Without /proc/stat nothing is said.
        assert_eq!(stood_still_us(&at(0, None), &at(40_000, None), 2.0), 0);
    }

    #[test]
    fn the_stretches_the_machine_stood_still_are_listed() {
        assert_eq!(stood_still_stretches(&run()), vec![(490_000, 560_000)]);
    }

    #[test]
    fn steal_is_read_from_proc_stat() {
        let stat = "cpu  100 5 40 9000 70 1 2 37 0 0\ncpu0 50 2 20 4500 35 0 1 1 0 0\n";
        assert_eq!(steal_ticks(stat), Some(37));
        assert_eq!(
            steal_ticks("cpu  1 2 3 4\n"),
            None,
            "a kernel without steal"
        );
        assert_eq!(steal_ticks("intr 1 2 3\n"), None);
    }

    #[test]
    fn the_run_counts_its_disk_stalls() {
        let readings = run();
        let view = MachineView::new(&readings, 0);
        assert!(view.psi);
        assert_eq!(view.io_stalls, 1, "{view:?}");
        assert_eq!(view.io_stall_longest_ms, 150.0);
        assert_eq!(view.sampler_late_max_ms, 60.0);
        assert_eq!(view.steal_max_100ms_ms, 60.0, "{view:?}");
        assert_eq!((view.stood_still, view.stood_still_longest_ms), (1, 70.0));
        assert!(view.steal_share > 0.0 && view.steal_share < 0.1, "{view:?}");
        assert!(view.io_pressure_share > 0.2 && view.io_pressure_share < 0.25);
        // From after the flush on, none.
        let later = MachineView::new(&readings, 300_000);
        assert_eq!(later.io_stalls, 0);
    }

    #[test]
    fn without_psi_only_the_sampler_is_kept() {
        let readings: Vec<Reading> = (0..10)
            .map(|i| Reading {
                at_us: i * 10_000,
                ..Reading::default()
            })
            .collect();
        let view = MachineView::new(&readings, 0);
        assert!(!view.psi);
        assert!(view.line().contains("no pressure information"));
        assert_eq!(
            MachineInWindow::within(&readings, 0, 90_000).held_by(90_000),
            None
        );
    }

    #[test]
    fn the_sampler_reads_and_stops() {
        let sampler = MachineSampler::start(Instant::now());
        std::thread::sleep(Duration::from_millis(50));
        let readings = sampler.stop();
        assert!(!readings.is_empty());
        assert!(readings.windows(2).all(|w| w[0].at_us <= w[1].at_us));
        let csv = csv(&readings);
        assert_eq!(csv.lines().count(), readings.len() + 1);
    }
}
