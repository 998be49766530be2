//! The store's tuning, in one place: how often and how long it retries,
//! how many calls one commit writes, how long what a server knows of a
//! game stands in for a read, and the sizes and paces of the background
//! jobs. Each constant says why it has its value.

use std::time::Duration;

// The retries of a call (see `Store::retrying` and `Store::cas`).

/// Most attempts of one call (first try included).
pub(crate) const MAX_ATTEMPTS: u32 = 8;

/// Backoff before the second attempt; doubles per attempt up to the cap.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(1);

/// The cap of that backoff: a call's deadline (500 ms by default) leaves
/// room for its eight attempts.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_millis(25);

/// Most reads and writes of one compare-and-set call (first try included)
/// before it counts as a transient failure, which `Store::retrying` then
/// retries with its longer backoff. Each miss means another call committed,
/// so the game as a whole always moves on.
pub(crate) const MAX_CAS_ATTEMPTS: u32 = 16;

/// Cap of the random pause before a compare-and-set retry.
pub(crate) const MAX_CAS_PAUSE: Duration = Duration::from_millis(2);

/// How long `Store::migrate` waits for Patroni to name the primary.
pub(crate) const PRIMARY_WAIT: Duration = Duration::from_secs(1);

/// How long `Store::migrate` waits for its connection: a database that
/// takes the connection and never answers (a host gone, its address kept
/// by something silent) would otherwise hold a server's start, or its map
/// following, for good.
pub(crate) const MIGRATE_CONNECT_WAIT: Duration = Duration::from_secs(2);

// Start-up and names.

/// Default of [`StoreOptions::warm_up_pace`](super::StoreOptions::warm_up_pace): 8 standing connections are
/// open and planned within about 0.2 s, using a few per cent of a core
/// rather than most of one for ~70 ms.
pub const DEFAULT_WARM_UP_PACE: Duration = Duration::from_millis(25);

/// How long a released name stays its owner's: a day, so a player who
/// renamed by mistake takes it back, and no one passes for the old owner
/// in the rankings the moment a name is let go.
pub const DEFAULT_NAME_HOLD: Duration = Duration::from_secs(24 * 3600);

// A game's commits (see `play` and `gates`).

/// The most calls one commit writes. The four players of a game, each
/// with a copy or two in flight (a hedge, a retry), fit; a game's queue
/// longer than that is a backlog, and its next calls go in the next commit.
pub(crate) const MAX_BATCH: usize = 16;

/// The longest the call holding a game's gate waits for the game's other
/// players due back (see [`gates`](super::gates)): about what a player's
/// next call takes to come back in a closed loop on one machine (the
/// network both ways and the client's turn, 1–3 ms on a busy machine: a
/// closed loop's commits held 2.2 calls with 1 ms, 2.6–3.1 with 2 ms), and
/// a twenty-fifth of a 20 Hz player's interval.
pub(crate) const LINGER: Duration = Duration::from_millis(2);

/// How long what a server knows of a game stands in for reading it, after
/// the game's roster was last read: its "connected" flags of players
/// other than the writers go stale (the database derives them from its
/// clock), so they are read again within a tenth of the connected window.
pub(crate) const KNOWN_FOR: Duration = Duration::from_millis(300);

/// How many games a server keeps known (see `play::known`); past that it forgets them all
/// (each game's next commit reads it, and is known again).
pub(crate) const KNOWN_GAMES: usize = 1024;

/// How long a caller counts as one of its game's callers after its last
/// call: a closed loop calls every few milliseconds, a paced player (20
/// Hz) every 50.
pub(crate) const SEEN_FOR: Duration = Duration::from_millis(100);

/// The most callers `gates::Arrivals` remembers per game (four players, their
/// copies share a caller; more means callers that left).
pub(crate) const SEEN_MAX: usize = 8;

/// How many games' `gates::Arrivals` are kept before those not heard from
/// lately are forgotten.
pub(crate) const ARRIVALS_KEPT: usize = 256;

/// The longest typical gap of a caller still waited for: one that calls
/// again this soon after its answer is in a closed loop, or near one.
///
/// A paced player (every 50 ms at 20 Hz) is not waited for even when it
/// is due: its return is known only to within its timer's and the
/// network's jitter, about the wait itself, so a wait for it brings it
/// about half the time and otherwise holds the call the whole linger
/// (and a timer tick more). Measured fault-free at 20 Hz (`bench
/// --duration-s 20`): 2–3 % of commits waited so, 1.4 % fewer commits
/// for it, and those waits were the runs' act p99 (2–3.5 ms of a 4 ms
/// p99, against 60 µs for the rest of a call's handler). The database
/// work a paced game's wait saves matters only when the database is
/// short of it, and then the calls queue behind the gate by themselves,
/// or wait in admission's line, which turns the wait off.
pub(crate) const QUICK_RETURN: Duration = Duration::from_millis(10);

/// How many of a caller's last gaps (between an answer and its next
/// call) `gates::Gaps` keeps.
pub(crate) const GAPS_KEPT: usize = 5;

// Retention (see `retention`).

/// Games deleted by one statement (each has a few seats and sessions).
pub(crate) const GAMES_PER_BATCH: i64 = 50;

/// Log rows or sessions deleted by one statement.
pub(crate) const ROWS_PER_BATCH: i64 = 500;

/// Pause between two batches.
pub(crate) const BATCH_PAUSE: Duration = Duration::from_millis(20);
