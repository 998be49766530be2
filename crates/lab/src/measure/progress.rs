//! The run's progress bar on stderr.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinHandle;

use super::RunPlan;
use super::record::RunClock;
use super::workload::Progress;
use crate::shutdown::Shutdown;

/// Shows elapsed seconds and live counters until `stop` turns true. Draws
/// nothing when stderr is not a terminal.
pub(super) fn progress_bar(
    plan: &RunPlan,
    clock: RunClock,
    progress: Arc<Progress>,
    mut stop: Shutdown,
) -> JoinHandle<()> {
    let total = plan.workload.total;
    let warmup = plan.workload.warmup;
    let bar = ProgressBar::new(total.as_secs());
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>8} [{elapsed_precise}] {bar:30} {pos}/{len} s  {msg}",
        )
        .expect("valid template"),
    );
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stop.recv() => break,
            }
            let elapsed = clock.started().elapsed();
            bar.set_prefix(if elapsed < warmup {
                "warm-up"
            } else {
                "measure"
            });
            bar.set_position(elapsed.as_secs().min(total.as_secs()));
            bar.set_message(format!(
                "{} calls, {} refused, {} errors, {} failovers, {} games finished",
                progress.calls.load(Ordering::Relaxed),
                progress.refusals.load(Ordering::Relaxed),
                progress.errors.load(Ordering::Relaxed),
                progress.failovers.load(Ordering::Relaxed),
                progress.sessions_finished.load(Ordering::Relaxed) / 4,
            ));
        }
        bar.finish_and_clear();
    })
}
