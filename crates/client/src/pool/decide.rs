//! What a call does next, decided apart from the I/O that carries it out
//! (`ServerPool::call` only follows these answers): what deadline an
//! attempt gets, whether a late attempt is hedged, left, or waited for,
//! what a failure does to its server, and how long to pause when no server
//! can take the call now.
//!
//! The rules, in words:
//!
//! - An attempt is *late* after its server's hedge delay (see `pool::rtt`).
//!   Then its server is probed (a health check on the warm connection,
//!   which no database work delays) and, at the same moment, unless the
//!   pool is in a shared stall, the database is known down, or the budget
//!   is spent, a copy goes to another server.
//! - Calls in flight on the same server share one probe and one token:
//!   the first late call opens a [`Suspicion`]; the others late on that
//!   server while it is open join it (their copies go out at once, covered
//!   by its token, as long as the server has not answered meanwhile), and
//!   its one verdict ends them all.
//! - A late server whose probe is still unanswered a few milliseconds
//!   after another server answered its own (sent at the same moment) is
//!   **silent**: probably hung. Every call late on it that has no copy out
//!   sends one now, even into a shared stall and with the budget spent:
//!   a stall delays calls, not health checks, so a health check one server
//!   answers and another does not is no stall; and waiting for the verdict
//!   instead cost a call ~100 ms.
//! - A server that does not answer its probe in time while another server
//!   does (even late: the verdict waits for it, and gives the late server
//!   as long and a slack more) is **hung**: it is dropped and the call
//!   moves on at once (free of the budget: the call never ran there), as
//!   does a copy sent to it. One that answers is alive, only **slow**: its
//!   probe, or any call sent since the late one (past a cluster's
//!   capacity, one server's health checks come back later than another's
//!   while it answers calls).
//! - When the copy is late too and the first server is alive, two servers
//!   are slow together: the cause is shared (the database). The pool
//!   enters a **shared stall**: no more hedges and no failovers into it,
//!   calls just wait (up to the slow deadline) until an answer comes back
//!   on time.
//! - A server whose answers said, within the last half second, that it
//!   queued calls for the database (`borbaman-busy`: admission's line or a
//!   pooled connection) is treated as in a shared stall for its late
//!   calls: probed, not hedged, not left at the deadline. Its lateness is
//!   the queue, and every server of the cluster queues on the same
//!   database: under 8× overload hedges were 15 % of the calls, each a
//!   second transaction for an answered game. A hung server still fails
//!   its probe and its calls move at once.
//! - At its deadline an attempt on a slow but alive server is left for
//!   another only outside a shared stall, with another server to go to,
//!   and with a token from the budget. Otherwise it is waited for: leaving
//!   a server that is working on the call for another just as slow would
//!   add a second copy to the database's queue. With another server to go
//!   to, it is probed again at each deadline meanwhile: it may have hung
//!   since its probe answered.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use rand::Rng;

use super::budget::backoff;
use super::choice::{Exhausted, FailureKind, exhausted};
use super::rtt::ServerTiming;

/// What the health probe of a late attempt's server has said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Not sent yet, or no verdict yet.
    Pending,
    /// No verdict yet, but the other server answered and this one has not
    /// within [`SILENT_SLACK`] more: probably hung (see [`probe_verdict`]).
    Silent,
    /// Answered in time: the server is alive (or nothing could answer,
    /// see [`probe_verdict`]).
    Alive,
    /// No answer in time: the server is hung.
    Hung,
}

/// What the two health checks of a probe have come to so far: the late
/// server's, and that of another live server sent at the same moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probing {
    /// The late server answered: its probe, or a call sent since the late
    /// one.
    pub answered: bool,
    /// The late server's probe deadline has passed (or its check failed
    /// outright).
    pub overdue: bool,
    /// The other server: `None` when there is none, else how long after
    /// the probe was sent it answered (`None` yet).
    pub other: Option<Option<Duration>>,
    /// Since the probe was sent.
    pub elapsed: Duration,
    /// Both have been silent for [`PROBE_PATIENCE`] times the late
    /// server's probe deadline.
    pub given_up: bool,
    /// The late server's own network round trip as usually late (its
    /// network RTO): it is not silent before this, whatever the other did.
    pub own_round_trip: Duration,
}

/// How much longer than the other server (and than its own usual round
/// trip) the late server may take to answer its probe before it is
/// [`Probe::Silent`]: a health check is answered without database work,
/// so two live servers on one machine answer within a few milliseconds
/// of each other even under load.
pub const SILENT_SLACK: Duration = Duration::from_millis(10);

/// How many of the late server's probe deadlines a probe waits for the
/// other server's answer before calling everyone slow.
pub const PROBE_PATIENCE: u32 = 2;

/// The verdict of a late attempt's probe (see [`Probing`]). A server is
/// hung when, past its probe deadline, it alone is silent: the other
/// server answered, and the late one has had that long and `slack` more
/// (a busy machine answers the two checks at different moments). When
/// the other has not answered either, the verdict waits for it: in the
/// burst of copies every client sends when a server hangs, the other can
/// answer after its own deadline, and calling the hung server alive then
/// kept every call on it until the deadline and a second probe. Both
/// silent for [`PROBE_PATIENCE`] deadlines: the machine or the link is
/// slow for everyone, and dropping a server for it would only add a
/// failover to a stall.
///
/// Before the verdict, the late server is [`Probe::Silent`] once the other
/// answered and the late one has had as long, and at least its own usual
/// round trip, and [`SILENT_SLACK`] more.
pub fn probe_verdict(now: Probing, slack: Duration) -> Probe {
    if now.answered {
        return Probe::Alive;
    }
    let silent = match now.other {
        Some(Some(other)) if now.elapsed >= silent_after(other, now.own_round_trip) => {
            Probe::Silent
        }
        _ => Probe::Pending,
    };
    if !now.overdue {
        return silent;
    }
    match now.other {
        None => Probe::Hung,
        Some(Some(other)) if now.elapsed >= other + slack => Probe::Hung,
        Some(None) if now.given_up => Probe::Alive,
        Some(_) => silent,
    }
}

/// When, from the probe, a late server is [`Probe::Silent`], the other
/// having answered after `other`: as long, at least its own usual round
/// trip, and [`SILENT_SLACK`] more.
pub fn silent_after(other: Duration, own_round_trip: Duration) -> Duration {
    other.max(own_round_trip) + SILENT_SLACK
}

/// What a background health check of a live server heard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Serving, after this round trip.
    Answered(Duration),
    /// An answer that is no: the connection failed or was refused, or the
    /// server said it is not serving (draining).
    Refused,
    /// Nothing within the check's deadline.
    Silent,
}

/// Whether a background health check that heard nothing drops its server.
/// Silence says less than a refusal: a server, or the machine and the link
/// everyone shares, may just be slow. So only when another server answered
/// meanwhile (a check of the same round, or any call since it began) and
/// this one answered no call since then. When nothing answered, the
/// machine or the link is slow for everyone (a client or a cluster past its
/// capacity, a moment the host took the cores, a player's own link
/// stalling), and dropping every server would only add reconnections and
/// failovers to that moment, as a late call's probe already does not
/// ([`probe_verdict`], [`PROBE_PATIENCE`]). A call that is late on a hung
/// server still finds it out through its own probe.
pub fn drop_silent(others_answered: bool, it_answered_a_call: bool) -> bool {
    others_answered && !it_answered_a_call
}

/// Whether a call late on a [`Probe::Silent`] server sends a copy now: when
/// none is out and another live server can take it. Budget and shared stall
/// do not stop it (see the module docs); the call pays a token if one is
/// left.
pub fn copy_when_silent(copy: Copy, other_server: bool) -> bool {
    copy == Copy::None && other_server
}

/// Whether a copy that is late too means two servers are slow together
/// (a shared stall, see [`at_deadline`]): only once the first server is
/// known alive. While its probe is pending, or it is hung, the copy's
/// server is only busy with the copies every client sends it when a
/// server hangs; calling that a shared stall would stop the hedges and
/// failovers the hang needs.
pub fn late_copy_is_shared_stall(copy: Copy, probe: Probe) -> bool {
    copy == Copy::Late && probe == Probe::Alive
}

/// When a copy, sent `copied_after` into its call, counts as late: the sign
/// of a shared stall ([`late_copy_is_shared_stall`]) while its first server
/// is known alive. Not at its server's hedge delay: when a server turns
/// slow, every player of its games copies to the same next server at once,
/// and the copies queue at their game's gate there, each behind the
/// others. So only at twice that delay, and not before the copy has
/// waited as long as its first call had when copied: a copy back sooner
/// came from a server faster than the first, not from a stall both share.
/// Before, a copy 6.1 ms long beside a hedge delay of about 3 ms, sent 7.5
/// ms into a call on a server just turned slow, latched its client into a
/// shared stall, and the client's next late call held its copy back for
/// 65 ms (a loopback `slow` run's maximum, 67 ms).
pub fn copy_late_after(hedge_delay: Duration, copied_after: Duration) -> Duration {
    (hedge_delay * 2).max(copied_after)
}

/// Whether a copy's answer ends a shared stall. An answer within its
/// server's hedge delay does, as any call's does. So does one the copy
/// brought back before it counted as late ([`copy_late_after`]) while the
/// first server has still not answered: the copy is back first, so the two
/// servers are not slow together. Before, such a copy (10 ms beside a
/// hedge delay of 9) kept its client in a "shared stall" while one server
/// was slow, and the client's next call on that server sent no copy and
/// waited out its 150 ms deadline (a loopback `slow` run's maximum, 152
/// ms).
pub fn copy_answer_ends_stall(
    rtt: Duration,
    hedge_delay: Duration,
    copied_after: Duration,
    first_pending: bool,
) -> bool {
    rtt <= hedge_delay || (first_pending && rtt <= copy_late_after(hedge_delay, copied_after))
}

/// How long a shared stall stops copies before one late call may send one
/// anyway. The stall ends only when a call is answered on time; a client
/// whose game sits on a server that alone turned slow gets no such answer
/// while every copy is stopped, and a moment of machine-wide slowness had
/// so latched one client into a "shared stall" for the whole two seconds a
/// server was slow: each of its calls waited out the slow server's 204 ms
/// (a loopback `slow` run). The first try comes after 50 ms (at 100 ms, a
/// call late on a server turned slow 46 ms after such a moment waited 59
/// ms for its copy, against 3–12 ms for the other clients'); each try
/// that does not end the stall doubles the wait for the next, up to
/// [`STALL_TRIAL_LONGEST`] (a circuit breaker's half-open backoff), so a
/// stall that really is shared (an overloaded database) draws few copies,
/// and the budget pays for each.
pub const STALL_TRIAL_AFTER: Duration = Duration::from_millis(50);
/// The longest wait between two tries.
pub const STALL_TRIAL_LONGEST: Duration = Duration::from_millis(1600);

/// Whether a late call in a shared stall last seen (or tried) at `seen`,
/// after `tries` tries that did not end it, may try a copy now.
pub fn stall_trial_due(seen: Option<Instant>, tries: u32, now: Instant) -> bool {
    stall_trial_at(seen, tries).is_none_or(|at| now >= at)
}

/// When a late call in a shared stall last seen (or tried) at `seen`,
/// after `tries` tries that did not end it, may try a copy (`None`: now).
/// A call the stall held back when it turned late asks again then, not
/// at its deadline: its client's stall may have been one moment of
/// machine-wide slowness, and its own server alone slow now (a loopback
/// `slow` run: a call sent 10 ms after its server turned slow went late
/// within 100 ms of its client's last stall, sent no copy, and waited out
/// the slow server's 205 ms while every other client's copy won).
pub fn stall_trial_at(seen: Option<Instant>, tries: u32) -> Option<Instant> {
    let wait = STALL_TRIAL_AFTER
        .saturating_mul(1 << tries.min(8))
        .min(STALL_TRIAL_LONGEST);
    seen.map(|seen| seen + wait)
}

/// Until when a call sent at `sent` on a server that said it queues calls
/// for the database (its last such answer queued `queued`) is waited for
/// rather than copied: its hedge delay and twice that queue. A copy would
/// queue on another server the same way, but only as long: a call later
/// than that is late for something else (the server itself is slow) and
/// is hedged as any other. A `slow` run's server answered 200 ms late
/// after queueing 2–7 ms for a database connection, and a client told
/// "busy" by each such answer sent it no copy for six calls in a row.
pub fn busy_excused_until(sent: Instant, hedge_delay: Duration, queued: Duration) -> Instant {
    sent + hedge_delay + queued * 2
}

/// How soon after a copy beat a server a second win over it must come to
/// move calls away from it ([`win_moves_calls`]).
pub const SECOND_WIN_WITHIN: Duration = Duration::from_millis(500);

/// Whether a copy's win over the `slow` server, for a call sent at `sent`,
/// moves the player's calls to the winner: only as the second win over it
/// in a row, for a call sent after the first (`beaten`: the server last
/// beaten and when, forgotten by the pool when that server answers a call
/// within its hedge delay) and within [`SECOND_WIN_WITHIN`] of it. One win is what a moment
/// of machine-wide slowness gives as often as a slow server; moving on it
/// put one player of a game on another server than the other three, the
/// two servers then raced for the game's row (a compare-and-set lost, a row
/// lock waited for), and act-only windows of 100 ms had a game split over
/// two servers in 24–36 % of a fault-free run and 32–73 % of kill runs,
/// their slowest call 5–8 ms against 2–5 ms in the others. A server that
/// is slow for good loses the next call's race too (a player calls 20
/// times a second); a hung or killed one is left by its probe or its
/// reset, not by this.
pub fn win_moves_calls(
    beaten: Option<(&str, Instant)>,
    slow: &str,
    sent: Instant,
    now: Instant,
) -> bool {
    beaten.is_some_and(|(address, at)| {
        address == slow && sent >= at && now.saturating_duration_since(at) <= SECOND_WIN_WITHIN
    })
}

/// How soon after an answer that it was alone sent a player back to its
/// game's server another may ([`back_when_alone`]).
pub const ALONE_RETURN_EVERY: Duration = Duration::from_secs(5);

/// Whether an answer of `answered_by`, the server a player's calls go to
/// in a game, saying the player is alone there (`borbaman-alone`: its
/// game-mates call another server) sends its calls back to `left`: the
/// game's server it left only because copies sent to `answered_by` beat
/// it twice ([`win_moves_calls`]), still live. Its game-mates stayed
/// there, served in time; the two wins were a moment of slowness as often
/// as a slow server, and a game split over two servers races for its row
/// until the mover's cool-off ends. At most once in
/// [`ALONE_RETURN_EVERY`] (`returned_at`: the last such return): a server
/// slow for this player alone (its own path to it) beats it again, and it
/// then stays where its calls are answered.
pub fn back_when_alone(
    left: Option<&str>,
    answered_by: &str,
    returned_at: Option<Instant>,
    now: Instant,
) -> bool {
    left.is_some_and(|left| left != answered_by)
        && returned_at.is_none_or(|at| now.saturating_duration_since(at) >= ALONE_RETURN_EVERY)
}

/// How long a server must have been live in a pool before a running
/// game's calls go back to it ([`game_server`]): a server just
/// (re)connected (started, resumed from a hang, healed) has passed one
/// health check at most, and its connections are still cold.
pub const SETTLE: Duration = Duration::from_secs(1);

/// The beat of the wall clock on which the players of a game go back to
/// its server: a server settles, and a server left cools off, at the first
/// multiple of this (since the Unix epoch) past its own wait
/// ([`on_the_beat`]).
///
/// Each player's pool learns of a fault on its own: the four players of a
/// game leave their server up to a call interval apart (50 ms at 20 Hz),
/// and a pool sees a server back when its own health check passes. Timed
/// from those moments, they would go back one by one, the game's players
/// on two servers in between, their commits racing for the game's row.
/// On the wall clock's beat, which every player's machine keeps to within
/// milliseconds, they go back together; only waits that straddle a beat
/// are a beat apart. (Most games split after a `db-partition` are split
/// otherwise: one player's copy wins twice and moves it alone, see
/// `docs/failure-detection.md`.)
pub const BEAT: Duration = Duration::from_millis(250);

/// How long from `now` (the wall clock, since the Unix epoch) until the
/// first multiple of [`BEAT`] at least `wait` away.
pub fn on_the_beat(now: Duration, wait: Duration) -> Duration {
    let beat = BEAT.as_nanos();
    let to_beat = (beat - (now + wait).as_nanos() % beat) % beat;
    wait + Duration::from_nanos(to_beat as u64)
}

/// Which server a player's calls go to, by index among the live servers:
/// `current`, the server they go to now (if it is live and usable), or the
/// game's `choice` (the same for every player of the game: rendezvous
/// hashing over the live servers that are not cooling off), `settled`
/// once it has been live in this pool for [`SETTLE`] (to the next
/// [`BEAT`]). A player goes back to the game's choice once it has settled;
/// until then (and when there is no choice) it stays where its calls go.
///
/// Without the return, a player that left its game's server (a failover,
/// a copy's second win, a server that seemed dead during a cold start)
/// stayed wherever it went for as long as that server served: the players
/// of one game on two servers for the rest of the game, their commits
/// racing for the game's row on both (a fault-free bench had three of its
/// four games split so from its first two seconds to its end), and after
/// kills every game stayed on the server it fled to, none on the
/// replacement.
pub fn game_server(current: Option<usize>, choice: Option<usize>, settled: bool) -> Option<usize> {
    match (current, choice) {
        (Some(current), Some(choice)) if choice != current && settled => Some(choice),
        (Some(current), _) => Some(current),
        (None, choice) => choice,
    }
}

/// A hedged copy of the attempt, if one was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copy {
    None,
    /// Sent, not yet late by its own server's hedge delay.
    OnTime,
    /// Sent and late too.
    Late,
    /// Sent and failed.
    Failed,
}

/// What an attempt does when its deadline passes without an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtDeadline {
    /// Give up on this server now and retry elsewhere (spends a token).
    Abandon,
    /// The server is hung: drop it, retry elsewhere at once.
    Hung,
    /// Wait for the probe's verdict, then decide again.
    WaitForProbe,
    /// Keep waiting, up to the slow deadline.
    KeepWaiting,
    /// Probe the server again (and take a copy if one is covered), then
    /// decide again at the next deadline: its probe found it alive, but
    /// nothing else will end the wait before the slow deadline (no copy
    /// out, and no leaving into a shared stall or without a token). The
    /// server may have hung since its probe answered (a probe answered a
    /// moment before the hang, or two silent servers called alive on a
    /// machine stalling for everyone); without a second look its calls
    /// waited the slow deadline out, 2 s on a loaded machine.
    Reprobe,
}

/// What is known when an attempt's deadline passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Late {
    pub probe: Probe,
    pub copy: Copy,
    /// The pool saw two servers slow together and no answer on time since.
    pub shared_stall: bool,
    /// Another live server could take the call.
    pub other_server: bool,
    /// The budget has a token for a retry.
    pub token: bool,
}

/// Decides [`AtDeadline`] (see the module docs).
pub fn at_deadline(late: Late) -> AtDeadline {
    match (late.probe, late.copy) {
        (Probe::Hung, _) => AtDeadline::Hung,
        // The copy is still within its time: it will answer.
        (_, Copy::OnTime) => AtDeadline::KeepWaiting,
        (Probe::Pending | Probe::Silent, _) => AtDeadline::WaitForProbe,
        (Probe::Alive, Copy::Late) => AtDeadline::KeepWaiting,
        (Probe::Alive, Copy::None | Copy::Failed) => {
            if !late.other_server {
                // Nowhere to go, whatever a probe says.
                AtDeadline::KeepWaiting
            } else if !late.shared_stall && late.token {
                AtDeadline::Abandon
            } else {
                AtDeadline::Reprobe
            }
        }
    }
}

/// Copies one suspicion covers with its single token: a player has at most
/// this many calls in flight (see [`crate::inputs::MAX_IN_FLIGHT`]), and
/// all of them wait on the same server.
pub const COPIES_PER_SUSPICION: u32 = crate::inputs::MAX_IN_FLIGHT as u32;

/// A server a call went late on, shared by every call in flight on it: the
/// first late call *opens* the suspicion (probes the server, pays one token
/// for its copy); the others late on the same server while it is open
/// *join* it: no probe of their own, the one verdict ends them all, and
/// their copies are covered by the first one's token. A player with eight
/// calls pipelined to a hung server so moves them all for one probe and
/// one token, instead of finding the budget spent after the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Suspicion {
    /// The opening call's copy was paid for: the suspicion covers copies.
    pub funded: bool,
    /// Copies it still covers.
    pub covered_left: u32,
    /// The server answered a call sent no earlier than the opening one:
    /// alive, only slow (a database stall). Copies are no longer covered:
    /// duplicating into a stall is what the budget is for.
    pub answered: bool,
    /// When the opening call was sent.
    pub call_sent: Instant,
}

impl Suspicion {
    /// The suspicion a late call sent at `call_sent` opens, having hedged
    /// as `hedge` says.
    pub fn opened(hedge: Hedge, call_sent: Instant) -> Suspicion {
        Suspicion {
            funded: hedge == Hedge::Paid,
            covered_left: COPIES_PER_SUSPICION.saturating_sub(1),
            answered: false,
            call_sent,
        }
    }

    /// The server answered a call sent at `sent`. Only a call sent no
    /// earlier than the opening one says the server is alive: one sent
    /// before it may have been carried out just before the server hung
    /// (100 ms away, its answer arrives a tenth of a second later), and
    /// taking it for life would leave the calls behind it without their
    /// copies.
    pub fn answer(&mut self, sent: Instant) {
        if sent >= self.call_sent {
            self.answered = true;
        }
    }
}

/// Whether a late call sends a copy to another server, and who pays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hedge {
    No,
    /// One token from the budget.
    Paid,
    /// Covered by the open suspicion's token.
    Covered,
}

/// What a call does the moment it is late.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WhenLate {
    /// Probe the server (and open a suspicion): no suspicion is open.
    pub probe: bool,
    pub hedge: Hedge,
}

/// What is known the moment a call is late (after its hedge delay).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LateNow {
    /// The suspicion open on this call's server, if any.
    pub suspicion: Option<Suspicion>,
    pub shared_stall: bool,
    pub database_unavailable: bool,
    /// Another live server could take a copy.
    pub other_server: bool,
    /// The budget has a token.
    pub token: bool,
}

/// Decides [`WhenLate`]: the copy goes out at once, beside the probe, not
/// after its verdict (a hung far server would otherwise cost the probe's
/// deadline and then a whole round trip more). See [`Suspicion`] for who
/// pays; [`should_hedge`] for when no copy goes at all.
pub fn when_late(now: LateNow) -> WhenLate {
    let paid = |token| {
        if should_hedge(
            now.shared_stall,
            now.database_unavailable,
            now.other_server,
            token,
        ) {
            Hedge::Paid
        } else {
            Hedge::No
        }
    };
    match now.suspicion {
        None => WhenLate {
            probe: true,
            hedge: paid(now.token),
        },
        Some(s) if s.funded && !s.answered && s.covered_left > 0 => WhenLate {
            probe: false,
            hedge: match paid(true) {
                Hedge::Paid => Hedge::Covered,
                no => no,
            },
        },
        Some(_) => WhenLate {
            probe: false,
            hedge: paid(now.token),
        },
    }
}

/// Whether a late attempt is hedged: not into a shared stall, not while the
/// database is known down (a copy would only wait beside the first), only
/// with another server to send it to and a token to spend.
pub fn should_hedge(
    shared_stall: bool,
    database_unavailable: bool,
    other_server: bool,
    token: bool,
) -> bool {
    !shared_stall && !database_unavailable && other_server && token
}

/// What a failed attempt does to its server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Gone: drop its connection.
    MarkDown,
    /// Alive but of no use to this call: move calls away, keep the
    /// connection.
    Leave,
    /// Not the server's fault: the caller gets the status.
    Return,
}

/// What a call does when no live server is left to try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Sleep this long, then try again. `database_down`: every server said
    /// the database is unavailable.
    Sleep {
        duration: Duration,
        database_down: bool,
    },
    /// No server is live: wait for the background task to find one.
    WaitForServer,
}

/// One call's state between attempts.
#[derive(Clone, Debug, Default)]
pub struct CallPlan {
    /// Servers left during this call (late, hung): avoided until every
    /// live server has been tried.
    avoid: HashSet<String>,
    /// Servers that said their database is unavailable during this call:
    /// another server may still reach it (a partitioned server), so they
    /// are avoided until every live server has said the same.
    database_down: HashSet<String>,
    /// Pauses taken so far (the backoff's exponent).
    pauses: u32,
    /// Every server has been slow: attempts get the slow deadline.
    slow: bool,
    /// The longest pushback a server sent during this call.
    pushback: Option<Duration>,
    /// The database was the trouble at least once.
    pub database_trouble: bool,
    /// An attempt failed because of its server.
    pub failed_over: bool,
}

impl CallPlan {
    /// Servers not to try now.
    pub fn skip(&self) -> HashSet<String> {
        self.avoid.union(&self.database_down).cloned().collect()
    }

    /// The deadline of the next attempt on a server timed as `timing`, and
    /// the longest it may be waited for once late (see [`AtDeadline`]).
    pub fn deadlines(&self, timing: &ServerTiming) -> (Duration, Duration) {
        if self.slow {
            (timing.slow_deadline(), timing.slow_deadline())
        } else {
            (timing.deadline(), timing.slow_deadline())
        }
    }

    /// An attempt on `server` failed as `kind`, the status carrying
    /// `pushback` if any.
    pub fn failed(&mut self, server: &str, kind: FailureKind, pushback: Option<Duration>) -> Fate {
        if let Some(pushback) = pushback {
            self.pushback = Some(self.pushback.map_or(pushback, |p| p.max(pushback)));
        }
        match kind {
            FailureKind::Refused => Fate::Return,
            FailureKind::ServerDown | FailureKind::Hung => {
                self.failed_over = true;
                self.avoid.insert(server.to_string());
                Fate::MarkDown
            }
            FailureKind::Timeout => {
                self.failed_over = true;
                self.avoid.insert(server.to_string());
                Fate::Leave
            }
            FailureKind::DatabaseUnavailable => {
                self.database_trouble = true;
                self.database_down.insert(server.to_string());
                Fate::Leave
            }
        }
    }

    /// No server outside [`CallPlan::skip`] is live (`live` are those that
    /// are): how long to pause before trying again, with the budget spent
    /// (`throttled`) or not.
    pub fn exhausted<R: Rng + ?Sized>(
        &mut self,
        live: &[&str],
        throttled: bool,
        rng: &mut R,
    ) -> Pause {
        let database_down = match exhausted(live, &self.avoid, &self.database_down) {
            Exhausted::WaitForServer => return Pause::WaitForServer,
            Exhausted::DatabaseDown => {
                self.database_down.clear();
                true
            }
            Exhausted::RetrySlow => {
                // Alive but slow, all of them (or cut off the database):
                // they get time to answer for themselves.
                self.avoid.clear();
                self.slow = true;
                false
            }
        };
        // The throttled cap holds back work added to servers that may still
        // be busy with the first copy (the budget is spent on hedges and on
        // retries after timeouts). Every server having answered that its
        // database is unavailable is not that: the calls did not run, and
        // the moment to catch is the database's return, which a pause of
        // up to a second would miss by half a second on average.
        let throttled = throttled && !database_down;
        let duration = backoff(self.pauses, throttled, self.pushback.take(), rng);
        self.pauses += 1;
        Pause::Sleep {
            duration,
            database_down,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn late(probe: Probe, copy: Copy) -> Late {
        Late {
            probe,
            copy,
            shared_stall: false,
            other_server: true,
            token: true,
        }
    }

    #[test]
    fn a_hung_server_is_left_at_once_whatever_else_is_known() {
        for copy in [Copy::None, Copy::OnTime, Copy::Late, Copy::Failed] {
            assert_eq!(at_deadline(late(Probe::Hung, copy)), AtDeadline::Hung);
            let stalled = Late {
                shared_stall: true,
                token: false,
                ..late(Probe::Hung, copy)
            };
            assert_eq!(at_deadline(stalled), AtDeadline::Hung);
        }
    }

    #[test]
    fn a_slow_server_is_left_only_when_another_can_do_better() {
        assert_eq!(
            at_deadline(late(Probe::Alive, Copy::None)),
            AtDeadline::Abandon,
            "one server slow, the others fine: move"
        );
        let stall = Late {
            shared_stall: true,
            ..late(Probe::Alive, Copy::None)
        };
        assert_eq!(at_deadline(stall), AtDeadline::Reprobe, "shared stall");
        assert_eq!(
            at_deadline(late(Probe::Alive, Copy::Late)),
            AtDeadline::KeepWaiting,
            "the copy is late too: the cause is shared"
        );
        let alone = Late {
            other_server: false,
            ..late(Probe::Alive, Copy::None)
        };
        assert_eq!(at_deadline(alone), AtDeadline::KeepWaiting, "nowhere to go");
        let broke = Late {
            token: false,
            ..late(Probe::Alive, Copy::Failed)
        };
        assert_eq!(at_deadline(broke), AtDeadline::Reprobe, "no budget");
    }

    #[test]
    fn a_call_on_a_server_found_alive_is_never_left_to_the_slow_deadline_unseen() {
        // A call's server answered its probe (a moment before it hung, or
        // beside another server as silent on a loaded machine), the call
        // has no copy out, and it cannot leave: no token, or a shared
        // stall. Keeping it waiting held it to the slow deadline (2.1 s on
        // loopback at load 20) however hung the server was: look again.
        for copy in [Copy::None, Copy::Failed] {
            for (shared_stall, token) in [(false, false), (true, true), (true, false)] {
                let stuck = Late {
                    shared_stall,
                    token,
                    ..late(Probe::Alive, copy)
                };
                assert_eq!(
                    at_deadline(stuck),
                    AtDeadline::Reprobe,
                    "{copy:?}, shared stall {shared_stall}, token {token}"
                );
            }
        }
    }

    #[test]
    fn a_copy_in_time_is_waited_for_and_a_pending_probe_decides() {
        assert_eq!(
            at_deadline(late(Probe::Alive, Copy::OnTime)),
            AtDeadline::KeepWaiting
        );
        assert_eq!(
            at_deadline(late(Probe::Pending, Copy::OnTime)),
            AtDeadline::KeepWaiting
        );
        assert_eq!(
            at_deadline(late(Probe::Pending, Copy::None)),
            AtDeadline::WaitForProbe,
            "a far server's deadline can come before its probe's"
        );
    }

    const SLACK: Duration = Duration::from_millis(50);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// At `elapsed` ms, the other having answered at `other` ms (`None`:
    /// there is no other; `Some(None)`: not yet).
    fn probing(
        answered: bool,
        overdue: bool,
        other: Option<Option<u64>>,
        elapsed: u64,
        given_up: bool,
    ) -> Probe {
        let now = Probing {
            answered,
            overdue,
            other: other.map(|o| o.map(ms)),
            elapsed: ms(elapsed),
            given_up,
            own_round_trip: ms(2),
        };
        probe_verdict(now, SLACK)
    }

    #[test]
    fn a_server_that_alone_does_not_answer_is_silent_before_its_verdict() {
        // Loopback: the other answered at 1 ms; the late server has 1 ms
        // and the slack, or its own round trip (2 ms) and the slack.
        assert_eq!(
            probing(false, false, Some(Some(1)), 11, false),
            Probe::Pending
        );
        assert_eq!(
            probing(false, false, Some(Some(1)), 12, false),
            Probe::Silent
        );
        assert_eq!(
            probing(false, false, Some(Some(20)), 29, false),
            Probe::Pending,
            "the other answered late: the late one gets as long"
        );
        assert_eq!(
            probing(false, false, Some(Some(20)), 30, false),
            Probe::Silent
        );
        assert_eq!(
            probing(false, false, Some(None), 90, false),
            Probe::Pending,
            "nobody answered: nothing to compare"
        );
        assert_eq!(probing(false, false, None, 90, false), Probe::Pending);
        assert_eq!(probing(true, false, Some(Some(1)), 50, false), Probe::Alive);
        assert_eq!(
            probing(false, true, Some(Some(1)), 40, false),
            Probe::Silent,
            "overdue but within the hung slack: still only silent"
        );
        assert_eq!(probing(false, true, Some(Some(1)), 51, false), Probe::Hung);
        // A far server (own round trip 210 ms) beside a near one.
        let far = Probing {
            answered: false,
            overdue: false,
            other: Some(Some(ms(1))),
            elapsed: ms(100),
            given_up: false,
            own_round_trip: ms(210),
        };
        assert_eq!(probe_verdict(far, SLACK), Probe::Pending);
        assert_eq!(
            probe_verdict(
                Probing {
                    elapsed: ms(220),
                    ..far
                },
                SLACK
            ),
            Probe::Silent
        );
    }

    #[test]
    fn a_second_win_over_one_server_moves_calls_and_a_first_does_not() {
        let at = Instant::now();
        let ms = Duration::from_millis;
        assert!(!win_moves_calls(None, "a", at + ms(50), at + ms(55)));
        let beaten = Some(("a", at));
        assert!(win_moves_calls(beaten, "a", at + ms(50), at + ms(55)));
        assert!(
            !win_moves_calls(beaten, "b", at + ms(50), at + ms(55)),
            "a win over another server"
        );
        assert!(
            !win_moves_calls(beaten, "a", at - ms(1), at + ms(5)),
            "a call sent before the first win was late in the same moment"
        );
        assert!(
            !win_moves_calls(beaten, "a", at + ms(600), at + ms(605)),
            "too long after the first win"
        );
    }

    #[test]
    fn a_servers_queue_excuses_a_wait_only_as_long_as_itself() {
        let sent = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(busy_excused_until(sent, ms(4), ms(2)), sent + ms(8));
        assert_eq!(busy_excused_until(sent, ms(4), ms(50)), sent + ms(104));
    }

    #[test]
    fn a_shared_stall_lets_a_copy_through_less_often_each_try() {
        let seen = Instant::now();
        let ms = Duration::from_millis;
        assert!(!stall_trial_due(Some(seen), 0, seen));
        assert!(!stall_trial_due(Some(seen), 0, seen + ms(49)));
        assert!(stall_trial_due(Some(seen), 0, seen + STALL_TRIAL_AFTER));
        // Tries that did not end the stall: 100 ms, 200 ms, … 1.6 s.
        assert!(!stall_trial_due(Some(seen), 1, seen + ms(99)));
        assert!(stall_trial_due(Some(seen), 1, seen + ms(100)));
        assert!(!stall_trial_due(Some(seen), 3, seen + ms(399)));
        assert!(stall_trial_due(Some(seen), 3, seen + ms(400)));
        assert!(!stall_trial_due(Some(seen), 40, seen + ms(1599)));
        assert!(stall_trial_due(Some(seen), 40, seen + STALL_TRIAL_LONGEST));
        assert_eq!(stall_trial_at(Some(seen), 1), Some(seen + ms(100)));
        assert_eq!(stall_trial_at(None, 3), None);
        assert!(
            stall_trial_due(None, 0, seen),
            "never seen: nothing holds it"
        );
    }

    #[test]
    fn a_copy_back_before_its_first_call_ends_a_shared_stall() {
        let ms = Duration::from_millis;
        // On time: ends it, whatever the first call does.
        assert!(copy_answer_ends_stall(ms(8), ms(9), ms(9), false));
        assert!(copy_answer_ends_stall(ms(8), ms(9), ms(9), true));
        // A little late, but back while the first server is still silent
        // on the call: one server is slow, not both.
        assert!(copy_answer_ends_stall(ms(10), ms(9), ms(9), true));
        // The same answer after the first had failed says nothing of the
        // first server's speed.
        assert!(!copy_answer_ends_stall(ms(10), ms(9), ms(9), false));
        // Back first, but as slow as a stall: both servers are in it.
        assert!(!copy_answer_ends_stall(ms(30), ms(9), ms(9), true));
        // Sent 40 ms into its call and back in 30: its server is the
        // faster one.
        assert!(copy_answer_ends_stall(ms(30), ms(9), ms(40), true));
    }

    #[test]
    fn a_copy_is_late_only_past_twice_its_delay_and_its_first_calls_wait() {
        let ms = Duration::from_millis;
        // The copies of a game's players land on one server together and
        // queue at its gate: one hedge delay is not late yet.
        assert_eq!(copy_late_after(ms(3), ms(3)), ms(6));
        // The slow run's case: copied 7.5 ms in, the copy was back in 6.1
        // ms, before it counted as late.
        let late = copy_late_after(ms(3), Duration::from_micros(7_500));
        assert!(Duration::from_micros(6_100) < late);
        assert!(copy_answer_ends_stall(
            Duration::from_micros(6_100),
            ms(3),
            Duration::from_micros(7_500),
            true
        ));
    }

    #[test]
    fn a_silent_server_gets_a_copy_whatever_the_budget_or_a_stall_say() {
        assert!(copy_when_silent(Copy::None, true));
        assert!(!copy_when_silent(Copy::None, false), "nowhere to send it");
        for out in [Copy::OnTime, Copy::Late, Copy::Failed] {
            assert!(!copy_when_silent(out, true), "{out:?}: one copy a call");
        }
        assert_eq!(
            at_deadline(late(Probe::Silent, Copy::None)),
            AtDeadline::WaitForProbe
        );
        assert_eq!(
            at_deadline(late(Probe::Silent, Copy::OnTime)),
            AtDeadline::KeepWaiting
        );
        assert!(!late_copy_is_shared_stall(Copy::Late, Probe::Silent));
    }

    #[test]
    fn a_server_is_hung_when_it_alone_is_silent() {
        for overdue in [false, true] {
            for other in [None, Some(None), Some(Some(10))] {
                assert_eq!(probing(true, overdue, other, 300, false), Probe::Alive);
            }
        }
        assert_eq!(
            probing(false, false, Some(Some(10)), 90, false),
            Probe::Silent,
            "within its deadline no verdict, only a suspicion"
        );
        assert_eq!(
            probing(false, true, Some(Some(10)), 100, false),
            Probe::Hung
        );
        assert_eq!(
            probing(false, true, None, 100, false),
            Probe::Hung,
            "none to compare"
        );
        assert_eq!(
            probing(false, true, Some(None), 200, true),
            Probe::Alive,
            "everyone silent for long: the machine is slow, not this server"
        );
    }

    #[test]
    fn a_verdict_waits_for_the_other_server_before_calling_everyone_slow() {
        // The other server, busy with every client's copies, has not
        // answered by the late server's deadline (280 ms, 100 ms away): no
        // verdict yet (before, this said "alive", and the hung server kept
        // its calls).
        assert_eq!(probing(false, true, Some(None), 280, false), Probe::Pending);
        // It answers at 310 ms, the late server still silent: given as
        // long and the slack more, it is hung.
        assert_eq!(
            probing(false, true, Some(Some(310)), 310, false),
            Probe::Pending
        );
        assert_eq!(
            probing(false, true, Some(Some(310)), 360, false),
            Probe::Hung
        );
        // Or the late server answers first: alive.
        assert_eq!(probing(true, true, Some(None), 300, false), Probe::Alive);
    }

    #[test]
    fn a_silent_health_check_drops_its_server_only_beside_one_that_answered() {
        assert!(drop_silent(true, false), "hung beside a live server");
        assert!(!drop_silent(false, false), "slow for everyone");
        assert!(!drop_silent(true, true), "its calls are answered");
        assert!(!drop_silent(false, true));
    }

    #[test]
    fn a_late_copy_is_a_shared_stall_only_beside_a_live_server() {
        assert!(late_copy_is_shared_stall(Copy::Late, Probe::Alive));
        assert!(
            !late_copy_is_shared_stall(Copy::Late, Probe::Pending),
            "the first server may be hung: its copies make the other busy"
        );
        assert!(!late_copy_is_shared_stall(Copy::Late, Probe::Hung));
        for copy in [Copy::None, Copy::OnTime, Copy::Failed] {
            assert!(!late_copy_is_shared_stall(copy, Probe::Alive));
        }
    }

    #[test]
    fn only_an_answer_to_a_call_sent_since_the_late_one_clears_a_suspicion() {
        let opened_at = Instant::now();
        let mut open = Suspicion::opened(Hedge::Paid, opened_at);
        // An answer to a call sent 50 ms before: carried out before the
        // hang, arriving after it.
        open.answer(opened_at - Duration::from_millis(50));
        assert!(!open.answered);
        assert_eq!(
            when_late(LateNow {
                token: false,
                ..late_now(Some(open))
            })
            .hedge,
            Hedge::Covered,
            "the calls behind it keep their copies"
        );
        open.answer(opened_at + Duration::from_millis(1));
        assert!(open.answered, "a later call answered: alive");
    }

    #[test]
    fn hedges_stay_out_of_shared_trouble() {
        assert!(should_hedge(false, false, true, true));
        assert!(!should_hedge(true, false, true, true), "shared stall");
        assert!(!should_hedge(false, true, true, true), "database down");
        assert!(!should_hedge(false, false, false, true), "no other server");
        assert!(!should_hedge(false, false, true, false), "no budget");
    }

    fn late_now(suspicion: Option<Suspicion>) -> LateNow {
        LateNow {
            suspicion,
            shared_stall: false,
            database_unavailable: false,
            other_server: true,
            token: true,
        }
    }

    #[test]
    fn the_first_late_call_probes_and_hedges_at_once_for_one_token() {
        assert_eq!(
            when_late(late_now(None)),
            WhenLate {
                probe: true,
                hedge: Hedge::Paid
            }
        );
        let broke = LateNow {
            token: false,
            ..late_now(None)
        };
        assert_eq!(
            when_late(broke),
            WhenLate {
                probe: true,
                hedge: Hedge::No
            },
            "no token: probe only, the verdict moves the call"
        );
    }

    #[test]
    fn pipelined_calls_on_a_suspect_server_share_its_probe_and_token() {
        let mut open = Suspicion::opened(Hedge::Paid, Instant::now());
        let mut covered = 0;
        // A player's other calls go late one after another, the budget
        // long spent: each hedges, none probes, up to the pipeline's depth.
        loop {
            let step = when_late(LateNow {
                token: false,
                ..late_now(Some(open))
            });
            assert!(!step.probe, "one probe for the lot");
            if step.hedge != Hedge::Covered {
                assert_eq!(step.hedge, Hedge::No);
                break;
            }
            covered += 1;
            open.covered_left -= 1;
        }
        assert_eq!(covered + 1, COPIES_PER_SUSPICION, "the first paid");
    }

    #[test]
    fn a_suspicion_covers_nothing_into_shared_trouble_or_once_the_server_answered() {
        let open = Suspicion::opened(Hedge::Paid, Instant::now());
        let stall = LateNow {
            shared_stall: true,
            ..late_now(Some(open))
        };
        assert_eq!(when_late(stall).hedge, Hedge::No, "shared stall");
        let db = LateNow {
            database_unavailable: true,
            ..late_now(Some(open))
        };
        assert_eq!(when_late(db).hedge, Hedge::No, "database down");
        let answered = Suspicion {
            answered: true,
            ..open
        };
        assert_eq!(
            when_late(late_now(Some(answered))).hedge,
            Hedge::Paid,
            "alive, only slow: an ordinary late call"
        );
        let broke = LateNow {
            token: false,
            ..late_now(Some(answered))
        };
        assert_eq!(when_late(broke).hedge, Hedge::No);
        // Opened without a token: nothing to cover with.
        let unfunded = Suspicion::opened(Hedge::No, Instant::now());
        let step = when_late(LateNow {
            token: false,
            ..late_now(Some(unfunded))
        });
        assert_eq!(
            step,
            WhenLate {
                probe: false,
                hedge: Hedge::No
            }
        );
    }

    #[test]
    fn failures_decide_the_servers_fate() {
        let mut plan = CallPlan::default();
        assert_eq!(plan.failed("a", FailureKind::Refused, None), Fate::Return);
        assert!(!plan.failed_over);
        assert_eq!(
            plan.failed("a", FailureKind::ServerDown, None),
            Fate::MarkDown
        );
        assert_eq!(plan.failed("b", FailureKind::Hung, None), Fate::MarkDown);
        assert_eq!(plan.failed("c", FailureKind::Timeout, None), Fate::Leave);
        assert_eq!(
            plan.failed("d", FailureKind::DatabaseUnavailable, None),
            Fate::Leave
        );
        assert!(plan.failed_over && plan.database_trouble);
        let skip = plan.skip();
        assert!(["a", "b", "c", "d"].iter().all(|s| skip.contains(*s)));
    }

    #[test]
    fn a_database_outage_backs_off_with_growing_jittered_pauses_and_pushback() {
        let mut rng = StdRng::seed_from_u64(9);
        let live = ["a", "b"];
        let mut plan = CallPlan::default();
        let mut longest = Duration::ZERO;
        for round in 0..8 {
            plan.failed("a", FailureKind::DatabaseUnavailable, None);
            plan.failed("b", FailureKind::DatabaseUnavailable, None);
            let Pause::Sleep {
                duration,
                database_down,
            } = plan.exhausted(&live, false, &mut rng)
            else {
                panic!("servers are live");
            };
            assert!(database_down);
            assert!(duration <= Duration::from_millis(10 << round).min(Duration::from_millis(200)));
            longest = longest.max(duration);
            assert!(plan.skip().is_empty(), "asked again after the pause");
        }
        assert!(longest > Duration::from_millis(50), "{longest:?}");
        // A pushback is obeyed once.
        plan.failed(
            "a",
            FailureKind::DatabaseUnavailable,
            Some(Duration::from_secs(2)),
        );
        plan.failed("b", FailureKind::DatabaseUnavailable, None);
        assert!(matches!(
            plan.exhausted(&live, false, &mut rng),
            Pause::Sleep { duration, .. } if duration == Duration::from_secs(2)
        ));
        plan.failed("a", FailureKind::DatabaseUnavailable, None);
        plan.failed("b", FailureKind::DatabaseUnavailable, None);
        assert!(matches!(
            plan.exhausted(&live, false, &mut rng),
            Pause::Sleep { duration, .. } if duration <= Duration::from_millis(200)
        ));
    }

    #[test]
    fn a_database_outage_is_retried_within_the_short_cap_even_with_the_budget_spent() {
        use crate::pool::budget::BACKOFF_CAP;
        let mut rng = StdRng::seed_from_u64(5);
        let live = ["a", "b"];
        let mut longest_down = Duration::ZERO;
        let mut longest_slow = Duration::ZERO;
        for _ in 0..200 {
            let mut plan = CallPlan {
                pauses: 10,
                ..CallPlan::default()
            };
            plan.failed("a", FailureKind::DatabaseUnavailable, None);
            plan.failed("b", FailureKind::DatabaseUnavailable, None);
            let Pause::Sleep { duration, .. } = plan.exhausted(&live, true, &mut rng) else {
                panic!("servers are live");
            };
            longest_down = longest_down.max(duration);
            // Slow servers with the budget spent still wait longer.
            let mut plan = CallPlan {
                pauses: 10,
                ..CallPlan::default()
            };
            plan.failed("a", FailureKind::Timeout, None);
            plan.failed("b", FailureKind::Timeout, None);
            let Pause::Sleep { duration, .. } = plan.exhausted(&live, true, &mut rng) else {
                panic!("servers are live");
            };
            longest_slow = longest_slow.max(duration);
        }
        assert!(longest_down <= BACKOFF_CAP, "{longest_down:?}");
        assert!(longest_slow > BACKOFF_CAP, "{longest_slow:?}");
    }

    #[test]
    fn when_every_server_was_slow_the_next_attempts_get_the_slow_deadline() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut timing = ServerTiming::default();
        timing.record_probe(Duration::from_millis(200));
        let mut plan = CallPlan::default();
        let (deadline, longest) = plan.deadlines(&timing);
        assert!(deadline < longest);
        plan.failed("a", FailureKind::Timeout, None);
        plan.failed("b", FailureKind::DatabaseUnavailable, None);
        let pause = plan.exhausted(&["a", "b"], false, &mut rng);
        assert!(matches!(
            pause,
            Pause::Sleep {
                database_down: false,
                ..
            }
        ));
        assert_eq!(plan.deadlines(&timing).0, timing.slow_deadline());
        assert!(!plan.skip().contains("a"), "the slow server is tried again");
        assert!(plan.skip().contains("b"), "the cut-off one is not");
        assert_eq!(
            CallPlan::default().exhausted(&[], false, &mut rng),
            Pause::WaitForServer
        );
    }

    #[test]
    fn a_player_goes_back_to_its_games_server_once_that_server_has_settled() {
        // Elsewhere, the game's server settled: back to it.
        assert_eq!(game_server(Some(1), Some(0), true), Some(0));
        // Just (re)connected: stay where the calls go.
        assert_eq!(game_server(Some(1), Some(0), false), Some(1));
        // Already there, or no choice (every live server cooling off).
        assert_eq!(game_server(Some(0), Some(0), false), Some(0));
        assert_eq!(game_server(Some(2), None, true), Some(2));
        // No usable current server: the game's choice, settled or not.
        assert_eq!(game_server(None, Some(1), false), Some(1));
        assert_eq!(game_server(None, None, true), None);
    }

    #[test]
    fn a_player_moved_by_a_copys_wins_goes_back_when_alone_at_most_every_few_seconds() {
        let at = Instant::now();
        assert!(back_when_alone(Some("a"), "b", None, at));
        assert!(
            !back_when_alone(None, "b", None, at),
            "moved for no copy's win"
        );
        assert!(!back_when_alone(Some("b"), "b", None, at), "back already");
        assert!(!back_when_alone(
            Some("a"),
            "b",
            Some(at),
            at + ALONE_RETURN_EVERY - ms(1)
        ));
        assert!(back_when_alone(
            Some("a"),
            "b",
            Some(at),
            at + ALONE_RETURN_EVERY
        ));
    }

    #[test]
    fn players_that_left_a_server_apart_go_back_on_one_beat() {
        let ms = Duration::from_millis;
        let epoch = Duration::from_secs(1_700_000_000);
        // Four players of a game leave a server within 50 ms, each to wait
        // a second: all go back at the same moment of the wall clock.
        let back: Vec<Duration> = [10, 25, 40, 60]
            .into_iter()
            .map(|left| epoch + ms(left) + on_the_beat(epoch + ms(left), SETTLE))
            .collect();
        assert!(back.iter().all(|at| *at == epoch + ms(1250)), "{back:?}");
        // Never sooner than the wait, at most a beat later.
        for left in [0, 1, 249, 250, 251, 999] {
            let wait = on_the_beat(epoch + ms(left), SETTLE);
            assert!(wait >= SETTLE && wait < SETTLE + BEAT, "{left}: {wait:?}");
            assert_eq!((epoch + ms(left) + wait).as_nanos() % BEAT.as_nanos(), 0);
        }
        // On a beat already: no more than the wait.
        assert_eq!(on_the_beat(epoch, SETTLE), SETTLE);
    }
}
