//! Gray failures in a short chaos run against a real local cluster
//! (PostgreSQL and three server processes, each reaching the database
//! through a proxy of the cluster's): 8 bots play while, four times in
//! about 15 s, a server is either cut off the database for 2 s (its clients
//! still reach it, and it answers "database unavailable") or answers every
//! game call 200 ms late for 2 s. Its health checks pass throughout. No
//! acknowledged action may be lost or applied twice, and every call must
//! succeed. (How single calls get around such a server, and how long they
//! take, is tested call by call in `gray.rs`: timings of a whole run say
//! more about the machine's load than about the pool.)

use std::path::Path;
use std::process::Command;

/// How long each fault lasts (`--partition-ms`, `--slow-for-ms`).
const FAULT_MS: u64 = 2000;

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn partitions_and_slow_servers_lose_and_duplicate_nothing() {
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_borbaman"))
        .args([
            "chaos",
            "--servers",
            "3",
            "--faults",
            "4",
            "--fault-interval-s",
            "3",
            "--fault",
            "db-partition,slow",
            "--partition-ms",
            &FAULT_MS.to_string(),
            "--slow-ms",
            "200",
            "--slow-for-ms",
            &FAULT_MS.to_string(),
            "--clients",
            "8",
            "--warmup-s",
            "2",
            "--tail-s",
            "1",
            "--floor-samples",
            "50",
            "--no-fsync",
            // A schedule with both kinds (kinds are drawn from this seed).
            "--seed",
            "749",
            "--out",
        ])
        .arg(out.path())
        // A database of its own, not whatever DATABASE_URL points at.
        .env_remove("DATABASE_URL")
        .output()
        .expect("runs borbaman chaos");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "chaos failed ({}):\n{stdout}\n{stderr}",
        output.status
    );

    let summary = read_json(&out.path().join("summary.json"));
    let n = |key: &str| {
        summary[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} in {summary}"))
    };
    assert_eq!(n("faults"), 4, "{stdout}");
    assert_eq!(n("lost_actions"), 0, "{stdout}");
    assert_eq!(n("duplicate_actions"), 0, "{stdout}");
    assert_eq!(n("state_regressions"), 0, "{stdout}");
    assert_eq!(n("errors"), 0, "every call eventually succeeded: {stdout}");
    assert!(n("invocations") > 100, "{stdout}");
    assert_eq!(summary["invariants_ok"], true, "{stdout}");

    // time_s,at_us,kind,target,promoted_ms,committing_ms,recovered_ms,restored_ms,error
    let faults = std::fs::read_to_string(out.path().join("faults.csv")).unwrap();
    let rows: Vec<Vec<String>> = faults
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), 4, "{faults}");
    for kind in ["db-partition", "slow"] {
        assert!(
            rows.iter().any(|r| r[2] == kind),
            "a {kind} fault in the schedule: {faults}"
        );
    }
    for row in &rows {
        assert!(row[3].starts_with("127.0.0.1:"), "a server: {faults}");
        let restored: f64 = row[7].parse().unwrap();
        assert!(
            restored >= FAULT_MS as f64,
            "healed after the fault's time: {faults}"
        );
        assert_eq!(row[8], "", "injected and healed: {faults}");
    }
}
