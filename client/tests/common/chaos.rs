//! A `borbaman chaos` (or `bench`) run as the tests make it: the binary
//! under test on a database of its own, its summary and CSV files read
//! back, and the checks every chaos run must pass whatever its faults.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The short run both local chaos tests make around their faults: 8
/// clients, 2 s of warm-up, 1 s of calm after the last fault, 50 samples
/// of the idle floors, no fsync.
pub const SHORT_RUN: &[&str] = &[
    "--clients",
    "8",
    "--warmup-s",
    "2",
    "--tail-s",
    "1",
    "--floor-samples",
    "50",
    "--no-fsync",
];

/// A finished run: its output directory, stdout and `summary.json`.
pub struct ChaosRun {
    pub out: tempfile::TempDir,
    pub stdout: String,
    pub summary: Value,
}

/// Runs `borbaman chaos ARGS --out DIR` (never on DATABASE_URL) and fails
/// unless it succeeds; `what` names it in the failure.
pub fn run(what: &str, args: &[&str]) -> ChaosRun {
    measure("chaos", what, args)
}

/// Runs `borbaman bench ARGS --out DIR` as [`run`] runs `chaos`.
pub fn bench(what: &str, args: &[&str]) -> ChaosRun {
    measure("bench", what, args)
}

fn measure(command: &str, what: &str, args: &[&str]) -> ChaosRun {
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_borbaman"))
        .arg(command)
        .args(args)
        .arg("--out")
        .arg(out.path())
        // A database of its own, not whatever DATABASE_URL points at.
        .env_remove("DATABASE_URL")
        .output()
        .unwrap_or_else(|e| panic!("cannot run borbaman {command}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let summary = read_json(&out.path().join("summary.json"));
    ChaosRun {
        out,
        stdout,
        summary,
    }
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

impl ChaosRun {
    /// A whole number of the summary.
    pub fn n(&self, key: &str) -> u64 {
        self.summary[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} in {}", self.summary))
    }

    /// A file the run wrote.
    pub fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.out.path().join(name))
            .unwrap_or_else(|e| panic!("cannot read {name}: {e}"))
    }

    /// The rows of faults.csv (time_s, at_us, kind, target, promoted_ms,
    /// committing_ms, recovered_ms, restored_ms, error), and its text.
    pub fn faults(&self) -> (Vec<Vec<String>>, String) {
        let text = self.file("faults.csv");
        let rows = text
            .lines()
            .skip(1)
            .map(|l| l.split(',').map(str::to_string).collect())
            .collect();
        (rows, text)
    }

    /// What every run must show: `faults` faults injected, no acknowledged
    /// action lost or applied twice, no state seen going back, and the
    /// invariant checker content with what it read.
    pub fn assert_nothing_lost(&self, faults: u64) {
        let stdout = &self.stdout;
        assert_eq!(self.n("faults"), faults, "{stdout}");
        assert_eq!(self.n("lost_actions"), 0, "{stdout}");
        assert_eq!(self.n("duplicate_actions"), 0, "{stdout}");
        assert_eq!(self.n("state_regressions"), 0, "{stdout}");
        assert_eq!(self.summary["invariants_ok"], true, "{stdout}");
    }

    /// Actions the clients saw acknowledged, as the checker counted them.
    pub fn acknowledged(&self) -> u64 {
        self.summary["invariants"]["actions"]["acknowledged"]
            .as_u64()
            .unwrap()
    }
}
