//! The standing connections, kept standing: after an outage of this
//! server's link to the database, the pool is topped up again to its
//! `min_connections`, opened and planned ahead of need.
//!
//! Start-up opens them ([`Store::warm_up`]) so that the burst of calls
//! failing over from a dead server finds connections open and planned.
//! But a partition between this server and PostgreSQL ends every one of
//! them, and the pool does not reopen them when the path heals: sqlx's
//! own upkeep of `min_connections` gives up at the first connect that
//! fails other than refused, and runs again only when a connection is
//! dropped or reaped (minutes later); while following Patroni the store
//! does without that upkeep altogether (see the store's module docs).
//! Calls then open connections one by one as they need them, so a
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
//! whether to reopen what is missing, in the background, paced and planned
//! as at start-up. Unlike start-up, calls are running meanwhile: the
//! top-up opens new connections without holding the idle ones (holding
//! them would have the calls open more of their own, unpaced, which is the
//! cost this avoids).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::task::Poll;

use sqlx::Postgres;
use sqlx::pool::PoolConnection;

use super::{Error, Store, plan_warm_statements, warm_up_pause};

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
        let standing = self.standing;
        let running = self.topping_up.load(Ordering::Acquire);
        if !top_up_now(committed, open, standing, running)
            || self.topping_up.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let store = self.clone();
        tokio::spawn(async move {
            match store.top_up().await {
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

    /// Opens connections until the pool holds its `min_connections`, a
    /// [`StoreOptions::warm_up_pace`](super::StoreOptions::warm_up_pace)
    /// apart, and plans the game calls' statements on each before the
    /// calls get it. At most `min_connections` attempts, so that a pool
    /// which hands over idle connections instead (see [`Store::open_one`])
    /// does not keep it going.
    async fn top_up(&self) -> Result<(), Error> {
        let wanted = self.standing;
        for attempt in 0..wanted {
            tokio::time::sleep(warm_up_pause(attempt, self.warm_up_pace)).await;
            if self.pool.size() >= wanted {
                break;
            }
            // Planning a connection planned already costs two round trips.
            let mut conn = self.open_one().await?;
            plan_warm_statements(&mut conn).await?;
        }
        Ok(())
    }

    /// A connection the pool opens now, without taking its idle
    /// connections from the calls for longer than an instant: they are
    /// held only while the pool's `acquire` first runs (it finds none
    /// idle, so it reserves a place and starts connecting), and given
    /// back before the connection is made. Should `acquire` not get that
    /// far at once, it may hand over an idle one after all.
    async fn open_one(&self) -> Result<PoolConnection<Postgres>, Error> {
        let mut borrowed = Vec::new();
        while let Some(conn) = self.pool.try_acquire() {
            borrowed.push(conn);
        }
        let mut acquire = std::pin::pin!(self.pool.acquire());
        let first = std::future::poll_fn(|cx| Poll::Ready(acquire.as_mut().poll(cx))).await;
        drop(borrowed);
        Ok(match first {
            Poll::Ready(conn) => conn?,
            Poll::Pending => acquire.await?,
        })
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

    async fn backend_pid(conn: &mut PoolConnection<Postgres>) -> i32 {
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut **conn)
            .await
            .unwrap()
    }

    async fn until_idle(store: &Store, idle: usize) {
        borbaman_cluster::wait::until(
            &format!("{idle} idle connections in the pool"),
            std::time::Duration::from_secs(5),
            || async { (store.pool().num_idle() == idle).then_some(()) },
        )
        .await;
    }

    /// The top-up's connection is a new one, opened beside the idle ones,
    /// which stay the calls': taking them would have the calls open more.
    #[tokio::test]
    async fn a_connection_is_opened_beside_the_idle_ones_not_taken_from_them() {
        let pg = borbaman_cluster::LocalPostgres::start_temp(borbaman_cluster::PgOptions {
            fsync: false,
            port: None,
        })
        .unwrap();
        let options = crate::store::StoreOptions {
            min_connections: 3,
            max_connections: 4,
            ..crate::store::StoreOptions::default()
        };
        let store = Store::connect(&pg.url(), &options).unwrap();
        let (mut a, mut b) = (
            store.pool().acquire().await.unwrap(),
            store.pool().acquire().await.unwrap(),
        );
        let idle = [backend_pid(&mut a).await, backend_pid(&mut b).await];
        drop((a, b));
        until_idle(&store, 2).await;

        let mut opened = store.open_one().await.unwrap();
        let pid = backend_pid(&mut opened).await;
        assert!(!idle.contains(&pid), "an idle connection was taken: {pid}");
        assert_eq!(store.pool().size(), 3);
        until_idle(&store, 2).await;
        drop(opened);

        store.top_up().await.unwrap();
        assert_eq!(store.pool().size(), 3, "already standing: nothing opened");
    }
}
