//! A short `borbaman bench` against a local cluster writes the parts of its
//! report that explain a tail: every answered call attributed to its parts
//! (with the servers' own timing), the stall windows, and PostgreSQL's own
//! view (its log and statistics kept in `OUT/logs/`, the backends it
//! opened counted). The figures themselves are the benchmark's business;
//! this checks they are there and add up.

mod common;

use std::path::Path;

use common::chaos;

#[test]
fn a_bench_report_attributes_its_calls_and_keeps_postgres_view() {
    let run = chaos::bench(
        "bench",
        &[
            "--clients",
            "4",
            "--warmup-s",
            "1",
            "--duration-s",
            "3",
            "--floor-samples",
            "20",
        ],
    );
    let (summary, stdout) = (&run.summary, &run.stdout);

    // Every answered call, split into parts that add up to its RTT, with
    // the server's timing of each.
    let all = &summary["attribution"]["all"];
    let calls = all["calls"].as_u64().unwrap();
    assert!(calls > 20, "the clients played: {all}");
    assert_eq!(
        all["with_server_timing"], all["calls"],
        "every answer carried its server's timing: {all}"
    );
    let parts: f64 = all["parts_ms"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum();
    let rtt = all["rtt_ms"].as_f64().unwrap();
    assert!(
        (parts - rtt).abs() <= 0.01 * 9.0 + 1e-9,
        "the parts ({parts} ms) add up to the RTTs ({rtt} ms): {all}"
    );
    assert!(
        all["parts_ms"]["db"].as_f64().unwrap() > 0.0,
        "a game call spends time in the database: {all}"
    );
    assert!(
        summary["attribution"]["slow_threshold_us"]
            .as_u64()
            .unwrap()
            > 0,
        "{summary}"
    );
    // The same, per call, in the CSV.
    let csv = run.file("invocations.csv");
    let header = csv.lines().next().unwrap();
    for column in [
        "server_db_us",
        "server_gate_us",
        "server_total_us",
        "backoff_us",
    ] {
        assert!(header.contains(column), "{column} in {header}");
    }

    // The stall windows, whether or not this run had one.
    let windows = &summary["stall_windows"];
    let listed = windows["windows"].as_array().expect("a list of windows");
    assert_eq!(windows["count"].as_u64().unwrap(), listed.len() as u64);
    assert!(
        windows["slow_calls_in_windows"].as_u64() <= windows["slow_calls"].as_u64(),
        "{windows}"
    );
    for window in listed {
        assert!(window["games"].as_u64().unwrap() >= 2, "{window}");
        assert!(
            window["postgres"].is_object(),
            "the log beside it: {window}"
        );
        assert!(
            window["machine"]["io_pressure_ms"].is_f64(),
            "the machine beside it: {window}"
        );
    }

    // The machine's view: pressure read all along the run, kept whole.
    let machine = &summary["machine"];
    assert!(
        machine["readings"].as_u64().unwrap() > 100,
        "read every 10 ms over the run: {machine}"
    );
    let psi = Path::new("/proc/pressure/io").exists();
    assert_eq!(machine["psi"].as_bool(), Some(psi), "{machine}");
    let readings = run.file("logs/machine.csv");
    assert!(
        readings.starts_with("at_us,"),
        "{}",
        &readings[..readings.len().min(200)]
    );
    assert!(readings.lines().count() as u64 > machine["readings"].as_u64().unwrap());

    // PostgreSQL's view: the log and both readings kept, the run's
    // commits and backends counted.
    let log = run.file("logs/postgres.log");
    assert!(
        log.contains("connection authorized"),
        "connections are logged: {}",
        &log[..log.len().min(2000)]
    );
    for reading in ["pg_stat_before.json", "pg_stat_after.json"] {
        let stats: serde_json::Value =
            serde_json::from_str(&run.file(&format!("logs/{reading}"))).unwrap();
        assert!(stats["pg_stat_wal"].is_array(), "{reading}: {stats}");
        assert!(stats["pg_stat_bgwriter"].is_array(), "{reading}: {stats}");
    }
    let postgres = &summary["postgres"];
    assert!(
        postgres["commits"].as_u64().unwrap() > calls / 2,
        "the workload's commits are counted: {postgres}"
    );
    assert!(postgres["backends_opened"].is_u64(), "{postgres}");
    assert_eq!(postgres["log_files"][0], "postgres.log", "{postgres}");
    assert!(postgres["log"].is_object(), "{postgres}");

    for line in [
        "slow calls (over",
        "stall windows:",
        "postgres: ",
        "machine: ",
    ] {
        assert!(stdout.contains(line), "{line:?} printed:\n{stdout}");
    }
}
