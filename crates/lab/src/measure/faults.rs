//! What a chaos run injects: the kinds of fault, and the record of each
//! one (a row of `faults.csv`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::record::{CallKind, Invocation};
use super::stats::{effective_rtt_us, rtt_stats};

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL a game server.
    Kill,
    /// SIGSTOP a game server for a while.
    Hang,
    /// SIGTERM a game server (it drains), then start it again.
    Restart,
    /// Restart the single PostgreSQL (`--db single`).
    DbRestart,
    /// SIGKILL the primary's postmaster; its Patroni stays (`--db ha`).
    DbKill,
    /// SIGKILL the primary's Patroni, postmaster and backends at once, as
    /// if its host were lost (`--db ha`).
    DbHostLoss,
    /// A planned switchover through Patroni (`--db ha`).
    DbSwitchover,
    /// SIGKILL one etcd member (`--db ha`).
    EtcdKill,
    /// Cut one game server off the database for a while; its clients still
    /// reach it (`--db single`: each server's database connections go
    /// through a proxy of the cluster's).
    DbPartition,
    /// One game server answers every game call late for a while (its slow
    /// mode, SIGUSR1/SIGUSR2).
    Slow,
    /// Move the partition of a game in play to another database cluster
    /// (`--db-clusters` 2 or more; `borbaman db move`).
    PartitionMove,
}

impl FaultKind {
    pub const ALL: [FaultKind; 11] = [
        FaultKind::Kill,
        FaultKind::Hang,
        FaultKind::Restart,
        FaultKind::DbRestart,
        FaultKind::DbKill,
        FaultKind::DbHostLoss,
        FaultKind::DbSwitchover,
        FaultKind::EtcdKill,
        FaultKind::DbPartition,
        FaultKind::Slow,
        FaultKind::PartitionMove,
    ];

    /// True for the faults of the replicated database.
    pub fn needs_ha(self) -> bool {
        matches!(
            self,
            FaultKind::DbKill
                | FaultKind::DbHostLoss
                | FaultKind::DbSwitchover
                | FaultKind::EtcdKill
        )
    }

    /// True for the faults that act on the database layer, not a server.
    pub fn is_database(self) -> bool {
        self.needs_ha() || self == FaultKind::DbRestart
    }

    /// True for the faults that need each server's database connections to
    /// go through a proxy of the cluster's.
    pub fn needs_database_proxy(self) -> bool {
        self == FaultKind::DbPartition
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FaultKind::Kill => "kill",
            FaultKind::Hang => "hang",
            FaultKind::Restart => "restart",
            FaultKind::DbRestart => "db-restart",
            FaultKind::DbKill => "db-kill",
            FaultKind::DbHostLoss => "db-host-loss",
            FaultKind::DbSwitchover => "db-switchover",
            FaultKind::EtcdKill => "etcd-kill",
            FaultKind::DbPartition => "db-partition",
            FaultKind::Slow => "slow",
            FaultKind::PartitionMove => "partition-move",
        })
    }
}

/// One injected fault: a row of `faults.csv`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FaultEvent {
    /// When it was injected, in seconds since the start of the run.
    pub time_s: f64,
    /// The same in microseconds (to line up with invocations.csv).
    pub at_us: u64,
    pub kind: FaultKind,
    /// The server's address, `database`, or the database member.
    pub target: String,
    /// Database faults of `--db ha`: from injection until a new primary
    /// first answered as primary to Patroni's REST API (empty where it does
    /// not apply, or no new primary was seen).
    pub promoted_ms: Option<f64>,
    /// Database faults of `--db ha`: from injection until the new primary
    /// committed a transaction (it is writable and a synchronous standby is
    /// attached): the database can take actions again. What follows, up to
    /// `recovered_ms`, is the servers' and clients' own share.
    pub committing_ms: Option<f64>,
    /// From injection until every client had a successful `Act` that it
    /// started after the injection (empty if some client never had one in
    /// the run): what the players felt.
    pub recovered_ms: Option<f64>,
    /// From injection until the cluster was whole again (replacement ready,
    /// server resumed, database or member back).
    pub restored_ms: f64,
    /// Empty, or why the fault could not be injected or recovered from.
    pub error: String,
    /// `partition-move`: how long the partition was read-only (no cluster
    /// took its games' writes) at the cut-over.
    pub read_only_ms: Option<f64>,
}

/// Fills each fault's `recovered_ms` from the clients' records: the time
/// from the injection until the last client had its first successful
/// commit back (an `Act`, or a `Join`: a client whose game ended in the outage
/// joins the next one and acts only once it starts, which waits for
/// players, not for the database) started after it — after the new
/// primary was named, for a fault that moves the primary: a planned
/// switchover leaves the old primary serving for a while after it is
/// asked for, and a call it served then says nothing about the failover.
/// Clients that made no call after that (the run ended) are not waited
/// for.
pub fn fill_recovery(faults: &mut [FaultEvent], records: &[Invocation]) {
    for fault in faults.iter_mut() {
        let from_us = fault.at_us + fault.promoted_ms.map_or(0, |ms| (ms * 1000.0) as u64);
        let mut first_ok: BTreeMap<u32, u64> = BTreeMap::new();
        let mut called: BTreeSet<u32> = BTreeSet::new();
        for r in records.iter().filter(|r| r.start_us >= from_us) {
            called.insert(r.client);
            if matches!(r.call, CallKind::Act | CallKind::Join) && r.is_ok() {
                let back = first_ok.entry(r.client).or_insert(u64::MAX);
                *back = (*back).min(r.end_us());
            }
        }
        fault.recovered_ms = (first_ok.len() == called.len() && !called.is_empty()).then(|| {
            let last = first_ok.values().max().copied().unwrap_or(fault.at_us);
            ((last - fault.at_us) as f64 / 1000.0 * 10.0).round() / 10.0
        });
    }
}

/// How long after a fault was restored its calls still count as its own
/// ([`FaultTail`]): games move back to a healed server, a replacement
/// takes its first calls.
pub const AFTER_RESTORED: Duration = Duration::from_secs(1);

/// The run's slowest call split by whether a fault can explain it: a
/// chaos run's maximum may come from a moment the machine stalled (the
/// floor's own maximum says how long those are) far from any fault, and
/// the faults' own tail is then hidden behind it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FaultTail {
    /// The slowest successful call started while a fault was in force,
    /// from its injection until [`AFTER_RESTORED`] after the cluster was
    /// whole again.
    pub in_faults_max_us: u64,
    pub in_faults_calls: u64,
    /// The slowest successful call started at any other time after the
    /// warm-up: the workload and the machine without a fault.
    pub elsewhere_max_us: u64,
    pub elsewhere_calls: u64,
}

/// A fault's window, in microseconds since the start of the run: from
/// its injection until [`AFTER_RESTORED`] after the cluster was whole
/// again.
fn window_us(f: &FaultEvent) -> (u64, u64) {
    let restored = Duration::from_secs_f64(f.restored_ms.max(0.0) / 1000.0);
    (
        f.at_us,
        f.at_us + (restored + AFTER_RESTORED).as_micros() as u64,
    )
}

impl FaultTail {
    pub fn new(faults: &[FaultEvent], records: &[Invocation]) -> FaultTail {
        let windows: Vec<(u64, u64)> = faults.iter().map(window_us).collect();
        let mut tail = FaultTail::default();
        for r in records.iter().filter(|r| !r.warmup && r.is_ok()) {
            let rtt = effective_rtt_us(r);
            if windows
                .iter()
                .any(|&(from, to)| (from..=to).contains(&r.start_us))
            {
                tail.in_faults_max_us = tail.in_faults_max_us.max(rtt);
                tail.in_faults_calls += 1;
            } else {
                tail.elsewhere_max_us = tail.elsewhere_max_us.max(rtt);
                tail.elsewhere_calls += 1;
            }
        }
        tail
    }
}

/// How many answered calls, their p99 and their slowest (µs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CallFigures {
    pub calls: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl CallFigures {
    fn of(rtts_us: impl IntoIterator<Item = u64>) -> CallFigures {
        let stats = rtt_stats(rtts_us);
        CallFigures {
            calls: stats.samples,
            p99_us: stats.p99,
            max_us: stats.max,
        }
    }

    /// `12 calls, p99 45.1 ms, max 60.2 ms`, or `no call`.
    pub fn line(&self) -> String {
        match self.calls {
            0 => "no call".into(),
            n => format!(
                "{n} calls, p99 {:.1} ms, max {:.1} ms",
                self.p99_us as f64 / 1000.0,
                self.max_us as f64 / 1000.0
            ),
        }
    }
}

/// One server fault's answered calls, split by where each was first sent.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FaultCalls {
    /// When it was injected, in seconds since the start of the run.
    pub time_s: f64,
    pub kind: FaultKind,
    /// The faulted server's address.
    pub target: String,
    /// Calls whose first attempt went to the faulted server: its games'
    /// players' calls, until their pools left it.
    pub to_faulted_server: CallFigures,
    /// Every other call in the fault's window, but those first sent to
    /// the server of another fault whose window they were in.
    pub to_other_servers: CallFigures,
}

/// A chaos run's server faults (not the database's), each fault's answered
/// calls split in two: those first sent to the faulted server, and the
/// rest. A call is a fault's when it was in flight at any moment of the
/// fault's window, from its injection until [`AFTER_RESTORED`] after the
/// cluster was whole again: a call sent just before a kill or a hang is
/// the one it catches. The first share is what the faulted server's
/// players felt, the second what its fault cost everyone else (copies
/// and failovers crowding the other servers). When two faults' windows
/// touch, a call first sent to either's server is in neither's rest.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FaultSplit {
    /// Over every server fault, each call once: the calls first sent to a
    /// server while it was the one faulted…
    pub to_faulted_server: CallFigures,
    /// …and the other calls in a server fault's window.
    pub to_other_servers: CallFigures,
    /// Each server fault's own split, in the order they came.
    pub faults: Vec<FaultCalls>,
}

impl FaultSplit {
    pub fn new(faults: &[FaultEvent], records: &[Invocation]) -> FaultSplit {
        let on_servers: Vec<(&FaultEvent, (u64, u64))> = faults
            .iter()
            .filter(|f| !f.kind.is_database())
            .map(|f| (f, window_us(f)))
            .collect();
        let in_flight =
            |r: &Invocation, (from, to): (u64, u64)| r.start_us <= to && r.end_us() >= from;
        // Each answered call in some server fault's window, and whether it
        // was first sent to the server of a fault it was in flight in
        // (windows can touch: a call sent to the next fault's server
        // while the last one's window lasts is the next one's, not the
        // rest of the last one's).
        let calls: Vec<(&Invocation, bool)> = records
            .iter()
            .filter(|r| !r.warmup && r.is_ok())
            .filter(|r| on_servers.iter().any(|(_, w)| in_flight(r, *w)))
            .map(|r| {
                let to_a_faulted = on_servers
                    .iter()
                    .any(|(f, w)| in_flight(r, *w) && r.first_server == f.target);
                (r, to_a_faulted)
            })
            .collect();
        let figures = |keep: &dyn Fn(&Invocation, bool) -> bool| {
            CallFigures::of(
                calls
                    .iter()
                    .filter(|(r, to_a_faulted)| keep(r, *to_a_faulted))
                    .map(|(r, _)| effective_rtt_us(r)),
            )
        };
        FaultSplit {
            to_faulted_server: figures(&|_, to_a_faulted| to_a_faulted),
            to_other_servers: figures(&|_, to_a_faulted| !to_a_faulted),
            faults: on_servers
                .iter()
                .map(|&(fault, window)| FaultCalls {
                    time_s: fault.time_s,
                    kind: fault.kind,
                    target: fault.target.clone(),
                    to_faulted_server: figures(&|r, _| {
                        in_flight(r, window) && r.first_server == fault.target
                    }),
                    to_other_servers: figures(&|r, to_a_faulted| {
                        in_flight(r, window) && !to_a_faulted
                    }),
                })
                .collect(),
        }
    }

    /// The summary's lines: the split over every server fault, then each
    /// fault's. None without a server fault.
    pub fn lines(&self) -> Vec<String> {
        if self.faults.is_empty() {
            return Vec::new();
        }
        let mut lines = vec![format!(
            "calls in a server fault's window (in flight from its injection to {} s after it \
             was whole again), by where each was first sent: to the faulted server {}; to \
             the others {}",
            AFTER_RESTORED.as_secs(),
            self.to_faulted_server.line(),
            self.to_other_servers.line(),
        )];
        lines.extend(self.faults.iter().map(|f| {
            format!(
                "  {} {} at {:.3} s: to it {}; to the others {}",
                f.kind,
                f.target,
                f.time_s,
                f.to_faulted_server.line(),
                f.to_other_servers.line(),
            )
        }));
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_kinds_parse_and_print_as_typed() {
        use clap::ValueEnum;
        for kind in FaultKind::ALL {
            let typed = kind.to_string();
            assert_eq!(FaultKind::from_str(&typed, false), Ok(kind));
        }
    }

    #[test]
    fn recovery_waits_for_every_clients_first_commit() {
        use crate::measure::record::tests::act;
        let mut fault = FaultEvent {
            time_s: 1.0,
            at_us: 1_000_000,
            kind: FaultKind::DbKill,
            target: "pg1".into(),
            promoted_ms: Some(100.0),
            committing_ms: Some(150.0),
            read_only_ms: None,
            recovered_ms: None,
            restored_ms: 9000.0,
            error: String::new(),
        };
        let mut failed = act(1, 1_100_000, 50_000);
        failed.status = "Unavailable".into();
        let records = vec![
            act(0, 900_000, 1_000),   // before the fault: ignored
            act(1, 1_050_000, 1_000), // before the new primary: ignored
            act(0, 1_200_000, 3_000), // client 0 back at 1.203 s
            failed,                   // client 1 fails first,
            act(1, 3_000_000, 4_000), // then is back at 3.004 s
        ];
        fill_recovery(std::slice::from_mut(&mut fault), &records);
        assert_eq!(fault.recovered_ms, Some(2004.0));
        // A client whose game ended joins the next: the join is its first
        // commit, and its first act waits for the new game to start.
        let mut between_games = records.clone();
        let mut join = act(1, 1_500_000, 20_000);
        join.call = CallKind::Join;
        between_games.push(join);
        fill_recovery(std::slice::from_mut(&mut fault), &between_games);
        assert_eq!(fault.recovered_ms, Some(520.0));
        // A client that never got an Act through: not recovered.
        let never = failed_only(&records);
        fill_recovery(std::slice::from_mut(&mut fault), &never);
        assert_eq!(fault.recovered_ms, None);
    }

    #[test]
    fn a_calls_tail_is_the_faults_only_while_it_lasts_and_a_second_after() {
        use crate::measure::record::tests::act;
        let fault = FaultEvent {
            time_s: 1.0,
            at_us: 1_000_000,
            kind: FaultKind::Slow,
            target: "127.0.0.1:1".into(),
            promoted_ms: None,
            committing_ms: None,
            read_only_ms: None,
            recovered_ms: Some(40.0),
            restored_ms: 500.0,
            error: String::new(),
        };
        let mut warmup = act(0, 100_000, 900_000);
        warmup.warmup = true;
        let mut failed = act(1, 1_100_000, 800_000);
        failed.status = "Unavailable".into();
        let records = vec![
            warmup,                    // the warm-up: neither
            act(0, 900_000, 9_000),    // before the fault
            act(0, 1_000_000, 20_000), // at its injection
            failed,                    // failed: neither
            act(1, 2_500_000, 7_000),  // a second after it was restored
            act(1, 2_500_001, 30_000), // and no longer
        ];
        let tail = FaultTail::new(std::slice::from_ref(&fault), &records);
        assert_eq!(
            tail,
            FaultTail {
                in_faults_max_us: 20_000,
                in_faults_calls: 2,
                elsewhere_max_us: 30_000,
                elsewhere_calls: 2,
            }
        );
        // Without faults every call is elsewhere.
        let none = FaultTail::new(&[], &records);
        assert_eq!((none.in_faults_calls, none.elsewhere_max_us), (0, 30_000));
    }

    #[test]
    fn a_server_faults_calls_are_split_by_the_server_they_were_first_sent_to() {
        use crate::measure::record::tests::act;
        let fault = |time_s: f64, kind, target: &str, restored_ms| FaultEvent {
            time_s,
            at_us: (time_s * 1e6) as u64,
            kind,
            target: target.into(),
            promoted_ms: None,
            committing_ms: None,
            recovered_ms: Some(40.0),
            restored_ms,
            error: String::new(),
            read_only_ms: None,
        };
        let faults = [
            // Window 1.0 s to 2.5 s.
            fault(1.0, FaultKind::Kill, "a", 500.0),
            // Not a server's: no split.
            fault(2.6, FaultKind::DbRestart, "database", 100.0),
            // Window 2.45 s to 3.55 s: it touches the first kill's.
            fault(2.45, FaultKind::Kill, "c", 100.0),
            // Window 4.0 s to 5.5 s.
            fault(4.0, FaultKind::Hang, "b", 500.0),
        ];
        let sent = |to: &str, client, start_us, rtt_us| Invocation {
            first_server: to.into(),
            ..act(client, start_us, rtt_us)
        };
        let mut warmup = sent("a", 0, 1_100_000, 900_000);
        warmup.warmup = true;
        let mut failed = sent("a", 1, 1_100_000, 800_000);
        failed.status = "Unavailable".into();
        let records = vec![
            // Sent to a before its kill, in flight at it, answered by b.
            Invocation {
                server: "b".into(),
                failed_over: true,
                ..sent("a", 0, 990_000, 60_000)
            },
            sent("b", 1, 1_200_000, 4_000),   // the kill's, elsewhere
            sent("a", 2, 1_000_000, 2_000),   // in flight at it, to a
            sent("b", 3, 980_000, 5_000),     // ended before it: neither
            sent("c", 3, 2_450_000, 90_000),  // the second kill's only
            sent("a", 0, 3_600_000, 3_000),   // after both windows: neither
            warmup,                           // neither
            failed,                           // neither
            sent("b", 1, 4_100_000, 300_000), // the hang's, to b
            sent("a", 2, 4_200_000, 7_000),   // the hang's, elsewhere
        ];
        let split = FaultSplit::new(&faults, &records);
        let figures = |calls, p99_us, max_us| CallFigures {
            calls,
            p99_us,
            max_us,
        };
        assert_eq!(split.faults.len(), 3, "the database's fault is not split");
        let (kill, other_kill, hang) = (&split.faults[0], &split.faults[1], &split.faults[2]);
        assert_eq!((kill.kind, kill.target.as_str()), (FaultKind::Kill, "a"));
        assert_eq!(kill.to_faulted_server, figures(2, 60_000, 60_000));
        assert_eq!(
            kill.to_other_servers,
            figures(1, 4_000, 4_000),
            "a call sent to the next fault's server is not this one's rest"
        );
        assert_eq!(other_kill.target, "c");
        assert_eq!(other_kill.to_faulted_server, figures(1, 90_000, 90_000));
        assert_eq!(other_kill.to_other_servers, figures(0, 0, 0));
        assert_eq!((hang.kind, hang.target.as_str()), (FaultKind::Hang, "b"));
        assert_eq!(hang.to_faulted_server, figures(1, 300_000, 300_000));
        assert_eq!(hang.to_other_servers, figures(1, 7_000, 7_000));
        assert_eq!(split.to_faulted_server.calls, 4);
        assert_eq!(split.to_faulted_server.max_us, 300_000);
        assert_eq!(split.to_other_servers.calls, 2);
        assert_eq!(split.to_other_servers.max_us, 7_000);
        let lines = split.lines();
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(
            lines[1].contains("kill a at 1.000 s: to it 2 calls"),
            "{lines:?}"
        );

        // Database faults only: nothing to split, nothing printed.
        let none = FaultSplit::new(&faults[1..2], &records);
        assert_eq!(none, FaultSplit::default());
        assert!(none.lines().is_empty());
    }

    fn failed_only(records: &[Invocation]) -> Vec<Invocation> {
        let mut all = records.to_vec();
        all.retain(|r| r.client == 0 || !r.is_ok());
        all
    }
}
