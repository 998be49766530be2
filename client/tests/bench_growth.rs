//! `borbaman bench --grow-at-s`: a run that starts with every partition
//! on home and, mid-run, adds a second database cluster and rebalances,
//! as an operator would (`db add-cluster`, `db rebalance`). The moves
//! happen while the games play, every call is answered, the invariants
//! hold over both clusters, and the report lists every move and draws
//! the goodput with the moves marked. Slow for a test (~1.5 min in a
//! debug build): 32 partitions move one at a time, and each keeps its
//! source's copy 2 s before deleting it.

mod common;

use std::collections::BTreeSet;

use common::chaos;
use serde_json::Value;

#[test]
fn a_bench_that_grows_moves_half_the_partitions_to_the_new_cluster_without_an_error() {
    let run = chaos::bench(
        "a growing bench",
        &[
            "--db-clusters",
            "2",
            "--grow-at-s",
            "2",
            "--clients",
            "8",
            "--warmup-s",
            "1",
            "--duration-s",
            "4",
            "--floor-samples",
            "20",
        ],
    );
    let (summary, stdout) = (&run.summary, &run.stdout);
    let growth = &summary["growth"];
    assert!(growth.is_object(), "the summary has the growth: {summary}");
    assert_eq!(growth["error"], Value::Null, "{growth}");
    assert_eq!(growth["clusters_added"][0]["name"], "c1", "{growth}");

    // Home held all 64 partitions; half of them moved to c1, each once.
    let moves = growth["moves"].as_array().expect("a list of moves");
    assert_eq!(moves.len(), 32, "{growth}");
    let moved: BTreeSet<u64> = moves
        .iter()
        .map(|m| m["partition"].as_u64().unwrap())
        .collect();
    assert_eq!(moved.len(), 32, "no partition moved twice: {moved:?}");
    let grow_at_s = growth["grow_at_s"].as_f64().unwrap();
    let mut last_end_s = 0.0;
    for m in moves {
        assert_eq!(
            (&m["from"], &m["to"]),
            (&"home".into(), &"c1".into()),
            "{m}"
        );
        let (start_s, end_s) = (m["start_s"].as_f64().unwrap(), m["end_s"].as_f64().unwrap());
        assert!(
            start_s >= grow_at_s && start_s >= last_end_s && end_s > start_s,
            "one move at a time, after the growth was due: {m}"
        );
        last_end_s = end_s;
        let read_only_ms = m["read_only_ms"].as_f64().expect("its read-only time");
        assert!(read_only_ms > 0.0, "{m}");
    }

    // The games played through it: no call failed, none was refused,
    // and nothing was lost or applied twice over the two clusters.
    assert_eq!(growth["errors_during"], 0, "{growth}");
    assert_eq!(summary["errors"], 0, "{}", summary["errors_by_status"]);
    assert!(growth["calls_during"].as_u64().unwrap() > 100, "{growth}");
    assert!(
        growth["goodput_after_per_s"].as_f64().unwrap() > 0.0,
        "the games play on after the moves: {growth}"
    );
    assert_eq!(summary["invariants_ok"], true, "{}", summary["invariants"]);
    assert_eq!(summary["lost_actions"], 0);
    assert_eq!(summary["duplicate_actions"], 0);

    // The plot, and the moves in the printout.
    let svg = run.file("goodput.svg");
    assert!(
        svg.contains("32 partitions moved"),
        "{}",
        &svg[..svg.len().min(400)]
    );
    assert!(svg.contains("a partition moved (its end)"));
    assert!(
        stdout.contains("growth: 1 cluster(s) added") && stdout.contains("32 partitions moved"),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("  move: partition").count(),
        32,
        "every move printed: {stdout}"
    );
}
