//! PostgreSQL's own view of a run: its statistics views read before and
//! after the workload (`pg_stat_wal`, `pg_stat_bgwriter`,
//! `pg_stat_database`, `pg_stat_user_tables`; kept whole in
//! `OUT/logs/pg_stat_before.json` and `pg_stat_after.json`), what changed
//! between them ([`PostgresView`]), and the events of its log (a local
//! cluster logs with `borbaman_cluster::postgres::OBSERVE`) counted over
//! the run and in each stall window ([`LogCounts`]).
//!
//! The log is read by its lines' `%m` prefix (`2026-12-01 13:08:17.123
//! UTC`), turned into time since the start of the run; lines of other
//! shapes (Patroni's own, continuation lines) are skipped.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A window's log events are counted from this long before it starts: a
/// checkpoint or a vacuum that began just before is a suspect too.
pub const LEAD_US: i64 = 250_000;

/// One reading of the statistics views: view name → its rows as JSON.
pub type Snapshot = BTreeMap<String, Value>;

/// Reads `(view, JSON text)` pairs into a [`Snapshot`] (a view whose text
/// does not parse is kept as the text).
pub fn snapshot(views: Vec<(&'static str, String)>) -> Snapshot {
    views
        .into_iter()
        .map(|(view, text)| {
            let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
            (view.to_string(), value)
        })
        .collect()
}

/// Several databases' snapshots as one (the clusters of a partitioned
/// run): each view's rows put together, so that every sum over a view's
/// rows is the sum over the clusters; anything else (the moment of
/// reading) is the first one's.
pub fn merge(snapshots: Vec<Snapshot>) -> Option<Snapshot> {
    let mut all = snapshots.into_iter();
    let mut merged = all.next()?;
    for snapshot in all {
        for (view, value) in snapshot {
            match (merged.get_mut(&view), value) {
                (Some(Value::Array(rows)), Value::Array(more)) => rows.extend(more),
                (None, value) => {
                    merged.insert(view, value);
                }
                _ => {}
            }
        }
    }
    Some(merged)
}

/// Sum of `field` over the rows of `view` (rows filtered by `row`).
fn sum(snapshot: &Snapshot, view: &str, field: &str, row: impl Fn(&Value) -> bool) -> f64 {
    snapshot
        .get(view)
        .and_then(Value::as_array)
        .map(|rows| {
            rows.iter()
                .filter(|r| row(r))
                .filter_map(|r| r.get(field)?.as_f64())
                .sum()
        })
        .unwrap_or(0.0)
}

/// What PostgreSQL did during the run, from the two readings and the log.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PostgresView {
    /// New backends (sessions) opened during the workload (warm-up
    /// included), over every database: the game servers' connections, and
    /// any a server opened again after dropping one. Connection churn
    /// shows here.
    pub backends_opened: u64,
    pub commits: u64,
    pub rollbacks: u64,
    /// Checkpoints started by time and on demand (WAL filling up).
    pub checkpoints_timed: u64,
    pub checkpoints_requested: u64,
    pub checkpoint_write_ms: f64,
    pub checkpoint_sync_ms: f64,
    /// Buffers written by backends themselves (nobody else had cleaned
    /// them), and fsyncs they had to do.
    pub buffers_backend: u64,
    pub buffers_backend_fsync: u64,
    pub wal_bytes: u64,
    /// WAL written and flushed (`wal_write`, `wal_sync`) and the time it
    /// took (`track_wal_io_timing`), and times the WAL buffers were full.
    pub wal_writes: u64,
    pub wal_syncs: u64,
    pub wal_write_ms: f64,
    pub wal_sync_ms: f64,
    /// Mean time of one WAL flush, ms: the commit floor the disk sets.
    pub wal_sync_mean_ms: f64,
    pub wal_buffers_full: u64,
    /// Autovacuum and autoanalyze runs, by table (only tables that had
    /// some).
    pub autovacuums: BTreeMap<String, u64>,
    /// The log's events during the measured window, when the log was read.
    pub log: Option<LogCounts>,
    /// The log files read (copied into `OUT/logs/`).
    pub log_files: Vec<String>,
}

impl PostgresView {
    pub fn between(before: &Snapshot, after: &Snapshot) -> PostgresView {
        let any = |_: &Value| true;
        let delta = |view: &str, field: &str| {
            (sum(after, view, field, any) - sum(before, view, field, any)).max(0.0)
        };
        let count = |view: &str, field: &str| delta(view, field).round() as u64;
        let ms = |view: &str, field: &str| (delta(view, field) * 100.0).round() / 100.0;
        let wal_syncs = count("pg_stat_wal", "wal_sync");
        let wal_sync_ms = ms("pg_stat_wal", "wal_sync_time");
        let mut autovacuums = BTreeMap::new();
        let tables: Vec<String> = after
            .get("pg_stat_user_tables")
            .and_then(Value::as_array)
            .map(|rows| {
                rows.iter()
                    .filter_map(|r| Some(r.get("relname")?.as_str()?.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        for table in tables {
            let of = |s: &Snapshot| {
                let this = |r: &Value| r.get("relname").and_then(Value::as_str) == Some(&table);
                sum(s, "pg_stat_user_tables", "autovacuum_count", this)
                    + sum(s, "pg_stat_user_tables", "autoanalyze_count", this)
            };
            let runs = (of(after) - of(before)).max(0.0).round() as u64;
            if runs > 0 {
                autovacuums.insert(table, runs);
            }
        }
        PostgresView {
            backends_opened: count("pg_stat_database", "sessions"),
            commits: count("pg_stat_database", "xact_commit"),
            rollbacks: count("pg_stat_database", "xact_rollback"),
            checkpoints_timed: count("pg_stat_bgwriter", "checkpoints_timed"),
            checkpoints_requested: count("pg_stat_bgwriter", "checkpoints_req"),
            checkpoint_write_ms: ms("pg_stat_bgwriter", "checkpoint_write_time"),
            checkpoint_sync_ms: ms("pg_stat_bgwriter", "checkpoint_sync_time"),
            buffers_backend: count("pg_stat_bgwriter", "buffers_backend"),
            buffers_backend_fsync: count("pg_stat_bgwriter", "buffers_backend_fsync"),
            wal_bytes: count("pg_stat_wal", "wal_bytes"),
            wal_writes: count("pg_stat_wal", "wal_write"),
            wal_syncs,
            wal_write_ms: ms("pg_stat_wal", "wal_write_time"),
            wal_sync_ms,
            wal_sync_mean_ms: match wal_syncs {
                0 => 0.0,
                n => (wal_sync_ms / n as f64 * 1000.0).round() / 1000.0,
            },
            wal_buffers_full: count("pg_stat_wal", "wal_buffers_full"),
            autovacuums,
            log: None,
            log_files: Vec::new(),
        }
    }

    /// The line the report prints.
    pub fn line(&self) -> String {
        let log = match &self.log {
            Some(log) => format!("; log: {}", log.line()),
            None => String::new(),
        };
        format!(
            "postgres: {} backends opened, {} commits; checkpoints {} timed + {} requested \
             (write {} ms, sync {} ms); WAL {} flushes, mean {} ms; autovacuum {}{log}",
            self.backends_opened,
            self.commits,
            self.checkpoints_timed,
            self.checkpoints_requested,
            self.checkpoint_write_ms,
            self.checkpoint_sync_ms,
            self.wal_syncs,
            self.wal_sync_mean_ms,
            match self.autovacuums.is_empty() {
                true => "none".to_string(),
                false => self
                    .autovacuums
                    .iter()
                    .map(|(t, n)| format!("{t} {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            },
        )
    }
}

/// What a PostgreSQL log line says, of what a stall may come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogEvent {
    Connection,
    Disconnection,
    CheckpointStart,
    CheckpointEnd,
    Autovacuum,
    Autoanalyze,
    SlowStatement,
    LockWait,
}

/// Events of the log over a stretch of time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogCounts {
    pub connections: u64,
    pub disconnections: u64,
    pub checkpoints_started: u64,
    pub checkpoints_done: u64,
    pub autovacuums: u64,
    pub autoanalyzes: u64,
    pub slow_statements: u64,
    pub lock_waits: u64,
}

impl LogCounts {
    fn add(&mut self, event: LogEvent) {
        let n = match event {
            LogEvent::Connection => &mut self.connections,
            LogEvent::Disconnection => &mut self.disconnections,
            LogEvent::CheckpointStart => &mut self.checkpoints_started,
            LogEvent::CheckpointEnd => &mut self.checkpoints_done,
            LogEvent::Autovacuum => &mut self.autovacuums,
            LogEvent::Autoanalyze => &mut self.autoanalyzes,
            LogEvent::SlowStatement => &mut self.slow_statements,
            LogEvent::LockWait => &mut self.lock_waits,
        };
        *n += 1;
    }

    /// Events at `at_us` (µs since the start of the run) within
    /// `from_us..=to_us`.
    pub fn within(events: &[(i64, LogEvent)], from_us: i64, to_us: i64) -> LogCounts {
        let mut counts = LogCounts::default();
        for &(at, event) in events {
            if (from_us..=to_us).contains(&at) {
                counts.add(event);
            }
        }
        counts
    }

    /// `3 connections, 1 checkpoint…`: only what happened.
    pub fn line(&self) -> String {
        let parts: Vec<String> = [
            ("connections opened", self.connections),
            ("closed", self.disconnections),
            ("checkpoints started", self.checkpoints_started),
            ("checkpoints done", self.checkpoints_done),
            ("autovacuums", self.autovacuums),
            ("autoanalyzes", self.autoanalyzes),
            ("statements over 100 ms", self.slow_statements),
            ("lock waits", self.lock_waits),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| format!("{n} {name}"))
        .collect();
        match parts.is_empty() {
            true => "nothing".into(),
            false => parts.join(", "),
        }
    }
}

/// A line's time (Unix ms) and event, if it is a PostgreSQL log line of
/// interest with a UTC `%m` prefix.
pub fn parse_line(line: &str) -> Option<(i64, LogEvent)> {
    // "2026-12-01 13:08:17.123 UTC [123] LOG:  connection authorized: …"
    let stamp = line.get(..27)?;
    if &stamp[23..] != " UTC" {
        return None;
    }
    let unix_ms = unix_ms(&stamp[..23])?;
    let message = &line[27..];
    let event = if message.contains("connection authorized") {
        LogEvent::Connection
    } else if message.contains("disconnection: session time") {
        LogEvent::Disconnection
    } else if message.contains("checkpoint starting") || message.contains("restartpoint starting") {
        LogEvent::CheckpointStart
    } else if message.contains("checkpoint complete") || message.contains("restartpoint complete") {
        LogEvent::CheckpointEnd
    } else if message.contains("automatic vacuum of table") {
        LogEvent::Autovacuum
    } else if message.contains("automatic analyze of table") {
        LogEvent::Autoanalyze
    } else if message.contains("LOG:  duration: ") {
        LogEvent::SlowStatement
    } else if message.contains("still waiting for") {
        LogEvent::LockWait
    } else {
        return None;
    };
    Some((unix_ms, event))
}

/// `2026-12-01 13:08:17.123` (UTC) as Unix milliseconds.
fn unix_ms(stamp: &str) -> Option<i64> {
    let num = |range: std::ops::Range<usize>| stamp.get(range)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + mi) * 60_000 + s * 1000 + ms)
}

/// Every event of `text`, at µs since `run_started_unix_ms`.
pub fn events(text: &str, run_started_unix_ms: i64) -> Vec<(i64, LogEvent)> {
    text.lines()
        .filter_map(parse_line)
        .map(|(ms, event)| ((ms - run_started_unix_ms) * 1000, event))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_clusters_snapshots_merge_into_sums_over_them() {
        let of = |syncs: u64, tables: Value| {
            snapshot(vec![
                ("now", "\"2026-01-01T00:00:00Z\"".into()),
                ("pg_stat_wal", json!([{ "wal_sync": syncs }]).to_string()),
                ("pg_stat_user_tables", tables.to_string()),
            ])
        };
        let merged = merge(vec![
            of(10, json!([{ "relname": "games" }])),
            of(5, json!([{ "relname": "games" }, { "relname": "actions" }])),
        ])
        .unwrap();
        assert_eq!(sum(&merged, "pg_stat_wal", "wal_sync", |_| true), 15.0);
        assert_eq!(merged["pg_stat_user_tables"].as_array().unwrap().len(), 3);
        assert_eq!(merged["now"], json!("2026-01-01T00:00:00Z"), "home's");
        assert_eq!(merge(Vec::new()), None);
    }

    #[test]
    fn log_lines_are_read_for_their_time_and_event() {
        let line = "2026-12-01 13:08:17.123 UTC [4242] LOG:  connection authorized: \
                    user=postgres database=borbaman application_name=sqlx";
        let (ms, event) = parse_line(line).unwrap();
        assert_eq!(event, LogEvent::Connection);
        // date -u -d '2026-12-01 13:08:17.123' +%s%3N
        assert_eq!(ms, 1_796_130_497_123);
        let at = |rest: &str| parse_line(&format!("2026-12-01 13:08:17.123 UTC [1] {rest}"));
        assert_eq!(
            at("LOG:  checkpoint starting: time").unwrap().1,
            LogEvent::CheckpointStart
        );
        assert_eq!(
            at("LOG:  checkpoint complete: wrote 3 buffers").unwrap().1,
            LogEvent::CheckpointEnd
        );
        assert_eq!(
            at("LOG:  automatic vacuum of table \"borbaman.public.games\"")
                .unwrap()
                .1,
            LogEvent::Autovacuum
        );
        assert_eq!(
            at("LOG:  duration: 120.5 ms  execute s1").unwrap().1,
            LogEvent::SlowStatement
        );
        assert_eq!(
            at("LOG:  process 7 still waiting for ShareLock").unwrap().1,
            LogEvent::LockWait
        );
        assert_eq!(at("LOG:  database system is ready"), None);
        assert_eq!(parse_line("13:08:17.123 INFO: no lock owner"), None);
        assert_eq!(
            parse_line("2026-12-01 13:08:17.123 CET [1] LOG:  connection authorized"),
            None,
            "a zone other than UTC is not guessed at"
        );
    }

    #[test]
    fn events_are_counted_in_a_window_and_placed_on_the_run_clock() {
        let text = "2026-12-01 13:08:17.100 UTC [1] LOG:  connection authorized: x\n\
                    2026-12-01 13:08:17.300 UTC [1] LOG:  checkpoint starting: time\n\
                    \tcontinued line\n\
                    2026-12-01 13:08:19.000 UTC [1] LOG:  connection authorized: y\n";
        let started = 1_796_130_497_000;
        let events = events(text, started);
        assert_eq!(events[0], (100_000, LogEvent::Connection));
        let counts = LogCounts::within(&events, 0, 500_000);
        assert_eq!((counts.connections, counts.checkpoints_started), (1, 1));
        assert_eq!(counts.line(), "1 connections opened, 1 checkpoints started");
        assert_eq!(
            LogCounts::within(&events, 600_000, 700_000).line(),
            "nothing"
        );
    }

    #[test]
    fn the_view_is_the_difference_of_two_readings() {
        let before = snapshot(vec![
            (
                "pg_stat_wal",
                json!([{"wal_sync": 10, "wal_sync_time": 5.0}]).to_string(),
            ),
            (
                "pg_stat_database",
                json!([{"sessions": 3, "xact_commit": 100}, {"sessions": 1, "xact_commit": 5}])
                    .to_string(),
            ),
            (
                "pg_stat_user_tables",
                json!([{"relname": "games", "autovacuum_count": 1, "autoanalyze_count": 0}])
                    .to_string(),
            ),
        ]);
        let after =
            snapshot(vec![
            ("pg_stat_wal", json!([{"wal_sync": 20, "wal_sync_time": 25.0}]).to_string()),
            (
                "pg_stat_database",
                json!([{"sessions": 13, "xact_commit": 600}, {"sessions": 1, "xact_commit": 5}])
                    .to_string(),
            ),
            (
                "pg_stat_user_tables",
                json!([
                    {"relname": "games", "autovacuum_count": 3, "autoanalyze_count": 1},
                    {"relname": "seats", "autovacuum_count": 0, "autoanalyze_count": 0}
                ])
                .to_string(),
            ),
        ]);
        let view = PostgresView::between(&before, &after);
        assert_eq!(view.backends_opened, 10);
        assert_eq!(view.commits, 500);
        assert_eq!((view.wal_syncs, view.wal_sync_ms), (10, 20.0));
        assert_eq!(view.wal_sync_mean_ms, 2.0);
        assert_eq!(view.autovacuums, BTreeMap::from([("games".to_string(), 3)]));
        assert!(
            view.line().contains("10 backends opened"),
            "{}",
            view.line()
        );
    }
}
