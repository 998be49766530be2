//! Per-invocation records: one row per call a headless client made, kept in
//! memory during a run and written to `invocations.csv` at the end.
//!
//! Times are microseconds since the start of the run (a single [`Instant`]
//! shared by every client), so rows from different clients line up and the
//! CSV can be replotted without the process that wrote it.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Which RPC an invocation was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallKind {
    Join,
    Act,
    State,
    Leave,
}

/// One call made by one client, as the client saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Invocation {
    /// When the call started, since the start of the run.
    pub start_us: u64,
    /// Headless client number (0-based).
    pub client: u32,
    /// Game the client was in (0 before its first join succeeded).
    pub game: u64,
    pub seat: u32,
    pub call: CallKind,
    /// Sequence number sent (0 for calls that carry none).
    pub seq: u64,
    /// Address of the server that answered (or was last tried).
    pub server: String,
    /// From the start of the call to its reply (or its final failure).
    pub rtt_us: u64,
    /// How late the client started this call after its tick was due: the
    /// client's own scheduling delay (a starved client), not in `rtt_us`.
    pub tick_late_us: u64,
    /// Tries the pool made, 1 when the first server answered.
    pub attempts: u32,
    /// The pool moved to another server during this call.
    pub failed_over: bool,
    /// Copies of the request sent to a second server because the first
    /// was slow to answer (hedges).
    pub hedges: u32,
    /// The answer came from a hedged copy.
    pub hedge_won: bool,
    /// When the first failed attempt started, relative to the start of the
    /// call (the failover gap runs from there to the reply).
    pub first_failure_us: Option<u64>,
    /// When the attempt that answered started, relative to the start of the
    /// call, if it was not the first: the failover gap splits into noticing
    /// the failure (up to here) and the retry (from here to the reply).
    pub last_attempt_us: Option<u64>,
    /// What the last failed attempt of a call that succeeded on a retry
    /// ended with, as the pool saw it (empty when no attempt failed).
    pub failure: String,
    /// `ok`; `refused:<reason>` when a server turned the call away for
    /// load or a rate limit (`refused:server-full`), which is not an
    /// error; else the error the call ended with.
    pub status: String,
    /// State version in the reply (0 when there was none).
    pub version: u64,
    /// The reply was a stored reply of an earlier identical request.
    pub replayed: bool,
    /// Made during the warm-up: written to the CSV, left out of statistics.
    pub warmup: bool,
    /// Time the pool slept between attempts (backoff, pushback, waiting
    /// for a live server), inside `rtt_us`.
    #[serde(default)]
    pub backoff_us: u64,
    /// When the request that was answered was sent, from the start of the
    /// call (0 when the first request was): failed attempts, backoff and
    /// the wait before a winning hedge come before it.
    #[serde(default)]
    pub answer_sent_us: u64,
    /// The answering server's own timing of the request it answered
    /// (`borbaman-timing`): waiting behind the game's gate, in kept
    /// database work, in lost compare-and-sets (their count and cost),
    /// and in all. Empty when the server did not say.
    #[serde(default)]
    pub server_gate_us: Option<u64>,
    #[serde(default)]
    pub server_db_us: Option<u64>,
    #[serde(default)]
    pub server_cas_retries: Option<u32>,
    #[serde(default)]
    pub server_cas_us: Option<u64>,
    #[serde(default)]
    pub server_total_us: Option<u64>,
    /// The call went first to another server than the client's call
    /// before it, and why (`copy-won`, `left`, `down`, `alone`, `back`,
    /// `game`: see the pool's `Move`); empty when it did not.
    #[serde(default)]
    pub moved: String,
    /// Address of the server the call's first attempt was sent to (the
    /// game's server when it began), whoever answered; empty for a call
    /// that failed. A chaos run's split by faulted server
    /// ([`super::faults::FaultSplit`]) counts calls by it.
    #[serde(default)]
    pub first_server: String,
}

impl Invocation {
    pub fn is_ok(&self) -> bool {
        self.status == STATUS_OK
    }

    /// The reason a server refused the call with, if it did
    /// (`server-full`, `rate-limited`).
    pub fn refusal(&self) -> Option<&str> {
        self.status.strip_prefix(REFUSED_PREFIX)
    }

    /// Neither answered nor refused: the call failed.
    pub fn is_error(&self) -> bool {
        !self.is_ok() && self.refusal().is_none()
    }

    /// End of the call, since the start of the run.
    pub fn end_us(&self) -> u64 {
        self.start_us + self.rtt_us
    }

    /// Time from the start of the first failed attempt to this successful
    /// reply, when the call failed over; `None` otherwise.
    pub fn failover_gap_us(&self) -> Option<u64> {
        (self.is_ok() && self.failed_over).then(|| {
            let failed_at = self.first_failure_us.unwrap_or(0).min(self.rtt_us);
            self.rtt_us - failed_at
        })
    }

    /// The failover gap split in two: from the failed attempt to the start
    /// of the attempt that answered, and that attempt itself.
    pub fn failover_split_us(&self) -> Option<(u64, u64)> {
        let gap = self.failover_gap_us()?;
        let last = self.last_attempt_us?.min(self.rtt_us);
        let retry = self.rtt_us - last;
        Some((gap.saturating_sub(retry), retry.min(gap)))
    }
}

/// The `status` of a call that succeeded.
pub const STATUS_OK: &str = "ok";

/// The start of the `status` of a call a server refused: `refused:` and the
/// reason it gave.
pub const REFUSED_PREFIX: &str = "refused:";

/// The clock of a run: converts [`Instant`]s to microseconds since its start.
#[derive(Clone, Copy, Debug)]
pub struct RunClock {
    started: Instant,
}

impl RunClock {
    pub fn start() -> Self {
        RunClock {
            started: Instant::now(),
        }
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    /// Microseconds from the start of the run to `at` (0 if `at` is earlier).
    pub fn us(&self, at: Instant) -> u64 {
        duration_us(at.saturating_duration_since(self.started))
    }

    pub fn now_us(&self) -> u64 {
        self.us(Instant::now())
    }

    /// Microseconds from the start of the run to `at`, negative before it.
    pub fn offset_us(&self, at: Instant) -> i64 {
        match at.checked_duration_since(self.started) {
            Some(after) => duration_us(after) as i64,
            None => -(duration_us(self.started - at) as i64),
        }
    }
}

pub fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Where clients put their records: a cheap-to-clone handle to one shared
/// list. A std `Mutex` is enough: a push holds it for nanoseconds, never
/// across an `.await`.
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    records: Arc<Mutex<Vec<Invocation>>>,
}

impl Recorder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&self, record: Invocation) {
        self.records.lock().unwrap().push(record);
    }

    pub fn len(&self) -> usize {
        self.records.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// All records so far, ordered by start time.
    pub fn snapshot(&self) -> Vec<Invocation> {
        let mut records = self.records.lock().unwrap().clone();
        records.sort_by_key(|r| (r.start_us, r.client));
        records
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: csv::Error },
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: csv::Error },
}

/// Writes `records` to `path` as CSV with a header row.
pub fn write_csv<T: Serialize>(path: &Path, records: &[T]) -> Result<(), CsvError> {
    let wrap = |source| CsvError::Write {
        path: path.display().to_string(),
        source,
    };
    let mut writer = csv::Writer::from_path(path).map_err(wrap)?;
    for record in records {
        writer.serialize(record).map_err(wrap)?;
    }
    writer.flush().map_err(|e| wrap(e.into()))
}

/// Reads back a CSV written by [`write_csv`].
pub fn read_csv<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, CsvError> {
    let wrap = |source| CsvError::Read {
        path: path.display().to_string(),
        source,
    };
    let mut reader = csv::Reader::from_path(path).map_err(wrap)?;
    reader.deserialize().collect::<Result<_, _>>().map_err(wrap)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A successful act of `client` starting at `start_us` and taking `rtt_us`.
    pub(crate) fn act(client: u32, start_us: u64, rtt_us: u64) -> Invocation {
        Invocation {
            start_us,
            client,
            game: 1,
            seat: client % 4,
            call: CallKind::Act,
            seq: start_us,
            server: "127.0.0.1:1".into(),
            rtt_us,
            tick_late_us: 0,
            attempts: 1,
            failed_over: false,
            hedges: 0,
            hedge_won: false,
            first_failure_us: None,
            last_attempt_us: None,
            failure: String::new(),
            status: STATUS_OK.into(),
            version: start_us,
            replayed: false,
            warmup: false,
            backoff_us: 0,
            answer_sent_us: 0,
            server_gate_us: None,
            server_db_us: None,
            server_cas_retries: None,
            server_cas_us: None,
            server_total_us: None,
            moved: String::new(),
            first_server: "127.0.0.1:1".into(),
        }
    }

    #[test]
    fn csv_round_trips_every_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("invocations.csv");
        let mut failed = act(3, 1_000, 4_000);
        failed.failed_over = true;
        failed.attempts = 2;
        failed.first_failure_us = Some(1_500);
        failed.last_attempt_us = Some(2_500);
        failed.failure = "Unknown from 127.0.0.1:2: transport error".into();
        failed.first_server = "127.0.0.1:2".into();
        failed.tick_late_us = 70;
        failed.backoff_us = 300;
        failed.answer_sent_us = 2_500;
        failed.server_gate_us = Some(11);
        failed.server_db_us = Some(900);
        failed.server_cas_retries = Some(1);
        failed.server_cas_us = Some(200);
        failed.server_total_us = Some(1_300);
        failed.call = CallKind::Join;
        let mut error = act(2, 10, 20);
        error.status = "unavailable: no live server".into();
        error.warmup = true;
        let mut refused = act(2, 30, 5);
        refused.status = "refused:server-full".into();
        assert_eq!(refused.refusal(), Some("server-full"));
        assert!(!refused.is_ok() && !refused.is_error());
        assert!(error.is_error() && error.refusal().is_none());
        let records = vec![act(1, 0, 100), failed, error, refused];
        write_csv(&path, &records).unwrap();
        let back: Vec<Invocation> = read_csv(&path).unwrap();
        assert_eq!(back, records);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("start_us,client,game,"), "{text}");
    }

    #[test]
    fn failover_gap_runs_from_the_first_failed_attempt_to_the_reply() {
        let plain = act(0, 100, 50);
        assert_eq!(plain.failover_gap_us(), None);

        let mut over = act(0, 100, 3_000);
        over.failed_over = true;
        over.first_failure_us = Some(0);
        assert_eq!(over.failover_gap_us(), Some(3_000));

        // The first attempt went through a database back-off; the failed
        // attempt started 1 ms into the call.
        over.first_failure_us = Some(1_000);
        assert_eq!(over.failover_gap_us(), Some(2_000));

        // Noticed 1.5 ms after the failed attempt started; the retry took
        // 0.5 ms.
        over.last_attempt_us = Some(2_500);
        assert_eq!(over.failover_split_us(), Some((1_500, 500)));

        over.status = "unavailable".into();
        assert_eq!(over.failover_split_us(), None);
        assert_eq!(
            over.failover_gap_us(),
            None,
            "a failed call recovers nothing"
        );
    }

    #[test]
    fn recorder_snapshot_is_ordered_by_start() {
        let recorder = Recorder::new();
        let clone = recorder.clone();
        recorder.push(act(0, 300, 1));
        clone.push(act(1, 100, 1));
        recorder.push(act(2, 200, 1));
        let starts: Vec<u64> = recorder.snapshot().iter().map(|r| r.start_us).collect();
        assert_eq!(starts, [100, 200, 300]);
        assert_eq!(recorder.len(), 3);
    }
}
