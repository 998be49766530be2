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

mod common;

use common::chaos;

/// How long each fault lasts (`--partition-ms`, `--slow-for-ms`).
const FAULT_MS: u64 = 2000;

#[test]
fn partitions_and_slow_servers_lose_and_duplicate_nothing() {
    let fault_ms = FAULT_MS.to_string();
    let run = chaos::run(
        "chaos",
        &[
            chaos::SHORT_RUN,
            &[
                "--servers",
                "3",
                "--faults",
                "4",
                "--fault-interval-s",
                "3",
                "--fault",
                "db-partition,slow",
                "--partition-ms",
                &fault_ms,
                "--slow-ms",
                "200",
                "--slow-for-ms",
                &fault_ms,
                // A schedule with both kinds (kinds are drawn from this seed).
                "--seed",
                "749",
            ],
        ]
        .concat(),
    );
    let stdout = &run.stdout;
    run.assert_nothing_lost(4);
    assert_eq!(
        run.n("errors"),
        0,
        "every call eventually succeeded: {stdout}"
    );
    assert!(run.n("invocations") > 100, "{stdout}");

    let (rows, faults) = run.faults();
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
