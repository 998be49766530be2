//! Ctrl-C or SIGTERM in the middle of `borbaman bench` or `borbaman chaos`
//! stops the run and everything it started: the local cluster's servers and
//! its PostgreSQL (which `pg_ctl` detaches, so it would otherwise outlive
//! the run), whose port is then free again.

use borbaman_cluster::wait;
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// What the run said it started: `local cluster: database URL (pid …);
/// servers ADDR … (pid …)`.
struct Started {
    database_port: u16,
    pids: Vec<u32>,
}

fn parse_started(line: &str) -> Option<Started> {
    let rest = line.strip_prefix("local cluster: database ")?;
    let port = rest
        .split("127.0.0.1:")
        .nth(1)?
        .split('/')
        .next()?
        .parse()
        .ok()?;
    let pids = rest
        .split("(pid ")
        .skip(1)
        .flat_map(|part| part.split(')').next().unwrap_or("").split_whitespace())
        .map(|pid| pid.parse().expect("a pid is a number"))
        .collect();
    Some(Started {
        database_port: port,
        pids,
    })
}

/// Alive: in `/proc` and not a zombie (an orphan's parent may not reap it).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z"),
        Err(_) => false,
    }
}

/// Starts `borbaman ARGS --out TMP`, reads its stderr until the cluster is
/// up, sends SIGTERM, and checks that the run ended with an error that
/// says so and left nothing of its cluster running.
fn stopped_by_sigterm(args: &[&str]) {
    let out = tempfile::tempdir().unwrap();
    let mut child: Child = Command::new(env!("CARGO_BIN_EXE_borbaman"))
        .args(args)
        .arg("--out")
        .arg(out.path())
        // A database of its own, not whatever DATABASE_URL points at.
        .env_remove("DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts borbaman");
    let stderr = child.stderr.take().unwrap();
    let (lines, incoming) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut said = Vec::new();
    let started = loop {
        match incoming.recv_timeout(Duration::from_secs(120)) {
            Ok(line) => {
                if let Some(started) = parse_started(&line) {
                    said.push(line);
                    break started;
                }
                said.push(line);
            }
            Err(_) => {
                let _ = child.kill();
                panic!("no cluster line within 120 s:\n{}", said.join("\n"));
            }
        }
    };
    assert!(
        started.pids.len() >= 3,
        "the database's and the servers' PIDs: {said:?}"
    );
    assert!(
        started.pids.iter().all(|&pid| alive(pid)),
        "the cluster runs before the signal: {said:?}"
    );
    assert!(TcpStream::connect(("127.0.0.1", started.database_port)).is_ok());

    // The run is under way (floors, warm-up): stop it.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let exited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let what = "borbaman bench to exit after SIGTERM";
        wait::until_blocking(what, Duration::from_secs(60), || child.try_wait().unwrap())
    }));
    // Still running: killed, so that it does not outlive the test.
    let status = exited.unwrap_or_else(|panic| {
        let _ = child.kill();
        std::panic::resume_unwind(panic)
    });
    while let Ok(line) = incoming.recv_timeout(Duration::from_secs(5)) {
        said.push(line);
    }
    let said = said.join("\n");
    assert!(
        !status.success(),
        "an interrupted run is no success:\n{said}"
    );
    assert!(said.contains("interrupted by a signal"), "{said}");
    let left: Vec<u32> = started.pids.into_iter().filter(|&pid| alive(pid)).collect();
    assert!(
        left.is_empty(),
        "processes of the cluster still running after the run ended: {left:?}\n{said}"
    );
    assert!(
        TcpStream::connect(("127.0.0.1", started.database_port)).is_err(),
        "the database's port still answers:\n{said}"
    );
}

#[test]
fn a_bench_stopped_by_sigterm_stops_its_servers_and_database() {
    stopped_by_sigterm(&[
        "bench",
        "--clients",
        "4",
        "--duration-s",
        "120",
        "--floor-samples",
        "20",
    ]);
}

#[test]
fn a_chaos_run_stopped_by_sigterm_stops_its_servers_and_database() {
    stopped_by_sigterm(&[
        "chaos",
        "--fault",
        "kill",
        "--faults",
        "8",
        "--clients",
        "4",
        "--floor-samples",
        "20",
    ]);
}
