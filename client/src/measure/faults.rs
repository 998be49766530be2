//! What a chaos run injects: the kinds of fault, and the record of each
//! one (a row of `faults.csv`).

use std::fmt;

use serde::Serialize;

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    Kill,
    Hang,
    Restart,
    DbRestart,
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FaultKind::Kill => "kill",
            FaultKind::Hang => "hang",
            FaultKind::Restart => "restart",
            FaultKind::DbRestart => "db-restart",
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
    /// The server's address, or `database`.
    pub target: String,
    /// From injection until the cluster was whole again (replacement ready,
    /// server resumed, database back).
    pub recovered_ms: f64,
    /// Empty, or why the fault could not be injected or recovered from.
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_kinds_parse_and_print_as_typed() {
        use clap::ValueEnum;
        for kind in [
            FaultKind::Kill,
            FaultKind::Hang,
            FaultKind::Restart,
            FaultKind::DbRestart,
        ] {
            let typed = kind.to_string();
            assert_eq!(FaultKind::from_str(&typed, false), Ok(kind));
        }
    }
}
