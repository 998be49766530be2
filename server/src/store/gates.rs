//! One write at a time per game, within this server.
//!
//! Two calls on one game that overlap between their read and their
//! compare-and-set write collide: one of them reads and writes again. Calls
//! through different servers can only find out in the database, but calls
//! through the same server can simply wait their turn here, which costs
//! nothing the collision would not have cost, and saves the database the
//! wasted read and write. The wait is in this process only: a server
//! stopped while holding a gate holds up no other server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use crate::metrics::{self, Metrics};

/// The gates of the games written through this server right now.
#[derive(Debug, Default)]
pub(crate) struct Gates {
    games: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
    /// Where the waits are counted, if anywhere.
    metrics: Option<Metrics>,
}

/// Held while a call writes its game; the next call on the game through
/// this server enters when it is dropped.
pub(crate) struct Gate<'a> {
    gates: &'a Gates,
    game_id: u64,
    held: Option<OwnedMutexGuard<()>>,
}

impl Gates {
    /// Waits for the calls on `game_id` that came before (first come, first
    /// served).
    pub(crate) async fn enter(&self, game_id: u64) -> Gate<'_> {
        let gate = self.map().entry(game_id).or_default().clone();
        let asked = Instant::now();
        let held = gate.lock_owned().await;
        if let Some(m) = &self.metrics {
            let waited = asked.elapsed();
            m.gate_waited(waited);
            metrics::calls::note_gate_wait(waited);
        }
        Gate {
            gates: self,
            game_id,
            held: Some(held),
        }
    }

    /// Gates whose waits are counted in `metrics`.
    pub(crate) fn observed(metrics: Metrics) -> Gates {
        Gates {
            games: Mutex::default(),
            metrics: Some(metrics),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<tokio::sync::Mutex<()>>>> {
        // A panic while the map was locked leaves it consistent.
        self.games.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }
}

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        drop(self.held.take());
        let mut map = self.gates.map();
        // Forget the game once no call holds or awaits its gate (they hold
        // a clone); new callers clone under the map's lock, so none is
        // missed.
        if map
            .get(&self.game_id)
            .is_some_and(|gate| Arc::strong_count(gate) == 1)
        {
            map.remove(&self.game_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn calls_on_one_game_take_turns_and_others_pass() {
        let gates = Arc::new(Gates::default());
        let inside = Arc::new(AtomicU32::new(0));
        let mut tasks = Vec::new();
        for i in 0..8u64 {
            let (gates, inside) = (gates.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                let _gate = gates.enter(7).await;
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "call {i}");
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
            }));
        }
        // Another game is not held up by game 7.
        let other = tokio::time::timeout(Duration::from_millis(5), gates.enter(8)).await;
        assert!(other.is_ok());
        drop(other);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(gates.len(), 0, "finished games are forgotten");
    }
}
