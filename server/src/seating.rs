//! Join admission by whole games, keyed to measured capacity: a server
//! opens a new game only while the cluster's running games leave room for
//! one more whole game.
//!
//! [`crate::admission`] bounds the calls in flight, not the games seated:
//! past capacity every seated game still sends its 80 calls a second, the
//! excess is refused call by call, and the offered load stays twice what
//! the machine answers (the clients' queues, not the servers', hold the
//! time). Seating bounds the load at its source instead. A join that fills
//! a game already waiting for players is always let through (a game
//! partly seated must fill, or its players wait for nothing: refusing
//! every join while overloaded left such games empty forever); a join
//! that would open a new game is refused `server-full` with a pushback
//! while the running games (`waiting` or `playing`, written in the last
//! [`LIVE_WITHIN`], counted under the lobby's lock, so across the cluster)
//! are at the limit. So games are seated whole: four at a time, or not at
//! all.
//!
//! The limit is learned ([`Seating`]), in the spirit of TCP Vegas and
//! Netflix's concurrency-limits, with games for requests: each seated
//! player's call (`Act`, `Leave`, `GetState`) is recorded by this server,
//! answered or refused by admission. Every [`WINDOW`] with at least
//! [`MIN_SAMPLES`] calls is judged over the limits if more than a share of
//! them were refused (`--seat-refused-percent`: this server's own excess,
//! since admission refuses a call only when the database's work ahead of
//! it outlasts the call's place in line), or if their 90th percentile time
//! in the server, admission's wait included, is over a target
//! (`--seat-latency-target-ms`, off by default; 50 ms is a third of the
//! clients' 150 ms call deadline, past which they hedge and retry and the
//! overload feeds itself). Over them [`OVER_RUN`]
//! windows in a row, the limit becomes [`DECREASE`] of the running games
//! last counted (never fewer than [`MIN_LIMIT`]); the games already
//! running are not touched, they end by themselves and their seats are not
//! refilled past the limit. The next cut, by a tenth of the limit itself,
//! needs [`OVER_RUN`] windows over the limits of its own, counted only
//! once the running games have come down to the limit (one cut per drain,
//! as TCP halves its window once per round trip, not once per lost
//! segment). Within it for [`INCREASE_AFTER`] while the
//! limit binds, the limit grows by an eighth (at least one game). Before the first
//! overload there is no limit (the machine has not been found full). `--max-games` caps the limit whatever is measured.
//!
//! The time target is off by default: on a machine shared with other
//! work (the build machine at load 9–15), the calls' time in the server
//! rose over 50 ms with four to eight games running, the limit held the
//! cluster to 4–10 games, and the sweep's goodput fell to about half of
//! the build without it (docs/scaling.md). A time in the server measures
//! the machine, not only the games; refusals measure the server's own
//! excess. `--max-games`, the capacity a sweep measured, seats whole
//! games without either.
//!
//! The limit is remembered between bursts: joins arrive all at once when a
//! crowd comes (128 clients at once), long before any of their games sends
//! a call, so only what earlier games taught can stop that crowd from
//! opening more games than the machine holds. And it is shared: each
//! server writes what it learned with its registry heartbeat, and a join
//! that would open a game is held to the smallest limit among the servers
//! heard from within [`SHARED_WITHIN`] (read with the running games, under
//! the lobby's lock). Every server queues on the one database, so what
//! one learned holds for all; without it, a crowd reaching a server not
//! yet found full opened every game it asked for there. The heartbeat also
//! reads the running games and the others' smallest limit ([`Seating::heard`]):
//! while no server anywhere has a limit, a join opens its game without
//! counting under the lobby's lock ([`Seating::may_bind`]).
//!
//! A join refused for the limit keeps the verdict for [`RECHECK`]: the
//! joins that come meanwhile to this server are refused without a look at
//! the database (a refused crowd asks again every second or so), and a
//! game that opens elsewhere meanwhile is found at the next look.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// How often the seated players' calls are judged.
pub const WINDOW: Duration = Duration::from_millis(500);
/// Fewest calls a window needs to judge anything: fewer say nothing about
/// the machine.
pub const MIN_SAMPLES: usize = 20;
/// Judged windows over the target in a row that make an overload: one
/// window (a burst of game starts, a checkpoint, a neighbour's compile) is
/// not the machine full.
pub const OVER_RUN: u32 = 4;
/// The limit after an overload, as a share of the running games.
pub const DECREASE: f64 = 0.9;
/// Calm needed, while the limit binds, before it grows by an eighth (at
/// least one game).
pub const INCREASE_AFTER: Duration = Duration::from_secs(1);
/// The learned limit never goes below this many games: fewer is no longer
/// serving fewer games well but turning players away, and a stall that
/// slows a handful of games (a debug build, a busy neighbour) is not a
/// crowd to hold back. `--max-games` may still cap lower.
pub const MIN_LIMIT: u32 = 4;
/// How long a refusal for the limit stands before a join asks the database
/// again.
pub const RECHECK: Duration = Duration::from_millis(250);
/// A game not written for this long does not count as running (its
/// players are gone; the clock ends it when someone looks).
pub const LIVE_WITHIN: Duration = Duration::from_secs(10);
/// A server's learned limit, written with its heartbeat, holds the other
/// servers' joins while the heartbeat is this fresh (a few beats: a server
/// gone stops holding anyone back).
pub const SHARED_WITHIN: Duration = Duration::from_secs(2);

/// What a server admits games by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeatingLimits {
    /// The 90th percentile of the seated players' calls' time in the
    /// server above which it opens no more games; `None`: not measured.
    pub target: Option<Duration>,
    /// The share of the seated players' calls refused for load (admission
    /// found no place for them within their wait) above which it opens no
    /// more games, in hundredths of a percent (200: 2 %); `None`: not
    /// counted.
    pub refused_share_bp: Option<u32>,
    /// Running games at most, whatever is measured; `None`: no cap.
    pub max_games: Option<u32>,
}

impl SeatingLimits {
    /// Every join opens a game if it finds none waiting.
    pub const OPEN: SeatingLimits = SeatingLimits {
        target: None,
        refused_share_bp: None,
        max_games: None,
    };

    /// Whether the seated players' calls are judged at all.
    pub fn measured(&self) -> bool {
        self.target.is_some() || self.refused_share_bp.is_some()
    }
}

/// The learned limit on running games and the calls it is learned from.
#[derive(Clone, Debug)]
pub struct Seating {
    limits: SeatingLimits,
    /// `None`: none learned yet (the machine was never found full).
    learned: Option<u32>,
    window_from: Option<Instant>,
    /// This window's calls' times in the server, µs (kept only with a
    /// target; a refusal is `u64::MAX`).
    times: Vec<u64>,
    /// This window's calls, and those of them refused for load.
    calls: usize,
    refused: usize,
    /// Running games at the last count (a heartbeat, or a join that would
    /// open a game).
    live: Option<u32>,
    /// The smallest limit the other live servers learned, as the last
    /// heartbeat read it.
    shared: Option<u32>,
    /// Since when every judged window was within the target.
    calm_from: Option<Instant>,
    /// Judged windows over the target in a row.
    over_run: u32,
    /// When a join was last refused for the limit.
    full_at: Option<Instant>,
}

/// What a join that finds no waiting game may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Open a new game.
    Open,
    /// Refuse: the running games are at the limit.
    Full,
}

impl Seating {
    pub fn new(limits: SeatingLimits) -> Seating {
        Seating {
            limits,
            learned: None,
            window_from: None,
            times: Vec::new(),
            calls: 0,
            refused: 0,
            live: None,
            shared: None,
            calm_from: None,
            over_run: 0,
            full_at: None,
        }
    }

    /// The limit this server learned from its own calls, if any: what it
    /// shares with the others through its heartbeat.
    pub fn learned(&self) -> Option<u32> {
        self.learned
    }

    /// A heartbeat read `live` running games and `shared`, the smallest
    /// limit the other live servers learned.
    pub fn heard(&mut self, live: u32, shared: Option<u32>) {
        self.live = Some(live);
        self.shared = shared;
    }

    /// Whether a join that would open a game may be refused: this server
    /// has a limit, or another's was heard of. Otherwise the join opens
    /// its game without counting the running ones under the lobby's lock
    /// (a statement more there, for every new game of a crowd, while
    /// nothing anywhere limits them).
    pub fn may_bind(&self) -> bool {
        self.limit().is_some() || self.shared.is_some()
    }

    /// The limit on running games now, if any.
    pub fn limit(&self) -> Option<u32> {
        match (self.learned, self.limits.max_games) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A seated player's call took `time` in this server (admission's
    /// wait included), ending at `now`.
    pub fn record(&mut self, now: Instant, time: Duration) {
        self.note(now, Some(time));
    }

    /// A seated player's call refused for load at `now`: over any target.
    pub fn record_refused(&mut self, now: Instant) {
        self.note(now, None);
    }

    /// One seated player's call ending at `now`, answered after `time` or
    /// refused (`None`); the first call of a new window judges the last.
    fn note(&mut self, now: Instant, time: Option<Duration>) {
        if !self.limits.measured() {
            return;
        }
        match self.window_from {
            Some(from) if now.saturating_duration_since(from) >= WINDOW => {
                self.judge(now);
                self.window_from = Some(now);
            }
            Some(_) => {}
            None => self.window_from = Some(now),
        }
        self.calls += 1;
        if time.is_none() {
            self.refused += 1;
        }
        if self.limits.target.is_some() {
            self.times.push(time.map_or(u64::MAX, |t| {
                u64::try_from(t.as_micros()).unwrap_or(u64::MAX)
            }));
        }
    }

    /// Whether the window's calls were over what the limits allow: their
    /// 90th percentile over the target, or more of them refused than the
    /// share. `calls` is at least one.
    fn window_over(&self, times: &mut [u64], calls: usize, refused: usize) -> (bool, u64) {
        let p90 = if times.is_empty() {
            0
        } else {
            let at = times.len() * 9 / 10;
            *times.select_nth_unstable(at).1
        };
        let slow = self
            .limits
            .target
            .is_some_and(|t| p90 > u64::try_from(t.as_micros()).unwrap_or(u64::MAX));
        let refusing = self
            .limits
            .refused_share_bp
            .is_some_and(|bp| refused as u64 * 10_000 > u64::from(bp) * calls as u64);
        (slow || refusing, p90)
    }

    /// Judges the window that just ended at `now` and starts the next.
    fn judge(&mut self, now: Instant) {
        let mut times = std::mem::take(&mut self.times);
        let calls = std::mem::take(&mut self.calls);
        let refused = std::mem::take(&mut self.refused);
        if calls < MIN_SAMPLES {
            // Too few calls to say anything: no change, no calm, and no
            // overload going on.
            self.calm_from = None;
            self.over_run = 0;
            return;
        }
        let (over, p90) = self.window_over(&mut times, calls, refused);
        times.clear();
        self.times = times;
        if over {
            self.calm_from = None;
            // One cut per drain: while more games run than the last cut
            // allows, the excess is still ending and the windows still
            // feel it, so they do not count towards the next cut. Cutting
            // again from those games, window after window, sank the limit
            // well below what the machine holds; and cutting from a count
            // taken while one crowd left and the next came in (4 games)
            // held the cluster at 4: a limit, once learned, is cut from
            // itself.
            let draining = matches!((self.learned, self.live), (Some(l), Some(live)) if live > l);
            self.over_run = if draining { 0 } else { self.over_run + 1 };
            if self.over_run < OVER_RUN {
                return;
            }
            if let Some(base) = self.learned.or(self.live) {
                let learned = ((f64::from(base) * DECREASE).floor() as u32).max(MIN_LIMIT);
                if self.learned != Some(learned) {
                    tracing::info!(
                        limit = learned,
                        running = self.live,
                        p90_us = p90,
                        calls,
                        refused,
                        "seated players' calls over the limits: fewer games"
                    );
                }
                self.learned = Some(learned);
                // The next cut needs an overload of its own.
                self.over_run = 0;
            }
            return;
        }
        self.over_run = 0;
        let calm_from = *self.calm_from.get_or_insert(now);
        // Grow only a limit that binds: room nobody asks for teaches
        // nothing, and would let the next crowd in unchecked.
        let binds = match (self.learned, self.live) {
            (Some(learned), Some(live)) => live + 1 >= learned,
            _ => false,
        };
        if binds && now.saturating_duration_since(calm_from) >= INCREASE_AFTER {
            self.learned = self.learned.map(|l| l.saturating_add((l / 8).max(1)));
            self.calm_from = Some(now);
            tracing::info!(limit = ?self.learned, p90_us = p90, "calm: one more game");
        }
    }

    /// Whether a join at `now` is refused for the limit without a look at
    /// the database: one was, less than [`RECHECK`] ago.
    pub fn full_without_looking(&self, now: Instant) -> bool {
        self.full_at
            .is_some_and(|at| now.saturating_duration_since(at) < RECHECK)
    }

    /// A join at `now` found no waiting game with a seat for it, and
    /// `live` running games; `shared` is the smallest limit the live
    /// servers learned (this one's included): may it open one?
    pub fn open_game(&mut self, now: Instant, live: u32, shared: Option<u32>) -> Verdict {
        self.live = Some(live);
        let limit = match (self.limit(), shared) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match limit {
            Some(limit) if live >= limit => {
                self.full_at = Some(now);
                Verdict::Full
            }
            _ => {
                self.full_at = None;
                Verdict::Open
            }
        }
    }
}

/// A server's [`Seating`], shared by its calls; cheap to clone.
#[derive(Clone, Debug)]
pub struct Seats {
    shared: Arc<Mutex<Seating>>,
    /// A target is set: the seated players' calls are recorded. Without
    /// one, their calls never take the lock.
    measures: bool,
}

impl Seats {
    pub fn new(limits: SeatingLimits) -> Seats {
        Seats {
            shared: Arc::new(Mutex::new(Seating::new(limits))),
            measures: limits.measured(),
        }
    }

    /// Whether the seated players' calls are to be recorded
    /// ([`Seating::record`]).
    pub fn measures(&self) -> bool {
        self.measures
    }

    /// Games opened freely (no target, no cap).
    pub fn open() -> Seats {
        Seats::new(SeatingLimits::OPEN)
    }

    /// Runs `f` on the seating. A std mutex: held for a few comparisons
    /// (a window's percentile at most), never across an await.
    pub fn with<T>(&self, f: impl FnOnce(&mut Seating) -> T) -> T {
        let mut seating = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut seating)
    }

    /// Whether games are admitted by anything at all.
    pub fn limited(&self) -> bool {
        self.with(|s| s.limits != SeatingLimits::OPEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGET: Duration = Duration::from_millis(50);

    fn seating() -> Seating {
        Seating::new(SeatingLimits {
            target: Some(TARGET),
            refused_share_bp: None,
            max_games: None,
        })
    }

    /// A seating that judges refusals only, over 2 %.
    fn judging_refusals() -> Seating {
        Seating::new(SeatingLimits {
            target: None,
            refused_share_bp: Some(200),
            max_games: None,
        })
    }

    /// One window of `n` calls of `time` each from `at`, judged at its end.
    fn window(s: &mut Seating, at: Instant, n: usize, time: Duration) -> Instant {
        for _ in 0..n {
            s.record(at, time);
        }
        let end = at + WINDOW;
        // The first call of the next window judges this one.
        s.record(end, Duration::ZERO);
        s.times.clear();
        s.calls = 0;
        s.refused = 0;
        end
    }

    /// [`OVER_RUN`] windows of `n` calls of `time` each from `at`.
    fn windows(s: &mut Seating, mut at: Instant, n: usize, time: Duration) -> Instant {
        for _ in 0..OVER_RUN {
            at = window(s, at, n, time);
        }
        at
    }

    #[test]
    fn without_a_window_over_the_target_every_game_opens() {
        let mut s = seating();
        let mut at = Instant::now();
        for _ in 0..10 {
            at = window(&mut s, at, 100, Duration::from_millis(10));
        }
        assert_eq!(s.limit(), None);
        assert_eq!(s.open_game(at, 1_000, None), Verdict::Open);
    }

    #[test]
    fn a_window_over_the_target_limits_games_to_a_share_of_those_running() {
        let mut s = seating();
        let at = Instant::now();
        assert_eq!(s.open_game(at, 31, None), Verdict::Open);
        let mut at = at;
        for _ in 1..OVER_RUN {
            at = window(&mut s, at, 100, Duration::from_millis(120));
        }
        assert_eq!(s.limit(), None, "a burst is not an overload");
        let at = window(&mut s, at, 100, Duration::from_millis(120));
        assert_eq!(s.limit(), Some(27), "0.9 of the 31 running, rounded down");
        assert_eq!(s.open_game(at, 31, None), Verdict::Full);
        assert!(s.full_without_looking(at + RECHECK / 2));
        assert!(!s.full_without_looking(at + RECHECK), "the database again");
        // More windows over the target while the games above the limit
        // end (not refilled) cut nothing.
        let at = window(&mut s, at, 100, Duration::from_millis(120));
        assert_eq!(s.limit(), Some(27));
        assert_eq!(s.open_game(at, 26, None), Verdict::Open);
        assert!(!s.full_without_looking(at));
        // Down to the limit: a new overload (OVER_RUN windows, not one)
        // cuts the limit again, by a tenth of itself.
        let mut at = at;
        for _ in 1..OVER_RUN {
            at = window(&mut s, at, 100, Duration::from_millis(120));
        }
        assert_eq!(s.limit(), Some(27), "a cut needs an overload of its own");
        window(&mut s, at, 100, Duration::from_millis(120));
        assert_eq!(s.limit(), Some(24), "0.9 of the limit, once it binds");
    }

    #[test]
    fn a_few_slow_calls_are_not_a_full_machine() {
        let mut s = seating();
        let at = Instant::now();
        s.open_game(at, 10, None);
        // 10 % slow: the 90th percentile is the fast ones'.
        for _ in 0..90 {
            s.record(at, Duration::from_millis(5));
        }
        for _ in 0..9 {
            s.record_refused(at);
        }
        s.record(at + WINDOW, Duration::ZERO);
        assert_eq!(s.limit(), None);
        // Too few calls to judge, however slow.
        let mut s = seating();
        s.open_game(at, 10, None);
        window(&mut s, at, MIN_SAMPLES - 1, Duration::from_secs(1));
        assert_eq!(s.limit(), None);
        // Refusals count as over the target.
        let mut at = at + WINDOW;
        for _ in 0..OVER_RUN {
            for _ in 0..MIN_SAMPLES {
                s.record_refused(at);
            }
            at += WINDOW;
        }
        s.record(at, Duration::ZERO);
        assert_eq!(s.limit(), Some(9));
    }

    /// [`OVER_RUN`] windows from `at`, each of `answered` quick calls and
    /// `refused` refusals.
    fn refusing(s: &mut Seating, mut at: Instant, answered: usize, refused: usize) -> Instant {
        for _ in 0..OVER_RUN {
            for _ in 0..answered {
                s.record(at, Duration::from_millis(1));
            }
            for _ in 0..refused {
                s.record_refused(at);
            }
            at += WINDOW;
            s.record(at, Duration::ZERO);
            s.calls = 0;
            s.refused = 0;
        }
        at
    }

    #[test]
    fn refusals_over_the_share_limit_games_and_slow_answers_do_not() {
        let mut s = judging_refusals();
        let at = Instant::now();
        s.open_game(at, 30, None);
        // Slow but answered: no target, so the time says nothing.
        let at = windows(&mut s, at, 100, Duration::from_secs(1));
        assert_eq!(s.limit(), None);
        assert!(s.times.is_empty(), "no times kept without a target");
        // Two refusals in a hundred calls: at the share, not over it.
        let at = refusing(&mut s, at, 98, 2);
        assert_eq!(s.limit(), None);
        // Three in a hundred, window after window: the machine is full.
        let at = refusing(&mut s, at, 97, 3);
        assert_eq!(s.limit(), Some(27), "0.9 of the 30 running");
        assert_eq!(s.open_game(at, 30, None), Verdict::Full);
        // Still refusing while the games above the limit end: no second
        // cut from games that are on their way out.
        assert_eq!(s.open_game(at, 29, None), Verdict::Full);
        let at = refusing(&mut s, at, 90, 10);
        assert_eq!(s.limit(), Some(27), "one cut per drain");
        // Down to the limit and still refusing: cut again, from the
        // limit, however few games the last count found.
        s.open_game(at, 5, None);
        let at = refusing(&mut s, at, 90, 10);
        assert_eq!(s.limit(), Some(24), "0.9 of the limit of 27");
        // Refusals gone while the limit binds: it grows again.
        s.open_game(at, 24, None);
        let calm = (INCREASE_AFTER.as_millis() / WINDOW.as_millis()) as usize;
        let mut at = at;
        for _ in 0..=calm {
            at = window(&mut s, at, 100, Duration::from_secs(1));
        }
        assert_eq!(s.limit(), Some(27), "an eighth more after a calm");
        assert!(
            Seats::new(SeatingLimits {
                target: None,
                refused_share_bp: Some(200),
                max_games: None
            })
            .measures()
        );
    }

    #[test]
    fn a_limit_another_server_learned_holds_this_ones_joins() {
        let mut s = judging_refusals();
        let at = Instant::now();
        // Nothing learned anywhere: a new game opens without a count.
        assert!(!s.may_bind());
        s.heard(12, Some(12));
        assert!(s.may_bind(), "another server's limit was heard of");
        // Nothing learned here: the cluster's smallest limit binds.
        assert_eq!(s.open_game(at, 12, Some(12)), Verdict::Full);
        assert_eq!(s.open_game(at, 11, Some(12)), Verdict::Open);
        assert_eq!(s.learned(), None, "not learned, only followed");
        // Learned here and lower than the cluster's: its own binds. The
        // first cut is from the running games a heartbeat counted.
        s.heard(10, None);
        refusing(&mut s, at, 90, 10);
        assert_eq!(s.learned(), Some(9));
        assert_eq!(s.open_game(at, 9, Some(20)), Verdict::Full);
        assert_eq!(s.open_game(at, 8, Some(20)), Verdict::Open);
    }

    #[test]
    fn a_binding_limit_grows_by_one_game_after_a_calm() {
        let mut s = seating();
        let at = Instant::now();
        s.open_game(at, 20, None);
        let mut at = windows(&mut s, at, 50, Duration::from_secs(1));
        assert_eq!(s.limit(), Some(18));
        assert_eq!(s.open_game(at, 18, None), Verdict::Full);
        // Calm, limit binding: an eighth more per INCREASE_AFTER.
        let calm = (INCREASE_AFTER.as_millis() / WINDOW.as_millis()) as usize;
        for _ in 0..calm {
            at = window(&mut s, at, 50, Duration::from_millis(5));
        }
        assert_eq!(s.limit(), Some(18), "not before INCREASE_AFTER of calm");
        at = window(&mut s, at, 50, Duration::from_millis(5));
        assert_eq!(s.limit(), Some(20));
        assert_eq!(s.open_game(at, 18, None), Verdict::Open);
        // Calm while far below the limit: no growth.
        s.open_game(at, 3, None);
        for _ in 0..calm * 3 {
            at = window(&mut s, at, 50, Duration::from_millis(5));
        }
        assert_eq!(s.limit(), Some(20));
    }

    #[test]
    fn the_cap_holds_whatever_is_measured_and_a_learned_limit_keeps_a_floor() {
        let mut s = Seating::new(SeatingLimits {
            target: Some(TARGET),
            refused_share_bp: None,
            max_games: Some(2),
        });
        let at = Instant::now();
        assert_eq!(s.open_game(at, 1, None), Verdict::Open);
        assert_eq!(s.open_game(at, 2, None), Verdict::Full);
        s.open_game(at, 1, None);
        windows(&mut s, at, 50, Duration::from_secs(1));
        assert_eq!(s.limit(), Some(2), "the cap is below what is learned");
        let mut s = seating();
        s.open_game(at, 2, None);
        windows(&mut s, at, 50, Duration::from_secs(1));
        assert_eq!(s.limit(), Some(MIN_LIMIT), "learned, never below the floor");
        // Without a target, nothing is learned; the cap alone.
        let mut s = Seating::new(SeatingLimits {
            target: None,
            refused_share_bp: None,
            max_games: Some(3),
        });
        s.open_game(at, 2, None);
        windows(&mut s, at, 50, Duration::from_secs(1));
        assert_eq!(s.limit(), Some(3));
        assert_eq!(s.open_game(at, 3, None), Verdict::Full);
        assert!(!Seats::open().limited());
        assert!(!Seats::open().measures());
        assert!(
            Seats::new(SeatingLimits {
                target: Some(TARGET),
                refused_share_bp: None,
                max_games: None
            })
            .measures()
        );
    }
}
