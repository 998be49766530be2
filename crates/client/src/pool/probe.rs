//! Probing a late call's server on its warm connection: no answer means
//! hung (left at once), an answer means slow; and the probes' round trips
//! as timings.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::choice::pick;
use super::decide::{Probe, Probing, probe_verdict, silent_after};

use super::*;

impl ServerPool {
    /// A health check on `address` answered after `rtt`.
    pub(super) fn record_probe(&self, address: &str, rtt: Duration) {
        let mut state = self.shared.state.lock().unwrap();
        state.timing_mut(address).record_probe(rtt);
    }

    /// Health-checks a late call's server on its warm connection, and at
    /// the same time one other live server, in a task of its own (its
    /// verdict counts even when the call is answered first).
    /// [`probe_verdict`] decides, as each answer or deadline comes: the
    /// late server has its probe deadline, the other as long as
    /// `Tuning::probe_patience` of them. A hung server is marked down (which
    /// every call in flight on it hears). The verdict is told on `tell`,
    /// and closes suspicion `id`.
    pub(super) fn probe(&self, server: &Server, id: u64, tell: watch::Sender<Probe>) {
        let pool = self.clone();
        let t = self.shared.config.tuning;
        let (timeout, own_round_trip, other) = {
            let state = self.shared.state.lock().unwrap();
            let others: Vec<&Server> = state
                .servers
                .iter()
                .filter(|s| s.address != server.address)
                .collect();
            let addresses: Vec<&str> = others.iter().map(|s| s.address.as_str()).collect();
            let other =
                pick(&addresses, &HashSet::new(), &mut rand::rng()).map(|i| others[i].clone());
            let timing = state.timing(&server.address);
            (
                timing.probe_deadline(),
                timing.net.rto().unwrap_or_default(),
                other,
            )
        };
        let server = server.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let overdue_at = started + timeout;
            let give_up_at = started + timeout * t.probe_patience;
            let longest = timeout * t.probe_patience;
            let check = healthy(&server.channel, longest);
            tokio::pin!(check);
            let other_check = async {
                match &other {
                    Some(other) => healthy(&other.channel, longest).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(other_check);
            let mut now = Probing {
                answered: false,
                overdue: false,
                other: other.as_ref().map(|_| None),
                elapsed: Duration::ZERO,
                given_up: false,
                own_round_trip,
            };
            let (mut checking, mut other_checking) = (true, other.is_some());
            let verdict = loop {
                now.elapsed = started.elapsed();
                // A call sent after the late one was answered: alive, only
                // slow, whatever its check says (past a cluster's capacity
                // one server answers checks later than another).
                now.answered |= pool.answered_since_suspected(&server.address, id);
                let verdict = probe_verdict(&t, now);
                match verdict {
                    Probe::Pending => {}
                    Probe::Silent => {
                        if *tell.borrow() != Probe::Silent {
                            tracing::debug!(
                                server = server.address,
                                "server silent: probe unanswered beside another's answer"
                            );
                            tell.send_replace(Probe::Silent);
                        }
                    }
                    Probe::Alive | Probe::Hung => break verdict,
                }
                // The other answered: the late server has that long (at
                // least its own round trip) and the silent slack more,
                // then that long and the hung slack more.
                let (silent_at, other_slack_at) = match now.other {
                    Some(Some(other)) if verdict == Probe::Pending => (
                        started + silent_after(&t, other, own_round_trip),
                        started + other + t.probe_slack,
                    ),
                    Some(Some(other)) => (give_up_at, started + other + t.probe_slack),
                    _ => (give_up_at, give_up_at),
                };
                tokio::select! {
                    answer = &mut check, if checking => {
                        checking = false;
                        match answer {
                            Some(rtt) => {
                                pool.record_probe(&server.address, rtt);
                                now.answered = true;
                            }
                            // Failed outright (or silent all along): no.
                            None => now.overdue = true,
                        }
                    }
                    answer = &mut other_check, if other_checking => {
                        other_checking = false;
                        if let (Some(rtt), Some(other)) = (answer, &other) {
                            pool.record_probe(&other.address, rtt);
                            now.other = Some(Some(started.elapsed()));
                        }
                    }
                    _ = tokio::time::sleep_until(overdue_at.into()), if !now.overdue => {
                        now.overdue = true;
                    }
                    _ = tokio::time::sleep_until(silent_at.into()), if silent_at < give_up_at => {}
                    _ = tokio::time::sleep_until(other_slack_at.into()), if other_slack_at < give_up_at => {}
                    _ = tokio::time::sleep_until(give_up_at.into()) => {
                        now.given_up = true;
                    }
                }
                // Both checks over, neither changing anything any more.
                if !checking && !other_checking {
                    now.given_up = true;
                }
            };
            {
                let mut state = pool.shared.state.lock().unwrap();
                if state
                    .suspects
                    .get(&server.address)
                    .is_some_and(|s| s.id == id)
                {
                    state.suspects.remove(&server.address);
                }
            }
            if verdict == Probe::Hung {
                tracing::info!(server = server.address, "server hung: no answer to a probe");
                pool.mark_down(&server.address);
            }
            tell.send_replace(verdict);
        });
    }

    /// Whether `address`, under suspicion `id`, answered a call sent after
    /// the late one that opened it ([`Suspicion::answer`]).
    pub(super) fn answered_since_suspected(&self, address: &str, id: u64) -> bool {
        let state = self.shared.state.lock().unwrap();
        state
            .suspects
            .get(address)
            .is_some_and(|s| s.id == id && s.suspicion.answered)
    }
}
