//! One call: sent to the current server, copied to another when it is
//! late (a hedge) or silent, failed over when its server fails, and
//! answered by the first copy that comes back. What to do next is decided
//! in `decide`; this room carries it out.

use std::cell::Cell;
use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use borbaman_proto::pb::game_client::GameClient;
use borbaman_proto::reason::retry_pushback;
use borbaman_proto::timing::{ServerTiming as CallTiming, TIMING_KEY};
use tokio::sync::watch;
use tonic::transport::Channel;

use super::attempt::{Action, Ask, AttemptMachine, Event, Offer, Outcome, PoolNow};
use super::budget::Funds;
use super::choice::{FailureKind, classify, pick, pick_for_game};
use super::decide::{
    CallPlan, Copy, Fate, Hedge, LateNow, Pause, Probe, Suspicion, copy_when_silent, should_hedge,
    when_late, win_moves_calls,
};

use super::*;

/// How one attempt failed.
pub(super) enum Failure {
    /// The server (or the transport) answered with this status.
    Status(tonic::Status),
    /// No answer by the deadline (this long); the server answers its probe.
    Late(Duration),
    /// No answer, and no answer to its health probe.
    Hung,
}

/// What one (possibly hedged) attempt came to.
pub(super) struct Attempt<T> {
    pub(super) result: Result<tonic::Response<T>, Failure>,
    pub(super) answered_by: String,
    pub(super) hedges: u32,
    pub(super) hedge_won: bool,
    /// When the hedged copy was sent, from the start of the attempt.
    pub(super) hedge_sent: Option<Duration>,
}

/// What an attempt's runner holds beside its [`AttemptMachine`]: the
/// answer or the first request's failure, the copy in flight, the probe's
/// verdict and the servers' "down" signals.
pub(super) struct AttemptIo<'a, T, Fut> {
    server: &'a Server,
    /// Servers this call does not try now.
    skip: HashSet<String>,
    copies: Copies,
    started: Instant,
    answer: Option<tonic::Response<T>>,
    first_status: Option<tonic::Status>,
    /// The copy: its server, when it went out, the request.
    copy: Option<(Server, Instant, Pin<Box<Fut>>)>,
    /// The copy's server's "down" signal, once a copy is out.
    copy_down: Option<watch::Receiver<bool>>,
    probe: Option<watch::Receiver<Probe>>,
    /// Where the copy the pool just offered goes.
    offered: Option<Server>,
    down: watch::Receiver<bool>,
}

/// What `probe` tells next after `known` (a suspicion that the server is
/// silent, or the verdict; `Alive` if its probe ended without one); never
/// ends without a probe.
pub(super) async fn verdict_of(probe: Option<&mut watch::Receiver<Probe>>, known: Probe) -> Probe {
    match probe {
        Some(probe) => match probe
            .wait_for(|p| *p != Probe::Pending && *p != known)
            .await
        {
            Ok(verdict) => *verdict,
            Err(_) => Probe::Alive,
        },
        None => std::future::pending().await,
    }
}

/// Whether a late call may be copied to a second server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Copies {
    Allowed,
    Never,
}

/// Where a call late on `server` sends its copy: another live server not in
/// `skip`; with a game set, the game's next choice ([`pick_for_game`]).
pub(super) fn copy_target(
    state: &State,
    server: &Server,
    skip: &HashSet<String>,
) -> Option<Server> {
    let candidates: Vec<&Server> = state
        .servers
        .iter()
        .filter(|s| s.address != server.address && !skip.contains(&s.address))
        .collect();
    let addresses: Vec<&str> = candidates.iter().map(|s| s.address.as_str()).collect();
    let chosen = match state.game {
        Some(game) => pick_for_game(&addresses, &HashSet::new(), game),
        None => pick(&addresses, &HashSet::new(), &mut rand::rng()),
    };
    chosen.map(|i| candidates[i].clone())
}

thread_local! {
    /// Set while a call's closure builds the request of a hedged copy: the
    /// pool calls it there and then, on this thread, so
    /// [`ServerPool::request`] marks that request a copy ([`COPY_KEY`])
    /// without a closure's signature having to say which it builds.
    pub(super) static SENDING_COPY: Cell<bool> = const { Cell::new(false) };
}

/// [`SENDING_COPY`] set while this lives, unset when it goes (even if the
/// closure panics).
pub(super) struct SendingCopy;

impl SendingCopy {
    pub(super) fn new() -> SendingCopy {
        SENDING_COPY.with(|copying| copying.set(true));
        SendingCopy
    }
}

impl Drop for SendingCopy {
    fn drop(&mut self) {
        SENDING_COPY.with(|copying| copying.set(false));
    }
}

/// Awaits `future` if there is one, else never ends (a `select!` branch
/// that is not there).
pub(super) async fn maybe<F: Future + Unpin>(future: Option<&mut F>) -> F::Output {
    match future {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

impl ServerPool {
    /// Sends one request, failing over as described in the module docs.
    /// `f` builds and sends the request on the client it is given; it is
    /// called again, with the same request, for every retry and hedge.
    ///
    /// Sending the same request twice is safe because every request is
    /// idempotent: reads change nothing, a join is keyed by its token, and
    /// an `Act` or `Leave` carries its sequence number, which the servers
    /// apply once and answer as a replay afterwards. That is what makes
    /// both retries and hedges possible.
    ///
    /// The decisions are `pool::decide`'s; this only carries them out.
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<(T, CallInfo), PoolError>
    where
        F: FnMut(GameClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.send(f, Copies::Allowed).await
    }

    /// [`Self::call`] for a call whose answer no one is waiting on to play
    /// (a `Leave`): being late does not copy it to a second server. It
    /// still fails over when its server refuses it, is found hung or
    /// passes its deadline, and is copied when its server is silent
    /// beside one that answers (as a failover would: that server is not
    /// working on it). A leave is the costliest write a game makes
    /// (its player's seat, the game's end and rankings), and the players
    /// of a game leave together: copied, each leave ran twice and the
    /// two raced for the game's row, at the moment the game was busiest
    /// (see `docs/failure-detection.md`, "Leaves are not copied").
    pub async fn call_without_copies<T, F, Fut>(&self, f: F) -> Result<(T, CallInfo), PoolError>
    where
        F: FnMut(GameClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.send(f, Copies::Never).await
    }

    pub(super) async fn send<T, F, Fut>(
        &self,
        mut f: F,
        copies: Copies,
    ) -> Result<(T, CallInfo), PoolError>
    where
        F: FnMut(GameClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let config = &self.shared.config;
        let started = Instant::now();
        let give_up_at = started + config.give_up_after;
        let mut plan = CallPlan::default();
        let mut attempts = 0u32;
        let mut hedges = 0u32;
        let mut first_failure = None;
        let mut last_failure = String::new();
        let mut backoff = Duration::ZERO;
        let mut moved = None;
        let mut first_server = None;
        self.shared.state.lock().unwrap().budget.earn();
        loop {
            let Some(server) = self.current_server(&plan.skip()) else {
                let pause = {
                    let mut state = self.shared.state.lock().unwrap();
                    let live: Vec<&str> =
                        state.servers.iter().map(|s| s.address.as_str()).collect();
                    let throttled = !state.budget.has_token();
                    let pause = plan.exhausted(&state.tuning, &live, throttled, &mut rand::rng());
                    match pause {
                        Pause::Sleep {
                            database_down: true,
                            ..
                        } => state.database_unavailable = true,
                        // Every server this call tried was slow: the cause
                        // is shared.
                        Pause::Sleep { .. } => state.stall(),
                        Pause::WaitForServer => {}
                    }
                    pause
                };
                let paused = Instant::now();
                let waited = match pause {
                    Pause::Sleep { duration, .. } => sleep_until_before(duration, give_up_at).await,
                    Pause::WaitForServer => self.wait_for_server(give_up_at).await,
                };
                backoff += paused.elapsed();
                if !waited {
                    return Err(self.give_up(started, last_failure, plan.database_trouble));
                }
                continue;
            };
            attempts += 1;
            first_server.get_or_insert_with(|| server.address.clone());
            if attempts > 1 {
                self.shared.state.lock().unwrap().retries += 1;
            } else {
                moved = self
                    .shared
                    .state
                    .lock()
                    .unwrap()
                    .went_first_to(&server.address);
            }
            let attempt_started = Instant::now();
            let attempt = self
                .attempt(&mut f, &server, &plan, attempt_started, copies)
                .await;
            hedges += attempt.hedges;
            let (kind, pushback) = match attempt.result {
                Ok(response) => {
                    self.set_database_unavailable(false);
                    let server_timing = response
                        .metadata()
                        .get(TIMING_KEY)
                        .and_then(|v| v.to_str().ok())
                        .and_then(CallTiming::parse);
                    let answer_sent = attempt_started.saturating_duration_since(started)
                        + attempt
                            .hedge_sent
                            .filter(|_| attempt.hedge_won)
                            .unwrap_or_default();
                    let info = CallInfo {
                        server: attempt.answered_by,
                        first_server: first_server.take().unwrap_or_default(),
                        attempts,
                        failed_over: plan.failed_over,
                        started,
                        first_failure,
                        last_attempt: (attempts > 1).then_some(attempt_started),
                        last_failure,
                        hedges,
                        hedge_won: attempt.hedge_won,
                        rtt: started.elapsed(),
                        backoff,
                        answer_sent,
                        server_timing,
                        moved,
                    };
                    return Ok((response.into_inner(), info));
                }
                Err(Failure::Status(status)) => {
                    let kind = classify(&status);
                    if kind == FailureKind::Refused {
                        return Err(PoolError::Status(status));
                    }
                    last_failure = format!(
                        "{} from {}: {}",
                        status.code(),
                        server.address,
                        status.message()
                    );
                    (kind, retry_pushback(&status))
                }
                Err(Failure::Late(deadline)) => {
                    last_failure = format!(
                        "no answer from {} within {} ms",
                        server.address,
                        deadline.as_millis()
                    );
                    (FailureKind::Timeout, None)
                }
                Err(Failure::Hung) => {
                    last_failure = format!(
                        "{} answers neither the call nor a health check",
                        server.address
                    );
                    (FailureKind::Hung, None)
                }
            };
            tracing::debug!(
                server = server.address,
                elapsed_us = attempt_started.elapsed().as_micros() as u64,
                ?kind,
                last_failure,
                "attempt failed"
            );
            first_failure.get_or_insert(attempt_started);
            match plan.failed(&server.address, kind, pushback) {
                Fate::MarkDown => self.mark_down(&server.address),
                Fate::Leave => self.leave_current(&server.address),
                Fate::Return => unreachable!("refusals are returned above"),
            }
            if Instant::now() >= give_up_at {
                return Err(self.give_up(started, last_failure, plan.database_trouble));
            }
        }
    }

    /// One attempt on `server`, run as [`AttemptMachine`] says: this owns
    /// the requests, the probe and the timers, feeds the machine what
    /// happens, and carries out what it asks. After the server's hedge
    /// delay the attempt is late: the server is probed on its warm
    /// connection (or the probe another late call started on it is
    /// joined) and, as [`when_late`] decides, the same request goes to
    /// another live server at the same moment; the first good answer
    /// wins. If the server is dropped meanwhile (hung, dead), the attempt
    /// leaves it at once. At the deadline [`at_deadline`] decides whether
    /// to leave the server or keep waiting.
    ///
    /// [`at_deadline`]: super::decide::at_deadline
    pub(super) async fn attempt<T, F, Fut>(
        &self,
        f: &mut F,
        server: &Server,
        plan: &CallPlan,
        started: Instant,
        copies: Copies,
    ) -> Attempt<T>
    where
        F: FnMut(GameClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let timing = self.shared.state.lock().unwrap().timing(&server.address);
        let (deadline, longest) = plan.deadlines(&timing);
        let hedge_after = timing.hedge_delay().min(deadline);
        let tuning = &self.shared.config.tuning;
        let mut machine = AttemptMachine::new(tuning, started, hedge_after, deadline, longest);
        let mut io = AttemptIo {
            server,
            skip: plan.skip(),
            copies,
            started,
            answer: None,
            first_status: None,
            copy: None,
            copy_down: None,
            probe: None,
            offered: None,
            down: server.down.subscribe(),
        };
        let first = f(GameClient::new(server.channel.clone()));
        tokio::pin!(first);
        loop {
            let event = tokio::select! {
                result = &mut first, if machine.first_pending() => match result {
                    Ok(response) => {
                        self.note_busy(&server.address, response.metadata());
                        io.answer = Some(response);
                        Event::FirstAnswered
                    }
                    Err(status) => {
                        self.note_busy(&server.address, status.metadata());
                        io.first_status = Some(status);
                        Event::FirstFailed
                    }
                },
                result = maybe(io.copy.as_mut().map(|(_, _, future)| future)), if machine.copy_pending() => {
                    let (second, _, _) = io.copy.as_ref().expect("a copy is pending");
                    let result: Result<tonic::Response<T>, tonic::Status> = result;
                    match result {
                        Ok(response) => {
                            self.note_busy(&second.address, response.metadata());
                            io.answer = Some(response);
                            Event::CopyAnswered
                        }
                        Err(status) => {
                            self.note_busy(&second.address, status.metadata());
                            let server_down = classify(&status) == FailureKind::ServerDown;
                            Event::CopyFailed { server_down }
                        }
                    }
                },
                // The probe marks a hung server down itself.
                verdict = verdict_of(io.probe.as_mut(), machine.probe()), if machine.awaits_verdict() && io.probe.is_some() => {
                    Event::Verdict(verdict)
                },
                // An answer on time ended the shared stall that held this
                // call's copy back: ask for it now.
                _ = self.shared.stall_over.notified(), if machine.holds_copy() => Event::StallOver,
                // The copy's server was dropped meanwhile (found hung or
                // dead): the copy will not answer.
                _ = async {
                    match io.copy_down.as_mut() {
                        Some(down) => { let _ = down.wait_for(|d| *d).await; }
                        None => std::future::pending().await,
                    }
                }, if machine.copy_pending() => Event::CopyServerDown,
                // The server was dropped meanwhile (another call's probe
                // found it hung, its health check failed): leave it now.
                _ = async { let _ = io.down.wait_for(|d| *d).await; }, if machine.first_pending() => {
                    Event::ServerDown
                },
                _ = tokio::time::sleep_until(machine.next_timer().into()) => Event::Timer,
            };
            let now = Instant::now();
            let actions = machine.handle(event, now);
            if let Some(attempt) = self.carry_out(f, &mut io, &mut machine, actions, now) {
                return attempt;
            }
        }
    }

    /// Carries out what an attempt's machine asked at `now`, answering its
    /// questions as they come: the attempt's end, if it has come.
    fn carry_out<T, F, Fut>(
        &self,
        f: &mut F,
        io: &mut AttemptIo<'_, T, Fut>,
        machine: &mut AttemptMachine,
        actions: Vec<Action>,
        now: Instant,
    ) -> Option<Attempt<T>>
    where
        F: FnMut(GameClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut actions: VecDeque<Action> = actions.into();
        while let Some(action) = actions.pop_front() {
            let answer = match action {
                Action::Ask(ask) => Some(Event::Offered(self.offer(io, ask, machine))),
                Action::AskPool => Some(Event::Pool(self.pool_now(io))),
                Action::SendCopy => {
                    let second = io.offered.take().expect("a copy was offered");
                    let future = {
                        let _copying = SendingCopy::new();
                        Box::pin(f(GameClient::new(second.channel.clone())))
                    };
                    io.copy_down = Some(second.down.subscribe());
                    io.copy = Some((second, now, future));
                    None
                }
                Action::Stall => {
                    self.shared.state.lock().unwrap().stall();
                    None
                }
                Action::MarkCopyDown => {
                    if let Some((second, _, _)) = &io.copy {
                        self.mark_down(&second.address);
                    }
                    None
                }
                Action::Answer { copy, on_time } => {
                    return Some(self.answered(io, machine, copy, on_time));
                }
                Action::GiveUp { spend, outcome } => {
                    if spend {
                        let mut state = self.shared.state.lock().unwrap();
                        state.budget.spend();
                        tracing::debug!(
                            server = io.server.address,
                            tokens_milli = state.budget.tokens_milli(),
                            "left a late call's server: a token spent"
                        );
                    }
                    let result = match outcome {
                        Outcome::Status => Err(Failure::Status(
                            io.first_status.take().expect("the first request failed"),
                        )),
                        Outcome::Hung => Err(Failure::Hung),
                        Outcome::Late(after) => Err(Failure::Late(after)),
                    };
                    return Some(Attempt {
                        result,
                        answered_by: io.server.address.clone(),
                        hedges: machine.hedges(),
                        hedge_won: false,
                        hedge_sent: machine.hedge_sent(),
                    });
                }
            };
            if let Some(answer) = answer {
                actions.extend(machine.handle(answer, now));
            }
        }
        None
    }

    /// The pool's answer to an attempt's question ([`Ask`]): whether a
    /// copy goes now (its server kept in `io` for [`Action::SendCopy`]),
    /// and when to ask again.
    fn offer<T, Fut>(
        &self,
        io: &mut AttemptIo<'_, T, Fut>,
        ask: Ask,
        machine: &AttemptMachine,
    ) -> Offer {
        let (second, ask_again) = match ask {
            Ask::Late => {
                // Late: probe the server (or join the probe under way),
                // and hedge at the same moment.
                let (verdict, second, ask_again) =
                    self.late(io.server, &io.skip, io.started, io.copies);
                io.probe = Some(verdict);
                (second, ask_again)
            }
            Ask::HeldCopy => self.held_copy(io.server, &io.skip, io.started),
            Ask::SilentCopy => (self.silent_copy(io.server, &io.skip, machine.copy()), None),
        };
        let copy = second.as_ref().map(|s| self.hedge_delay(&s.address));
        io.offered = second;
        Offer { copy, ask_again }
    }

    /// What the pool knows when an attempt on `io.server` is overdue.
    fn pool_now<T, Fut>(&self, io: &AttemptIo<'_, T, Fut>) -> PoolNow {
        let state = self.shared.state.lock().unwrap();
        let address = &io.server.address;
        PoolNow {
            // A busy server's copy would queue elsewhere as it does here:
            // wait, as in a shared stall.
            shared_stall: state.shared_stall
                || state.busy(address, io.started, Instant::now()).is_some(),
            other_server: state
                .servers
                .iter()
                .any(|s| &s.address != address && !io.skip.contains(&s.address)),
            token: state.budget.has_token(),
        }
    }

    /// The attempt was answered (by its copy with `copy`): the answer is
    /// timed, a copy's win noted, and the attempt returned.
    fn answered<T, Fut>(
        &self,
        io: &mut AttemptIo<'_, T, Fut>,
        machine: &AttemptMachine,
        copy: bool,
        on_time: bool,
    ) -> Attempt<T>
    where
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let response = io.answer.take().expect("an answer came");
        let mut attempt = Attempt {
            result: Err(Failure::Hung),
            answered_by: io.server.address.clone(),
            hedges: machine.hedges(),
            hedge_won: copy,
            hedge_sent: machine.hedge_sent(),
        };
        if copy {
            let (second, copy_started, _) = io.copy.take().expect("a copy answered");
            self.record_call(&second.address, copy_started, on_time);
            self.hedge_won(&io.server.address, &second.address, io.started);
            self.note_alone(&second.address, response.metadata());
            attempt.answered_by = second.address;
        } else {
            self.note_alone(&io.server.address, response.metadata());
            self.record_call(&io.server.address, io.started, on_time);
        }
        attempt.result = Ok(response);
        attempt
    }

    /// A call on `server` is late: decides with [`when_late`] whether to
    /// probe (opening a [`Suspicion`]) or join the one open on it, and
    /// whether a copy goes to another live server (not in `skip`) now:
    /// with a game set, the game's next choice ([`pick_for_game`]), where
    /// every player of the game sends its copies and goes if the server is
    /// left, so that the game's calls do not contend for it from two
    /// servers. `sent`: when the late call was sent. Returns where the
    /// verdict will be told, and the copy's server.
    pub(super) fn late(
        &self,
        server: &Server,
        skip: &HashSet<String>,
        sent: Instant,
        copies: Copies,
    ) -> (watch::Receiver<Probe>, Option<Server>, Option<Instant>) {
        let mut state = self.shared.state.lock().unwrap();
        let target = match copies {
            Copies::Allowed => copy_target(&state, server, skip),
            Copies::Never => None,
        };
        // A shared stall that has lasted a while lets one late call try a
        // copy: the stall ends only with an answer on time, and a client
        // whose game is on a server that alone turned slow gets none.
        let now = Instant::now();
        let trial = state.stall_trial(now);
        let held = state.shared_stall && !trial;
        let busy = state.busy(&server.address, sent, now);
        let funds = state.copy_funds(&server.address, sent, now);
        let step = when_late(LateNow {
            suspicion: state.suspects.get(&server.address).map(|s| s.suspicion),
            // A server that queues calls for the database is late for
            // that: a copy would queue on another server the same way.
            shared_stall: held || busy.is_some(),
            database_unavailable: state.database_unavailable,
            other_server: target.is_some(),
            token: funds == Funds::Now,
        });
        // Held back by the stall, the server's queue or the budget's
        // reserve: ask again when the stall's next try is due, the queue
        // no longer excuses the wait, or the call stays late enough to
        // spend the reserve (see `held_copy`).
        let stall_try = held.then(|| state.stall_trial_at()).flatten();
        let reserve_at = match funds {
            Funds::LateFor(late) => Some(sent + late),
            Funds::Now | Funds::None => None,
        };
        let ask_again = (step.hedge == Hedge::No
            && should_hedge(false, state.database_unavailable, target.is_some(), true))
        .then(|| stall_try.into_iter().chain(busy).chain(reserve_at).max())
        .flatten();
        if step.hedge == Hedge::No {
            tracing::debug!(
                server = server.address,
                late_us = now.saturating_duration_since(sent).as_micros() as u64,
                stall = held,
                busy = busy.is_some(),
                ?funds,
                tokens_milli = state.budget.tokens_milli(),
                database = state.database_unavailable,
                other_server = target.is_some(),
                joined = !step.probe,
                ask_again_us =
                    ask_again.map(|at| at.saturating_duration_since(sent).as_micros() as u64),
                "late call: no copy now"
            );
        } else {
            // The suspicion is looked up only when the line is logged.
            tracing::debug!(
                server = server.address,
                late_us = now.saturating_duration_since(sent).as_micros() as u64,
                hedge = ?step.hedge,
                tokens_milli = state.budget.tokens_milli(),
                joined = !step.probe,
                suspicion = ?state.suspects.get(&server.address).map(|s| s.suspicion),
                "late call: copied"
            );
        }
        if step.hedge == Hedge::Covered
            && let Some(suspect) = state.suspects.get_mut(&server.address)
        {
            suspect.suspicion.covered_left -= 1;
        }
        let target = if step.hedge == Hedge::No {
            None
        } else {
            state.copy_sent(step.hedge == Hedge::Paid, trial, now);
            target
        };
        let verdict = if step.probe {
            let (tell, verdict) = watch::channel(Probe::Pending);
            let id = state.next_suspicion;
            state.next_suspicion += 1;
            let suspicion = Suspicion::opened(&state.tuning, step.hedge, sent);
            state.suspects.insert(
                server.address.clone(),
                Suspect {
                    id,
                    suspicion,
                    verdict: verdict.clone(),
                },
            );
            drop(state);
            self.probe(server, id, tell);
            verdict
        } else {
            state
                .suspects
                .get(&server.address)
                .map(|s| s.verdict.clone())
                .expect("a suspicion is open: joined")
        };
        (verdict, target, ask_again)
    }

    /// A late call on `server`, sent at `sent`, that a shared stall, the
    /// server's queue or the budget's reserve held back, at the time
    /// [`Self::late`] gave: the copy's server if one goes now (paying a
    /// token, as a try of the stall, because the stall has ended or
    /// because the call stays late enough to spend the reserve), or when
    /// to ask again (another call took this try meanwhile, the server said
    /// since that it queues, or the reserve is not the call's yet).
    pub(super) fn held_copy(
        &self,
        server: &Server,
        skip: &HashSet<String>,
        sent: Instant,
    ) -> (Option<Server>, Option<Instant>) {
        let mut state = self.shared.state.lock().unwrap();
        let now = Instant::now();
        let target = copy_target(&state, server, skip);
        let trial = state.stall_trial(now);
        if state.shared_stall && !trial {
            return (None, state.stall_trial_at());
        }
        if let Some(excused) = state.busy(&server.address, sent, now) {
            return (None, Some(excused));
        }
        let funds = state.copy_funds(&server.address, sent, now);
        if let Funds::LateFor(late) = funds
            && target.is_some()
        {
            return (None, Some(sent + late));
        }
        if !should_hedge(
            false,
            state.database_unavailable,
            target.is_some(),
            funds == Funds::Now,
        ) {
            return (None, None);
        }
        state.copy_sent(true, trial, now);
        (target, None)
    }

    /// A call late on `server`, which its probe found [`Probe::Silent`]:
    /// the server to send its copy to now, if [`copy_when_silent`] says so
    /// (chosen as [`Self::late`] chooses). Pays a token if one is left.
    pub(super) fn silent_copy(
        &self,
        server: &Server,
        skip: &HashSet<String>,
        copy: Copy,
    ) -> Option<Server> {
        let mut state = self.shared.state.lock().unwrap();
        let target = copy_target(&state, server, skip);
        if !copy_when_silent(copy, target.is_some()) {
            return None;
        }
        tracing::debug!(
            server = server.address,
            "silent server: its late call copied now"
        );
        state.copy_sent(true, false, Instant::now());
        target
    }

    /// A hedge to `winner` answered before `slow` did, for a call sent at
    /// `sent`. A second such win over `slow` ([`win_moves_calls`]) moves
    /// calls to the winner. With a game set, `slow` stays its players'
    /// server; it is left out of the game's choice for `Tuning::slow_cool_off`,
    /// then tried again (a server slow for good keeps losing races and is
    /// left again).
    pub(super) fn hedge_won(&self, slow: &str, winner: &str, sent: Instant) {
        let mut state = self.shared.state.lock().unwrap();
        let now = Instant::now();
        let beaten = state
            .beaten
            .as_ref()
            .map(|(address, at)| (address.as_str(), *at));
        if !win_moves_calls(&state.tuning, beaten, slow, sent, now) {
            state.beaten = Some((slow.to_string(), now));
            return;
        }
        state.beaten = None;
        if state.is_live(winner) {
            state.current = Some(winner.to_string());
            state.why_moved = Some(Move::CopyWon);
            if state.game.is_some() {
                state.left_on_win = Some(slow.to_string());
            }
        }
        state.cool_off(slow);
    }

    pub(super) fn give_up(&self, started: Instant, last: String, database: bool) -> PoolError {
        PoolError::GaveUp {
            after: started.elapsed(),
            last: if last.is_empty() {
                "no server reachable".into()
            } else {
                last
            },
            database,
        }
    }
}
