//! Command-line pieces shared by several subcommands.

use std::path::PathBuf;

use anyhow::Context;
use borbaman_client::pool::PoolConfig;
use borbaman_cluster::{WanMix, WanSpec};
use tonic::transport::{Certificate, ClientTlsConfig};

/// A `--servers` entry: `host:port`, as a server's ready line prints it.
pub fn server_address(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.contains("://") {
        return Err("write host:port without a scheme, e.g. 127.0.0.1:50051".into());
    }
    let (host, port) = text
        .rsplit_once(':')
        .ok_or("expected host:port, e.g. 127.0.0.1:50051")?;
    let host_ok = !host.is_empty() && !host.contains(|c: char| c.is_whitespace() || c == '/');
    if !host_ok {
        return Err(format!("{host:?} is not a host name or IP address"));
    }
    match port.parse::<u16>() {
        Ok(port) if port > 0 => Ok(text.to_string()),
        _ => Err(format!("{port:?} is not a port number (1-65535)")),
    }
}

/// A `--map` name: one of the arenas' (an unknown one is refused with the
/// list of valid names).
pub fn map_name(text: &str) -> Result<String, String> {
    borbaman_game::Arena::from_name(text)
        .map(|arena| arena.name().to_string())
        .map_err(|e| e.to_string())
}

/// `--servers host:port,…` (or `BORBAMAN_SERVERS`): the servers to
/// bootstrap from; any live one will do, the others are found through it.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ServersArg {
    /// Servers to bootstrap from (any live one will do), comma-separated
    /// host:port. Without it, a local cluster is started.
    #[arg(long, value_delimiter = ',', env = "BORBAMAN_SERVERS", value_parser = server_address)]
    pub servers: Vec<String>,
    /// Speak TLS to the --servers and trust the CA in this PEM file (the
    /// servers run with --tls-cert). Without it, plaintext. `play` starts
    /// its local cluster in plaintext and ignores it there.
    #[arg(long, env = "BORBAMAN_TLS_CA", value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
}

impl ServersArg {
    /// How this client's pools reach the servers: TLS with `--tls-ca`.
    pub fn pool_config(&self) -> anyhow::Result<PoolConfig> {
        let tls = match &self.tls_ca {
            Some(path) => {
                let pem = std::fs::read(path)
                    .with_context(|| format!("cannot read the TLS CA {}", path.display()))?;
                Some(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
            }
            None => None,
        };
        Ok(PoolConfig {
            tls,
            ..PoolConfig::default()
        })
    }
}

/// Which database a local cluster runs on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DbKind {
    /// One private PostgreSQL.
    #[default]
    Single,
    /// A replicated PostgreSQL: 3 etcd and 3 Patroni members with
    /// synchronous replication (Debian's patroni, etcd-server and
    /// etcd-client packages); the servers follow its primary.
    Ha,
}

/// `--db single|ha` and `--db-clusters N`.
#[derive(Clone, Debug, clap::Args)]
pub struct DbArg {
    /// The local cluster's database: `single` (one PostgreSQL) or `ha`
    /// (3 etcd + 3 Patroni members, synchronous replication, survives the
    /// loss of its primary).
    #[arg(long, value_enum, default_value_t = DbKind::Single)]
    pub db: DbKind,
    /// Partition the games over N database clusters of the local cluster
    /// (each one what --db says: a PostgreSQL, or a group of 3 Patroni
    /// members sharing one etcd). Cluster 0 is home (names, rankings, the
    /// lobby, the partition map) and holds games too; the 64 partitions
    /// are spread evenly, a game going to cluster `partition % N`. See
    /// docs/scaling.md.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = db_clusters)]
    pub db_clusters: usize,
}

impl Default for DbArg {
    fn default() -> Self {
        DbArg {
            db: DbKind::Single,
            db_clusters: 1,
        }
    }
}

/// The most database clusters a local cluster starts: one per partition
/// at most would do, but each is a PostgreSQL (or three) on this machine.
pub const MAX_DB_CLUSTERS: usize = 16;

/// A `--db-clusters` value: 1 to [`MAX_DB_CLUSTERS`].
pub fn db_clusters(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_DB_CLUSTERS).contains(&n) => Ok(n),
        Ok(n) => Err(format!(
            "{n} database clusters: give 1 (one database, the default) to {MAX_DB_CLUSTERS}"
        )),
        Err(_) => Err(format!("{text:?} is not a number of database clusters")),
    }
}

/// `--db-cpu-quota` and `--server-cpu-quota`: CPU quotas for a local
/// cluster (bench and chaos).
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct CpuQuotaArgs {
    /// Cap the local cluster's PostgreSQL at CORES of CPU (e.g. 0.5): the
    /// postmaster starts in a control group of its own with that quota,
    /// and every backend it forks inherits it (with `--db ha`, the three
    /// Patroni members and their PostgreSQL share it). With
    /// `--db-clusters N`, each cluster gets a group of its own with that
    /// quota (N × CORES in all). cgroup v1's `cpu`
    /// controller (/sys/fs/cgroup/cpu) or cgroup v2's `cpu.max`; needs
    /// root. The group's CPU time and throttling are reported at the end.
    #[arg(long, value_name = "CORES")]
    pub db_cpu_quota: Option<f64>,
    /// Cap the local cluster's game servers, all of them together, at
    /// CORES of CPU, so that the load generator's own CPU is out of the
    /// picture.
    #[arg(long, value_name = "CORES")]
    pub server_cpu_quota: Option<f64>,
}

impl CpuQuotaArgs {
    pub fn quotas(&self) -> borbaman_cluster::CpuQuotas {
        borbaman_cluster::CpuQuotas {
            database: self.db_cpu_quota,
            servers: self.server_cpu_quota,
        }
    }

    /// Refuses the quotas where no local cluster is started.
    pub fn ensure_local(&self, local: bool) -> anyhow::Result<()> {
        anyhow::ensure!(
            local || (self.db_cpu_quota.is_none() && self.server_cpu_quota.is_none()),
            "--db-cpu-quota and --server-cpu-quota cap a local cluster's processes; with \
             --servers the cluster is not ours to cap"
        );
        Ok(())
    }
}

/// A `--wan` value: `DELAY[,JITTER][,stall=P]`.
pub fn wan_spec(text: &str) -> Result<WanSpec, String> {
    WanSpec::parse(text).map_err(|e| e.to_string())
}

/// A `--wan-mix` value: `D1,D2,…[,jitter=J][,stall=P]`.
pub fn wan_mix(text: &str) -> Result<WanMix, String> {
    WanMix::parse(text).map_err(|e| e.to_string())
}

/// `--wan` and `--wan-mix`: the local cluster's servers at a distance from
/// the clients (bench and chaos).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct DistanceArgs {
    /// Put the local cluster's servers at a distance: every byte between a
    /// client and a server waits DELAY each way (a one-way delay: the
    /// network's round trip is twice it), give or take JITTER (a duration,
    /// or a share of the delay such as 10%), and with probability P a
    /// chunk is held a further round trip + 200 ms, as a lost TCP segment
    /// is. A bare number is milliseconds. E.g. `--wan 100ms` or `--wan
    /// 100ms,10ms,stall=0.001`. The floors are measured through the same
    /// delay proxies, whose addresses the registry hands out; see
    /// docs/internet.md.
    #[arg(
        long,
        value_name = "DELAY[,JITTER][,stall=P]",
        value_parser = wan_spec,
        conflicts_with = "wan_mix"
    )]
    pub wan: Option<WanSpec>,
    /// Clients at several distances in one run: one-way delays (a bare
    /// number is milliseconds), given to the clients in turn (client 0 the
    /// first, client 1 the second, …), e.g. `--wan-mix 5,50,100,150`;
    /// `jitter=J` (a duration or a share such as 10%) and `stall=P` apply
    /// to each. Every figure is also reported per distance, beside the
    /// network's own RTT at that distance.
    #[arg(
        long,
        value_name = "D1,D2,…[,jitter=J][,stall=P]",
        value_parser = wan_mix
    )]
    pub wan_mix: Option<WanMix>,
}

impl DistanceArgs {
    /// The distances a local cluster puts its servers at
    /// (`ClusterConfig::wan`): none, `--wan`'s, or `--wan-mix`'s.
    pub fn links(&self) -> Vec<WanSpec> {
        match (&self.wan, &self.wan_mix) {
            (Some(wan), _) => vec![*wan],
            (None, Some(mix)) => mix.links.clone(),
            (None, None) => Vec::new(),
        }
    }

    /// Refuses a distance with `--servers`: the proxies stand in front of
    /// the servers a local cluster starts.
    pub fn ensure_local(&self, local: bool) -> anyhow::Result<()> {
        anyhow::ensure!(
            local || self.links().is_empty(),
            "--wan and --wan-mix put the servers of a local cluster at a distance; with \
             --servers the network between you and them is the real one (leave --servers \
             out to emulate one)"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_are_host_and_port() {
        assert_eq!(
            server_address(" 127.0.0.1:50051 "),
            Ok("127.0.0.1:50051".into())
        );
        assert!(server_address("game.example.org:443").is_ok());
        assert!(server_address("[::1]:7000").is_ok());
        for bad in [
            "nonsense",
            "",
            "127.0.0.1",
            "127.0.0.1:0",
            "host:http",
            ":80",
        ] {
            assert!(server_address(bad).is_err(), "{bad:?}");
        }
        let scheme = server_address("http://127.0.0.1:1").unwrap_err();
        assert!(scheme.contains("without a scheme"), "{scheme}");
    }

    #[test]
    fn wan_flags_give_the_cluster_its_distances() {
        let none = DistanceArgs::default();
        assert!(none.links().is_empty());
        assert!(none.ensure_local(false).is_ok());
        let one = DistanceArgs {
            wan: Some(wan_spec("100ms,10ms").unwrap()),
            ..DistanceArgs::default()
        };
        assert_eq!(one.links(), [wan_spec("100ms,10ms").unwrap()]);
        let err = one.ensure_local(false).unwrap_err().to_string();
        assert!(err.contains("leave --servers out"), "{err}");
        let mix = DistanceArgs {
            wan_mix: Some(wan_mix("5,150").unwrap()),
            ..DistanceArgs::default()
        };
        assert_eq!(mix.links().len(), 2);
        assert!(wan_spec("far").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn db_clusters_are_one_or_more() {
        assert_eq!(db_clusters("2"), Ok(2));
        assert_eq!(db_clusters(" 1 "), Ok(1));
        for bad in ["0", "17", "two", "-1", ""] {
            assert!(db_clusters(bad).is_err(), "{bad:?}");
        }
        assert!(db_clusters("0").unwrap_err().contains("give 1"));
    }

    #[test]
    fn map_names_are_checked_and_an_unknown_one_lists_the_valid_ones() {
        assert_eq!(map_name("Corridors"), Ok("corridors".into()));
        let err = map_name("lava").unwrap_err();
        assert!(err.contains("classic, open, corridors"), "{err}");
    }
}
