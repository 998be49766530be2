//! Learning Patroni's leader from etcd the moment Patroni writes it.
//!
//! Patroni keeps its cluster state in etcd under `<namespace><scope>/`:
//! the `leader` key holds the name of the member that holds the leader
//! lock (a lease-bound key: it is the lock itself), and `members/<name>`
//! holds each member's JSON (`conn_url`, `api_url`, `role`, `timeline`,
//! ...). Watching that prefix tells a server of a new leader when etcd
//! commits it, instead of at the next `/primary` poll, and gives the new
//! leader's PostgreSQL address in the same breath (no `/cluster` request).
//!
//! The read and the watch speak etcd v3's own gRPC API through the
//! `etcd-client` crate, over the tonic and HTTP/2 the game service already
//! uses: one connection to one etcd member ([`connect`]) carries a range
//! read of the prefix ([`range`]), then a watch from the revision after it
//! ([`Watch`]). The caller (`store::follow`) moves on to the next member
//! when either fails. HTTP/2 keepalive pings find a member that stopped
//! answering without closing the connection.
//!
//! [`ClusterKeys`] is the pure part: it applies the range's keys and the
//! watch's events and names the leader ([`ClusterKeys::leader`]). The
//! store's follower decides what to do with it.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions, WatchResponse, WatchStream};
use hyper::Uri;
use serde::Deserialize;

use crate::patroni::{self, Member, PgAddress};

/// etcd's default client port, for URLs that give none.
pub const DEFAULT_CLIENT_PORT: u16 = 2379;

/// Patroni's key prefix in the local replicated database and the
/// containers (server/patroni/patroni.yml: namespace `/borbaman/`, scope
/// `borbaman`).
pub const DEFAULT_PREFIX: &str = "/borbaman/borbaman/";

/// One etcd member's client URL, `http://host:port`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    authority: String,
}

impl Endpoint {
    /// `host:port`, as dialled and sent in the `Host` header.
    pub fn authority(&self) -> &str {
        &self.authority
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", self.authority)
    }
}

impl FromStr for Endpoint {
    type Err = String;

    /// `http://host:port` (port 2379 when left out).
    fn from_str(s: &str) -> Result<Endpoint, String> {
        let authority = patroni::http_authority("etcd URL", s, DEFAULT_CLIENT_PORT)?;
        Ok(Endpoint { authority })
    }
}

/// The leader as etcd holds it: the lock holder's name and what its
/// member key says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DcsLeader {
    /// The member's name (the `leader` key's value).
    pub name: String,
    /// Where its PostgreSQL listens (`conn_url`).
    pub address: PgAddress,
    /// Its REST API (`api_url`), the member the `/primary` probes name.
    pub member: Member,
    /// Its timeline as it last reported it.
    pub timeline: Option<u64>,
}

/// A member key's JSON, the fields that matter here.
#[derive(Clone, Debug, Default, Deserialize)]
struct MemberRecord {
    #[serde(default)]
    conn_url: Option<String>,
    #[serde(default)]
    api_url: Option<String>,
    #[serde(default)]
    timeline: Option<u64>,
}

/// What etcd holds under a Patroni cluster's prefix that says who leads.
#[derive(Clone, Debug, Default)]
pub struct ClusterKeys {
    leader: Option<String>,
    members: HashMap<String, MemberRecord>,
    /// The highest revision applied.
    revision: i64,
}

/// One key change: a `PUT` with its value or a `DELETE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyChange {
    /// The key, relative to the prefix (`leader`, `members/pg1`, ...).
    pub key: String,
    /// `None` for a delete.
    pub value: Option<Vec<u8>>,
    pub mod_revision: i64,
}

impl ClusterKeys {
    /// The highest revision applied: a watch resumes after it.
    #[cfg(test)]
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// Applies one change; `true` if it may have changed the leader (the
    /// leader key, or the leader's member key).
    pub fn apply(&mut self, change: &KeyChange) -> bool {
        self.revision = self.revision.max(change.mod_revision);
        let value = change.value.as_deref();
        if change.key == "leader" {
            let name = value.map(|v| String::from_utf8_lossy(v).trim().to_string());
            let changed = self.leader != name;
            self.leader = name.filter(|n| !n.is_empty());
            return changed;
        }
        let Some(name) = change.key.strip_prefix("members/") else {
            return false;
        };
        match value {
            Some(v) => {
                // A record we cannot read counts as absent.
                let record = serde_json::from_slice(v).unwrap_or_default();
                self.members.insert(name.to_string(), record);
            }
            None => {
                self.members.remove(name);
            }
        }
        self.leader.as_deref() == Some(name)
    }

    /// The leader, if the lock is held and its member key gives where its
    /// PostgreSQL and REST API are. `Err` says why not.
    pub fn leader(&self) -> Result<DcsLeader, String> {
        let name = self
            .leader
            .as_ref()
            .ok_or("no member holds the leader lock")?;
        let record = self
            .members
            .get(name)
            .ok_or_else(|| format!("the leader {name} has no member key"))?;
        let address = record
            .conn_url
            .as_deref()
            .and_then(parse_conn_url)
            .ok_or_else(|| format!("the leader {name} has no usable conn_url"))?;
        let member = record
            .api_url
            .as_deref()
            .and_then(|url| Member::from_str(&strip_path(url)).ok())
            .ok_or_else(|| format!("the leader {name} has no usable api_url"))?;
        Ok(DcsLeader {
            name: name.clone(),
            address,
            member,
            timeline: record.timeline,
        })
    }
}

/// `postgres://host:port/db` → host and port (5432 when left out).
fn parse_conn_url(url: &str) -> Option<PgAddress> {
    let uri: Uri = url.parse().ok()?;
    if !matches!(uri.scheme_str(), Some("postgres" | "postgresql")) {
        return None;
    }
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return None;
    }
    Some(PgAddress {
        host: host.to_string(),
        port: uri.port_u16().unwrap_or(5432),
    })
}

/// `http://host:port/patroni` → `http://host:port`.
fn strip_path(url: &str) -> String {
    match url.find("://") {
        Some(i) => {
            let rest = &url[i + 3..];
            let end = rest.find('/').map_or(url.len(), |j| i + 3 + j);
            url[..end].to_string()
        }
        None => url.to_string(),
    }
}

/// How often an idle connection to etcd is pinged, and how long a ping
/// may go unanswered before the connection counts as broken. etcd refuses
/// pings more often than every 5 s (`--grpc-keepalive-min-time`).
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(3);

/// Why etcd gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("no answer within {0} ms")]
    Timeout(u128),
    #[error("bad etcd URL: {0}")]
    Url(String),
    #[error("{0}")]
    Etcd(#[from] etcd_client::Error),
    #[error("watch canceled: {reason} (compacted to {compact_revision})")]
    Canceled {
        reason: String,
        compact_revision: i64,
    },
    #[error("the watch stream ended")]
    Ended,
}

/// The change a key-value under `prefix` describes, its key made relative
/// to the prefix; `None` for a key outside it.
fn change(key: &[u8], value: Option<&[u8]>, mod_revision: i64, prefix: &str) -> Option<KeyChange> {
    let key = std::str::from_utf8(key).ok()?.strip_prefix(prefix)?;
    Some(KeyChange {
        key: key.to_string(),
        value: value.map(<[u8]>::to_vec),
        mod_revision,
    })
}

/// A client of the one etcd member at `endpoint`. It connects at its
/// first request, within `timeout`; each request has its own deadline.
pub async fn connect(endpoint: &Endpoint, timeout: Duration) -> Result<Client, EtcdError> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_string())
        .map_err(|e| EtcdError::Url(format!("{endpoint}: {e}")))?
        .connect_timeout(timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .connect_lazy();
    Ok(Client::from_channel(etcd_client::Channel::Tonic(channel), None).await?)
}

/// Reads every key under `prefix` at once: the revision and the keys.
pub async fn range(
    client: &mut Client,
    prefix: &str,
    timeout: Duration,
) -> Result<(i64, Vec<KeyChange>), EtcdError> {
    let read = client.get(prefix, Some(GetOptions::new().with_prefix()));
    let reply = match tokio::time::timeout(timeout, read).await {
        Ok(reply) => reply?,
        Err(_) => return Err(EtcdError::Timeout(timeout.as_millis())),
    };
    let revision = reply.header().map_or(0, |h| h.revision());
    let changes = reply
        .kvs()
        .iter()
        .filter_map(|kv| change(kv.key(), Some(kv.value()), kv.mod_revision(), prefix))
        .collect();
    Ok((revision, changes))
}

/// A running watch on a prefix: yields batches of changes as etcd
/// commits them.
pub struct Watch {
    stream: WatchStream,
    prefix: String,
}

impl Watch {
    /// Starts watching `prefix` from `start_revision` on, within
    /// `timeout` for etcd to confirm the watch (its `created` reply, which
    /// carries no event).
    pub async fn start(
        client: &mut Client,
        prefix: &str,
        start_revision: i64,
        timeout: Duration,
    ) -> Result<Watch, EtcdError> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(start_revision);
        let opening = async {
            let mut stream = client.watch(prefix, Some(options)).await?;
            match stream.message().await? {
                Some(reply) if reply.canceled() => Err(canceled(&reply)),
                Some(reply) if reply.created() => Ok(stream),
                Some(_) => Err(EtcdError::Etcd(etcd_client::Error::WatchError(
                    "the first reply does not confirm the watch".into(),
                ))),
                None => Err(EtcdError::Ended),
            }
        };
        match tokio::time::timeout(timeout, opening).await {
            Ok(stream) => Ok(Watch {
                stream: stream?,
                prefix: prefix.to_string(),
            }),
            Err(_) => Err(EtcdError::Timeout(timeout.as_millis())),
        }
    }

    /// The next batch of changes (possibly empty: a progress report).
    /// `Err` when the stream ends, breaks or etcd cancels the watch (a
    /// compacted revision): watch again.
    pub async fn next(&mut self) -> Result<Vec<KeyChange>, EtcdError> {
        let reply = self.stream.message().await?.ok_or(EtcdError::Ended)?;
        if reply.canceled() {
            return Err(canceled(&reply));
        }
        Ok(reply
            .events()
            .iter()
            .filter_map(|event| {
                let kv = event.kv()?;
                let value = match event.event_type() {
                    EventType::Put => Some(kv.value()),
                    EventType::Delete => None,
                };
                change(kv.key(), value, kv.mod_revision(), &self.prefix)
            })
            .collect())
    }
}

fn canceled(reply: &WatchResponse) -> EtcdError {
    EtcdError::Canceled {
        reason: reply.cancel_reason().to_string(),
        compact_revision: reply.compact_revision(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "/borbaman/borbaman/";

    fn member_json(port: u16, rest: u16, timeline: u64) -> String {
        format!(
            r#"{{"conn_url":"postgres://127.0.0.1:{port}/postgres","api_url":"http://127.0.0.1:{rest}/patroni","state":"running","role":"replica","version":"3.0.2","xlog_location":50331808,"timeline":{timeline}}}"#
        )
    }

    fn put(key: &str, value: &str, rev: i64) -> KeyChange {
        KeyChange {
            key: key.into(),
            value: Some(value.as_bytes().to_vec()),
            mod_revision: rev,
        }
    }

    fn delete(key: &str, rev: i64) -> KeyChange {
        KeyChange {
            key: key.into(),
            value: None,
            mod_revision: rev,
        }
    }

    #[test]
    fn etcd_urls_parse_with_the_client_port_by_default() {
        let e: Endpoint = "http://127.0.0.1:2380".parse().unwrap();
        assert_eq!(e.authority(), "127.0.0.1:2380");
        let e: Endpoint = "http://etcd-a".parse().unwrap();
        assert_eq!(e.authority(), "etcd-a:2379");
        let err = "https://etcd-a".parse::<Endpoint>().unwrap_err();
        assert!(err.contains("etcd URL"), "{err}");
    }

    #[test]
    fn the_leader_is_the_lock_holder_with_its_member_keys_addresses() {
        let mut keys = ClusterKeys::default();
        assert!(keys.leader().is_err());
        assert!(!keys.apply(&put("members/pg1", &member_json(15441, 18008, 1), 5)));
        assert!(!keys.apply(&put("members/pg2", &member_json(15442, 18009, 1), 6)));
        assert!(keys.apply(&put("leader", "pg1", 7)));
        let leader = keys.leader().unwrap();
        assert_eq!(leader.name, "pg1");
        assert_eq!(leader.address.to_string(), "127.0.0.1:15441");
        assert_eq!(leader.member.to_string(), "http://127.0.0.1:18008");
        assert_eq!(leader.timeline, Some(1));
        assert_eq!(keys.revision(), 7);
        // A refresh of the same value changes nothing.
        assert!(!keys.apply(&put("leader", "pg1", 8)));
        // Patroni releases the lock: no leader, whatever the members say.
        assert!(keys.apply(&delete("leader", 9)));
        assert!(keys.leader().is_err());
        // The other member takes it; its record names the new timeline.
        assert!(!keys.apply(&put("members/pg2", &member_json(15442, 18009, 2), 10)));
        assert!(keys.apply(&put("leader", "pg2", 11)));
        let leader = keys.leader().unwrap();
        assert_eq!(leader.address.port, 15442);
        assert_eq!(leader.timeline, Some(2));
        // The leader's own record changing may change where it is.
        assert!(keys.apply(&put("members/pg2", &member_json(15442, 18009, 3), 12)));
        assert!(!keys.apply(&put("members/pg1", &member_json(15441, 18008, 3), 13)));
        assert!(!keys.apply(&put("config", "{}", 14)));
    }

    #[test]
    fn a_leader_without_a_usable_member_key_is_not_named() {
        let mut keys = ClusterKeys::default();
        keys.apply(&put("leader", "pg1", 1));
        assert!(keys.leader().unwrap_err().contains("no member key"));
        keys.apply(&put("members/pg1", "not json", 2));
        assert!(keys.leader().unwrap_err().contains("conn_url"));
        keys.apply(&put(
            "members/pg1",
            r#"{"conn_url":"postgres://127.0.0.1:1/x"}"#,
            3,
        ));
        assert!(keys.leader().unwrap_err().contains("api_url"));
        keys.apply(&put("leader", "", 4));
        assert!(keys.leader().is_err());
    }

    #[test]
    fn conn_urls_give_host_and_port() {
        let a = parse_conn_url("postgres://10.0.0.5:5433/postgres").unwrap();
        assert_eq!((a.host.as_str(), a.port), ("10.0.0.5", 5433));
        let a = parse_conn_url("postgresql://pg-a/postgres").unwrap();
        assert_eq!((a.host.as_str(), a.port), ("pg-a", 5432));
        let a = parse_conn_url("postgres://[::1]:5432/postgres").unwrap();
        assert_eq!(a.host, "::1");
        assert!(parse_conn_url("http://pg-a:5432/").is_none());
        assert!(parse_conn_url("nonsense").is_none());
        assert_eq!(strip_path("http://h:1/patroni"), "http://h:1");
        assert_eq!(strip_path("http://h:1"), "http://h:1");
    }

    #[test]
    fn keys_are_read_relative_to_the_prefix() {
        let put = change(b"/borbaman/borbaman/leader", Some(b"pg0"), 40, PREFIX);
        assert_eq!(put, Some(self::put("leader", "pg0", 40)));
        let deleted = change(b"/borbaman/borbaman/members/pg1", None, 41, PREFIX);
        assert_eq!(deleted, Some(delete("members/pg1", 41)));
        // Another scope's keys, or a key that is not text: not ours.
        assert_eq!(
            change(b"/borbaman/c1/leader", Some(b"pg0"), 42, PREFIX),
            None
        );
        assert_eq!(
            change(b"/borbaman/borbaman/\xff", Some(b"x"), 43, PREFIX),
            None
        );
    }
}
