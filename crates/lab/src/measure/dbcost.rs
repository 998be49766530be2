//! What each call cost the database, from two readings around the
//! workload: WAL bytes and writing transactions (PostgreSQL's own
//! counters, exact at the moment of reading), and CPU
//! time of every `postgres` process on this machine (from `/proc`, so only
//! meaningful for a local cluster on a machine running no other
//! PostgreSQL; the standbys of a replicated database are included, as
//! their work is part of what a call costs).

use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;

use borbaman_server::store::audit::{self, DatabaseActivity};

/// Linux reports process CPU time in clock ticks of `USER_HZ`, which the
/// kernel ABI fixes at 100 per second.
const USER_HZ: u64 = 100;

/// One reading.
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    activity: DatabaseActivity,
    cpu: Option<Duration>,
}

/// Per call of the workload, between two readings.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DatabaseCost {
    pub calls: u64,
    pub wal_bytes_per_call: f64,
    pub writing_transactions_per_call: f64,
    /// `None` where `/proc` cannot be read.
    pub cpu_us_per_call: Option<f64>,
}

/// Reads the database's counters and, given its processes (`roots`), their
/// CPU time.
pub async fn read(db: &PgPool, roots: Option<Vec<u32>>) -> Result<Reading, sqlx::Error> {
    Ok(Reading {
        activity: audit::database_activity(db).await?,
        cpu: roots.and_then(|roots| cpu_of(&roots)),
    })
}

impl Reading {
    /// Several databases' readings as one (the clusters of a partitioned
    /// run): counters added, CPU time known only when known for each.
    pub fn sum(readings: &[Reading]) -> Option<Reading> {
        if readings.is_empty() {
            return None;
        }
        Some(Reading {
            activity: DatabaseActivity {
                wal_bytes: readings.iter().map(|r| r.activity.wal_bytes).sum(),
                writing_transactions: readings
                    .iter()
                    .map(|r| r.activity.writing_transactions)
                    .sum(),
            },
            cpu: readings
                .iter()
                .map(|r| r.cpu)
                .try_fold(Duration::ZERO, |all, cpu| Some(all + cpu?)),
        })
    }
}

impl DatabaseCost {
    pub fn between(before: &Reading, after: &Reading, calls: u64) -> DatabaseCost {
        let per_call = |x: u64| match calls {
            0 => 0.0,
            n => (x as f64 / n as f64 * 10.0).round() / 10.0,
        };
        DatabaseCost {
            calls,
            wal_bytes_per_call: per_call(
                after
                    .activity
                    .wal_bytes
                    .saturating_sub(before.activity.wal_bytes),
            ),
            writing_transactions_per_call: per_call(
                after
                    .activity
                    .writing_transactions
                    .saturating_sub(before.activity.writing_transactions),
            ),
            cpu_us_per_call: match (before.cpu, after.cpu) {
                (Some(b), Some(a)) => Some(per_call(
                    u64::try_from(a.saturating_sub(b).as_micros()).unwrap_or(u64::MAX),
                )),
                _ => None,
            },
        }
    }
}

/// CPU time of the processes `roots` and their children (PostgreSQL's
/// postmaster and its backends; this process and the servers it started),
/// exited children included.
pub fn cpu_of(roots: &[u32]) -> Option<Duration> {
    if roots.is_empty() {
        return None;
    }
    let mut ticks = 0u64;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((ppid, t)) = parse_stat(&stat)
            && (roots.contains(&pid) || roots.contains(&ppid))
        {
            ticks += t;
        }
    }
    Some(Duration::from_micros(ticks * (1_000_000 / USER_HZ)))
}

/// CPU time used so far by process `pid` itself: not its children, live
/// or reaped (the bench without the servers it started).
pub fn cpu_of_process(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, own, _) = stat_fields(&stat)?;
    Some(Duration::from_micros(own * (1_000_000 / USER_HZ)))
}

/// From a `/proc/PID/stat` line: the parent's pid, and utime + stime +
/// cutime + cstime. The name is in parentheses and may hold spaces, so
/// fields are counted after the last `)`.
fn parse_stat(stat: &str) -> Option<(u32, u64)> {
    let (ppid, own, reaped) = stat_fields(stat)?;
    Some((ppid, own + reaped))
}

/// From a `/proc/PID/stat` line: the parent's pid, utime + stime, and
/// cutime + cstime (children reaped).
fn stat_fields(stat: &str) -> Option<(u32, u64, u64)> {
    let close = stat.rfind(')')?;
    // After ")": state is field 3, the parent field 4; utime..cstime are
    // fields 14-17.
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let ppid = u32::try_from(field(4)?).ok()?;
    Some((ppid, field(14)? + field(15)?, field(16)? + field(17)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_parent_and_cpu_ticks() {
        let line = "4242 (postgres: a) b) S 17 4242 4242 0 -1 4194560 500 0 0 0 \
                    120 30 7 3 20 0 1 0 100 0 0";
        assert_eq!(parse_stat(line), Some((17, 160)));
        assert_eq!(stat_fields(line), Some((17, 150, 10)));
        assert_eq!(parse_stat("4242 (postgres"), None);
    }

    #[test]
    fn this_process_has_used_some_cpu() {
        let me = std::process::id();
        // Busy until the kernel has counted at least one clock tick.
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        let mut spin = 0u64;
        while cpu_of(&[me]).is_some_and(|t| t == Duration::ZERO)
            && std::time::Instant::now() < give_up
        {
            for i in 0..1_000_000u64 {
                spin = spin.wrapping_add(std::hint::black_box(i));
            }
        }
        std::hint::black_box(spin);
        assert!(cpu_of(&[me]).is_some_and(|t| t > Duration::ZERO));
        assert_eq!(cpu_of(&[]), None);
    }

    #[test]
    fn cost_is_per_call() {
        let at = |wal_bytes, commits, cpu_ms| Reading {
            activity: DatabaseActivity {
                wal_bytes,
                writing_transactions: commits,
            },
            cpu: Some(Duration::from_millis(cpu_ms)),
        };
        let cost = DatabaseCost::between(&at(1000, 10, 100), &at(51_000, 110, 300), 100);
        assert_eq!(cost.wal_bytes_per_call, 500.0);
        assert_eq!(cost.writing_transactions_per_call, 1.0);
        assert_eq!(cost.cpu_us_per_call, Some(2000.0));
    }
}
