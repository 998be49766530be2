//! What the CPU quotas of a local cluster (`--db-cpu-quota`,
//! `--server-cpu-quota`) allowed and what the capped processes used over
//! the workload: read from their control groups before and after it.

use std::time::Duration;

use borbaman_cluster::CpuGroup;
use serde::Serialize;

/// One group's counters at one moment.
#[derive(Clone, Debug)]
pub struct GroupReading {
    /// What the group holds: `database` (home's), `database-c1`... (the
    /// other database clusters') or `servers`.
    pub name: String,
    pub cores: f64,
    pub used: Option<Duration>,
    pub throttled: Option<(u64, Duration)>,
}

impl GroupReading {
    pub fn of(name: String, group: &CpuGroup) -> GroupReading {
        GroupReading {
            name,
            cores: group.cores(),
            used: group.usage(),
            throttled: group.throttled(),
        }
    }
}

/// A group over the workload, in `summary.json`'s `cpu_quotas`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct QuotaUse {
    pub group: String,
    /// The quota, in cores.
    pub cores: f64,
    /// CPU the group used over the workload, in cores (CPU time over the
    /// workload's wall time): at the quota, the group was the limit.
    pub used_cores: Option<f64>,
    /// Scheduler periods (100 ms) in which the group used up its quota
    /// and waited, and how long it waited in all.
    pub throttled_periods: Option<u64>,
    pub throttled_s: Option<f64>,
}

/// Each group's use between two readings `ran` apart.
pub fn between(before: &[GroupReading], after: &[GroupReading], ran: Duration) -> Vec<QuotaUse> {
    after
        .iter()
        .map(|end| {
            let start = before.iter().find(|b| b.name == end.name);
            let used = match (start.and_then(|s| s.used), end.used) {
                (Some(from), Some(to)) if !ran.is_zero() => Some(round(
                    to.saturating_sub(from).as_secs_f64() / ran.as_secs_f64(),
                )),
                _ => None,
            };
            let throttled = match (start.and_then(|s| s.throttled), end.throttled) {
                (Some((n0, t0)), Some((n1, t1))) => Some((n1 - n0.min(n1), t1.saturating_sub(t0))),
                _ => None,
            };
            QuotaUse {
                group: end.name.to_string(),
                cores: end.cores,
                used_cores: used,
                throttled_periods: throttled.map(|(n, _)| n),
                throttled_s: throttled.map(|(_, t)| round(t.as_secs_f64())),
            }
        })
        .collect()
}

/// One line per group, for the end of a run.
pub fn describe(uses: &[QuotaUse]) -> Vec<String> {
    uses.iter()
        .map(|u| {
            let used = u
                .used_cores
                .map_or("unknown".to_string(), |c| format!("{c:.2} cores"));
            let throttled = match (u.throttled_periods, u.throttled_s) {
                (Some(n), Some(s)) => format!("; held back in {n} periods of 100 ms ({s:.1} s)"),
                _ => String::new(),
            };
            format!(
                "CPU quota of the {}: {:.2} cores; used {used} over the workload{throttled}",
                u.group, u.cores
            )
        })
        .collect()
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(used_ms: u64, throttled: u64) -> GroupReading {
        GroupReading {
            name: "database".into(),
            cores: 0.5,
            used: Some(Duration::from_millis(used_ms)),
            throttled: Some((throttled, Duration::from_millis(throttled * 40))),
        }
    }

    #[test]
    fn a_groups_use_is_its_cpu_over_the_workloads_wall_time() {
        let uses = between(
            &[reading(1_000, 10)],
            &[reading(6_000, 60)],
            Duration::from_secs(10),
        );
        assert_eq!(
            uses,
            [QuotaUse {
                group: "database".into(),
                cores: 0.5,
                used_cores: Some(0.5),
                throttled_periods: Some(50),
                throttled_s: Some(2.0),
            }]
        );
        assert_eq!(
            describe(&uses),
            [
                "CPU quota of the database: 0.50 cores; used 0.50 cores over the workload; \
              held back in 50 periods of 100 ms (2.0 s)"
            ]
        );
    }
}
