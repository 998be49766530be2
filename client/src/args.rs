//! Command-line pieces shared by several subcommands.

use std::path::PathBuf;

use anyhow::Context;
use borbaman_client::pool::PoolConfig;
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

/// `--db single|ha`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct DbArg {
    /// The local cluster's database: `single` (one PostgreSQL) or `ha`
    /// (3 etcd + 3 Patroni members, synchronous replication, survives the
    /// loss of its primary).
    #[arg(long, value_enum, default_value_t = DbKind::Single)]
    pub db: DbKind,
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
    fn map_names_are_checked_and_an_unknown_one_lists_the_valid_ones() {
        assert_eq!(map_name("Corridors"), Ok("corridors".into()));
        let err = map_name("lava").unwrap_err();
        assert!(err.contains("classic, open, corridors"), "{err}");
    }
}
