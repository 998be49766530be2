//! `borbaman play` keeps its local cluster whole: a server killed from a
//! shell (`kill -9`) is started again on its address, and clients that knew
//! it find it live again.

mod common;

use std::time::Duration;

use borbaman_client::pool::{PoolConfig, ServerPool};
use borbaman_cluster::wait;

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
    wait::until("the dead server revived", Duration::from_secs(5), || {
        let revived = common::blocking(|| cluster.revive_exited()).unwrap();
        async move { (revived == [0]).then_some(()) }
    })
    .await;
    assert!(cluster.is_running(0));
    assert_ne!(cluster.pids()[0], pid, "a new process");
    assert_eq!(cluster.addresses()[0], address, "on the old address");

    common::until_pool_sees(&pool, &address, true, Duration::from_secs(5)).await;
}
