//! Waiting for a condition with a deadline, for the tests and anything else
//! that drives a cluster from outside: a log line, a row, a status.
//!
//! A fixed sleep either flakes on a busy machine (too short) or lets a late
//! event slip past the check after it (too long to notice). These helpers
//! poll the condition instead, return as soon as it holds, and when the
//! deadline passes they panic with what never came, so a failing test says
//! what it was waiting for rather than only that an assertion failed later.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often a condition is checked.
const POLL: Duration = Duration::from_millis(20);

/// Polls `check` until it gives a value, and returns it.
///
/// # Panics
///
/// When `timeout` passes first, with "waited … for {what}".
#[track_caller]
pub fn until_blocking<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        if started.elapsed() >= timeout {
            gave_up(what, started.elapsed());
        }
        std::thread::sleep(POLL);
    }
}

/// Polls the future `check` makes until it gives a value, and returns it.
/// Each check runs to completion: give it a deadline of its own if it can
/// hang.
///
/// # Panics
///
/// When `timeout` passes first, with "waited … for {what}".
#[track_caller]
pub fn until<'a, T, F, Fut>(
    what: &'a str,
    timeout: Duration,
    mut check: F,
) -> impl Future<Output = T> + 'a
where
    F: FnMut() -> Fut + 'a,
    Fut: Future<Output = Option<T>> + 'a,
    T: 'a,
{
    let caller = std::panic::Location::caller();
    async move {
        let started = Instant::now();
        loop {
            if let Some(value) = check().await {
                return value;
            }
            if started.elapsed() >= timeout {
                panic!(
                    "waited {:.1?} for {what}; it never came (at {caller})",
                    started.elapsed()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Waits until the file `log` contains `needle` (a server's log line).
///
/// # Panics
///
/// When `timeout` passes first, naming the line and the file.
pub async fn until_logged(log: &Path, needle: &str, timeout: Duration) {
    let what = format!("{needle:?} in {}", log.display());
    until(&what, timeout, || async {
        logged(log, needle).then_some(())
    })
    .await
}

/// Whether the file `log` contains `needle` now (`false` if unreadable).
pub fn logged(log: &Path, needle: &str) -> bool {
    std::fs::read_to_string(log).is_ok_and(|text| text.contains(needle))
}

#[track_caller]
fn gave_up(what: &str, waited: Duration) -> ! {
    panic!("waited {waited:.1?} for {what}; it never came")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_value_once_the_condition_holds() {
        let mut calls = 0;
        let value = until_blocking("the third call", Duration::from_secs(5), || {
            calls += 1;
            (calls == 3).then_some(calls)
        });
        assert_eq!(value, 3);
    }

    #[test]
    fn names_what_never_came() {
        let err = std::panic::catch_unwind(|| {
            until_blocking::<()>("the moon", Duration::from_millis(50), || None)
        })
        .expect_err("gives up");
        let message = err.downcast_ref::<String>().expect("a message");
        assert!(message.contains("for the moon; it never came"), "{message}");
    }

    #[tokio::test]
    async fn waits_for_a_log_line() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let writer = {
            let log = log.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(60)).await;
                std::fs::write(&log, "INFO slow mode on (fault injection)\n").unwrap();
            })
        };
        assert!(!logged(&log, "slow mode on"));
        until_logged(&log, "slow mode on", Duration::from_secs(5)).await;
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn an_async_check_that_never_holds_gives_up_with_its_name() {
        let outcome = tokio::spawn(until("a row", Duration::from_millis(50), || async {
            None::<()>
        }))
        .await;
        let err = outcome.expect_err("panics");
        let message = err.into_panic();
        let message = message.downcast_ref::<String>().expect("a message");
        assert!(message.contains("for a row; it never came"), "{message}");
    }
}
