//! Patroni's REST API: who is primary, the members' states, and waiting for
//! a healthy cluster or a new primary.

use super::*;

#[derive(Deserialize)]
pub(super) struct ClusterJson {
    pub(super) members: Vec<MemberJson>,
}

#[derive(Deserialize)]
pub(super) struct MemberJson {
    pub(super) name: String,
    #[serde(default)]
    pub(super) role: String,
    #[serde(default)]
    pub(super) state: String,
    pub(super) timeline: Option<u64>,
    /// A number, or `"unknown"`.
    #[serde(default)]
    pub(super) lag: serde_json::Value,
}

impl LocalHa {
    /// The member whose Patroni answers 200 to `GET /primary` (it holds the
    /// leader lock and runs a primary).
    pub fn primary(&self) -> Option<usize> {
        (0..MEMBERS).find(|&i| self.is_primary(i, REST_TIMEOUT))
    }

    /// Polls `GET /primary` on every member other than `old` every ~50 ms
    /// and returns the first that answers as primary, with when it was
    /// seen; `None` after `timeout`. (Each request costs Patroni a query
    /// of its PostgreSQL; polling faster loads the very REST APIs the
    /// members ask each other during a switchover.)
    pub fn wait_for_new_primary(&self, old: usize, timeout: Duration) -> Option<(usize, Instant)> {
        let deadline = Instant::now() + timeout;
        let found = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|scope| {
            for i in (0..MEMBERS).filter(|&i| i != old) {
                let tx = tx.clone();
                let found = &found;
                scope.spawn(move || {
                    while !found.load(Ordering::Relaxed) && Instant::now() < deadline {
                        if self.is_primary(i, PROBE_TIMEOUT) {
                            let seen = Instant::now();
                            found.store(true, Ordering::Relaxed);
                            let _ = tx.send((i, seen));
                            return;
                        }
                        std::thread::sleep(PROBE_PERIOD);
                    }
                });
            }
            drop(tx);
            let first = rx.recv().ok();
            found.store(true, Ordering::Relaxed);
            first
        })
    }

    /// Every member as `GET /cluster` shows it (asked of the primary, else
    /// of any member that answers), with the primary's view of replication.
    pub fn members(&self) -> Result<Vec<MemberStatus>, HaError> {
        let order: Vec<usize> = self.primary().into_iter().chain(0..MEMBERS).collect();
        let mut last = String::from("no member answered");
        for i in order {
            match self.cluster_status(i) {
                Ok(status) => return Ok(status),
                Err(e) => last = e,
            }
        }
        Err(HaError::Fault(format!("GET /cluster: {last}")))
    }

    pub(super) fn rest_url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].rest_port)
    }

    pub(super) fn is_primary(&self, i: usize, timeout: Duration) -> bool {
        let url = format!("{}/primary", self.rest_url(i));
        matches!(self.get(&url, timeout), Ok((200, _)))
    }

    /// `GET url`: status and body.
    pub(super) fn get(&self, url: &str, timeout: Duration) -> Result<(u16, String), String> {
        let mut reply = self
            .agent
            .get(url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .call()
            .map_err(|e| e.to_string())?;
        let body = reply
            .body_mut()
            .read_to_string()
            .map_err(|e| e.to_string())?;
        Ok((reply.status().as_u16(), body))
    }

    /// `/cluster` of member `i`, joined with the replication state the
    /// leader's PostgreSQL reports.
    pub(super) fn cluster_status(&self, i: usize) -> Result<Vec<MemberStatus>, String> {
        let url = format!("{}/cluster", self.rest_url(i));
        let (code, body) = self.get(&url, REST_TIMEOUT)?;
        if code != 200 {
            return Err(format!("{url}: {code} {}", body.trim()));
        }
        let cluster: ClusterJson =
            serde_json::from_str(&body).map_err(|e| format!("{url}: {e}: {body}"))?;
        let leader_port = cluster
            .members
            .iter()
            .find(|m| m.role == "leader")
            .and_then(|m| member_index(&m.name))
            .map(|l| self.members[l].pg_port);
        let replication: Vec<(String, String, String)> = leader_port
            .and_then(|port| {
                let sql = "SELECT application_name, state, sync_state FROM pg_stat_replication";
                self.psql_port(port, "postgres", sql).ok()
            })
            .map(|out| {
                out.lines()
                    .filter_map(|line| {
                        let mut cols = line.split('|');
                        Some((
                            cols.next()?.to_string(),
                            cols.next()?.to_string(),
                            cols.next()?.to_string(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(cluster
            .members
            .into_iter()
            .map(|m| {
                let rep = replication.iter().find(|(name, _, _)| *name == m.name);
                MemberStatus {
                    index: member_index(&m.name),
                    lag: m.lag.as_u64(),
                    replication: rep.map(|(_, state, _)| state.clone()),
                    sync_state: rep.map(|(_, _, sync)| sync.clone()),
                    name: m.name,
                    role: m.role,
                    state: m.state,
                    timeline: m.timeline,
                }
            })
            .collect())
    }

    /// `Ok(primary)` when every etcd member is healthy and there is one
    /// leader with two streaming standbys, both synchronous; else what is
    /// missing.
    pub(super) fn health(&self) -> Result<usize, String> {
        for e in &self.etcds {
            if !e.child.as_ref().is_some_and(|c| alive(c.id())) {
                return Err(format!("{} is not running", e.name));
            }
            let url = format!("http://127.0.0.1:{}/health", e.client_port);
            match self.get(&url, REST_TIMEOUT) {
                Ok((200, body)) if body.contains("true") => {}
                Ok((code, body)) => {
                    return Err(format!("{} unhealthy: {code} {}", e.name, body.trim()));
                }
                Err(err) => return Err(format!("{}: {err}", e.name)),
            }
        }
        for m in &self.members {
            if !m.patroni.as_ref().is_some_and(|c| alive(c.id())) {
                return Err(format!("Patroni of {} is not running", m.name));
            }
        }
        let primary = self.primary().ok_or("no member answers 200 to /primary")?;
        let status = self.cluster_status(primary)?;
        let describe = || {
            status
                .iter()
                .map(|m| {
                    format!(
                        "{} {} {} {}",
                        m.name,
                        m.role,
                        m.state,
                        m.replication.as_deref().unwrap_or("-")
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let leaders: Vec<_> = status.iter().filter(|m| m.is_leader()).collect();
        let healthy = status.len() == MEMBERS
            && leaders.len() == 1
            && leaders[0].index == Some(primary)
            && leaders[0].state == "running"
            && status.iter().filter(|m| m.is_streaming_standby()).count() == MEMBERS - 1
            && status.iter().filter(|m| m.is_sync_standby()).count() == MEMBERS - 1;
        if healthy {
            Ok(primary)
        } else {
            Err(format!("members: {}", describe()))
        }
    }

    pub(super) fn wait_healthy(&self, timeout: Duration, what: &str) -> Result<usize, HaError> {
        let deadline = Instant::now() + timeout;
        loop {
            let why = match self.health() {
                Ok(primary) => return Ok(primary),
                Err(why) => why,
            };
            if let Some(exited) = self.exited() {
                return Err(self.not_ready(what, timeout, exited));
            }
            if Instant::now() >= deadline {
                return Err(self.not_ready(what, timeout, why));
            }
            std::thread::sleep(HEALTH_PERIOD);
        }
    }
}
