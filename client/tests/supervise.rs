//! `borbaman play` keeps its local cluster whole: a server killed from a
//! shell (`kill -9`) is started again on its address, and clients that knew
//! it find it live again.

mod common;

use std::time::{Duration, Instant};

use borbaman_client::pool::{PoolConfig, ServerPool};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_from_outside_is_started_again_on_its_address() {
    let mut cluster = common::cluster(2);
    let pool = ServerPool::connect(&cluster.addresses(), PoolConfig::default())
        .await
        .unwrap();
    let address = cluster.addresses()[0].clone();
    let pid = cluster.pids()[0];
    assert!(
        common::blocking(|| cluster.revive_exited())
            .unwrap()
            .is_empty()
    );

    // SAFETY: kill(2) on a server process this test started.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let revived = common::blocking(|| cluster.revive_exited()).unwrap();
        if revived == [0] {
            break;
        }
        assert!(Instant::now() < deadline, "the dead server was not noticed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(cluster.is_running(0));
    assert_ne!(cluster.pids()[0], pid, "a new process");
    assert_eq!(cluster.addresses()[0], address, "on the old address");

    let deadline = Instant::now() + Duration::from_secs(5);
    while !pool.status().live.contains(&address) {
        assert!(Instant::now() < deadline, "{:?}", pool.status());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
