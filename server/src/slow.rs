//! Slow mode, a fault-injection hook: while it is on, the game service
//! waits a fixed delay (`--slow-mode-ms`) before it handles each game call,
//! as a server would that is starved of CPU, swapping, or stuck behind a
//! slow disk. Its health checks, registry and `Ping` still answer at once:
//! a gray failure, which only the callers' own timing reveals.
//!
//! `borbaman-server` switches it on at SIGUSR1 and off at SIGUSR2 (on and
//! off rather than a toggle, so that a repeated signal does no harm);
//! `borbaman chaos --fault slow` uses it. The wait comes before the call
//! touches the database, so a slow server holds no game's lock while it
//! waits, and a caller that gives up on it (a hedged copy answered first)
//! cancels the wait.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Whether the server is slow now, and by how much.
#[derive(Debug, Default)]
pub struct SlowMode {
    on: AtomicBool,
    delay: Duration,
}

impl SlowMode {
    /// Off; `delay` once switched on.
    pub fn new(delay: Duration) -> SlowMode {
        SlowMode {
            on: AtomicBool::new(false),
            delay,
        }
    }

    pub fn set(&self, on: bool) {
        if self.on.swap(on, Ordering::Relaxed) != on {
            tracing::warn!(
                delay_ms = self.delay.as_millis() as u64,
                "slow mode {} (fault injection)",
                if on { "on" } else { "off" }
            );
        }
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// Waits the delay if slow mode is on; returns at once otherwise.
    pub async fn pause(&self) {
        if self.is_on() && !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn pauses_only_while_on() {
        let slow = SlowMode::new(Duration::from_millis(30));
        let started = Instant::now();
        slow.pause().await;
        assert!(started.elapsed() < Duration::from_millis(30), "off");
        slow.set(true);
        assert!(slow.is_on());
        let started = Instant::now();
        slow.pause().await;
        assert!(started.elapsed() >= Duration::from_millis(30), "on");
        slow.set(false);
        let started = Instant::now();
        slow.pause().await;
        assert!(started.elapsed() < Duration::from_millis(30), "off again");
    }
}
