//! One way to tell tasks to stop, for every Borbaman program: the app
//! (play, watch, bots, bench, chaos), the game server (its heartbeat,
//! retention job and graceful drain) and the local cluster's threads (the
//! database proxy).
//!
//! A [`Stopper`] is held by whoever decides (the player pressing q, a
//! signal, the end of a measured run, a dropped handle); every task that
//! must stop holds a cheap clone of [`Shutdown`], checks
//! [`Shutdown::is_shutdown`] between steps (plain threads can too) and
//! `select!`s on [`Shutdown::recv`] while it waits. Dropping the `Stopper`
//! counts as a stop too, so no task outlives its owner by waiting on a
//! channel nobody will ever send on.

use tokio::sync::watch;

/// The sending side: stops every [`Shutdown`] made from it. Clones share
/// it (any of them may stop); the stop that dropping means happens when the
/// last clone goes.
#[derive(Clone, Debug)]
pub struct Stopper {
    sender: std::sync::Arc<watch::Sender<bool>>,
}

/// The listening side; clones share the stop.
#[derive(Clone, Debug)]
pub struct Shutdown {
    receiver: watch::Receiver<bool>,
}

/// A new stopper and its first listener.
pub fn channel() -> (Stopper, Shutdown) {
    let (sender, receiver) = watch::channel(false);
    (
        Stopper {
            sender: std::sync::Arc::new(sender),
        },
        Shutdown { receiver },
    )
}

impl Stopper {
    /// Stops every listener; later calls do nothing.
    pub fn stop(&self) {
        self.sender.send_replace(true);
    }

    /// Another listener.
    pub fn subscribe(&self) -> Shutdown {
        Shutdown {
            receiver: self.sender.subscribe(),
        }
    }

    pub fn is_stopped(&self) -> bool {
        *self.sender.borrow()
    }
}

impl Shutdown {
    /// True once stopped (or once the [`Stopper`] is gone).
    pub fn is_shutdown(&self) -> bool {
        *self.receiver.borrow() || self.receiver.has_changed().is_err()
    }

    /// Waits until stopped; returns at once if already stopped.
    pub async fn recv(&mut self) {
        // An error means the stopper was dropped: that is a stop too.
        let _ = self.receiver.wait_for(|stopped| *stopped).await;
    }

    /// Sleeps for `duration` unless stopped first; true when stopped.
    pub async fn sleep(&mut self, duration: std::time::Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(duration) => self.is_shutdown(),
            _ = self.recv() => true,
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    let term = async {
        match term.as_mut() {
            Some(term) => {
                term.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_stop_reaches_every_listener_and_a_dropped_stopper_is_a_stop() {
        let (stopper, mut a) = channel();
        let mut b = stopper.subscribe();
        assert!(!a.is_shutdown());
        assert!(!a.sleep(Duration::from_millis(1)).await);
        stopper.stop();
        a.recv().await;
        assert!(b.is_shutdown());
        b.recv().await;

        let (stopper, mut c) = channel();
        drop(stopper);
        assert!(c.is_shutdown());
        tokio::time::timeout(Duration::from_secs(1), c.recv())
            .await
            .expect("a dropped stopper stops");
    }
}
