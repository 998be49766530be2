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
//!   by its token, as long as the server has not answered meanwhile: once
//!   it has, the next call late on it opens a suspicion of its own), and
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
//!   probe, or any call sent after the late one (past a cluster's
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
use super::tuning::Tuning;

/// What the health probe of a late attempt's server has said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Not sent yet, or no verdict yet.
    Pending,
    /// No verdict yet, but the other server answered and this one has not
    /// within `Tuning::silent_slack` more: probably hung (see [`probe_verdict`]).
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
    /// The late server answered: its probe, or a call sent after the late
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
    /// Both have been silent for `Tuning::probe_patience` times the late
    /// server's probe deadline.
    pub given_up: bool,
    /// The late server's own network round trip as usually late (its
    /// network RTO): it is not silent before this, whatever the other did.
    pub own_round_trip: Duration,
}

/// The verdict of a late attempt's probe (see [`Probing`]). A server is
/// hung when, past its probe deadline, it alone is silent: the other
/// server answered, and the late one has had that long and `slack` more
/// (a busy machine answers the two checks at different moments). When
/// the other has not answered either, the verdict waits for it: in the
/// burst of copies every client sends when a server hangs, the other can
/// answer after its own deadline, and calling the hung server alive then
/// kept every call on it until the deadline and a second probe. Both
/// silent for `Tuning::probe_patience` deadlines: the machine or the link is
/// slow for everyone, and dropping a server for it would only add a
/// failover to a stall.
///
/// Before the verdict, the late server is [`Probe::Silent`] once the other
/// answered and the late one has had as long, and at least its own usual
/// round trip, and `Tuning::silent_slack` more.
pub fn probe_verdict(t: &Tuning, now: Probing) -> Probe {
    let slack = t.probe_slack;
    if now.answered {
        return Probe::Alive;
    }
    let silent = match now.other {
        Some(Some(other)) if now.elapsed >= silent_after(t, other, now.own_round_trip) => {
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
/// trip, and `Tuning::silent_slack` more.
pub fn silent_after(t: &Tuning, other: Duration, own_round_trip: Duration) -> Duration {
    other.max(own_round_trip) + t.silent_slack
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
/// ([`probe_verdict`], `Tuning::probe_patience`). A call that is late on a hung
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
pub fn copy_late_after(t: &Tuning, hedge_delay: Duration, copied_after: Duration) -> Duration {
    (hedge_delay * t.copy_late_delays).max(copied_after)
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
    t: &Tuning,
    rtt: Duration,
    hedge_delay: Duration,
    copied_after: Duration,
    first_pending: bool,
) -> bool {
    rtt <= hedge_delay || (first_pending && rtt <= copy_late_after(t, hedge_delay, copied_after))
}

/// Whether a late call in a shared stall last seen (or tried) at `seen`,
/// after `tries` tries that did not end it, may try a copy now.
pub fn stall_trial_due(t: &Tuning, seen: Option<Instant>, tries: u32, now: Instant) -> bool {
    stall_trial_at(t, seen, tries).is_none_or(|at| now >= at)
}

/// When a late call in a shared stall last seen (or tried) at `seen`,
/// after `tries` tries that did not end it, may try a copy (`None`: now).
/// A call the stall held back when it turned late asks again then, not
/// at its deadline: its client's stall may have been one moment of
/// machine-wide slowness, and its own server alone slow now (a loopback
/// `slow` run: a call sent 10 ms after its server turned slow went late
/// within 100 ms of its client's last stall, sent no copy, and waited out
/// the slow server's 205 ms while every other client's copy won).
pub fn stall_trial_at(t: &Tuning, seen: Option<Instant>, tries: u32) -> Option<Instant> {
    let wait = t
        .stall_trial_after
        .saturating_mul(1 << tries.min(8))
        .min(t.stall_trial_longest);
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
pub fn busy_excused_until(
    t: &Tuning,
    sent: Instant,
    hedge_delay: Duration,
    queued: Duration,
) -> Instant {
    sent + hedge_delay + queued * t.busy_queue_factor
}

/// Whether a copy's win over the `slow` server, for a call sent at `sent`,
/// moves the player's calls to the winner: only as the second win over it
/// in a row, for a call sent after the first (`beaten`: the server last
/// beaten and when, forgotten by the pool when that server answers a call
/// within its hedge delay) and within `Tuning::second_win_within` of it. One win is what a moment
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
    t: &Tuning,
    beaten: Option<(&str, Instant)>,
    slow: &str,
    sent: Instant,
    now: Instant,
) -> bool {
    beaten.is_some_and(|(address, at)| {
        address == slow && sent >= at && now.saturating_duration_since(at) <= t.second_win_within
    })
}

/// Whether an answer of `answered_by`, the server a player's calls go to
/// in a game, saying the player is alone there (`borbaman-alone`: its
/// game-mates call another server) sends its calls back to `left`: the
/// game's server it left only because copies sent to `answered_by` beat
/// it twice ([`win_moves_calls`]), still live. Its game-mates stayed
/// there, served in time; the two wins were a moment of slowness as often
/// as a slow server, and a game split over two servers races for its row
/// until the mover's cool-off ends. At most once in
/// `Tuning::alone_return_every` (`returned_at`: the last such return): a server
/// slow for this player alone (its own path to it) beats it again, and it
/// then stays where its calls are answered.
pub fn back_when_alone(
    t: &Tuning,
    left: Option<&str>,
    answered_by: &str,
    returned_at: Option<Instant>,
    now: Instant,
) -> bool {
    left.is_some_and(|left| left != answered_by)
        && returned_at.is_none_or(|at| now.saturating_duration_since(at) >= t.alone_return_every)
}

/// How long from `now` (the wall clock, since the Unix epoch) until the
/// first multiple of `Tuning::beat` at least `wait` away.
pub fn on_the_beat(beat: Duration, now: Duration, wait: Duration) -> Duration {
    let beat = beat.as_nanos();
    let to_beat = (beat - (now + wait).as_nanos() % beat) % beat;
    wait + Duration::from_nanos(to_beat as u64)
}

/// Which server a player's calls go to, by index among the live servers:
/// `current`, the server they go to now (if it is live and usable), or the
/// game's `choice` (the same for every player of the game: rendezvous
/// hashing over the live servers that are not cooling off), `settled`
/// once it has been live in this pool for `Tuning::settle` (to the next
/// `Tuning::beat`). A player goes back to the game's choice once it has settled;
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
    /// The server answered a call sent after the opening one: alive then,
    /// only slow (a database stall), and the suspicion covers no more
    /// copies. A call late after that opens a suspicion of its own (its
    /// own probe and token, [`when_late`]): the server may have hung since
    /// it answered. Joining the answered one instead, while its probe
    /// waited out a round trip, made each call late on a server hung
    /// meanwhile pay its own copy: a call copied inside the jitter band,
    /// the next one answered, then the server hung, and the four calls
    /// late after that took a client's budget to its reserve; the next
    /// four held their copies until they stayed late (762 ms at 150 ms,
    /// where the bar is 700).
    pub answered: bool,
    /// When the opening call was sent.
    pub call_sent: Instant,
}

impl Suspicion {
    /// The suspicion a late call sent at `call_sent` opens, having hedged
    /// as `hedge` says.
    pub fn opened(t: &Tuning, hedge: Hedge, call_sent: Instant) -> Suspicion {
        Suspicion {
            funded: hedge == Hedge::Paid,
            covered_left: t.copies_per_suspicion.saturating_sub(1),
            answered: false,
            call_sent,
        }
    }

    /// The server answered a call sent at `sent`. Only a call sent after
    /// the opening one says the server is alive: one sent before it, or
    /// the opening call itself, may have been carried out just before the
    /// server hung (150 ms away, its answer arrives 150 ms later), and
    /// taking it for life would leave the calls behind it without their
    /// copies. The opening call's own answer, late inside the jitter band
    /// just after its copy went, called a server hung meanwhile alive: the
    /// calls behind it each paid a copy, the budget sank to its reserve,
    /// and the next four held theirs until they stayed late (an answer
    /// after 809 ms where 2 × RTT + 100 ms is 700).
    pub fn answer(&mut self, sent: Instant) {
        if sent > self.call_sent {
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
        // An answered suspicion is over (alive when it answered): a call
        // late since asks again, with a probe and a token of its own.
        None | Some(Suspicion { answered: true, .. }) => WhenLate {
            probe: true,
            hedge: paid(now.token),
        },
        Some(s) if s.funded && s.covered_left > 0 => WhenLate {
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
        t: &Tuning,
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
        let duration = backoff(t, self.pauses, throttled, self.pushback.take(), rng);
        self.pauses += 1;
        Pause::Sleep {
            duration,
            database_down,
        }
    }
}

#[cfg(test)]
mod tests;
