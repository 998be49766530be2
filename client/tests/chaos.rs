//! A short chaos run against a real local cluster (PostgreSQL and three
//! server processes): 8 bots play while a server is SIGKILLed three times in
//! about 15 s. No acknowledged action may be lost or applied twice, and every
//! call must eventually succeed. Servers play 1-second rounds, so games
//! finish during the run, and every finished game must re-simulate from its
//! log to its stored state.

mod common;

use common::chaos;

#[test]
fn three_kills_lose_and_duplicate_nothing() {
    let run = chaos::run(
        "chaos",
        &[
            chaos::SHORT_RUN,
            &[
                "--servers",
                "3",
                "--faults",
                "3",
                "--fault-interval-s",
                "4",
                "--fault",
                "kill",
                "--server-arg=--round-ms=1000",
            ],
        ]
        .concat(),
    );
    let (stdout, summary) = (&run.stdout, &run.summary);
    run.assert_nothing_lost(3);
    assert_eq!(
        run.n("errors"),
        0,
        "every call eventually succeeded: {stdout}"
    );
    // 8 clients at 20 Hz for 13 measured seconds: about two thousand on a
    // quiet machine; the bound only checks that the clients played.
    assert!(run.n("invocations") > 100, "{stdout}");
    assert_eq!(summary["invariants_ok"], true, "{stdout}");
    // Every input the clients sent was applied, kills or not.
    let inputs = &summary["invariants"]["inputs"];
    assert!(inputs["sent"].as_u64().unwrap() > 50, "{stdout}");
    assert_eq!(inputs["applied"], inputs["sent"], "{stdout}");
    assert!(
        run.acknowledged() > 50,
        "the checker saw the actions: {summary}"
    );
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

    // Every call in the CSV, warm-up included, ended well: answered, or
    // (a join in the first burst on a busy machine) refused server-full
    // with a time to come back, which the client waited out.
    let csv = run.file("invocations.csv");
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert!(rows.len() as u64 >= run.n("invocations"));
    let ended_well = |row: &&str| row.contains(",ok,") || row.contains(",refused:server-full,");
    assert!(
        rows.iter().all(ended_well),
        "a call failed: {:?}",
        rows.iter().find(|row| !ended_well(row))
    );

    let (kills, faults) = run.faults();
    assert_eq!(kills.len(), 3, "{faults}");
    assert!(
        kills
            .iter()
            .all(|k| k[2] == "kill" && k[3].starts_with("127.0.0.1:") && k[8].is_empty()),
        "{faults}"
    );

    // The run's slowest call is either a fault's or not: the split by
    // fault covers every call the tail does, and the kills took calls.
    let split = &summary["fault_tail"];
    let in_faults = split["in_faults_max_us"].as_u64().unwrap();
    let elsewhere = split["elsewhere_max_us"].as_u64().unwrap();
    assert_eq!(
        in_faults.max(elsewhere),
        summary["tail"]["rtt_max_us"].as_u64().unwrap(),
        "{summary}"
    );
    assert!(split["in_faults_calls"].as_u64().unwrap() > 0, "{summary}");
    assert!(stdout.contains("tail by fault: RTT max"), "{stdout}");

    // Each kill's calls split by where they were first sent: a killed
    // server that had a game (calls first sent to it in the 200 ms before
    // the kill) has its players' calls in its share, the ones the kill
    // caught in flight or that went to it before their pool left it.
    let split = &summary["fault_split"];
    let each = split["faults"].as_array().expect("a split of each kill");
    assert_eq!(each.len(), kills.len(), "{split}");
    let sent_to = |row: &str| -> (u64, String) {
        let start_us = row.split(',').next().unwrap().parse().unwrap();
        let first_server = row.rsplit(',').next().unwrap().to_string();
        (start_us, first_server)
    };
    for (kill, split) in kills.iter().zip(each) {
        assert_eq!(split["kind"], "kill", "{split}");
        assert_eq!(split["target"].as_str(), Some(kill[3].as_str()), "{split}");
        let at_us: u64 = kill[1].parse().unwrap();
        let had_a_game = rows.iter().map(|row| sent_to(row)).any(|(start_us, to)| {
            to == kill[3] && (at_us.saturating_sub(200_000)..at_us).contains(&start_us)
        });
        let to_it = split["to_faulted_server"]["calls"].as_u64().unwrap();
        assert!(!had_a_game || to_it > 0, "{split}");
        assert!(
            split["to_other_servers"]["calls"].as_u64().unwrap() > 0,
            "{split}"
        );
    }
    let to_faulted = split["to_faulted_server"]["calls"].as_u64().unwrap();
    let by_kill: u64 = each
        .iter()
        .map(|s| s["to_faulted_server"]["calls"].as_u64().unwrap())
        .sum();
    assert!(
        to_faulted <= by_kill,
        "a call counts once over all kills: {split}"
    );
    assert!(
        stdout.contains("by where each was first sent: to the faulted server"),
        "{stdout}"
    );

    for chart in ["ecdf.svg", "rtt.svg"] {
        let svg = run.file(chart);
        assert!(svg.starts_with("<svg") && svg.len() > 1000, "{chart}");
    }
}
