//! On the replicated database (3 etcd, 3 Patroni members): a server's
//! metrics and status name the member it writes to; losing one etcd
//! member moves nothing; and when Patroni switches over (from the primary,
//! to one of its synchronous standbys), the new primary and the change,
//! learned from the watch on Patroni's leader key in etcd.
//!
//! The etcd member lost and `LocalHa::switchover` are checked here rather
//! than among `ha`'s faults: the first is a watch of several seconds in
//! which nothing may happen, the second a restore of several seconds
//! after it (which `chaos_ha` checks), and here both are off the suite's
//! longest chain (`ha`, `chaos_ha`) on a cluster that is started anyway.

mod common;

use std::time::Duration;

use borbaman_cluster::ha::LEADER_LEASE_WORST;
use borbaman_cluster::local::{ClusterConfig, Database, LocalCluster};
use borbaman_cluster::wait;
use common::http_get;

/// The member `borbaman_database_member_info` names, and the changes
/// counted, from the text of `/metrics`.
fn member_and_changes(metrics: &str) -> (Option<String>, Option<u64>) {
    let member = metrics.lines().find_map(|l| {
        l.strip_prefix("borbaman_database_member_info{member=\"")
            .and_then(|rest| rest.split_once('"'))
            .map(|(m, _)| m.to_string())
    });
    let changes = metrics.lines().find_map(|l| {
        l.strip_prefix("borbaman_database_member_changes_total ")
            .and_then(|n| n.trim().parse().ok())
    });
    (member, changes)
}

/// Polls `/metrics` at `addr` until `ok` holds of its member and changes
/// (each other answer printed once).
fn wait_metrics(
    addr: &str,
    what: &str,
    ok: impl Fn(&Option<String>, &Option<u64>) -> bool,
) -> (String, u64) {
    let what = format!("{what} in /metrics");
    let mut last = None;
    wait::until_blocking(&what, Duration::from_secs(60), || {
        let now = member_and_changes(&http_get(addr, "/metrics").unwrap_or_default());
        let (member, changes) = &now;
        if ok(member, changes) {
            return Some((
                member.clone().unwrap_or_default(),
                changes.unwrap_or_default(),
            ));
        }
        if last.as_ref() != Some(&now) {
            eprintln!("{addr}/metrics: member {member:?}, changes {changes:?}");
            last = Some(now);
        }
        None
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_an_etcd_member_moves_nothing_and_the_metrics_follow_a_switchover() {
    let config = ClusterConfig {
        database: Database::Replicated,
        ..common::config(
            1,
            &[
                "--metrics-listen=127.0.0.1:0",
                "--operator-token=operate-ha-test-0123456789",
            ],
        )
    };
    let mut cluster = common::blocking(|| LocalCluster::start(config, |_| {})).expect("a cluster");
    let metrics = cluster.metrics_addresses()[0].clone().expect("/metrics");
    let (first, changes) = common::blocking(|| {
        wait_metrics(&metrics, "the primary", |m, c| m.is_some() && c.is_some())
    });
    assert_eq!(changes, 0, "no change yet");

    // One etcd member down: the other two keep a quorum, nothing fails
    // over. A lost quorum would show only once the leader lease ran out:
    // watch for a new primary longer than that.
    common::blocking(|| {
        let ha = cluster.replicated_mut().expect("replicated");
        let leader = ha.primary().expect("a primary");
        ha.kill_etcd(0).expect("etcd0 killed");
        let watch = LEADER_LEASE_WORST + Duration::from_secs(1);
        if let Some((moved, _)) = ha.wait_for_new_primary(leader, watch) {
            panic!(
                "losing one etcd member moved the leader from pg{leader} to pg{moved}; \
                 members {:?}",
                ha.members()
            );
        }
        assert_eq!(
            ha.primary(),
            Some(leader),
            "losing one etcd member moved the leader"
        );
        ha.restore().expect("etcd0 back");
    });
    let (member, changes) = member_and_changes(&http_get(&metrics, "/metrics").unwrap_or_default());
    assert_eq!(
        (member.as_deref(), changes),
        (Some(first.as_str()), Some(0)),
        "the server saw its primary change while one etcd member was down"
    );

    let ha = cluster.replicated().expect("replicated");
    let member = |i: usize| format!("127.0.0.1:{}", ha.pg_ports()[i]);
    let switch = common::blocking(|| ha.switchover()).expect("a switchover");
    assert_eq!(
        member(switch.from),
        first,
        "the switchover starts from the primary the server writes to"
    );
    let (now, changes) = common::blocking(|| {
        wait_metrics(&metrics, "the new primary", |m, c| {
            m.as_deref().is_some_and(|m| m != first) && c.is_some_and(|c| c >= 1)
        })
    });
    eprintln!("member {first} -> {now}, changes {changes}");
    // The new primary is one of the synchronous standbys Patroni had when
    // asked (`LocalHa::switchover` names no candidate; both race).
    assert!(
        switch.candidates.iter().any(|&c| member(c) == now),
        "{now} took over, not one of the synchronous standbys {:?} ({:?})",
        switch.candidates,
        switch
            .candidates
            .iter()
            .map(|&c| member(c))
            .collect::<Vec<_>>()
    );
    // Learned from the watch on Patroni's leader key, not a REST probe.
    let text = http_get(&metrics, "/metrics").unwrap_or_default();
    let learned = |from: &str| {
        text.lines().find_map(|l| {
            l.strip_prefix(&format!(
                "borbaman_database_leader_learned_total{{from=\"{from}\"}} "
            ))
            .and_then(|n| n.trim().parse::<u64>().ok())
        })
    };
    assert!(
        learned("etcd-watch").is_some_and(|n| n >= 1),
        "the new primary was not learned from etcd's watch:\n{text}"
    );

    // borbaman status says the same.
    let token: borbaman_server::status::OperatorToken =
        "operate-ha-test-0123456789".parse().unwrap();
    let screen = borbaman::status::look(
        &cluster.addresses(),
        None,
        Some(&token),
        Duration::from_millis(400),
    )
    .await;
    let row = &screen.servers[0];
    assert_eq!(
        row.database_member.as_deref(),
        Some(now.as_str()),
        "{}",
        screen.render()
    );
    assert!(
        row.database_member_changes >= Some(1),
        "{}",
        screen.render()
    );
    // Its database cluster's line names the primary Patroni named, as the
    // follower learned it, not the database URL's guess.
    let clusters: Vec<(&str, Option<&str>)> = screen
        .clusters
        .iter()
        .map(|c| (c.name.as_str(), c.primary.as_deref()))
        .collect();
    assert_eq!(
        clusters,
        [("home", Some(now.as_str()))],
        "{}",
        screen.render()
    );
}
