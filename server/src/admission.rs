//! Admission control: a bound on the game calls this server runs against
//! the database at once, with priorities, so that past its capacity the
//! cluster serves fewer games well instead of every game badly.
//!
//! Every game call takes a [`Permit`] before it reaches the store and
//! gives it back when it is done. The calls on one game share one place:
//! they take turns at the game's gate in the store and reach the database
//! one at a time, so a game is one unit of database work however many of
//! its players' calls wait for it. A call of a given [`Priority`] enters
//! only while fewer places than its class's share of the bound
//! ([`AdmissionLimits::bound`]) are taken: the calls of players already
//! seated (`Act`, `Leave`, `GetState`) may fill the whole bound, joins
//! half of it, spectators (`WatchState`, `ListGames`, `GetReplay`,
//! `Rankings`) a quarter. So as the database slows down and calls pile up,
//! spectators are turned away first, then new players, and the running
//! games keep the database to themselves.
//!
//! A call that does not enter at once waits in line, briefly (CoDel's
//! lesson: a queue is for bursts, not for standing load): up to
//! [`AdmissionLimits::queue_timeout`], and joins up to
//! [`AdmissionLimits::join_queue_timeout`], since one join costs several
//! round trips under the single `lobby` row's lock and many at once only
//! wait for each other there. A call still not admitted then is refused
//! before it touches the database, with `RESOURCE_EXHAUSTED`, the reason
//! `server-full` and a pushback ([`pushback`]): the time after which the
//! client tries again, longer for the classes that can wait, and spread
//! at random so that refused clients do not come back together.
//!
//! The bound is static (`--max-db-concurrency`, 16 by default; past the
//! server's database connections, `--db-connections`, admitted calls wait
//! for a connection in turn, as a burst of joins waits for the lobby's
//! lock whatever the bound; see `docs/scaling.md` for the
//! measurements behind it); 0 switches admission control off.
//! [`Admission::stats`] counts what was admitted, queued and refused.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// How important a call is when the server is full; the most important
/// first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Priority {
    /// A seated player's call: `Act`, `Leave`, `GetState`.
    Play,
    /// `Join`: a player asking for a seat.
    Join,
    /// Spectators and lists: `WatchState`, `ListGames`, `GetReplay`,
    /// `Rankings`.
    Spectate,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Play, Priority::Join, Priority::Spectate];

    pub const fn as_str(self) -> &'static str {
        match self {
            Priority::Play => "play",
            Priority::Join => "join",
            Priority::Spectate => "spectate",
        }
    }

    const fn index(self) -> usize {
        match self {
            Priority::Play => 0,
            Priority::Join => 1,
            Priority::Spectate => 2,
        }
    }
}

/// The server's admission limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdmissionLimits {
    /// Calls in flight at once, all classes together; `None`: no bound
    /// (admission control off).
    pub max_in_flight: Option<usize>,
    /// Longest wait in line of a seated player's call or a spectator's.
    pub queue_timeout: Duration,
    /// Longest wait in line of a join.
    pub join_queue_timeout: Duration,
}

impl AdmissionLimits {
    /// Admission control off.
    pub const NONE: AdmissionLimits = AdmissionLimits {
        max_in_flight: None,
        queue_timeout: Duration::ZERO,
        join_queue_timeout: Duration::ZERO,
    };

    /// The most calls in flight at which a call of `priority` still
    /// enters (it enters while fewer are): the whole bound for players,
    /// half for joins, a quarter for spectators, at least one each.
    pub fn bound(&self, priority: Priority) -> usize {
        let Some(max) = self.max_in_flight else {
            return usize::MAX;
        };
        let share = match priority {
            Priority::Play => max,
            Priority::Join => max.div_ceil(2),
            Priority::Spectate => max.div_ceil(4),
        };
        share.max(1)
    }

    /// Whether a call of `priority` enters with `in_flight` calls in flight.
    pub fn admits(&self, priority: Priority, in_flight: usize) -> bool {
        in_flight < self.bound(priority)
    }

    /// How long a call of `priority` may wait in line.
    pub fn queue_timeout(&self, priority: Priority) -> Duration {
        match priority {
            Priority::Join => self.join_queue_timeout,
            Priority::Play | Priority::Spectate => self.queue_timeout,
        }
    }
}

/// The pushback sent with a refusal: how long the refused client waits
/// before it tries again. A seated player's next tick comes soon anyway; a
/// joiner or a spectator can wait longer, and is spread over half to one
/// and a half times its class's base by `spread`, a number in `[0, 1)`,
/// so that the clients refused by one burst do not come back as one.
pub fn pushback(priority: Priority, spread: f64) -> Duration {
    let base = match priority {
        Priority::Play => Duration::from_millis(50),
        Priority::Join => Duration::from_millis(1000),
        Priority::Spectate => Duration::from_millis(2000),
    };
    base.mul_f64(0.5 + spread.clamp(0.0, 1.0))
}

/// What admission control did, since the server started; per class,
/// indexed like [`Priority::ALL`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdmissionStats {
    /// Calls in flight now.
    pub in_flight: u64,
    /// Calls waiting in line now, per class.
    pub waiting: [u64; 3],
    /// Calls admitted (at once or after waiting in line).
    pub admitted: [u64; 3],
    /// Calls that waited in line before they were admitted or refused.
    pub queued: [u64; 3],
    /// Calls refused with `server-full`.
    pub refused: [u64; 3],
}

impl AdmissionStats {
    pub fn admitted(&self, priority: Priority) -> u64 {
        self.admitted[priority.index()]
    }

    pub fn queued(&self, priority: Priority) -> u64 {
        self.queued[priority.index()]
    }

    pub fn refused(&self, priority: Priority) -> u64 {
        self.refused[priority.index()]
    }
}

/// A call that was not admitted: refuse it with this pushback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    pub priority: Priority,
    pub pushback: Duration,
}

/// The admission control of one server; cheap to clone, shared by its
/// services.
#[derive(Clone, Debug)]
pub struct Admission {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    limits: AdmissionLimits,
    /// Calls in flight and in line. A std mutex: held for a few
    /// comparisons, never across an await.
    counts: Mutex<Counts>,
    /// Per class, woken one at a time as places are given back.
    freed: [Notify; 3],
    admitted: [AtomicU64; 3],
    queued: [AtomicU64; 3],
    refused: [AtomicU64; 3],
}

#[derive(Debug, Default)]
struct Counts {
    /// Places taken: one per game with calls in flight, one per other call.
    in_flight: usize,
    /// Calls waiting in line, per class.
    waiting: [usize; 3],
    /// Calls in flight per game, for the games holding a place.
    games: HashMap<u64, usize>,
}

impl Counts {
    /// The class whose call in line gets the place just given back: the
    /// most important that waits and may enter now, if any.
    fn next_in_line(&self, limits: &AdmissionLimits) -> Option<Priority> {
        Priority::ALL
            .into_iter()
            .find(|&p| self.waiting[p.index()] > 0 && limits.admits(p, self.in_flight))
    }
}

/// A call's place among the calls in flight (or its share of its game's
/// place); given back when dropped.
#[derive(Debug)]
pub struct Permit {
    shared: Arc<Shared>,
    game: Option<u64>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let next = {
            let mut counts = self.shared.lock();
            if let Some(game) = self.game {
                let calls = counts.games.entry(game).or_insert(1);
                *calls -= 1;
                if *calls > 0 {
                    // The game keeps its place for its other calls.
                    return;
                }
                counts.games.remove(&game);
            }
            counts.in_flight = counts.in_flight.saturating_sub(1);
            counts.next_in_line(&self.shared.limits)
        };
        // One place, one call woken: not every call in line, which would
        // spin a crowd of refused joins on every reply of a busy server.
        if let Some(class) = next {
            self.shared.freed[class.index()].notify_one();
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // Only counts behind it: a panic elsewhere leaves them consistent.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a place if `priority` is admitted now, or shares the place
    /// of `game` if it holds one (leaving its line if `line` says it is in
    /// it); else joins its class's line once.
    fn try_enter(
        self: &Arc<Self>,
        priority: Priority,
        game: Option<u64>,
        line: &mut bool,
    ) -> Option<Permit> {
        let mut guard = self.lock();
        let counts = &mut *guard;
        let enters = match game.and_then(|g| counts.games.get_mut(&g)) {
            Some(calls) => {
                *calls += 1;
                true
            }
            None if self.limits.admits(priority, counts.in_flight) => {
                counts.in_flight += 1;
                if let Some(game) = game {
                    counts.games.insert(game, 1);
                }
                true
            }
            None => false,
        };
        if enters {
            if std::mem::take(line) {
                counts.waiting[priority.index()] -= 1;
            }
            return Some(Permit {
                shared: self.clone(),
                game,
            });
        }
        if !*line {
            counts.waiting[priority.index()] += 1;
            *line = true;
        }
        None
    }
}

/// Notes the call's wait in line when the admission ends, however it ends.
struct NoteQueued(tokio::time::Instant);

impl Drop for NoteQueued {
    fn drop(&mut self) {
        crate::metrics::calls::note_queued(self.0.elapsed());
    }
}

/// A call's place in its class's line, while it has one.
struct Line<'a> {
    shared: &'a Shared,
    priority: Priority,
    in_line: bool,
}

impl Drop for Line<'_> {
    fn drop(&mut self) {
        if self.in_line {
            self.shared.lock().waiting[self.priority.index()] -= 1;
        }
    }
}

impl Admission {
    pub fn new(limits: AdmissionLimits) -> Admission {
        Admission {
            shared: Arc::new(Shared {
                limits,
                counts: Mutex::new(Counts::default()),
                freed: Default::default(),
                admitted: Default::default(),
                queued: Default::default(),
                refused: Default::default(),
            }),
        }
    }

    pub fn limits(&self) -> AdmissionLimits {
        self.shared.limits
    }

    /// Admits a call of `priority`, at once or after waiting in line up
    /// to its class's queue timeout; refuses it otherwise. A call on
    /// `game` shares the place of the game's calls already in flight:
    /// they take turns at the game's gate in the store, one at a time in
    /// the database, so a game is one unit of database work however many
    /// of its players' calls wait for it.
    pub async fn admit(&self, priority: Priority, game: Option<u64>) -> Result<Permit, Refused> {
        let shared = &self.shared;
        let class = priority.index();
        // Leaves the line however this call ends: a caller that gives up
        // (a deadline, a hedge answered elsewhere) drops this future.
        let mut line = Line {
            shared,
            priority,
            in_line: false,
        };
        if let Some(permit) = shared.try_enter(priority, game, &mut line.in_line) {
            shared.admitted[class].fetch_add(1, Ordering::Relaxed);
            return Ok(permit);
        }
        shared.queued[class].fetch_add(1, Ordering::Relaxed);
        let queued_at = tokio::time::Instant::now();
        // The answer says how long the call queued (busy, see
        // `metrics::calls::note_queued`), whether it then got in or not.
        let _noted = NoteQueued(queued_at);
        let deadline = queued_at + shared.limits.queue_timeout(priority);
        loop {
            // Registered before the next look, so a place given back in
            // between still wakes this call.
            let freed = shared.freed[class].notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(permit) = shared.try_enter(priority, game, &mut line.in_line) {
                shared.admitted[class].fetch_add(1, Ordering::Relaxed);
                return Ok(permit);
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                drop(line);
                shared.refused[class].fetch_add(1, Ordering::Relaxed);
                return Err(Refused {
                    priority,
                    pushback: pushback(priority, rand::random::<f64>()),
                });
            }
        }
    }

    /// Whether any call waits in line for a place now.
    pub fn has_line(&self) -> bool {
        self.shared.lock().waiting.iter().any(|&n| n > 0)
    }

    /// What admission control did so far (for logs and metrics).
    pub fn stats(&self) -> AdmissionStats {
        let load =
            |counters: &[AtomicU64; 3]| counters.each_ref().map(|c| c.load(Ordering::Relaxed));
        let counts = self.shared.lock();
        AdmissionStats {
            in_flight: counts.in_flight as u64,
            waiting: counts.waiting.map(|n| n as u64),
            admitted: load(&self.shared.admitted),
            queued: load(&self.shared.queued),
            refused: load(&self.shared.refused),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize) -> AdmissionLimits {
        AdmissionLimits {
            max_in_flight: Some(max),
            queue_timeout: Duration::from_millis(20),
            join_queue_timeout: Duration::from_millis(40),
        }
    }

    #[test]
    fn spectators_go_first_then_joins_and_players_last() {
        let l = limits(16);
        assert_eq!(l.bound(Priority::Play), 16);
        assert_eq!(l.bound(Priority::Join), 8);
        assert_eq!(l.bound(Priority::Spectate), 4);
        for in_flight in 0..32 {
            // Whatever admits a less important call admits a more
            // important one.
            if l.admits(Priority::Spectate, in_flight) {
                assert!(l.admits(Priority::Join, in_flight), "{in_flight}");
            }
            if l.admits(Priority::Join, in_flight) {
                assert!(l.admits(Priority::Play, in_flight), "{in_flight}");
            }
        }
        assert!(l.admits(Priority::Play, 15) && !l.admits(Priority::Play, 16));
        assert!(l.admits(Priority::Join, 7) && !l.admits(Priority::Join, 8));
        assert!(l.admits(Priority::Spectate, 3) && !l.admits(Priority::Spectate, 4));
    }

    #[test]
    fn a_small_bound_still_admits_one_of_each_on_an_idle_server() {
        let l = limits(2);
        for p in Priority::ALL {
            assert!(l.admits(p, 0), "{p:?}");
        }
        assert!(l.admits(Priority::Play, 1));
        assert!(!l.admits(Priority::Join, 1));
        assert!(!l.admits(Priority::Spectate, 1));
    }

    #[test]
    fn without_a_bound_everything_enters() {
        let l = AdmissionLimits::NONE;
        for p in Priority::ALL {
            assert!(l.admits(p, 1_000_000));
        }
    }

    #[test]
    fn pushback_is_longer_for_what_can_wait_and_spread() {
        let lo = |p| pushback(p, 0.0);
        let hi = |p| pushback(p, 0.999);
        assert_eq!(lo(Priority::Join), Duration::from_millis(500));
        assert!(hi(Priority::Join) < Duration::from_millis(1500));
        assert!(hi(Priority::Play) < lo(Priority::Join));
        assert!(lo(Priority::Spectate) >= lo(Priority::Join));
        // Out-of-range spreads are clamped, never negative.
        assert_eq!(pushback(Priority::Join, -3.0), Duration::from_millis(500));
    }

    #[tokio::test]
    async fn past_the_bound_calls_wait_then_are_refused() {
        let admission = Admission::new(limits(2));
        let a = admission.admit(Priority::Play, None).await.expect("first");
        // A join enters only on an idle server (bound 1 of 2).
        let refused = admission.admit(Priority::Join, None).await.unwrap_err();
        assert_eq!(refused.priority, Priority::Join);
        assert!(refused.pushback >= Duration::from_millis(500));
        let b = admission.admit(Priority::Play, None).await.expect("second");
        let refused = admission.admit(Priority::Play, None).await.unwrap_err();
        assert!(refused.pushback <= Duration::from_millis(75));
        let stats = admission.stats();
        assert_eq!(stats.in_flight, 2);
        assert_eq!(stats.admitted(Priority::Play), 2);
        assert_eq!(stats.refused(Priority::Play), 1);
        assert_eq!(stats.refused(Priority::Join), 1);
        assert_eq!(stats.queued(Priority::Join), 1);
        drop((a, b));
        assert_eq!(admission.stats().in_flight, 0);
    }

    #[tokio::test]
    async fn a_call_in_line_enters_when_a_place_is_given_back() {
        let admission = Admission::new(AdmissionLimits {
            queue_timeout: Duration::from_secs(10),
            ..limits(1)
        });
        let held = admission.admit(Priority::Play, None).await.unwrap();
        assert!(!admission.has_line(), "a full server with nobody waiting");
        let waiting = {
            let admission = admission.clone();
            tokio::spawn(async move { admission.admit(Priority::Play, None).await.map(drop) })
        };
        // Wait until the call is in line, then give the place back.
        while admission.stats().queued(Priority::Play) == 0 {
            tokio::task::yield_now().await;
        }
        assert!(admission.has_line(), "a call waits for a place");
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the call in line was never admitted")
            .unwrap()
            .expect("admitted, not refused");
        let stats = admission.stats();
        assert_eq!(stats.admitted(Priority::Play), 2);
        assert_eq!(stats.refused(Priority::Play), 0);
        assert_eq!((stats.in_flight, stats.waiting), (0, [0; 3]));
        assert!(!admission.has_line(), "nobody waits any more");
    }

    #[tokio::test]
    async fn a_place_given_back_goes_to_the_most_important_call_in_line() {
        let admission = Admission::new(AdmissionLimits {
            queue_timeout: Duration::from_secs(10),
            join_queue_timeout: Duration::from_secs(10),
            ..limits(1)
        });
        let held = admission.admit(Priority::Play, None).await.unwrap();
        let spawn = |p| {
            let admission = admission.clone();
            tokio::spawn(async move { admission.admit(p, None).await })
        };
        let join = spawn(Priority::Join);
        while admission.stats().waiting != [0, 1, 0] {
            tokio::task::yield_now().await;
        }
        let play = spawn(Priority::Play);
        while admission.stats().waiting != [1, 1, 0] {
            tokio::task::yield_now().await;
        }
        drop(held);
        let play = tokio::time::timeout(Duration::from_secs(5), play)
            .await
            .expect("the player in line was never admitted")
            .unwrap()
            .expect("admitted");
        assert!(!join.is_finished(), "the join waits while the player plays");
        drop(play);
        tokio::time::timeout(Duration::from_secs(5), join)
            .await
            .expect("the join in line was never admitted")
            .unwrap()
            .expect("admitted");
        assert_eq!(admission.stats().waiting, [0; 3]);
    }

    #[tokio::test]
    async fn the_calls_of_one_game_share_its_place() {
        let admission = Admission::new(limits(2));
        let a = admission.admit(Priority::Play, Some(7)).await.unwrap();
        let b = admission.admit(Priority::Play, Some(7)).await.unwrap();
        let c = admission.admit(Priority::Play, Some(7)).await.unwrap();
        assert_eq!(admission.stats().in_flight, 1, "one game, one place");
        let other = admission.admit(Priority::Play, Some(8)).await.unwrap();
        assert_eq!(admission.stats().in_flight, 2);
        // Full: a third game is refused, game 7's next call is not.
        assert!(admission.admit(Priority::Play, Some(9)).await.is_err());
        let d = admission.admit(Priority::Play, Some(7)).await.unwrap();
        drop((a, b, c));
        assert_eq!(admission.stats().in_flight, 2, "game 7 still has a call");
        drop(d);
        assert_eq!(admission.stats().in_flight, 1);
        drop(other);
        assert_eq!(admission.stats().in_flight, 0);
        assert!(admission.shared.lock().games.is_empty());
    }

    #[tokio::test]
    async fn a_call_that_gives_up_in_line_leaves_it() {
        let admission = Admission::new(AdmissionLimits {
            queue_timeout: Duration::from_secs(10),
            ..limits(1)
        });
        let _held = admission.admit(Priority::Play, None).await.unwrap();
        let waiting = admission.admit(Priority::Play, None);
        let gave_up = tokio::time::timeout(Duration::from_millis(20), waiting).await;
        assert!(gave_up.is_err());
        assert_eq!(admission.stats().waiting, [0; 3]);
    }

    #[test]
    fn the_place_goes_to_a_class_that_may_enter() {
        let l = limits(16);
        let counts = |in_flight, waiting| Counts {
            in_flight,
            waiting,
            games: HashMap::new(),
        };
        assert_eq!(counts(15, [1, 1, 1]).next_in_line(&l), Some(Priority::Play));
        assert_eq!(
            counts(15, [0, 1, 1]).next_in_line(&l),
            None,
            "joins wait for 3"
        );
        assert_eq!(counts(3, [0, 1, 1]).next_in_line(&l), Some(Priority::Join));
        assert_eq!(
            counts(1, [0, 0, 1]).next_in_line(&l),
            Some(Priority::Spectate)
        );
        assert_eq!(counts(0, [0; 3]).next_in_line(&l), None);
    }
}
