//! The replicated database end to end: a local cluster on 3 etcd and 3
//! Patroni/PostgreSQL members with synchronous replication, 8 bots
//! playing, and two faults on one cluster: a planned switchover, then
//! (once the old primary is back as a standby) the primary's postmaster
//! SIGKILLed. The servers must follow each new primary by themselves (the
//! switchover learned from the watch on Patroni's leader key in etcd); no
//! acknowledged action may be lost or applied twice, every client must get
//! an action through after each fault, and the killed member must come
//! back as a standby.
//!
//! One run with both faults rather than a run per fault: starting and
//! stopping a replicated database costs more than either fault. The
//! switchover comes first, on a cluster that has been whole since it
//! started, as it would be in operation; a kill needs nothing of Patroni's
//! REST API, only a synchronous standby, which the restore after the
//! switchover waits for.

mod common;

use common::chaos;
use serde_json::Value;

/// The two faults under 8 bots after 2 s of warm-up (the first 1.5 s
/// after it), each as soon as the one before is over (its member back as
/// a standby, the cluster whole for 3 s: `borbaman chaos` waits for that
/// on the replicated database), then 1 s of calm after the kill is over.
/// The clients have got their actions through by then: the kill is over
/// only once the killed member is back as a standby, which comes after
/// the promotion (~3 s after a kill, more on a loaded machine) and after
/// the new primary's first commit, and every client's recovery is
/// counted from those. The run's end follows the faults, however long
/// they take, rather than a fixed time with room for the slowest; a
/// client still not through at the end fails the recovery count below.
fn switchover_then_kill() -> chaos::ChaosRun {
    chaos::run(
        "chaos --db ha --fault db-switchover,db-kill --faults-in-order",
        &[
            "--db",
            "ha",
            "--servers",
            "3",
            "--faults",
            "2",
            "--faults-in-order",
            "--fault-interval-s",
            "3",
            "--fault",
            "db-switchover,db-kill",
            "--clients",
            "8",
            "--warmup-s",
            "2",
            "--tail-s",
            "1",
            "--floor-samples",
            "50",
            "--no-fsync",
        ],
    )
}

/// A switchover, then a killed primary: nothing lost or applied twice,
/// every client through after each, the killed member back as a standby,
/// and each server moved off the first primary at the switchover, learned
/// from the etcd watch (its log says so).
#[test]
fn a_switchover_followed_from_etcd_then_a_killed_primary_lose_nothing() {
    let run = switchover_then_kill();
    let summary = &run.summary;
    run.assert_nothing_lost(2);
    assert!(
        run.acknowledged() > 100,
        "the checker saw the actions: {summary}"
    );
    assert_eq!(
        summary["recovery_ms"]["samples"], 2,
        "every client got an action through after the switchover and after the kill: {summary}"
    );

    let (rows, faults) = run.faults();
    assert_eq!(rows.len(), 2, "{faults}");
    let switchover = &rows[0];
    assert_eq!(switchover[2], "db-switchover", "{faults}");
    assert_eq!(switchover[8], "", "the switchover completed: {faults}");

    let kill = &rows[1];
    assert_eq!(kill[2], "db-kill", "{faults}");
    let promoted: f64 = kill[4].parse().expect("a new primary was seen");
    let committing: f64 = kill[5].parse().expect("the new primary committed");
    let recovered: f64 = kill[6].parse().expect("the clients recovered");
    assert!(promoted > 0.0 && committing >= promoted, "{faults}");
    assert!(recovered > 0.0, "{faults}");
    // Restoring waits until the killed member is back as a streaming
    // standby (one leader, two standbys, one synchronous): no error means
    // it came back.
    assert_eq!(kill[8], "", "the killed member came back: {faults}");

    // Each server moved off the primary Patroni named at its start, learned
    // from etcd. That member is primary from the start until the
    // switchover (the kill may make it primary again, but nothing moves
    // the primary after the kill), so every move away from it is the
    // switchover's.
    for server in 0..3 {
        let log = run.file(&format!("logs/server-{server}.log"));
        let lines: Vec<Value> = log
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        let field = |line: &Value, key: &str| line[key].as_str().unwrap_or_default().to_string();
        let first = lines
            .iter()
            .find(|l| field(l, "message") == "primary named by Patroni")
            .map(|l| field(l, "primary"))
            .unwrap_or_else(|| panic!("server {server} never had a primary named:\n{log}"));
        let switches: Vec<&Value> = lines
            .iter()
            .filter(|l| field(l, "message") == "following the new primary")
            .filter(|l| field(l, "from") == first)
            .collect();
        assert!(
            !switches.is_empty(),
            "server {server} never left {first} at the switchover ({}):\n{log}",
            switchover[3]
        );
        for line in switches {
            assert_eq!(
                field(line, "learned_from"),
                "etcd-watch",
                "server {server} learned the switchover's new primary from elsewhere: {line}"
            );
        }
    }
}
