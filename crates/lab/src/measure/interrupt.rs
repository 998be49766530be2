//! Ctrl-C or SIGTERM during `bench` or `chaos`: the run stops, and so does
//! everything it started.
//!
//! A local cluster's PostgreSQL is started by `pg_ctl`, which detaches it:
//! it is no child of this process and would outlive one that a signal ends
//! outright (the servers would not: they die with it, see
//! `borbaman_cluster::local`). So a run watches for both signals from
//! before it starts its cluster, and on one drops what it was doing and
//! returns [`Interrupted`]; the cluster is then dropped as at the end of any
//! run, which stops the servers and the database by PID and removes the
//! throwaway data directory.

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};

use crate::shutdown::{self, Shutdown};

/// The error of a run that a signal stopped.
#[derive(Debug, thiserror::Error)]
#[error(
    "interrupted by a signal (Ctrl-C or SIGTERM): the run was stopped and the local cluster it \
     started (servers and database) shut down; no report was written"
)]
pub struct Interrupted;

/// Watches for Ctrl-C and SIGTERM for as long as its runtime runs.
pub struct Interrupt {
    signalled: Shutdown,
}

impl Interrupt {
    /// Takes over Ctrl-C and SIGTERM from now on (they no longer end the
    /// process), on `runtime`. Fails only if the signals cannot be
    /// watched.
    pub fn watch(runtime: &tokio::runtime::Runtime) -> std::io::Result<Interrupt> {
        // Registered here, not when the task first runs: a signal that
        // comes before then must not end the process.
        let _entered = runtime.enter();
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        let (stopper, signalled) = shutdown::channel();
        runtime.spawn(async move {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
            stopper.stop();
        });
        Ok(Interrupt { signalled })
    }

    /// [`Interrupted`] once a signal came. (Only while the runtime runs:
    /// its end drops the watch, which reads as a signal.)
    pub fn check(&self) -> Result<(), Interrupted> {
        match self.signalled.is_shutdown() {
            true => Err(Interrupted),
            false => Ok(()),
        }
    }

    /// Runs `work` until it ends or a signal comes (then `work` is dropped
    /// and the result is [`Interrupted`]).
    pub async fn or_signal<T>(
        &self,
        work: impl Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        let mut signalled = self.signalled.clone();
        tokio::select! {
            result = work => result,
            _ = signalled.recv() => Err(Interrupted.into()),
        }
    }
}
