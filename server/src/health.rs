//! Health that means something: the `Game` service is `SERVING` only while
//! this server can write to its database.
//!
//! The registry heartbeat is a write that commits every heartbeat interval,
//! so its outcome is the probe: [`DatabaseHealth::beat`] takes each one,
//! [`Judge`] decides, and [`report_task`] sets `grpc.health.v1`'s status of
//! `borbaman.v1.Game` (a load balancer or orchestrator asks for that
//! name). The overall status (the empty service name) stays `SERVING` while
//! the process runs: clients' pools check that one, and a database outage
//! is every server's at once, so moving calls between servers would help
//! nobody.

use std::sync::Mutex;

use borbaman_proto::pb;
use tokio::sync::watch;
use tonic_health::server::HealthReporter;

use crate::metrics::Metrics;
use crate::service::GameService;

/// Heartbeats failed in a row before the game service is `NOT_SERVING`:
/// one failure may be a blip (a conflict, a slow commit); two span at
/// least a heartbeat interval.
pub const FAILURES_BEFORE_NOT_SERVING: u32 = 2;

/// Decides from heartbeat outcomes whether the database is writable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Judge {
    failures_in_a_row: u32,
}

impl Judge {
    /// Takes one heartbeat's outcome; whether to serve now. One success
    /// is enough to serve again: it committed.
    pub fn beat(&mut self, committed: bool) -> bool {
        if committed {
            self.failures_in_a_row = 0;
        } else {
            self.failures_in_a_row = self.failures_in_a_row.saturating_add(1);
        }
        self.failures_in_a_row < FAILURES_BEFORE_NOT_SERVING
    }
}

/// Takes the heartbeats' outcomes; publishes whether to serve.
#[derive(Debug)]
pub struct DatabaseHealth {
    judge: Mutex<Judge>,
    serving: watch::Sender<bool>,
    metrics: Metrics,
}

impl DatabaseHealth {
    /// Serving at first (a server starts only once it has registered).
    pub fn new(metrics: Metrics) -> DatabaseHealth {
        metrics.database_writable(true);
        DatabaseHealth {
            judge: Mutex::default(),
            serving: watch::Sender::new(true),
            metrics,
        }
    }

    /// One heartbeat committed (or failed).
    pub fn beat(&self, committed: bool) {
        let serving = self
            .judge
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .beat(committed);
        self.metrics.database_writable(serving);
        self.serving.send_if_modified(|now| {
            let changed = *now != serving;
            *now = serving;
            changed
        });
    }

    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.serving.subscribe()
    }
}

/// Sets the game service's health from `serving` until `stop`.
pub async fn report_task(
    reporter: HealthReporter,
    mut serving: watch::Receiver<bool>,
    mut stop: borbaman_shutdown::Shutdown,
) {
    type Game = pb::game_server::GameServer<GameService>;
    loop {
        tokio::select! {
            changed = serving.changed() => if changed.is_err() { return },
            _ = stop.recv() => return,
        }
        if stop.is_shutdown() {
            return;
        }
        if *serving.borrow_and_update() {
            tracing::info!("database writable again: the game service is SERVING");
            reporter.set_serving::<Game>().await;
        } else {
            tracing::warn!("database not writable: the game service is NOT_SERVING");
            reporter.set_not_serving::<Game>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_failures_in_a_row_stop_serving_and_one_success_resumes() {
        let mut judge = Judge::default();
        assert!(judge.beat(true));
        assert!(judge.beat(false), "one failure is a blip");
        assert!(judge.beat(true));
        assert!(judge.beat(false));
        assert!(!judge.beat(false), "two in a row");
        assert!(!judge.beat(false));
        assert!(judge.beat(true), "one commit is enough");
    }

    #[tokio::test]
    async fn only_changes_are_published() {
        let health = DatabaseHealth::new(Metrics::new());
        let mut rx = health.subscribe();
        health.beat(false);
        assert!(!rx.has_changed().unwrap());
        health.beat(false);
        assert!(rx.has_changed().unwrap());
        assert!(!*rx.borrow_and_update());
        health.beat(false);
        assert!(!rx.has_changed().unwrap());
        health.beat(true);
        assert!(*rx.borrow_and_update());
    }
}
