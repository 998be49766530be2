//! Operating a cluster: a real Prometheus scrapes every server while bots
//! play, `promtool` accepts each server's `/metrics`, the game service's
//! health follows the database, and `borbaman status` sees a killed server
//! go.
//!
//! The Prometheus test needs Debian's `prometheus` package (prometheus and
//! promtool), which scripts/test and .ci/run install; without it the test
//! says so and passes as skipped.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use borbaman_client::pool::PoolConfig;
use borbaman_cluster::wait;
use common::http_get;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// `text` percent-encoded for a query string.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn on_path(binary: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(binary))
            .find(|p| p.is_file())
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// An instant vector: each series' labels and value.
type Samples = Vec<(serde_json::Value, f64)>;

/// A Prometheus process, killed by PID when dropped.
struct Prometheus {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` every second, with the
    /// project's rules loaded; returns once it is ready.
    fn start(binary: &Path, targets: &[String]) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus/rules.yml");
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: borbaman\n    static_configs:\n      - targets: [{}]\n",
            rules.display(),
            targets.join(", ")
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let prometheus = Prometheus {
            child,
            addr,
            _dir: dir,
        };
        let log = prometheus._dir.path().join("prometheus.log");
        let what = format!("prometheus ready (its log: {})", log.display());
        wait::until_blocking(&what, Duration::from_secs(30), || {
            http_get(&prometheus.addr, "/-/ready").ok()
        });
        prometheus
    }

    /// The instant vector `query` evaluates to: (labels, value) pairs.
    fn query(&self, query: &str) -> Samples {
        let body = http_get(
            &self.addr,
            &format!("/api/v1/query?query={}", encode(query)),
        )
        .unwrap_or_else(|e| panic!("query {query}: {e}"));
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(json["status"], "success", "{body}");
        json["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let value = r["value"][1].as_str().unwrap().parse::<f64>().unwrap();
                (r["metric"].clone(), value)
            })
            .collect()
    }

    /// Waits until `query` returns one series per instance of `instances`,
    /// each satisfying `ok` (each new answer short of it is printed).
    fn wait_per_instance(
        &self,
        what: &str,
        query: &str,
        instances: &[String],
        ok: impl Fn(f64) -> bool,
        within: Duration,
    ) -> Samples {
        let mut last = String::new();
        wait::until_blocking(what, within, || {
            let result = self.query(query);
            let all = instances.iter().all(|i| {
                result
                    .iter()
                    .any(|(labels, v)| labels["instance"] == i.as_str() && ok(*v))
            });
            let answer = format!("{result:?}");
            if !all && answer != last {
                eprintln!("{query}: {answer}");
                last = answer;
            }
            all.then_some(result)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_calls_and_latency_of_every_server_during_a_bot_game() {
    let (Some(prometheus), Some(promtool)) = (on_path("prometheus"), on_path("promtool")) else {
        eprintln!(
            "SKIPPED: Debian's prometheus package (prometheus, promtool) is not installed; \
             scripts/test installs it"
        );
        return;
    };
    let cluster = common::cluster_with(3, &["--round-ms=1000", "--metrics-listen=127.0.0.1:0"]);
    let targets: Vec<String> = cluster
        .metrics_addresses()
        .into_iter()
        .map(|a| a.expect("every server serves /metrics"))
        .collect();
    let prom = common::blocking(|| Prometheus::start(&prometheus, &targets));

    // A short bot game: 4 bots, one game, sudden death after a 1-second
    // round (the arena then closes a cell every 150 ms: some seconds of
    // play, each bot acting about 20 times a second).
    common::bot_game(
        &cluster.addresses(),
        PoolConfig::default(),
        "",
        Duration::from_secs(90),
        "the bots' game",
    )
    .await;

    // Every server counted calls (health checks and registry lists reach
    // each one; the game's calls go where the bots' pools sent them) and
    // filled its latency histogram; the game's calls are counted in all.
    let per_server = common::blocking(|| {
        prom.wait_per_instance(
            "calls counted on every server",
            "sum by (instance) (borbaman_calls_total)",
            &targets,
            |v| v > 0.0,
            Duration::from_secs(20),
        )
    });
    eprintln!("calls per server: {per_server:?}");
    common::blocking(|| {
        prom.wait_per_instance(
            "a filled histogram on every server",
            "sum by (instance) (borbaman_call_duration_seconds_bucket{le=\"5\"})",
            &targets,
            |v| v > 0.0,
            Duration::from_secs(20),
        )
    });
    // A bot acts about 20 times a second through a game of several
    // seconds.
    let acts = common::blocking(|| {
        wait::until_blocking("the game's acts counted", Duration::from_secs(20), || {
            let acts = prom.query(
                "sum(borbaman_calls_total{service=\"borbaman.v1.Game\",method=\"Act\",code=\"OK\"})",
            );
            let n = acts.first().map_or(0.0, |(_, v)| *v);
            (n >= 100.0).then_some(n)
        })
    });
    eprintln!("acts counted: {acts}");
    let p99 = prom.query(
        "histogram_quantile(0.99, sum by (le) (borbaman_call_duration_seconds_bucket{method=\"Act\"}))",
    );
    eprintln!("p99 of Act over the run: {p99:?}");
    assert!(
        p99.first().is_some_and(|(_, v)| *v > 0.0 && *v <= 5.0),
        "the Act histogram gives a p99 within its buckets: {p99:?}"
    );
    // The project's rules load and evaluate.
    let up = prom.query("up{job=\"borbaman\"}");
    assert_eq!(up.len(), 3, "{up:?}");

    // promtool accepts what every server exposes.
    for target in &targets {
        let text = http_get(target, "/metrics").unwrap();
        assert!(text.contains("borbaman_build_info{"), "{target}");
        let mut check = Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        check
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = check.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool check metrics refused {target}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

async fn health(addr: &str, service: &str) -> Option<ServingStatus> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .ok()?
        .connect()
        .await
        .ok()?;
    let mut client = HealthClient::new(channel);
    let reply = client
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .ok()?;
    ServingStatus::try_from(reply.into_inner().status).ok()
}

/// Polls the game service's health on `addr` until it is `want`.
async fn wait_health(addr: &str, want: ServingStatus, within: Duration) {
    let what = format!("the game service {want:?}");
    wait::until(&what, within, || async {
        (health(addr, "borbaman.v1.Game").await == Some(want)).then_some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_game_service_is_not_serving_while_the_database_is_down() {
    let mut cluster = common::cluster_with(1, &["--metrics-listen=127.0.0.1:0"]);
    let addr = cluster.addresses()[0].clone();
    let metrics = cluster.metrics_addresses()[0].clone().unwrap();
    wait_health(&addr, ServingStatus::Serving, Duration::from_secs(5)).await;

    common::blocking(|| cluster.stop_database()).unwrap();
    // Two failed heartbeats (250 ms apart, each up to the 500 ms database
    // deadline).
    wait_health(&addr, ServingStatus::NotServing, Duration::from_secs(10)).await;
    assert_eq!(
        health(&addr, "").await,
        Some(ServingStatus::Serving),
        "the process itself still serves: clients keep it"
    );
    let text = common::blocking(|| http_get(&metrics, "/metrics")).unwrap();
    assert!(
        text.contains("borbaman_database_writable 0"),
        "the metrics say so too"
    );

    common::blocking(|| cluster.start_database()).unwrap();
    wait_health(&addr, ServingStatus::Serving, Duration::from_secs(15)).await;
    let text = common::blocking(|| http_get(&metrics, "/metrics")).unwrap();
    assert!(text.contains("borbaman_database_writable 1"));
}

/// The operator token the status tests' servers are started with.
const OPERATOR_TOKEN: &str = "operate-test-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_three_servers_then_a_killed_one_gone() {
    let mut cluster = common::cluster_with(3, &[&format!("--operator-token={OPERATOR_TOKEN}")]);
    // As an operator would ask: every server named, so a dead one stays on
    // the screen (as gone) after the registry forgets it.
    let seed = cluster.addresses();
    let timeout = Duration::from_millis(400);
    let token: borbaman_server::status::OperatorToken = OPERATOR_TOKEN.parse().unwrap();
    let token = Some(&token);
    // Without the token, every server refuses to say.
    let refused = borbaman::status::look(&seed, None, None, timeout).await;
    assert_eq!(refused.live, 0, "{}", refused.render());
    assert!(
        refused.servers.iter().all(|s| s
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("PERMISSION_DENIED"))),
        "{}",
        refused.render()
    );
    // A server may miss the 400 ms on a machine busy starting other
    // tests' clusters: that look says so ("no answer"), the next one sees
    // it again.
    let screen = wait::until(
        "the 3 servers live on the screen",
        Duration::from_secs(10),
        || async {
            let started = Instant::now();
            let screen = borbaman::status::look(&seed, None, token, timeout).await;
            eprintln!("{} (in {:?})", screen.render(), started.elapsed());
            (screen.live == 3).then_some(screen)
        },
    )
    .await;
    assert!(screen.servers.iter().all(|s| s.reachable && s.listed));
    assert!(screen.games_waiting.is_some(), "the games were counted");
    // One database: one cluster, holding every partition, and no cluster
    // lines on the screen.
    let home = &screen.clusters;
    assert_eq!(home.len(), 1, "{home:?}");
    assert_eq!(
        (home[0].name.as_str(), home[0].partitions),
        ("home", 64),
        "{home:?}"
    );
    assert_eq!(
        home[0].primary.as_deref(),
        Some(host_port(&cluster.database_url()).as_str())
    );
    assert!(!screen.render().contains("CLUSTER"));

    let killed = cluster.addresses()[2].clone();
    common::blocking(|| cluster.kill(2)).unwrap();
    let killed_at = Instant::now();
    let what = format!("the killed server {killed} shown as gone");
    let screen = wait::until(&what, Duration::from_secs(10), || async {
        let screen = borbaman::status::look(&seed, None, token, timeout).await;
        let gone = screen
            .servers
            .iter()
            .find(|s| s.address == killed)
            .is_some_and(|s| !s.reachable && s.error.is_some());
        (gone && screen.live == 2).then_some(screen)
    })
    .await;
    eprintln!(
        "{}killed server gone after {:?}",
        screen.render(),
        killed_at.elapsed()
    );
}

/// `host:port` of a database URL, as status names a primary.
fn host_port(url: &str) -> String {
    let opts: sqlx::postgres::PgConnectOptions = url.parse().expect("a database URL");
    format!("{}:{}", opts.get_host(), opts.get_port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_each_database_clusters_primary_partitions_and_games() {
    let config = borbaman_cluster::local::ClusterConfig {
        db_clusters: 2,
        ..common::config(2, &[&format!("--operator-token={OPERATOR_TOKEN}")])
    };
    let cluster = borbaman_cluster::local::LocalCluster::start(config, |_| {})
        .expect("start servers over two database clusters");
    let urls = cluster.database_urls();
    let primaries: Vec<String> = urls.iter().map(|u| host_port(u)).collect();
    assert_ne!(primaries[0], primaries[1], "two PostgreSQLs");

    // A running game, on the cluster its partition names.
    let (_pool, players) = common::pool_and_game(&cluster, "census").await;
    let game_id = players[0].game_id();
    let home = common::database(&cluster).await;
    let holder: String =
        sqlx::query_scalar("SELECT cluster FROM partition_map WHERE partition = $1")
            .bind((game_id % 64) as i16)
            .fetch_one(&home)
            .await
            .unwrap();

    let seed = cluster.addresses();
    let token: borbaman_server::status::OperatorToken = OPERATOR_TOKEN.parse().unwrap();
    let timeout = Duration::from_millis(400);
    let screen = wait::until(
        &format!("both clusters on the screen, game {game_id} running on {holder}"),
        Duration::from_secs(10),
        || async {
            let screen = borbaman::status::look(&seed, None, Some(&token), timeout).await;
            let running = screen
                .clusters
                .iter()
                .find(|c| c.name == holder)
                .and_then(|c| c.games_running);
            (screen.live == 2 && running == Some(1)).then_some(screen)
        },
    )
    .await;
    let text = screen.render();
    eprintln!("{text}");
    let shown: Vec<(&str, Option<&str>, u32)> = screen
        .clusters
        .iter()
        .map(|c| (c.name.as_str(), c.primary.as_deref(), c.partitions))
        .collect();
    assert_eq!(
        shown,
        [
            ("home", Some(primaries[0].as_str()), 32),
            ("c1", Some(primaries[1].as_str()), 32)
        ],
        "{text}"
    );
    for c in &screen.clusters {
        let expected = if c.name == holder { 1 } else { 0 };
        assert_eq!(c.games_running, Some(expected), "{text}");
        assert_eq!(c.games_waiting, Some(0), "{text}");
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(c.name.as_str()))
            .unwrap_or_else(|| panic!("no line for cluster {}: {text}", c.name));
        assert!(line.contains(c.primary.as_deref().unwrap()), "{line}");
    }
    assert_eq!(screen.games_running, Some(1), "{text}");
    let json = serde_json::to_value(&screen).unwrap();
    assert_eq!(json["clusters"][1]["name"], "c1");
    assert_eq!(json["clusters"][1]["primary"], primaries[1].as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_asks_gets_the_calls_server_timing_back() {
    let cluster = common::cluster(1);
    let addr = cluster.addresses()[0].clone();
    let mut game = borbaman_proto::pb::game_client::GameClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let join = |name: &str| borbaman_proto::pb::JoinRequest {
        name: name.into(),
        ..Default::default()
    };
    let mut asked = tonic::Request::new(join("timed"));
    asked
        .metadata_mut()
        .insert("borbaman-timing", "1".parse().unwrap());
    let reply = game.join(asked).await.unwrap();
    let timing = reply
        .metadata()
        .get("borbaman-timing")
        .expect("the timing comes back when asked for")
        .to_str()
        .unwrap()
        .to_string();
    // gate=…;db=…;cas=…;cas_ms=…;total=…, and a join spends time in the
    // database, within the call's total.
    let fields: Vec<(&str, f64)> = timing
        .split(';')
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("key=value");
            (k, v.parse::<f64>().expect("a number"))
        })
        .collect();
    assert_eq!(
        fields.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        ["gate", "db", "cas", "cas_ms", "total"],
        "{timing}"
    );
    assert!(
        fields[1].1 > 0.0,
        "a join spends time in the database: {timing}"
    );
    assert!(
        fields[4].1 >= fields[1].1,
        "the database time is part of the call's total: {timing}"
    );

    let plain = game.join(join("untimed")).await.unwrap();
    assert!(
        plain.metadata().get("borbaman-timing").is_none(),
        "nothing is added unless asked for"
    );
}
