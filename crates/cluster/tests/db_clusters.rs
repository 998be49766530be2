//! A local cluster over several database clusters (`db_clusters`): each
//! is a PostgreSQL of its own that answers, and dropping the cluster stops
//! every one of them.

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::Command;

use borbaman_cluster::local::{ClusterConfig, ClusterError, Database, LocalCluster};

/// The machine's `psql` (PostgreSQL's own, else the one on `PATH`).
fn psql_binary() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin/psql"))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| PathBuf::from("psql"))
}

/// One query on `url`, its single value.
fn query(url: &str, sql: &str) -> String {
    let out = Command::new(psql_binary())
        .args([url, "-tAc", sql])
        .env_remove("PGPASSWORD")
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn port_of(url: &str) -> u16 {
    let after_host = url.rsplit_once(':').expect("host:port in the URL").1;
    after_host
        .split('/')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port in the URL")
}

#[test]
fn two_database_clusters_are_two_postgresqls_that_answer_and_stop() {
    let config = ClusterConfig {
        db_clusters: 2,
        ..ClusterConfig::temporary(0)
    };
    let cluster = LocalCluster::start(config, |_| {}).expect("start two database clusters");
    let urls = cluster.database_urls();
    assert_eq!(urls.len(), 2, "{urls:?}");
    assert_eq!(cluster.database_url(), urls[0], "home first");
    assert_ne!(port_of(&urls[0]), port_of(&urls[1]), "{urls:?}");
    // Each is a database of its own: a row written on one is not on the
    // other.
    query(
        &urls[1],
        "CREATE TABLE only_here (v int); INSERT INTO only_here VALUES (1)",
    );
    assert_eq!(query(&urls[1], "SELECT count(*) FROM only_here"), "1");
    assert_eq!(
        query(&urls[0], "SELECT to_regclass('only_here') IS NULL"),
        "t"
    );
    assert_eq!(cluster.database_pids().len(), 2, "a postmaster each");
    assert_eq!(cluster.database_logs().len(), 2);
    drop(cluster);
    for url in &urls {
        let port = port_of(url);
        assert!(
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok(),
            "{url} still listens after the drop"
        );
    }
}

#[test]
fn kept_database_clusters_live_beside_home_and_are_found_again() {
    let parent = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(
        parent.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let home = parent.path().join("postgres");
    let config = || ClusterConfig {
        database: Database::Persistent(home.clone()),
        db_clusters: 2,
        ..ClusterConfig::temporary(0)
    };
    let cluster = LocalCluster::start(config(), |_| {}).expect("start two kept clusters");
    query(
        &cluster.database_urls()[1],
        "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)",
    );
    drop(cluster);
    assert!(home.join("PG_VERSION").exists());
    assert!(parent.path().join("postgres-c1/PG_VERSION").exists());
    let cluster = LocalCluster::start(config(), |_| {}).expect("start them again");
    assert_eq!(
        query(&cluster.database_urls()[1], "SELECT v FROM kept"),
        "7"
    );
}

#[test]
fn no_database_cluster_or_several_on_a_given_database_are_refused() {
    let none = ClusterConfig {
        db_clusters: 0,
        ..ClusterConfig::temporary(0)
    };
    let err = LocalCluster::start(none, |_| {}).err().expect("refused");
    assert!(matches!(err, ClusterError::NoDatabaseCluster(0)), "{err}");
    let given = ClusterConfig {
        database: Database::Url("postgres://postgres@127.0.0.1:1/borbaman".into()),
        db_clusters: 2,
        ..ClusterConfig::temporary(0)
    };
    let err = LocalCluster::start(given, |_| {}).err().expect("refused");
    assert!(err.to_string().contains("DATABASE_URL"), "{err}");
}
