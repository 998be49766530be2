//! `borbaman status --servers host:port`: the cluster on one screen.
//!
//! Asks the given servers' registries for the live servers, then every
//! server at once for its `Status` (uptime, calls/s, p99, database member,
//! refusals, and each database cluster's primary, partitions and games:
//! with several clusters, one line per cluster below the servers), each
//! with a short deadline, so the whole screen comes within
//! about two deadlines even when some servers are dead: a server the
//! registry still lists but that does not answer shows as `gone`. Needs no
//! database access, but the servers' operator token (`--operator-token`,
//! or `BORBAMAN_OPERATOR_TOKEN`): `Status` answers no one else. [`Screen`] holds what was learnt; [`Screen::render`]
//! and `--json` only read it.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use borbaman_proto::pb;
use borbaman_server::status::{AUTHORIZATION, OperatorToken};
use serde::Serialize;
use tokio::task::JoinSet;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::args::ServersArg;

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub servers: ServersArg,
    /// Print the screen as one JSON object instead.
    #[arg(long)]
    pub json: bool,
    /// Deadline of each registry and status call: a server that has not
    /// answered by then shows as gone.
    #[arg(long, default_value_t = 400)]
    pub timeout_ms: u64,
    /// The operator token the servers were started with (their
    /// --operator-token): `Status` answers no one else. Prefer the
    /// environment variable: a flag shows in the process list.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "BORBAMAN_OPERATOR_TOKEN",
        hide_env_values = true
    )]
    pub operator_token: Option<OperatorToken>,
}

/// One server as seen by `borbaman status`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServerRow {
    pub address: String,
    /// Registry id, when the registry or the server named it.
    pub id: Option<String>,
    /// Listed by a registry just now.
    pub listed: bool,
    /// Answered its status call.
    pub reachable: bool,
    /// Why not, when it did not.
    pub error: Option<String>,
    pub uptime_s: Option<f64>,
    pub calls_per_s: Option<f64>,
    pub p99_ms: Option<f64>,
    pub database_member: Option<String>,
    pub database_member_changes: Option<u64>,
    pub database_writable: Option<bool>,
    pub refusals_last_minute: Option<u64>,
    pub connections_open: Option<u32>,
    pub version: Option<String>,
}

/// One database cluster as `borbaman status` shows it, from what the
/// servers that answered said of it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClusterRow {
    /// `home`, or its name as `borbaman db clusters` lists it.
    pub name: String,
    /// `host:port` of its primary, as most of the servers that named one
    /// name it (Patroni's when they follow it, else the cluster's URL's).
    pub primary: Option<String>,
    /// How many partitions it holds.
    pub partitions: u32,
    /// Its games and seated players (`None` if no server could count them).
    pub games_waiting: Option<u32>,
    pub games_running: Option<u32>,
    pub players_seated: Option<u32>,
}

/// The whole cluster as `borbaman status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Screen {
    pub servers: Vec<ServerRow>,
    /// The database clusters the games are partitioned over, home first
    /// (one, home, when they all live in one database).
    pub clusters: Vec<ClusterRow>,
    /// The cluster's games and seated players (as the servers that
    /// answered counted them; `None` if none could).
    pub games_waiting: Option<u32>,
    pub games_running: Option<u32>,
    pub players_seated: Option<u32>,
    /// Refusals in the last minute, all reachable servers together.
    pub refusals_last_minute: u64,
    pub live: usize,
}

impl Screen {
    /// Puts together the addresses to show (the seeds and those any
    /// registry listed, with their ids) and the status answers.
    pub fn assemble(
        seeds: &[String],
        listed: &[pb::ServerInfo],
        answers: &BTreeMap<String, Result<pb::StatusReply, String>>,
    ) -> Screen {
        let mut rows: BTreeMap<String, ServerRow> = BTreeMap::new();
        let blank = |address: &str| ServerRow {
            address: address.to_string(),
            id: None,
            listed: false,
            reachable: false,
            error: None,
            uptime_s: None,
            calls_per_s: None,
            p99_ms: None,
            database_member: None,
            database_member_changes: None,
            database_writable: None,
            refusals_last_minute: None,
            connections_open: None,
            version: None,
        };
        for seed in seeds {
            rows.entry(seed.clone()).or_insert_with(|| blank(seed));
        }
        for server in listed {
            let row = rows
                .entry(server.address.clone())
                .or_insert_with(|| blank(&server.address));
            row.listed = true;
            row.id = Some(server.id.clone());
        }
        let mut screen = Screen::default();
        // Per cluster, in the order servers list them, and every primary
        // named for it with how many servers named it.
        let mut clusters: Vec<(ClusterRow, Vec<(String, usize)>)> = Vec::new();
        for (address, row) in rows.iter_mut() {
            match answers.get(address) {
                Some(Ok(reply)) => {
                    row.reachable = true;
                    row.id = Some(reply.server_id.clone());
                    row.uptime_s = Some(reply.uptime_ms as f64 / 1000.0);
                    row.calls_per_s = Some(reply.calls_per_s);
                    row.p99_ms = Some(reply.p99_ms);
                    row.database_member =
                        Some(reply.database_member.clone()).filter(|m| !m.is_empty());
                    row.database_member_changes = Some(reply.database_member_changes);
                    row.database_writable = Some(reply.database_writable);
                    row.refusals_last_minute = Some(reply.refusals_last_minute);
                    row.connections_open = Some(reply.connections_open);
                    row.version = Some(format!("{} ({})", reply.version, reply.commit));
                    screen.refusals_last_minute += reply.refusals_last_minute;
                    screen.live += 1;
                    // Every server counts the same database, a moment apart;
                    // any count beats none (`None` is the least Option).
                    screen.games_waiting = screen.games_waiting.max(reply.games_waiting);
                    screen.games_running = screen.games_running.max(reply.games_running);
                    screen.players_seated = screen.players_seated.max(reply.players_seated);
                    for said in &reply.clusters {
                        let at = match clusters.iter().position(|(c, _)| c.name == said.name) {
                            Some(at) => at,
                            None => {
                                clusters.push((
                                    ClusterRow {
                                        name: said.name.clone(),
                                        primary: None,
                                        partitions: said.partitions,
                                        games_waiting: None,
                                        games_running: None,
                                        players_seated: None,
                                    },
                                    Vec::new(),
                                ));
                                clusters.len() - 1
                            }
                        };
                        let (cluster, primaries) = &mut clusters[at];
                        cluster.games_waiting = cluster.games_waiting.max(said.games_waiting);
                        cluster.games_running = cluster.games_running.max(said.games_running);
                        cluster.players_seated = cluster.players_seated.max(said.players_seated);
                        if !said.primary.is_empty() {
                            match primaries.iter_mut().find(|(p, _)| *p == said.primary) {
                                Some((_, n)) => *n += 1,
                                None => primaries.push((said.primary.clone(), 1)),
                            }
                        }
                    }
                }
                Some(Err(err)) => row.error = Some(err.clone()),
                None => row.error = Some("not asked".into()),
            }
        }
        screen.servers = rows.into_values().collect();
        screen.clusters = clusters
            .into_iter()
            .map(|(mut cluster, primaries)| {
                cluster.primary = most_named(primaries);
                cluster
            })
            .collect();
        screen
    }

    /// The screen as text, one line per server.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{:<22} {:<8} {:>9} {:>8} {:>9} {:<22} {:>8}\n",
            "SERVER", "STATE", "UPTIME", "CALLS/S", "P99 MS", "DATABASE", "REFUSED"
        );
        for row in &self.servers {
            let state = match (row.reachable, row.database_writable) {
                (false, _) => "gone",
                (true, Some(false)) => "no-db",
                (true, _) => "live",
            };
            let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
            let member = match (&row.database_member, row.database_member_changes) {
                (Some(m), Some(n)) if n > 0 => format!("{m} ({n}×)"),
                (Some(m), _) => m.clone(),
                _ => "-".into(),
            };
            out += &format!(
                "{:<22} {:<8} {:>9} {:>8} {:>9} {:<22} {:>8}\n",
                row.address,
                state,
                opt(row.uptime_s.map(uptime)),
                opt(row.calls_per_s.map(|c| format!("{c:.1}"))),
                opt(row.p99_ms.filter(|p| *p > 0.0).map(|p| format!("{p:.2}"))),
                member,
                opt(row.refusals_last_minute.map(|r| r.to_string())),
            );
            if let Some(err) = row.error.as_ref().filter(|_| !row.reachable) {
                out += &format!("    {err}\n");
            }
        }
        let count = |n: Option<u32>| n.map_or("?".to_string(), |n| n.to_string());
        // One database: the summary line says it all.
        if self.clusters.len() > 1 {
            out += &format!(
                "\n{:<22} {:<22} {:>10} {:>8} {:>8} {:>8}\n",
                "CLUSTER", "PRIMARY", "PARTITIONS", "WAITING", "RUNNING", "SEATED"
            );
            for c in &self.clusters {
                out += &format!(
                    "{:<22} {:<22} {:>10} {:>8} {:>8} {:>8}\n",
                    c.name,
                    c.primary.as_deref().unwrap_or("unknown"),
                    c.partitions,
                    count(c.games_waiting),
                    count(c.games_running),
                    count(c.players_seated),
                );
            }
        }
        out += &format!(
            "\n{} of {} servers live · games: {} waiting, {} running · players seated: {} · \
             refused in the last minute: {}\n",
            self.live,
            self.servers.len(),
            count(self.games_waiting),
            count(self.games_running),
            count(self.players_seated),
            self.refusals_last_minute
        );
        out
    }
}

/// The primary most servers named (the first named of those tied): during
/// a failover servers learn of the new one a moment apart.
fn most_named(primaries: Vec<(String, usize)>) -> Option<String> {
    let most = primaries.iter().map(|(_, n)| *n).max()?;
    primaries
        .into_iter()
        .find(|(_, n)| *n == most)
        .map(|(p, _)| p)
}

/// `12s`, `5m03s`, `2h07m`.
fn uptime(s: f64) -> String {
    let s = s as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !args.servers.servers.is_empty(),
        "borbaman status needs a server to ask: give --servers host:port (or BORBAMAN_SERVERS)"
    );
    let tls = args.servers.pool_config()?.tls;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let timeout = Duration::from_millis(args.timeout_ms.max(1));
    if args.operator_token.is_none() {
        eprintln!(
            "borbaman status: no operator token (--operator-token or BORBAMAN_OPERATOR_TOKEN): \
             the servers will refuse to say their status"
        );
    }
    let screen = runtime.block_on(look(
        &args.servers.servers,
        tls,
        args.operator_token.as_ref(),
        timeout,
    ));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&screen)?);
    } else {
        print!("{}", screen.render());
    }
    Ok(())
}

/// Asks the seeds' registries, then every server's status with the
/// operator's `token`, each call within `timeout`.
pub async fn look(
    seeds: &[String],
    tls: Option<ClientTlsConfig>,
    token: Option<&OperatorToken>,
    timeout: Duration,
) -> Screen {
    let authorization = token.map(|t| {
        t.header_value()
            .parse::<tonic::metadata::MetadataValue<_>>()
            .expect("an operator token is printable ASCII")
    });
    let channel = |address: &str| channel(address, tls.clone(), timeout);
    let mut lists = JoinSet::new();
    for seed in seeds {
        let ch = channel(seed);
        lists.spawn(async move {
            let mut client = pb::registry_client::RegistryClient::new(ch.ok()?);
            let reply =
                tokio::time::timeout(timeout, client.list_servers(pb::ListServersRequest {}))
                    .await
                    .ok()?
                    .ok()?;
            Some(reply.into_inner().servers)
        });
    }
    let mut listed: Vec<pb::ServerInfo> = Vec::new();
    while let Some(joined) = lists.join_next().await {
        for server in joined.ok().flatten().unwrap_or_default() {
            if !listed.iter().any(|s| s.address == server.address) {
                listed.push(server);
            }
        }
    }
    let mut addresses: Vec<String> = seeds.to_vec();
    addresses.extend(listed.iter().map(|s| s.address.clone()));
    addresses.sort();
    addresses.dedup();
    let mut asks = JoinSet::new();
    for address in addresses {
        let ch = channel(&address);
        let mut request = tonic::Request::new(pb::StatusRequest {});
        if let Some(value) = authorization.clone() {
            request.metadata_mut().insert(AUTHORIZATION, value);
        }
        asks.spawn(async move {
            let answer = async {
                let mut client = pb::status_client::StatusClient::new(ch?);
                match tokio::time::timeout(timeout, client.get_status(request)).await {
                    Ok(Ok(reply)) => Ok(reply.into_inner()),
                    Ok(Err(status)) => Err(format!(
                        "{}: {}",
                        borbaman_server::metrics::calls::code_name(status.code()),
                        status.message()
                    )),
                    Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
                }
            };
            (address, answer.await)
        });
    }
    let mut answers = BTreeMap::new();
    while let Some(Ok((address, answer))) = asks.join_next().await {
        answers.insert(address, answer);
    }
    Screen::assemble(seeds, &listed, &answers)
}

/// A lazily connected channel to `address`.
fn channel(
    address: &str,
    tls: Option<ClientTlsConfig>,
    timeout: Duration,
) -> Result<Channel, String> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
        .map_err(|e| format!("bad address {address}: {e}"))?
        .connect_timeout(timeout)
        .tcp_nodelay(true);
    if let Some(tls) = tls {
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| format!("TLS for {address}: {e}"))?;
    }
    Ok(endpoint.connect_lazy())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(id: &str, member: &str, waiting: u32) -> pb::StatusReply {
        pb::StatusReply {
            server_id: id.into(),
            address: String::new(),
            version: "0.1.0".into(),
            commit: "abc".into(),
            uptime_ms: 125_000,
            calls_per_s: 80.5,
            p99_ms: 3.25,
            database_member: member.into(),
            database_member_changes: 1,
            database_writable: true,
            games_waiting: Some(waiting),
            games_running: Some(4),
            players_seated: Some(16),
            refusals_last_minute: 2,
            connections_open: 5,
            clusters: vec![cluster("home", "db:5432", waiting)],
        }
    }

    fn cluster(name: &str, primary: &str, waiting: u32) -> pb::ClusterStatus {
        pb::ClusterStatus {
            name: name.into(),
            primary: primary.into(),
            partitions: 64,
            games_waiting: Some(waiting),
            games_running: Some(4),
            players_seated: Some(16),
        }
    }

    #[test]
    fn a_listed_server_that_does_not_answer_is_gone() {
        let seeds = vec!["127.0.0.1:1".to_string()];
        let listed = vec![
            pb::ServerInfo {
                id: "a".into(),
                address: "127.0.0.1:1".into(),
                heartbeat_age_ms: 10,
            },
            pb::ServerInfo {
                id: "b".into(),
                address: "127.0.0.1:2".into(),
                heartbeat_age_ms: 900,
            },
        ];
        let mut answers = BTreeMap::new();
        answers.insert("127.0.0.1:1".to_string(), Ok(reply("a", "db:5432", 1)));
        answers.insert(
            "127.0.0.1:2".to_string(),
            Err("UNAVAILABLE: connection refused".to_string()),
        );
        let screen = Screen::assemble(&seeds, &listed, &answers);
        assert_eq!(screen.live, 1);
        assert_eq!(screen.servers.len(), 2);
        assert!(screen.servers[0].reachable);
        assert!(!screen.servers[1].reachable);
        assert_eq!(screen.games_waiting, Some(1));
        let text = screen.render();
        assert!(text.contains("127.0.0.1:2            gone"), "{text}");
        assert!(text.contains("db:5432 (1×)"), "{text}");
        assert!(text.contains("2m05s"), "{text}");
        assert!(text.contains("1 of 2 servers live"), "{text}");
        assert!(text.contains("refused in the last minute: 2"), "{text}");
    }

    #[test]
    fn one_database_adds_no_cluster_lines() {
        let mut answers = BTreeMap::new();
        answers.insert("x:1".to_string(), Ok(reply("x", "db:5432", 1)));
        let screen = Screen::assemble(&["x:1".into()], &[], &answers);
        assert_eq!(screen.clusters.len(), 1);
        assert_eq!(screen.clusters[0].primary.as_deref(), Some("db:5432"));
        assert!(!screen.render().contains("CLUSTER"), "{}", screen.render());
    }

    #[test]
    fn each_cluster_gets_a_line_with_the_primary_most_servers_name() {
        let two = |id: &str, c1_primary: &str, c1_waiting: u32| {
            let mut r = reply(id, "home-db:5432", 0);
            r.clusters = vec![
                pb::ClusterStatus {
                    partitions: 32,
                    ..cluster("home", "home-db:5432", 0)
                },
                pb::ClusterStatus {
                    partitions: 32,
                    games_running: None,
                    ..cluster("c1", c1_primary, c1_waiting)
                },
            ];
            r
        };
        let mut answers = BTreeMap::new();
        // Mid-failover: one server still names c1's old primary, two the
        // new one; and one has no primary for it yet.
        answers.insert("a:1".to_string(), Ok(two("a", "pg-old:5433", 2)));
        answers.insert("b:1".to_string(), Ok(two("b", "pg-new:5434", 1)));
        answers.insert("c:1".to_string(), Ok(two("c", "pg-new:5434", 1)));
        answers.insert("d:1".to_string(), Ok(two("d", "", 1)));
        let seeds: Vec<String> = answers.keys().cloned().collect();
        let screen = Screen::assemble(&seeds, &[], &answers);
        let names: Vec<&str> = screen.clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["home", "c1"], "home first");
        let c1 = &screen.clusters[1];
        assert_eq!(c1.primary.as_deref(), Some("pg-new:5434"));
        assert_eq!(c1.partitions, 32);
        assert_eq!(c1.games_waiting, Some(2), "the freshest count");
        assert_eq!(c1.games_running, None, "no server counted it");
        let text = screen.render();
        assert!(text.contains("CLUSTER"), "{text}");
        let line = text.lines().find(|l| l.starts_with("c1 ")).expect(&text);
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            fields,
            ["c1", "pg-new:5434", "32", "2", "?", "16"],
            "{text}"
        );
        assert_eq!(most_named(vec![]), None);
    }

    #[test]
    fn the_freshest_census_wins() {
        let mut answers = BTreeMap::new();
        answers.insert("x:1".to_string(), Ok(reply("x", "db:5432", 1)));
        let mut no_census = reply("y", "db:5432", 0);
        no_census.games_waiting = None;
        answers.insert("y:1".to_string(), Ok(no_census));
        let screen = Screen::assemble(&["x:1".into(), "y:1".into()], &[], &answers);
        assert_eq!(screen.games_waiting, Some(1));
        assert_eq!(screen.refusals_last_minute, 4);
    }
}
