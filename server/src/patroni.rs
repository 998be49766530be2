//! Asking Patroni which PostgreSQL member is the primary.
//!
//! Patroni's REST API answers `GET /primary` with 200 only on the member
//! that holds the leader lock, and 503 everywhere else; a member whose
//! Patroni is dead does not answer at all. That makes it the one source a
//! server may trust: an old primary whose Patroni died still accepts
//! connections and reports itself read-write, but it no longer holds the
//! lock, and its commits wait forever for a standby that has moved on.
//!
//! The `/primary` reply (Patroni 3.0.2: `state`, `role`, `timeline`,
//! `replication`, ...) does not say where the member's PostgreSQL listens,
//! so the leader's `GET /cluster` (every member's `name`, `role`, `host`,
//! `port`) gives the address of the member in the `leader` role.
//!
//! Each request is plain HTTP/1.1 over a fresh TCP connection (Patroni's
//! server answers as HTTP/1.0 and closes after each reply anyway) with
//! hyper's low-level client, bounded by a short timeout so that a dead or
//! hung member costs a probe round no more than that.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::net::TcpStream;

/// Patroni's default REST API port, for member URLs that give none.
pub const DEFAULT_REST_PORT: u16 = 8008;

/// Largest reply read from a member; `/cluster` of a few members is ~1 KiB.
const MAX_REPLY_BYTES: usize = 256 * 1024;

/// One member's REST API, `http://host:port`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Member {
    /// `host:port`, as dialled and sent in the `Host` header.
    authority: String,
}

impl Member {
    /// `host:port` of the REST API.
    pub fn authority(&self) -> &str {
        &self.authority
    }
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", self.authority)
    }
}

impl FromStr for Member {
    type Err = String;

    /// `http://host:port` (port 8008 when left out; a trailing `/` is
    /// fine). No TLS and no path: the REST API's endpoints live at its
    /// root.
    fn from_str(s: &str) -> Result<Member, String> {
        Ok(Member {
            authority: http_authority("Patroni REST URL", s, DEFAULT_REST_PORT)?,
        })
    }
}

/// `host:port` of a plain `http://host[:port]` URL, a `what` such as
/// "Patroni REST URL" (`default_port` when
/// it gives none). No TLS, no path, no credentials: Patroni's REST API
/// and etcd's gRPC API live at their root.
pub(crate) fn http_authority(what: &str, s: &str, default_port: u16) -> Result<String, String> {
    let s = s.trim();
    let uri: Uri = s.parse().map_err(|e| format!("bad {what} {s:?}: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => {
            return Err(format!(
                "bad {what} {s:?}: scheme {other}:// is not supported, use http://"
            ));
        }
        None => {
            return Err(format!("bad {what} {s:?}: expected http://host:port"));
        }
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!(
            "bad {what} {s:?}: give only http://host:port, no path"
        ));
    }
    let authority = uri
        .authority()
        .ok_or_else(|| format!("bad {what} {s:?}: no host"))?;
    if authority.as_str().contains('@') {
        return Err(format!("bad {what} {s:?}: credentials are not supported"));
    }
    if authority.host().is_empty() {
        return Err(format!("bad {what} {s:?}: no host"));
    }
    // What follows the host: nothing, or ":port".
    let after_host = authority
        .as_str()
        .strip_prefix(authority.host())
        .unwrap_or_default();
    let port = match after_host.strip_prefix(':') {
        None if after_host.is_empty() => default_port,
        Some(port) if !port.is_empty() => port
            .parse::<u16>()
            .map_err(|_| format!("bad {what} {s:?}: bad port {port:?}"))?,
        _ => return Err(format!("bad {what} {s:?}: bad port")),
    };
    Ok(format!("{}:{port}", authority.host()))
}

/// Where a PostgreSQL member listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PgAddress {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for PgAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// What a member said about itself in its `/primary` reply.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct MemberStatus {
    /// PostgreSQL's state as Patroni sees it (`running`, `stopped`, ...).
    #[serde(default)]
    pub state: Option<String>,
    /// `master` (Patroni 3.0) or `primary` on the leader, `replica` else.
    #[serde(default)]
    pub role: Option<String>,
    /// The member's timeline; a promotion starts a new, higher one.
    #[serde(default)]
    pub timeline: Option<u64>,
}

/// Why a member gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum PatroniError {
    #[error("no answer within {0} ms")]
    Timeout(u128),
    #[error("cannot connect: {0}")]
    Connect(#[from] std::io::Error),
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("HTTP: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("reading the reply: {0}")]
    Body(String),
    #[error("unexpected status {0}")]
    Status(StatusCode),
    #[error("unexpected reply: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    NoLeader(String),
}

/// Parses a `/primary` (or `/`) reply body. Unknown fields are ignored;
/// a body that is not JSON is an error.
pub fn parse_status(body: &[u8]) -> Result<MemberStatus, PatroniError> {
    Ok(serde_json::from_slice(body)?)
}

#[derive(Deserialize)]
struct ClusterReply {
    #[serde(default)]
    members: Vec<ClusterMember>,
}

#[derive(Deserialize)]
struct ClusterMember {
    #[serde(default)]
    name: String,
    #[serde(default)]
    role: String,
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    port: Option<u16>,
}

/// The PostgreSQL address of the member in the `leader` role of a
/// `/cluster` reply. A standby cluster's `standby_leader` is not a
/// primary and does not count.
pub fn parse_leader_address(body: &[u8]) -> Result<PgAddress, PatroniError> {
    let reply: ClusterReply = serde_json::from_slice(body)?;
    let mut leaders = reply.members.into_iter().filter(|m| m.role == "leader");
    let leader = leaders
        .next()
        .ok_or_else(|| PatroniError::NoLeader("the cluster has no leader".into()))?;
    if leaders.next().is_some() {
        return Err(PatroniError::NoLeader(
            "the cluster lists more than one leader".into(),
        ));
    }
    match (leader.host, leader.port) {
        (Some(host), Some(port)) if !host.is_empty() => Ok(PgAddress { host, port }),
        _ => Err(PatroniError::NoLeader(format!(
            "the leader {:?} has no PostgreSQL host and port in /cluster \
             (is postgresql.connect_address set?)",
            leader.name
        ))),
    }
}

/// `GET path` on `member`: status and body, within `timeout` (connecting
/// included).
pub async fn get(
    member: &Member,
    path: &str,
    timeout: Duration,
) -> Result<(StatusCode, Bytes), PatroniError> {
    let exchange = async {
        let stream = TcpStream::connect(member.authority()).await?;
        stream.set_nodelay(true)?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let request = Request::get(path)
            .header(hyper::header::HOST, member.authority())
            .body(Empty::<Bytes>::new())?;
        let reply = async move {
            let response = sender.send_request(request).await?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_REPLY_BYTES)
                .collect()
                .await
                .map_err(|e| PatroniError::Body(e.to_string()))?
                .to_bytes();
            Ok::<_, PatroniError>((status, body))
            // `sender` is dropped here, so `connection` completes.
        };
        // The connection future drives the socket; it ends once the reply
        // is read and the sender is gone (or the member closes it).
        let (reply, _closed) = tokio::join!(reply, connection);
        reply
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(PatroniError::Timeout(timeout.as_millis())),
    }
}

/// `GET /primary`: `Some(status)` if `member` holds the leader lock (200),
/// `None` if it answers that it does not (503).
pub async fn ask_primary(
    member: &Member,
    timeout: Duration,
) -> Result<Option<MemberStatus>, PatroniError> {
    let (status, body) = get(member, "/primary", timeout).await?;
    match status {
        // A 200 is what counts; a body we cannot read does not undo it.
        StatusCode::OK => Ok(Some(parse_status(&body).unwrap_or_default())),
        StatusCode::SERVICE_UNAVAILABLE => Ok(None),
        other => Err(PatroniError::Status(other)),
    }
}

/// `GET /cluster` on `member`: the leader's PostgreSQL address.
pub async fn leader_address(member: &Member, timeout: Duration) -> Result<PgAddress, PatroniError> {
    let (status, body) = get(member, "/cluster", timeout).await?;
    if status != StatusCode::OK {
        return Err(PatroniError::Status(status));
    }
    parse_leader_address(&body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_urls_parse_to_host_and_port() {
        let m: Member = "http://127.0.0.1:18008".parse().unwrap();
        assert_eq!(m.authority(), "127.0.0.1:18008");
        assert_eq!(m.to_string(), "http://127.0.0.1:18008");
        let m: Member = " http://pg-a.example:8009/ ".parse().unwrap();
        assert_eq!(m.authority(), "pg-a.example:8009");
        let m: Member = "http://pg-b".parse().unwrap();
        assert_eq!(m.authority(), "pg-b:8008");
        let m: Member = "http://[::1]:18008".parse().unwrap();
        assert_eq!(m.authority(), "[::1]:18008");
    }

    #[test]
    fn member_urls_that_cannot_work_are_refused() {
        for bad in [
            "",
            "127.0.0.1:18008",
            "https://127.0.0.1:18008",
            "http://127.0.0.1:18008/patroni",
            "http://127.0.0.1:18008/?x=1",
            "http://user:pw@127.0.0.1:18008",
            "http://127.0.0.1:notaport",
        ] {
            assert!(bad.parse::<Member>().is_err(), "{bad:?} accepted");
        }
    }

    /// Bodies as Patroni 3.0.2 sends them (lab cluster, trimmed).
    const PRIMARY_200: &str = r#"{"state": "running", "postmaster_start_time": "2026-11-30 22:55:05.755755+00:00", "role": "master", "server_version": 150018, "xlog": {"location": 67108944}, "timeline": 1, "replication": [{"usename": "replicator", "application_name": "pg3", "client_addr": "127.0.0.1", "state": "streaming", "sync_state": "sync", "sync_priority": 1}], "dcs_last_seen": 1796079315, "database_system_identifier": "7714101871173657778", "patroni": {"version": "3.0.2", "scope": "borbaman"}}"#;
    const REPLICA_503: &str = r#"{"state": "running", "role": "replica", "server_version": 150018, "xlog": {"received_location": 67108944, "replayed_location": 67108944, "replayed_timestamp": null, "paused": false}, "timeline": 1, "dcs_last_seen": 1796079315, "patroni": {"version": "3.0.2", "scope": "borbaman"}}"#;
    const STOPPED: &str = r#"{"state": "stopped", "role": "master", "cluster_unlocked": true, "dcs_last_seen": 1796079315}"#;
    const CLUSTER: &str = r#"{"members": [{"name": "pg1", "role": "leader", "state": "running", "api_url": "http://127.0.0.1:18008/patroni", "host": "127.0.0.1", "port": 15441, "timeline": 1}, {"name": "pg2", "role": "replica", "state": "running", "api_url": "http://127.0.0.1:18009/patroni", "host": "127.0.0.1", "port": 15442, "timeline": 1, "lag": 0}, {"name": "pg3", "role": "sync_standby", "state": "running", "api_url": "http://127.0.0.1:18010/patroni", "host": "127.0.0.1", "port": 15443, "timeline": 1, "lag": 0}]}"#;

    #[test]
    fn primary_replies_give_state_role_and_timeline() {
        let s = parse_status(PRIMARY_200.as_bytes()).unwrap();
        assert_eq!(s.state.as_deref(), Some("running"));
        assert_eq!(s.role.as_deref(), Some("master"));
        assert_eq!(s.timeline, Some(1));
        let s = parse_status(REPLICA_503.as_bytes()).unwrap();
        assert_eq!(s.role.as_deref(), Some("replica"));
        let s = parse_status(STOPPED.as_bytes()).unwrap();
        assert_eq!(s.state.as_deref(), Some("stopped"));
        assert_eq!(s.timeline, None);
        assert!(parse_status(b"<html>").is_err());
    }

    #[test]
    fn the_cluster_reply_names_the_leaders_postgres() {
        let a = parse_leader_address(CLUSTER.as_bytes()).unwrap();
        assert_eq!(
            a,
            PgAddress {
                host: "127.0.0.1".into(),
                port: 15441
            }
        );
        assert_eq!(a.to_string(), "127.0.0.1:15441");
        let ipv6 = PgAddress {
            host: "::1".into(),
            port: 5432,
        };
        assert_eq!(ipv6.to_string(), "[::1]:5432");
    }

    #[test]
    fn a_cluster_without_one_leader_names_none() {
        let leaderless = CLUSTER.replace("\"leader\"", "\"replica\"");
        assert!(matches!(
            parse_leader_address(leaderless.as_bytes()),
            Err(PatroniError::NoLeader(_))
        ));
        let two = CLUSTER.replace("\"sync_standby\"", "\"leader\"");
        assert!(parse_leader_address(two.as_bytes()).is_err());
        let standby_cluster = CLUSTER.replace("\"leader\"", "\"standby_leader\"");
        assert!(parse_leader_address(standby_cluster.as_bytes()).is_err());
        let no_host = r#"{"members": [{"name": "pg1", "role": "leader", "state": "running"}]}"#;
        assert!(parse_leader_address(no_host.as_bytes()).is_err());
        assert!(parse_leader_address(b"{}").is_err());
        assert!(parse_leader_address(b"not json").is_err());
    }
}
