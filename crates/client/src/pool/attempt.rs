//! One attempt of a call, as a state machine with no I/O and no clock:
//! events in (an answer, an error, a timer, a probe's verdict, a server
//! dropped, the pool's answer to a question), actions out (ask the pool
//! for a copy, send it, declare a shared stall, answer the caller, give
//! up). The runner (`pool::call`) owns the requests, the probe and the
//! timers, passes the time in with every event, and sleeps until
//! [`AttemptMachine::next_timer`].
//!
//! What the pool as a whole decides (whether a copy goes out now, who
//! pays for it, the probe shared by every call late on a server, whether
//! the pool is in a shared stall) stays with the pool: the machine asks
//! ([`Action::Ask`], [`Action::AskPool`]) and the runner answers at once
//! with [`Event::Offered`] or [`Event::Pool`]. A question is always the
//! last action of a batch: the machine goes on from there when the answer
//! comes.
//!
//! The rules are `pool::decide`'s; this holds their order. An attempt is
//! late after its hedge delay: the pool probes the server and may send a
//! copy. A copy held back (shared stall, the server's queue, the budget's
//! reserve) is asked for again when the pool says, or at once when an
//! answer on time ends the stall. A probe that finds the server silent
//! beside a live one copies the call whatever the budget says; one that
//! finds it hung leaves it. A copy late too beside a live first server is
//! a shared stall. At the deadline [`at_deadline`] decides; past the
//! longest wait the attempt gives up.

use std::time::{Duration, Instant};

use super::decide::{
    AtDeadline, Copy, Late, Probe, at_deadline, copy_answer_ends_stall, copy_late_after,
    copy_when_silent, late_copy_is_shared_stall,
};
use super::tuning::Tuning;

/// Where the attempt's first request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum First {
    Pending,
    /// Failed with a status (the runner keeps it).
    Failed,
    /// Its server was found hung or dropped.
    Hung,
}

/// What the pool asks the attempt's question about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// The attempt is late: probe its server (or join the probe open on
    /// it), and send a copy if the pool allows one now
    /// (`ServerPool::late`).
    Late,
    /// A copy held back earlier is asked for again
    /// (`ServerPool::held_copy`).
    HeldCopy,
    /// The probe found the server silent: a copy if another server can
    /// take it (`ServerPool::silent_copy`).
    SilentCopy,
}

/// The pool's answer to an [`Ask`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offer {
    /// A copy may go out now, to a server whose hedge delay is this.
    pub copy: Option<Duration>,
    /// No copy now: ask again then (the stall's next try, the end of the
    /// server's queue excuse, the reserve's turn).
    pub ask_again: Option<Instant>,
}

/// What the pool knows when the attempt's deadline passes (see [`Late`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolNow {
    /// A shared stall, or a server that says it queues calls for the
    /// database.
    pub shared_stall: bool,
    /// Another live server could take the call.
    pub other_server: bool,
    /// The budget has a token.
    pub token: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The timer armed for [`AttemptMachine::next_timer`] fired.
    Timer,
    FirstAnswered,
    FirstFailed,
    CopyAnswered,
    /// The copy failed; `server_down`: its status says its server is gone.
    CopyFailed {
        server_down: bool,
    },
    /// The server's probe said this (never [`Probe::Pending`]).
    Verdict(Probe),
    /// An answer on time ended the shared stall.
    StallOver,
    /// The attempt's server was dropped (hung, dead).
    ServerDown,
    /// The copy's server was dropped.
    CopyServerDown,
    /// The pool's answer to [`Action::Ask`].
    Offered(Offer),
    /// The pool's answer to [`Action::AskPool`].
    Pool(PoolNow),
}

/// How an attempt that got no answer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The first request's status.
    Status,
    /// Its server is hung (or was dropped).
    Hung,
    /// No answer within this long; the server answers its probes.
    Late(Duration),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Ask the pool; answer with [`Event::Offered`].
    Ask(Ask),
    /// Send the copy the pool just offered.
    SendCopy,
    /// Tell what the pool knows now; answer with [`Event::Pool`].
    AskPool,
    /// Two servers are slow together: the pool is in a shared stall.
    Stall,
    /// The copy's failure says its server is gone: drop it.
    MarkCopyDown,
    /// Answer the caller with the first request's answer or the copy's;
    /// `on_time` ends a shared stall.
    Answer { copy: bool, on_time: bool },
    /// The attempt is over without an answer; `spend`: a token pays for
    /// leaving a server that may still be working on the call.
    GiveUp { spend: bool, outcome: Outcome },
}

/// Where the machine goes on once the pool has answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Then {
    /// After [`Ask::Late`]: the held copy's turn, then the rest of the
    /// timers.
    Held,
    /// After [`Ask::HeldCopy`]: the copy's lateness, the deadline, the end.
    CopyLate,
    /// After [`Ask::SilentCopy`]: the rest of the verdict.
    Verdict,
    /// After [`Action::AskPool`]: the deadline's decision.
    Decide,
}

/// One attempt on one server.
#[derive(Clone, Debug)]
pub struct AttemptMachine {
    tuning: Tuning,
    started: Instant,
    hedge_after: Duration,
    deadline: Duration,
    /// The longest the attempt waits at all.
    longest: Duration,
    first: First,
    copy: Copy,
    copy_sent_at: Option<Instant>,
    /// The copy's server's hedge delay when the copy went out.
    copy_delay: Duration,
    /// When the (last) copy went out, from the start of the attempt.
    hedge_sent: Option<Duration>,
    hedges: u32,
    probe: Probe,
    hedge_at: Option<Instant>,
    /// When a copy the pool held back is asked for again.
    held_copy_at: Option<Instant>,
    copy_late_at: Option<Instant>,
    deadline_at: Option<Instant>,
    overdue: bool,
    final_at: Instant,
    /// The deadline's decision is due once the current step is over.
    decide: bool,
    then: Option<Then>,
    done: bool,
}

impl AttemptMachine {
    /// An attempt sent at `started`, late after `hedge_after`, overdue at
    /// `deadline`, waited for at most `longest` (or the deadline if
    /// longer).
    pub fn new(
        tuning: &Tuning,
        started: Instant,
        hedge_after: Duration,
        deadline: Duration,
        longest: Duration,
    ) -> AttemptMachine {
        let longest = longest.max(deadline);
        AttemptMachine {
            tuning: *tuning,
            started,
            hedge_after,
            deadline,
            longest,
            first: First::Pending,
            copy: Copy::None,
            copy_sent_at: None,
            copy_delay: Duration::ZERO,
            hedge_sent: None,
            hedges: 0,
            probe: Probe::Pending,
            hedge_at: Some(started + hedge_after),
            held_copy_at: None,
            copy_late_at: None,
            deadline_at: Some(started + deadline),
            overdue: false,
            final_at: started + longest,
            decide: false,
            then: None,
            done: false,
        }
    }

    /// When the runner wakes the machine with [`Event::Timer`].
    pub fn next_timer(&self) -> Instant {
        [
            self.hedge_at,
            self.held_copy_at,
            self.copy_late_at,
            self.deadline_at,
        ]
        .into_iter()
        .flatten()
        .fold(self.final_at, Instant::min)
    }

    /// The first request may still answer.
    pub fn first_pending(&self) -> bool {
        self.first == First::Pending
    }

    /// A copy is out and may still answer.
    pub fn copy_pending(&self) -> bool {
        matches!(self.copy, Copy::OnTime | Copy::Late)
    }

    /// What the probe has said so far (a verdict other than this one is
    /// news).
    pub fn probe(&self) -> Probe {
        self.probe
    }

    /// The copy, if one went out.
    pub fn copy(&self) -> Copy {
        self.copy
    }

    /// Whether the probe's verdict is still awaited.
    pub fn awaits_verdict(&self) -> bool {
        matches!(self.probe, Probe::Pending | Probe::Silent)
    }

    /// A copy held back waits for the shared stall's end.
    pub fn holds_copy(&self) -> bool {
        self.held_copy_at.is_some()
    }

    /// Copies sent so far.
    pub fn hedges(&self) -> u32 {
        self.hedges
    }

    /// When the last copy went out, from the start of the attempt.
    pub fn hedge_sent(&self) -> Option<Duration> {
        self.hedge_sent
    }

    /// The machine has answered the caller or given up.
    #[cfg(test)]
    pub fn done(&self) -> bool {
        self.done
    }

    /// Takes `event`, which happened at `now`: what to do.
    pub fn handle(&mut self, event: Event, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        if self.done {
            return out;
        }
        match event {
            Event::FirstAnswered => {
                let on_time = now.saturating_duration_since(self.started) <= self.hedge_after;
                self.finish(
                    Action::Answer {
                        copy: false,
                        on_time,
                    },
                    &mut out,
                );
            }
            Event::FirstFailed => {
                self.first = First::Failed;
                if !self.copy_pending() {
                    self.give_up(false, Outcome::Status, &mut out);
                }
            }
            Event::CopyAnswered => {
                let rtt = self
                    .copy_sent_at
                    .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
                let on_time = copy_answer_ends_stall(
                    &self.tuning,
                    rtt,
                    self.copy_delay,
                    self.hedge_sent.unwrap_or_default(),
                    self.first_pending(),
                );
                self.finish(
                    Action::Answer {
                        copy: true,
                        on_time,
                    },
                    &mut out,
                );
            }
            Event::CopyFailed { server_down } => {
                if server_down {
                    out.push(Action::MarkCopyDown);
                }
                self.copy_lost(&mut out);
            }
            Event::CopyServerDown => {
                self.copy_late_at = None;
                self.copy_lost(&mut out);
            }
            Event::ServerDown => self.first_hung(&mut out),
            Event::StallOver => {
                if self.held_copy_at.is_some() {
                    self.held_copy_at = Some(now);
                }
            }
            Event::Verdict(verdict) => {
                self.probe = verdict;
                if verdict == Probe::Silent
                    && self.first_pending()
                    && copy_when_silent(self.copy, true)
                {
                    // Another server answered its health check, this one
                    // did not: a copy now, whatever the budget or a stall
                    // say.
                    self.ask(Ask::SilentCopy, Then::Verdict, &mut out);
                } else {
                    self.after_verdict(now, &mut out);
                }
            }
            Event::Timer => {
                self.decide = false;
                self.on_timers(now, &mut out);
            }
            Event::Offered(offer) => match self.then.take() {
                Some(Then::Held) => {
                    self.offered(offer, now, &mut out);
                    self.held_copy_due(now, &mut out);
                }
                Some(Then::CopyLate) => {
                    self.offered(offer, now, &mut out);
                    self.later_timers(now, &mut out);
                }
                Some(Then::Verdict) => {
                    self.offered(offer, now, &mut out);
                    self.after_verdict(now, &mut out);
                }
                Some(Then::Decide) | None => debug_assert!(false, "an offer nobody asked for"),
            },
            Event::Pool(pool) => match self.then.take() {
                Some(Then::Decide) => self.decided(pool, now, &mut out),
                _ => debug_assert!(false, "the pool told what nobody asked"),
            },
        }
        out
    }

    fn ask(&mut self, ask: Ask, then: Then, out: &mut Vec<Action>) {
        self.then = Some(then);
        out.push(Action::Ask(ask));
    }

    fn finish(&mut self, action: Action, out: &mut Vec<Action>) {
        self.done = true;
        self.then = None;
        out.push(action);
    }

    fn give_up(&mut self, spend: bool, outcome: Outcome, out: &mut Vec<Action>) {
        self.finish(Action::GiveUp { spend, outcome }, out);
    }

    /// How the attempt ends once neither request can answer.
    fn without_answer(&self) -> Outcome {
        match self.first {
            First::Failed => Outcome::Status,
            First::Hung => Outcome::Hung,
            First::Pending => Outcome::Late(self.longest),
        }
    }

    /// The copy will not answer.
    fn copy_lost(&mut self, out: &mut Vec<Action>) {
        self.copy = Copy::Failed;
        if !self.first_pending() {
            self.give_up(false, self.without_answer(), out);
        }
    }

    /// The first request will not answer: its server is hung or gone.
    fn first_hung(&mut self, out: &mut Vec<Action>) {
        if !self.first_pending() {
            return;
        }
        self.first = First::Hung;
        if !self.copy_pending() {
            self.give_up(false, Outcome::Hung, out);
        }
    }

    /// The pool answered an [`Ask`]: send the copy it allows, and note
    /// when to ask again.
    fn offered(&mut self, offer: Offer, now: Instant, out: &mut Vec<Action>) {
        self.held_copy_at = offer.ask_again;
        let Some(copy_delay) = offer.copy else {
            return;
        };
        let copied_after = now.saturating_duration_since(self.started);
        self.hedges += 1;
        self.hedge_sent = Some(copied_after);
        self.copy_delay = copy_delay;
        self.copy_late_at = Some(now + copy_late_after(&self.tuning, copy_delay, copied_after));
        self.copy_sent_at = Some(now);
        self.copy = Copy::OnTime;
        out.push(Action::SendCopy);
    }

    /// The rest of a verdict: a late copy beside a live server is a
    /// shared stall, a hung server is left, an overdue attempt decides.
    fn after_verdict(&mut self, now: Instant, out: &mut Vec<Action>) {
        if late_copy_is_shared_stall(self.copy, self.probe) {
            out.push(Action::Stall);
        }
        if self.probe == Probe::Hung {
            self.first_hung(out);
            if self.done {
                return;
            }
        }
        self.decide = self.overdue && self.first_pending();
        self.decide_if_due(now, out);
    }

    /// The timers due at `now`, in order: late, a held copy, the copy
    /// late, the deadline, the end.
    fn on_timers(&mut self, now: Instant, out: &mut Vec<Action>) {
        if self.hedge_at.is_some_and(|at| at <= now) {
            self.hedge_at = None;
            self.ask(Ask::Late, Then::Held, out);
            return;
        }
        self.held_copy_due(now, out);
    }

    fn held_copy_due(&mut self, now: Instant, out: &mut Vec<Action>) {
        if self.held_copy_at.is_some_and(|at| at <= now) {
            self.held_copy_at = None;
            if self.first_pending() && self.copy == Copy::None {
                self.ask(Ask::HeldCopy, Then::CopyLate, out);
                return;
            }
        }
        self.later_timers(now, out);
    }

    fn later_timers(&mut self, now: Instant, out: &mut Vec<Action>) {
        if self.copy_late_at.is_some_and(|at| at <= now) {
            self.copy_late_at = None;
            if self.copy == Copy::OnTime {
                self.copy = Copy::Late;
                // Two servers slow together: the cause is shared. (While
                // the first server's probe is pending, its verdict
                // decides.)
                if late_copy_is_shared_stall(self.copy, self.probe) {
                    out.push(Action::Stall);
                }
            }
        }
        if self.deadline_at.is_some_and(|at| at <= now) {
            self.deadline_at = None;
            self.overdue = true;
            self.decide = self.first_pending();
        }
        if now >= self.final_at {
            self.give_up(false, self.without_answer(), out);
            return;
        }
        self.decide_if_due(now, out);
    }

    fn decide_if_due(&mut self, _now: Instant, out: &mut Vec<Action>) {
        if std::mem::take(&mut self.decide) {
            self.then = Some(Then::Decide);
            out.push(Action::AskPool);
        }
    }

    /// The deadline has passed and the pool said how things stand.
    fn decided(&mut self, pool: PoolNow, now: Instant, out: &mut Vec<Action>) {
        let late = Late {
            probe: self.probe,
            copy: self.copy,
            shared_stall: pool.shared_stall,
            other_server: pool.other_server,
            token: pool.token,
        };
        match at_deadline(late) {
            AtDeadline::Abandon => self.give_up(true, Outcome::Late(self.deadline), out),
            AtDeadline::Hung => self.give_up(false, Outcome::Hung, out),
            AtDeadline::Reprobe => {
                // Probe again at once (joining a probe under way if another
                // call opened one), with a copy if one is covered; the
                // verdict alone decides nothing until the next deadline,
                // so a server that answers its probes is looked at once a
                // deadline.
                self.probe = Probe::Pending;
                self.overdue = false;
                self.deadline_at = Some(now + self.deadline);
                self.hedge_at = Some(now);
                self.on_timers(now, out);
            }
            AtDeadline::WaitForProbe | AtDeadline::KeepWaiting => {}
        }
    }
}

#[cfg(test)]
mod tests;
