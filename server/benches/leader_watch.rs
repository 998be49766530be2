//! How soon a server learns of a new Patroni leader from etcd: the time
//! from writing Patroni's leader key to the store's follower naming the
//! new primary, the part of a failover that is the server's own.
//!
//! Starts one real etcd (Debian's `etcd-server`) on free loopback ports,
//! writes two members' keys under a Patroni prefix as Patroni does, and
//! opens a store that follows that prefix (its Patroni REST members do not
//! answer, so only the etcd watch can name a leader). Then hands the
//! leader key from one member to the other `LEADER_WATCH_ROUNDS` times
//! (default 200) and prints the percentiles of put → named, beside those
//! of the put's own round trip (the floor: etcd committing the key).
//! Last, kills etcd (by PID), starts it again on the same data and hands
//! the key over once more: how long after etcd answers again the
//! follower, which must watch anew, names the leader.
//!
//! `cargo bench -p borbaman-server --bench leader_watch`

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use borbaman_server::store::{FollowOptions, LearnedFrom, Store, StoreOptions};
use etcd_client::Client;

const PREFIX: &str = "/bench/leader-watch/";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One etcd member, killed by PID when dropped; its data directory goes
/// with it.
struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
}

impl Etcd {
    fn start() -> Etcd {
        let dir =
            std::env::temp_dir().join(format!("borbaman-leader-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a data directory");
        let mut etcd = Etcd {
            child: None,
            dir,
            client_port: free_port(),
            peer_port: free_port(),
        };
        etcd.spawn();
        etcd
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn spawn(&mut self) {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.dir.join("etcd.log")).expect("a log file");
        let child = Command::new("etcd")
            .args(["--name", "bench"])
            .arg("--data-dir")
            .arg(data_dir(&self.dir))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("bench={peer}")])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd (Debian's etcd-server)");
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn data_dir(dir: &Path) -> PathBuf {
    dir.join("data")
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A member key as Patroni 3.0.2 writes it.
fn member_json(pg_port: u16, timeline: u64) -> String {
    format!(
        r#"{{"conn_url":"postgres://127.0.0.1:{pg_port}/postgres","api_url":"http://127.0.0.1:1/patroni","state":"running","role":"replica","version":"3.0.2","timeline":{timeline}}}"#
    )
}

/// A client of `url` once etcd answers there (within 20 s).
async fn answering(url: &str) -> Client {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let attempt = async {
            let mut client = Client::connect([url], None).await?;
            client.get("probe", None).await?;
            Ok::<_, etcd_client::Error>(client)
        };
        if let Ok(Ok(client)) = tokio::time::timeout(Duration::from_millis(500), attempt).await {
            return client;
        }
        assert!(Instant::now() < deadline, "etcd at {url} never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the store names the primary on `port`: when it did.
async fn named(store: &Store, port: u16) -> Instant {
    let mut primary = store.watch_primary().expect("following");
    let found = primary.wait_for(|p| p.as_ref().is_some_and(|p| p.address.port == port));
    let named = tokio::time::timeout(Duration::from_secs(10), found)
        .await
        .expect("the follower names the new leader within 10 s")
        .expect("the follower runs")
        .clone()
        .expect("a primary");
    assert_eq!(named.learned_from, LearnedFrom::EtcdWatch);
    Instant::now()
}

fn percentiles(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{name:<26} n={:<4} p50 {:>7.2} ms  p90 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms",
        samples.len(),
        ms(at(0.5)),
        ms(at(0.9)),
        ms(at(0.99)),
        ms(at(1.0)),
    );
}

fn main() {
    let rounds: usize = std::env::var("LEADER_WATCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let mut etcd = Etcd::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let url = etcd.url();
        let mut client = answering(&url).await;
        // Two members; nothing listens on their PostgreSQL ports: the
        // follower's pool points there and opens nothing.
        let ports = [free_port(), free_port()];
        for (i, port) in ports.iter().enumerate() {
            let key = format!("{PREFIX}members/pg{i}");
            client.put(key, member_json(*port, 1), None).await.unwrap();
        }
        client
            .put(format!("{PREFIX}leader"), "pg0", None)
            .await
            .unwrap();
        let follow = FollowOptions {
            etcd: vec![url.parse().unwrap()],
            etcd_prefix: PREFIX.to_string(),
            ..FollowOptions::new(vec!["http://127.0.0.1:1".parse().unwrap()])
        };
        let store = Store::connect(
            &format!("postgres://bench@127.0.0.1:{}/bench", ports[0]),
            &StoreOptions {
                min_connections: 0,
                follow: Some(follow),
                ..StoreOptions::default()
            },
        )
        .unwrap();
        named(&store, ports[0]).await;

        let mut learned = Vec::with_capacity(rounds);
        let mut committed = Vec::with_capacity(rounds);
        for round in 1..=rounds {
            let to = round % 2;
            let put_at = Instant::now();
            client
                .put(format!("{PREFIX}leader"), format!("pg{to}"), None)
                .await
                .unwrap();
            committed.push(put_at.elapsed());
            learned.push(named(&store, ports[to]).await - put_at);
        }
        percentiles("leader key put (etcd)", committed);
        percentiles("put -> follower named it", learned);

        // etcd restarts: the follower watches anew.
        etcd.kill();
        etcd.spawn();
        let mut client = answering(&url).await;
        let back = Instant::now();
        let to = (rounds + 1) % 2;
        client
            .put(format!("{PREFIX}leader"), format!("pg{to}"), None)
            .await
            .unwrap();
        let after = named(&store, ports[to]).await - back;
        println!(
            "etcd restarted: named {:.1} ms after etcd answered again",
            after.as_secs_f64() * 1e3
        );
        store.close().await;
    });
}
