//! The standing connections, kept standing: after an outage of this
//! server's link to the database, the pool is topped up again to its
//! `min_connections`, opened and planned ahead of need.
//!
//! Start-up opens them ([`Store::warm_up`]) so that the burst of calls
//! failing over from a dead server finds connections open and planned.
//! But a partition between this server and PostgreSQL ends every one of
//! them, and the pool does not reopen them when the path heals: sqlx's
//! own upkeep of `min_connections` gives up at the first failed connect
//! and runs again only when a connection is dropped or reaped (minutes
//! later). Calls then open connections one by one as they need them, so a
//! server that was cut off stays at one or two. When the next server is
//! cut off, its games land on survivors that must each start several
//! PostgreSQL backends and plan the game's statements on them, all at
//! once, on the failover's critical path: on a two-core machine that is
//! 50–70 ms of every call on those servers (chaos, `db-partition`: the
//! faults whose survivors opened 9 connections took 96–127 ms to recover,
//! those that opened none 49 ms).
//!
//! The heartbeat is the probe: a heartbeat that committed shows the
//! database is reachable from here again, and [`top_up_now`] decides
//! whether to reopen what is missing, in the background, paced as at
//! start-up.

use std::sync::atomic::Ordering;

use super::Store;

/// Whether to top the pool up now: the last heartbeat `committed` (the
/// database is reachable, so connecting is not wasted on a cut path), the
/// pool holds fewer than its `standing` connections (`open` counts those
/// in use too), and no top-up is running already.
pub fn top_up_now(committed: bool, open: u32, standing: u32, running: bool) -> bool {
    committed && !running && open < standing
}

impl Store {
    /// Takes a heartbeat's outcome; if [`top_up_now`] says so, reopens the
    /// missing standing connections in the background (each paced and
    /// planned as by [`Store::warm_up`]). Call inside a Tokio runtime.
    pub fn keep_standing(&self, committed: bool) {
        let open = self.pool.size();
        let standing = self.pool.options().get_min_connections();
        let running = self.topping_up.load(Ordering::Acquire);
        if !top_up_now(committed, open, standing, running)
            || self.topping_up.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let store = self.clone();
        tokio::spawn(async move {
            match store.warm_up().await {
                Ok(()) => tracing::info!(
                    was = open,
                    now = store.pool.size(),
                    "standing database connections reopened"
                ),
                Err(err) => {
                    tracing::debug!(error = %err, "reopening standing database connections")
                }
            }
            store.topping_up.store(false, Ordering::Release);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_short_of_its_standing_connections_is_topped_up_once_the_database_answers() {
        assert!(top_up_now(true, 1, 8, false), "healed: reopen");
        assert!(top_up_now(true, 0, 8, false));
        assert!(
            !top_up_now(false, 0, 8, false),
            "still cut off: connecting would fail"
        );
        assert!(!top_up_now(true, 8, 8, false), "all standing");
        assert!(!top_up_now(true, 12, 8, false), "more than standing");
        assert!(!top_up_now(true, 1, 8, true), "one top-up at a time");
        assert!(!top_up_now(true, 0, 0, false), "none wanted");
    }
}
