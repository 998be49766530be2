//! A short chaos run against a real local cluster (PostgreSQL and three
//! server processes): 8 bots play while a server is SIGKILLed three times in
//! about 15 s. No acknowledged action may be lost or applied twice, and every
//! call must eventually succeed. Servers play 1-second rounds, so games
//! finish during the run, and every finished game must re-simulate from its
//! log to its stored state.

use std::path::Path;
use std::process::Command;

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn three_kills_lose_and_duplicate_nothing() {
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_borbaman"))
        .args([
            "chaos",
            "--servers",
            "3",
            "--faults",
            "3",
            "--fault-interval-s",
            "4",
            "--fault",
            "kill",
            "--clients",
            "8",
            "--warmup-s",
            "2",
            "--tail-s",
            "1",
            "--floor-samples",
            "50",
            "--no-fsync",
            "--server-arg=--round-ms=1000",
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
    assert_eq!(n("faults"), 3, "{stdout}");
    assert_eq!(n("lost_actions"), 0, "{stdout}");
    assert_eq!(n("duplicate_actions"), 0, "{stdout}");
    assert_eq!(n("state_regressions"), 0, "{stdout}");
    assert_eq!(n("errors"), 0, "every call eventually succeeded: {stdout}");
    // 8 clients at 20 Hz for 13 measured seconds: about two thousand on a
    // quiet machine; the bound only checks that the clients played.
    assert!(n("invocations") > 100, "{stdout}");
    assert_eq!(summary["invariants_ok"], true, "{stdout}");
    // Every input the clients sent was applied, kills or not.
    let inputs = &summary["invariants"]["inputs"];
    assert!(inputs["sent"].as_u64().unwrap() > 50, "{stdout}");
    assert_eq!(inputs["applied"], inputs["sent"], "{stdout}");
    let acknowledged = summary["invariants"]["actions"]["acknowledged"]
        .as_u64()
        .unwrap();
    assert!(acknowledged > 50, "the checker saw the actions: {summary}");
    let replays = &summary["invariants"];
    assert!(
        replays["replays_checked"].as_u64().unwrap() > 0,
        "games finished during the kills and were re-simulated: {stdout}"
    );
    assert_eq!(
        replays["replays_differing"].as_array().unwrap().len(),
        0,
        "{stdout}"
    );
    assert_eq!(replays["replays_not_logged"], 0, "{stdout}");

    // Every call in the CSV, warm-up included, ended well.
    let csv = std::fs::read_to_string(out.path().join("invocations.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert!(rows.len() as u64 >= n("invocations"));
    assert!(
        rows.iter().all(|row| row.contains(",ok,")),
        "a call failed: {:?}",
        rows.iter().find(|row| !row.contains(",ok,"))
    );

    let faults = std::fs::read_to_string(out.path().join("faults.csv")).unwrap();
    let kills: Vec<&str> = faults.lines().skip(1).collect();
    assert_eq!(kills.len(), 3, "{faults}");
    assert!(
        kills
            .iter()
            .all(|k| k.contains(",kill,127.0.0.1:") && k.ends_with(',')),
        "{faults}"
    );

    for chart in ["ecdf.svg", "rtt.svg"] {
        let svg = std::fs::read_to_string(out.path().join(chart)).unwrap();
        assert!(svg.starts_with("<svg") && svg.len() > 1000, "{chart}");
    }
}
