//! The replicated database end to end: a local cluster on 3 etcd and 3
//! Patroni/PostgreSQL members with synchronous replication, 8 bots playing,
//! and the primary's postmaster SIGKILLed once. The servers must follow the
//! new primary by themselves; no acknowledged action may be lost or applied
//! twice, every client must get an action through after the failover, and
//! the killed member must come back as a standby.

use std::path::Path;
use std::process::Command;

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn killing_the_primary_loses_and_duplicates_nothing() {
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_borbaman"))
        .args([
            "chaos",
            "--db",
            "ha",
            "--servers",
            "3",
            "--faults",
            "1",
            "--fault-interval-s",
            "12",
            "--fault",
            "db-kill",
            "--clients",
            "8",
            "--warmup-s",
            "3",
            // Calm after the fault: Patroni alone takes ~3 s to promote,
            // more on a loaded machine, and every client must get an action
            // through before the run ends.
            "--tail-s",
            "8",
            "--floor-samples",
            "50",
            "--no-fsync",
            "--out",
        ])
        .arg(out.path())
        .output()
        .expect("runs borbaman chaos");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "chaos --db ha failed ({}):\n{stdout}\n{stderr}",
        output.status
    );

    let summary = read_json(&out.path().join("summary.json"));
    let n = |key: &str| {
        summary[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} in {summary}"))
    };
    assert_eq!(n("faults"), 1, "{stdout}");
    assert_eq!(n("lost_actions"), 0, "{stdout}");
    assert_eq!(n("duplicate_actions"), 0, "{stdout}");
    assert_eq!(n("state_regressions"), 0, "{stdout}");
    assert_eq!(summary["invariants_ok"], true, "{stdout}");
    let acknowledged = summary["invariants"]["actions"]["acknowledged"]
        .as_u64()
        .unwrap();
    assert!(acknowledged > 100, "the checker saw the actions: {summary}");
    assert_eq!(
        summary["recovery_ms"]["samples"], 1,
        "every client got an action through after the failover: {summary}"
    );

    // time_s,at_us,kind,target,promoted_ms,committing_ms,recovered_ms,restored_ms,error
    let faults = std::fs::read_to_string(out.path().join("faults.csv")).unwrap();
    let rows: Vec<Vec<&str>> = faults
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
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
