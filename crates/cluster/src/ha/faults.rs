//! The faults tests and chaos runs inject (a postmaster killed, a host
//! lost, a switchover, an etcd member killed) and `restore`, which starts
//! again what was killed and waits until the cluster is whole.

use super::*;

impl LocalHa {
    /// SIGKILLs member `i`'s postmaster only; its Patroni stays up, sees it
    /// gone and (on the primary) gives up the leader lock. Returns when the
    /// signal was sent.
    pub fn kill_postmaster(&mut self, i: usize) -> Result<Instant, HaError> {
        let pm = self.postmaster(i).ok_or_else(|| {
            HaError::Fault(format!("{} has no running postmaster", member_name(i)))
        })?;
        kill(pm.pid, libc::SIGKILL);
        Ok(Instant::now())
    }

    /// A lost machine: SIGKILLs member `i`'s Patroni, its postmaster and
    /// every PostgreSQL process of the member at once. Returns when the
    /// signals were sent.
    pub fn host_loss(&mut self, i: usize) -> Result<Instant, HaError> {
        self.member(i)?;
        let postmaster = self.postmaster(i);
        let backends = postmaster.map(|pm| children_of(pm.pid)).unwrap_or_default();
        let member = &mut self.members[i];
        let patroni = member.patroni.as_ref().map(Child::id).filter(|&p| alive(p));
        if patroni.is_none() && postmaster.is_none() {
            return Err(HaError::Fault(format!("{} is already down", member.name)));
        }
        // Patroni first, so that it cannot react to the rest.
        for pid in patroni
            .into_iter()
            .chain(postmaster.map(|pm| pm.pid))
            .chain(backends.iter().map(|b| b.pid))
        {
            kill(pid, libc::SIGKILL);
        }
        let sent = Instant::now();
        if let Some(mut child) = member.patroni.take() {
            let _ = child.wait();
        }
        Ok(sent)
    }

    /// A planned switchover through Patroni's REST API (`POST /switchover`)
    /// from the current leader, naming no candidate: both standbys are
    /// synchronous, both race for the leader key, and the one that loses
    /// follows the winner at once. (Naming one makes the other sleep 2 s
    /// in Patroni 3.0.2 before it follows, and strict synchronous mode
    /// holds every commit until a standby streams from the new primary:
    /// docs/replicated-database.md.) Returns once Patroni accepted it (or
    /// did not refuse it within half a second); the switch itself takes a
    /// few seconds: see [`Self::wait_for_new_primary`].
    pub fn switchover(&self) -> Result<Switchover, HaError> {
        let from = self.primary().ok_or(HaError::NoPrimary)?;
        let status = self.cluster_status(from).map_err(HaError::Fault)?;
        let candidates: Vec<usize> = status
            .iter()
            .filter(|m| m.role == "sync_standby")
            .filter_map(|m| m.index)
            .collect();
        if candidates.is_empty() {
            return Err(HaError::Fault(
                "no synchronous standby to switch over to".into(),
            ));
        }
        let switchover = Switchover {
            from,
            candidates,
            from_name: member_name(from),
        };
        let body = serde_json::json!({ "leader": switchover.from_name }).to_string();
        let url = format!("{}/switchover", self.rest_url(from));
        let agent = self.agent.clone();
        let (tx, rx) = mpsc::channel();
        // Patroni answers only once the switch is done (or after ~20 s);
        // a refusal comes at once.
        std::thread::Builder::new()
            .name("ha-switchover".into())
            .spawn(move || {
                let reply = agent
                    .post(&url)
                    .config()
                    .timeout_global(Some(Duration::from_secs(30)))
                    .build()
                    .header("Content-Type", "application/json")
                    .send(body.as_str())
                    .map_err(|e| e.to_string())
                    .map(|mut r| {
                        let text = r.body_mut().read_to_string().unwrap_or_default();
                        (r.status().as_u16(), text)
                    });
                let _ = tx.send(reply);
            })
            .map_err(|source| HaError::Spawn {
                what: "the switchover thread".into(),
                source,
            })?;
        match rx.recv_timeout(SWITCHOVER_REFUSAL) {
            Ok(Ok((200, _))) | Err(mpsc::RecvTimeoutError::Timeout) => Ok(switchover),
            Ok(Ok((code, text))) => Err(HaError::Fault(format!(
                "Patroni refused the switchover ({code}): {}",
                text.trim()
            ))),
            Ok(Err(e)) => Err(HaError::Fault(format!("POST /switchover: {e}"))),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(HaError::Fault("POST /switchover: no reply".into()))
            }
        }
    }

    /// SIGKILLs etcd member `j`.
    pub fn kill_etcd(&mut self, j: usize) -> Result<Instant, HaError> {
        let etcd = self.etcds.get_mut(j).ok_or(HaError::NoSuchEtcd(j))?;
        let mut child = etcd
            .child
            .take()
            .ok_or_else(|| HaError::Fault(format!("{} is already down", etcd.name)))?;
        kill(child.id(), libc::SIGKILL);
        let sent = Instant::now();
        let _ = child.wait();
        Ok(sent)
    }

    /// Starts again every etcd member and Patroni that is down (a killed
    /// old primary rejoins as a standby, rewound or cloned again), and
    /// waits until the cluster is healthy: one leader, two streaming
    /// standbys, both synchronous. Returns the primary.
    pub fn restore(&mut self) -> Result<usize, HaError> {
        // None for a group that shares another's etcd.
        for j in 0..self.etcds.len() {
            if !self.etcds[j].child.as_ref().is_some_and(|c| alive(c.id())) {
                if let Some(mut old) = self.etcds[j].child.take() {
                    let _ = old.wait();
                }
                self.spawn_etcd(j, true)?;
            }
        }
        for i in 0..MEMBERS {
            if self.members[i]
                .patroni
                .as_ref()
                .is_some_and(|c| alive(c.id()))
            {
                continue;
            }
            if let Some(mut old) = self.members[i].patroni.take() {
                let _ = old.wait();
            }
            // An orphaned postmaster (its Patroni died, it did not): stop it,
            // Patroni will start it again in the right role.
            if let Some(pm) = self.postmaster(i) {
                stop_postmaster(pm, Duration::from_secs(5));
            }
            self.spawn_patroni(i)?;
        }
        let timeout = self.opts.heal_timeout;
        self.wait_healthy(timeout, "the cluster did not heal")
    }
}
