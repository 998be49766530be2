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
//! The watch speaks etcd v3's JSON gateway (`POST /v3/kv/range`, then a
//! streaming `POST /v3/watch`), which Patroni's own `etcd3` client uses
//! too, over hyper's low-level HTTP/1.1 client: no gRPC client and no
//! etcd crate. Keys and values travel base64-encoded.
//!
//! [`ClusterKeys`] is the pure part: it applies the range's keys and the
//! watch's events and names the leader ([`ClusterKeys::leader`]). The
//! store's follower (`store::follow`) decides what to do with it.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::net::TcpStream;

use crate::patroni::{self, Member, PgAddress};

/// etcd's default client port, for URLs that give none.
pub const DEFAULT_CLIENT_PORT: u16 = 2379;

/// Patroni's key prefix in the local replicated database and the
/// containers (server/patroni/patroni.yml: namespace `/borbaman/`, scope
/// `borbaman`).
pub const DEFAULT_PREFIX: &str = "/borbaman/borbaman/";

/// Largest range reply read; a cluster of a few members is a few KiB.
const MAX_REPLY_BYTES: usize = 1024 * 1024;

/// Largest unparsed part of the watch stream kept; one message is at most
/// a few KiB.
const MAX_PENDING_BYTES: usize = 1024 * 1024;

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

/// The end of the key range that holds every key starting with `prefix`.
fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Why etcd gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
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
    #[error("unexpected status {0}: {1}")]
    Status(StatusCode, String),
    #[error("unexpected reply: {0}")]
    Json(#[from] serde_json::Error),
    #[error("etcd: {0}")]
    Etcd(String),
    #[error("the watch stream ended")]
    Ended,
}

#[derive(Deserialize)]
struct Header {
    #[serde(default, deserialize_with = "int_string")]
    revision: i64,
}

#[derive(Deserialize)]
struct Kv {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default, deserialize_with = "int_string")]
    mod_revision: i64,
}

#[derive(Deserialize)]
struct RangeReply {
    header: Header,
    #[serde(default)]
    kvs: Vec<Kv>,
}

#[derive(Deserialize)]
struct WatchEvent {
    /// `PUT` is left out (the default of the enum); `DELETE` is named.
    #[serde(default, rename = "type")]
    kind: Option<String>,
    kv: Kv,
}

#[derive(Deserialize)]
struct WatchResult {
    #[serde(default)]
    events: Vec<WatchEvent>,
    #[serde(default)]
    canceled: bool,
    #[serde(default)]
    cancel_reason: Option<String>,
    #[serde(default, deserialize_with = "int_string")]
    compact_revision: i64,
}

#[derive(Deserialize)]
struct WatchMessage {
    #[serde(default)]
    result: Option<WatchResult>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

/// etcd's gateway sends 64-bit integers as JSON strings.
fn int_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum IntOrString {
        Int(i64),
        Str(String),
    }
    match IntOrString::deserialize(d)? {
        IntOrString::Int(i) => Ok(i),
        IntOrString::Str(s) => s.parse().map_err(serde::de::Error::custom),
    }
}

impl Kv {
    /// The change this key-value describes, its key made relative to
    /// `prefix`; `None` for a key outside it.
    fn change(self, prefix: &str, deleted: bool) -> Option<KeyChange> {
        let key = BASE64.decode(self.key).ok()?;
        let key = String::from_utf8(key).ok()?;
        let key = key.strip_prefix(prefix)?.to_string();
        let value = match (deleted, self.value) {
            (true, _) => None,
            (false, Some(v)) => Some(BASE64.decode(v).ok()?),
            (false, None) => Some(Vec::new()),
        };
        Some(KeyChange {
            key,
            value,
            mod_revision: self.mod_revision,
        })
    }
}

/// Parses a range reply: the revision it was read at and its keys.
pub fn parse_range(body: &[u8], prefix: &str) -> Result<(i64, Vec<KeyChange>), EtcdError> {
    let reply: RangeReply = serde_json::from_slice(body)?;
    let changes = reply
        .kvs
        .into_iter()
        .filter_map(|kv| kv.change(prefix, false))
        .collect();
    Ok((reply.header.revision, changes))
}

/// Parses one watch message into its changes; `Err` if etcd ended or
/// refused the watch (a compacted revision, an error).
pub fn parse_watch_message(
    message: &serde_json::Value,
    prefix: &str,
) -> Result<Vec<KeyChange>, EtcdError> {
    let message = WatchMessage::deserialize(message)?;
    if let Some(error) = message.error {
        return Err(EtcdError::Etcd(error.to_string()));
    }
    let Some(result) = message.result else {
        return Ok(Vec::new());
    };
    if result.canceled {
        return Err(EtcdError::Etcd(format!(
            "watch canceled: {} (compacted to {})",
            result.cancel_reason.unwrap_or_default(),
            result.compact_revision
        )));
    }
    Ok(result
        .events
        .into_iter()
        .filter_map(|e| {
            let deleted = e.kind.as_deref() == Some("DELETE");
            e.kv.change(prefix, deleted)
        })
        .collect())
}

/// Splits complete JSON objects off the front of `pending` (the gateway
/// streams them back to back); an incomplete one stays for the next chunk.
pub fn split_messages(pending: &mut Vec<u8>) -> Result<Vec<serde_json::Value>, EtcdError> {
    let mut out = Vec::new();
    let mut stream = serde_json::Deserializer::from_slice(pending).into_iter::<serde_json::Value>();
    let mut consumed = 0;
    loop {
        match stream.next() {
            Some(Ok(value)) => {
                consumed = stream.byte_offset();
                out.push(value);
            }
            Some(Err(e)) if e.is_eof() => break,
            Some(Err(e)) => return Err(e.into()),
            None => {
                consumed = pending.len();
                break;
            }
        }
    }
    pending.drain(..consumed);
    Ok(out)
}

fn range_request(prefix: &str) -> String {
    serde_json::json!({
        "key": BASE64.encode(prefix),
        "range_end": BASE64.encode(prefix_range_end(prefix.as_bytes())),
    })
    .to_string()
}

fn watch_request(prefix: &str, start_revision: i64) -> String {
    serde_json::json!({
        "create_request": {
            "key": BASE64.encode(prefix),
            "range_end": BASE64.encode(prefix_range_end(prefix.as_bytes())),
            "start_revision": start_revision.to_string(),
        }
    })
    .to_string()
}

/// Opens an HTTP/1.1 connection to `endpoint` and sends `POST path`.
async fn post(
    endpoint: &Endpoint,
    path: &str,
    body: String,
) -> Result<hyper::Response<hyper::body::Incoming>, EtcdError> {
    let stream = TcpStream::connect(endpoint.authority()).await?;
    stream.set_nodelay(true)?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    // Drives the socket until the reply is read (or, for a watch, until
    // the stream is dropped).
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = Request::post(path)
        .header(hyper::header::HOST, endpoint.authority())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))?;
    Ok(sender.send_request(request).await?)
}

/// Reads every key under `prefix` at once: the revision and the keys.
pub async fn range(
    endpoint: &Endpoint,
    prefix: &str,
    timeout: Duration,
) -> Result<(i64, Vec<KeyChange>), EtcdError> {
    let exchange = async {
        let response = post(endpoint, "/v3/kv/range", range_request(prefix)).await?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_REPLY_BYTES)
            .collect()
            .await
            .map_err(|e| EtcdError::Body(e.to_string()))?
            .to_bytes();
        if status != StatusCode::OK {
            return Err(EtcdError::Status(
                status,
                String::from_utf8_lossy(&body).into_owned(),
            ));
        }
        parse_range(&body, prefix)
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(EtcdError::Timeout(timeout.as_millis())),
    }
}

/// A running watch on a prefix: yields batches of changes as etcd
/// commits them.
pub struct Watch {
    body: hyper::body::Incoming,
    pending: Vec<u8>,
    prefix: String,
}

impl Watch {
    /// Starts watching `prefix` from `start_revision` on, within
    /// `timeout` for etcd to accept it.
    pub async fn start(
        endpoint: &Endpoint,
        prefix: &str,
        start_revision: i64,
        timeout: Duration,
    ) -> Result<Watch, EtcdError> {
        let opening = post(endpoint, "/v3/watch", watch_request(prefix, start_revision));
        let response = match tokio::time::timeout(timeout, opening).await {
            Ok(response) => response?,
            Err(_) => return Err(EtcdError::Timeout(timeout.as_millis())),
        };
        if response.status() != StatusCode::OK {
            return Err(EtcdError::Status(response.status(), String::new()));
        }
        Ok(Watch {
            body: response.into_body(),
            pending: Vec::new(),
            prefix: prefix.to_string(),
        })
    }

    /// The next batch of changes (possibly empty: etcd's confirmation of
    /// the watch). `Err` when the stream ends or breaks: watch again.
    pub async fn next(&mut self) -> Result<Vec<KeyChange>, EtcdError> {
        loop {
            let messages = split_messages(&mut self.pending)?;
            if !messages.is_empty() {
                let mut changes = Vec::new();
                for message in &messages {
                    changes.extend(parse_watch_message(message, &self.prefix)?);
                }
                return Ok(changes);
            }
            let frame = match self.body.frame().await {
                Some(frame) => frame?,
                None => return Err(EtcdError::Ended),
            };
            if let Ok(data) = frame.into_data() {
                self.pending.extend_from_slice(&data);
                if self.pending.len() > MAX_PENDING_BYTES {
                    return Err(EtcdError::Body("a watch message too large".into()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        BASE64.encode(s)
    }

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
    fn prefix_range_ends_are_the_next_key() {
        assert_eq!(prefix_range_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(prefix_range_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_range_end(b"\xff"), vec![0]);
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

    /// A range reply and watch messages as etcd 3.4's gateway sends them.
    #[test]
    fn range_replies_and_watch_messages_parse() {
        let range = format!(
            r#"{{"header":{{"cluster_id":"1","member_id":"2","revision":"42","raft_term":"3"}},"kvs":[{{"key":"{}","create_revision":"5","mod_revision":"40","version":"3","value":"{}","lease":"7"}},{{"key":"{}","mod_revision":"41","value":"{}"}}],"count":"2"}}"#,
            b64("/borbaman/borbaman/leader"),
            b64("pg0"),
            b64("/borbaman/borbaman/members/pg0"),
            b64(&member_json(15441, 18008, 1)),
        );
        let (revision, changes) = parse_range(range.as_bytes(), PREFIX).unwrap();
        assert_eq!(revision, 42);
        assert_eq!(changes.len(), 2);
        assert_eq!(changes[0], put("leader", "pg0", 40));
        let mut keys = ClusterKeys::default();
        for c in &changes {
            keys.apply(c);
        }
        assert_eq!(keys.leader().unwrap().name, "pg0");

        // The watch's confirmation, then a delete and a put in one
        // message, streamed back to back and cut mid-object.
        let created = r#"{"result":{"header":{"revision":"42"},"created":true}}"#;
        let events = format!(
            r#"{{"result":{{"header":{{"revision":"44"}},"events":[{{"type":"DELETE","kv":{{"key":"{}","mod_revision":"43"}}}},{{"kv":{{"key":"{}","mod_revision":"44","value":"{}"}}}}]}}}}"#,
            b64("/borbaman/borbaman/leader"),
            b64("/borbaman/borbaman/leader"),
            b64("pg1"),
        );
        let stream = format!("{created}\n{events}\n");
        let (first, second) = stream.as_bytes().split_at(created.len() + 30);
        let mut pending = first.to_vec();
        let messages = split_messages(&mut pending).unwrap();
        assert_eq!(messages.len(), 1);
        assert!(
            parse_watch_message(&messages[0], PREFIX)
                .unwrap()
                .is_empty()
        );
        pending.extend_from_slice(second);
        let messages = split_messages(&mut pending).unwrap();
        assert_eq!(messages.len(), 1);
        assert!(pending.iter().all(u8::is_ascii_whitespace));
        let changes = parse_watch_message(&messages[0], PREFIX).unwrap();
        assert_eq!(
            changes,
            vec![delete("leader", 43), put("leader", "pg1", 44)]
        );

        let canceled = serde_json::json!({"result": {"canceled": true, "compact_revision": "50"}});
        assert!(parse_watch_message(&canceled, PREFIX).is_err());
        let error = serde_json::json!({"error": {"grpc_code": 14, "message": "no leader"}});
        assert!(parse_watch_message(&error, PREFIX).is_err());
        let mut garbage = b"<html>".to_vec();
        assert!(split_messages(&mut garbage).is_err());
    }
}
