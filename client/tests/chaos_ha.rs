//! The replicated database end to end: a local cluster on 3 etcd and 3
//! Patroni/PostgreSQL members with synchronous replication, 8 bots playing,
//! and the primary's postmaster SIGKILLed once. The servers must follow the
//! new primary by themselves; no acknowledged action may be lost or applied
//! twice, every client must get an action through after the failover, and
//! the killed member must come back as a standby.

mod common;

use common::chaos;

/// One `fault` under 8 bots on a replicated database, `interval_s` into
/// the run, then a calm tail: Patroni alone takes ~3 s to promote, more on
/// a loaded machine, and every client must get an action through before
/// the run ends.
fn one_fault(what: &str, fault: &str, interval_s: &str) -> chaos::ChaosRun {
    chaos::run(
        what,
        &[
            "--db",
            "ha",
            "--servers",
            "3",
            "--faults",
            "1",
            "--fault-interval-s",
            interval_s,
            "--fault",
            fault,
            "--clients",
            "8",
            "--warmup-s",
            "3",
            "--tail-s",
            "8",
            "--floor-samples",
            "50",
            "--no-fsync",
        ],
    )
}

#[test]
fn killing_the_primary_loses_and_duplicates_nothing() {
    let run = one_fault("chaos --db ha", "db-kill", "12");
    let summary = &run.summary;
    run.assert_nothing_lost(1);
    assert!(
        run.acknowledged() > 100,
        "the checker saw the actions: {summary}"
    );
    assert_eq!(
        summary["recovery_ms"]["samples"], 1,
        "every client got an action through after the failover: {summary}"
    );

    let (rows, faults) = run.faults();
    assert_eq!(rows.len(), 1, "{faults}");
    let row = &rows[0];
    assert_eq!(row[2], "db-kill", "{faults}");
    let promoted: f64 = row[4].parse().expect("a new primary was seen");
    let committing: f64 = row[5].parse().expect("the new primary committed");
    let recovered: f64 = row[6].parse().expect("the clients recovered");
    assert!(promoted > 0.0 && committing >= promoted, "{faults}");
    assert!(recovered > 0.0, "{faults}");
    // Restoring waits until the killed member is back as a streaming
    // standby (one leader, two standbys, one synchronous): no error means
    // it came back.
    assert_eq!(row[8], "", "the killed member came back: {faults}");
}

/// A planned switchover under 8 bots: the servers learn the new primary
/// from the watch on Patroni's leader key in etcd (their logs say so),
/// every client gets an action through after it, and nothing is lost or
/// applied twice.
#[test]
fn a_switchover_is_followed_from_the_etcd_watch_and_loses_nothing() {
    let run = one_fault("chaos --db ha --fault db-switchover", "db-switchover", "10");
    let summary = &run.summary;
    run.assert_nothing_lost(1);
    assert!(
        run.acknowledged() > 100,
        "the checker saw the actions: {summary}"
    );
    assert_eq!(
        summary["recovery_ms"]["samples"], 1,
        "every client got an action through after the switchover: {summary}"
    );
    let (rows, faults) = run.faults();
    assert_eq!(rows.len(), 1, "{faults}");
    assert_eq!(rows[0][2], "db-switchover", "{faults}");
    assert_eq!(rows[0][8], "", "the switchover completed: {faults}");

    // Each server moved to the new primary once, learned from etcd.
    for server in 0..3 {
        let log = run.file(&format!("logs/server-{server}.log"));
        let switches: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("following the new primary"))
            .collect();
        assert!(
            !switches.is_empty(),
            "server {server} never followed the new primary:\n{log}"
        );
        for line in switches {
            assert!(
                line.contains(r#""learned_from":"etcd-watch""#),
                "server {server} learned the new primary from elsewhere: {line}"
            );
        }
    }
}
