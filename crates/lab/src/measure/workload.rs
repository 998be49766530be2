//! The workload of a bench or chaos run: headless clients, each a bot brain
//! playing a real game through its own [`GameSession`] on its own
//! [`ServerPool`] (as every player has one: its own connections, its own
//! randomly picked server), making one invocation every interval like the
//! original's `update()` calls. What each call is, a [`Driver`] decides, the
//! same as for `borbaman bot`: in a running game the brain's action (`Act`);
//! in a lobby that is still filling a poll (`GetState`), acting idle once a
//! second to keep its seat; when its game ends (or its session is lost) it
//! joins the next one at once, so the load stays steady for the whole run.
//! A call a server refuses (`server-full`, `rate-limited`) is recorded as a
//! refusal, not an error, and the client waits the server's pushback before
//! its next call, as a player would. At the end every client leaves its
//! game.
//!
//! In a running game a client's inputs do not wait for round trips, as a
//! player's do not: each tick's action goes out at once in a call carrying
//! every unacknowledged input, while earlier calls are still on their way
//! (see `borbaman_client::inputs`); replies are taken in as they come.
//! (A closed loop, `--interval-ms 0`, waits for each reply instead: it
//! measures what one caller at a time gets.)
//!
//! Each client records every call ([`Recorder`]) and keeps the proof the
//! invariant checker needs: every session token it used, every `(token,
//! seq)` the servers acknowledged and the highest sequence number it sent;
//! and the inputs it sent, how many were applied, and how long each took
//! from its key press to the reply that acknowledged it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use borbaman_client::inputs::{Acked, RESEND_AFTER_FAILURE};
use borbaman_client::pool::{CallInfo, PoolError, ServerPool};
use borbaman_client::session::{GameSession, InputReply, new_identity, new_token};
use borbaman_proto::pb;

use super::record::{
    CallKind, Invocation, REFUSED_PREFIX, Recorder, RunClock, STATUS_OK, duration_us,
};
use crate::driver::{self, Driver, JoinBackoff, Step};
use crate::shutdown::Shutdown;

/// What the clients do and for how long.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    pub clients: u32,
    /// Time between two invocations of one client.
    pub interval: Duration,
    /// Calls started before this much time has passed are warm-up.
    pub warmup: Duration,
    /// Total run time, warm-up included.
    pub total: Duration,
    /// The clients run until `stop` turns true, not until `total`: a chaos
    /// run ends a calm after its last fault is over.
    pub until_stopped: bool,
    /// Players are named `<prefix><n>`.
    pub name_prefix: String,
    /// Each client predicts its own inputs as the terminal does (see
    /// `borbaman_client::predict`): its bot decides on the predicted state,
    /// and the corrections are counted.
    pub predict: bool,
}

/// An `Act` or `Leave` the servers acknowledged.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ack {
    pub token: Vec<u8>,
    pub seq: u64,
    pub game_id: u64,
}

/// One session (one game) of one client.
#[derive(Clone, Debug, Default)]
pub struct SessionLog {
    pub token: Vec<u8>,
    pub game_id: u64,
    pub seat: u32,
    /// Highest sequence number sent, acknowledged or not (0 if none).
    pub last_seq_sent: u64,
    /// Replies carrying a state older than one already seen.
    pub regressions: u64,
    /// The game was seen to finish (winner or draw).
    pub finished: bool,
    /// The servers stopped taking the session's calls (its seat was given
    /// away, its token is unknown): its inputs still queued were never
    /// applied.
    pub lost: bool,
    /// Inputs (actions) sent, and of them acknowledged as applied.
    pub inputs_sent: u64,
    pub inputs_applied: u64,
    /// The first and newest sequence number of the inputs sent (all those
    /// between were inputs too), if any.
    pub input_seqs: Option<(u64, u64)>,
    /// With prediction: states from the server that replaced the
    /// prediction's base, and of them those that moved the player from
    /// where the prediction had it.
    pub reconciled: u64,
    pub mispredicted: u64,
}

/// What a client proves about its run.
#[derive(Clone, Debug, Default)]
pub struct ClientLog {
    pub client: u32,
    pub sessions: Vec<SessionLog>,
    pub acknowledged: Vec<Ack>,
    /// Times this client's pool abandoned its current server.
    pub pool_failovers: u64,
    /// Key press to acknowledgement of every applied input sent after the
    /// warm-up, µs.
    pub input_to_apply_us: Vec<u64>,
}

/// Live counters for the progress bar.
#[derive(Debug, Default)]
pub struct Progress {
    pub calls: AtomicU64,
    pub errors: AtomicU64,
    /// Calls a server refused (`server-full`, `rate-limited`).
    pub refusals: AtomicU64,
    pub failovers: AtomicU64,
    /// Sessions that saw their game finish (four per finished game).
    pub sessions_finished: AtomicU64,
}

/// Runs one client per pool in `pools` until `config.total` has passed (or
/// `stop` turns true) and returns their logs, ordered by client.
pub async fn run(
    config: &WorkloadConfig,
    pools: Vec<ServerPool>,
    clock: RunClock,
    recorder: &Recorder,
    progress: &Arc<Progress>,
    stop: Shutdown,
) -> Vec<ClientLog> {
    let mut tasks = tokio::task::JoinSet::new();
    for (client, pool) in (0u32..).zip(pools) {
        // Each simulated player has an identity of its own, which owns its
        // name: the name carries a piece of it so a later run's players
        // (new identities) do not ask for names this run's own.
        let identity = new_identity();
        let client_run = ClientRun {
            client,
            name: format!(
                "{}{client}-{}",
                config.name_prefix,
                hex::encode(&identity[..3])
            ),
            identity,
            config: config.clone(),
            pool,
            clock,
            recorder: recorder.clone(),
            progress: progress.clone(),
            stop: stop.clone(),
            log: ClientLog {
                client,
                ..ClientLog::default()
            },
            tick_late_us: 0,
            pause: None,
            join_backoff: JoinBackoff::default(),
        };
        tasks.spawn(client_run.run());
    }
    let mut logs: Vec<ClientLog> = tasks.join_all().await;
    logs.sort_by_key(|l| l.client);
    logs
}

struct ClientRun {
    client: u32,
    name: String,
    identity: Vec<u8>,
    config: WorkloadConfig,
    pool: ServerPool,
    clock: RunClock,
    recorder: Recorder,
    progress: Arc<Progress>,
    stop: Shutdown,
    log: ClientLog,
    /// How late the current tick fired.
    tick_late_us: u64,
    /// The wait a server's refusal asked for, before the next call.
    pause: Option<Duration>,
    /// This client's joins refused in a row.
    join_backoff: JoinBackoff,
}

impl ClientRun {
    async fn run(mut self) -> ClientLog {
        let deadline =
            (!self.config.until_stopped).then(|| self.clock.started() + self.config.total);
        let mut driver = Driver::new(u64::from(self.client));
        // Spread the clients' calls over the interval instead of all at once.
        // An interval of zero is a closed loop: the next call as soon as
        // the last one answered.
        let closed_loop = self.config.interval.is_zero();
        let offset = self.config.interval * self.client / self.config.clients.max(1);
        let mut ticker = tokio::time::interval_at(
            tokio::time::Instant::from_std(self.clock.started() + offset),
            self.config.interval.max(Duration::from_micros(1)),
        );
        // After a stall, carry on at the normal pace rather than in a burst.
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut session: Option<GameSession> = None;
        loop {
            if let Some(pause) = self.pause.take() {
                // A refused call: wait as the server asked, then carry on
                // at the next tick (the missed ones are skipped).
                let left = deadline.map_or(pause, |d| d.saturating_duration_since(Instant::now()));
                if self.stop.sleep(pause.min(left)).await {
                    break;
                }
            }
            // The previous call, if any, ended here.
            let idle_from = Instant::now();
            if closed_loop {
                tokio::task::yield_now().await;
                self.tick_late_us = 0;
            } else {
                // Until the tick, take in the replies to the inputs sent.
                let due = loop {
                    let wake = tokio::select! {
                        due = ticker.tick() => Wake::Tick(due),
                        Some(reply) = next_reply(&mut session) => Wake::Reply(Box::new(reply)),
                    };
                    match wake {
                        Wake::Tick(due) => break due,
                        Wake::Reply(reply) => {
                            let Some(current) = session.as_mut() else {
                                continue;
                            };
                            if self.settled(current, *reply) {
                                self.close(current, false, true);
                                session = self.join().await;
                            }
                        }
                    }
                };
                let due = due.into_std();
                // Late only by what the client could have done: a call that
                // overran the interval delays the next one by its own RTT.
                self.tick_late_us = duration_us(idle_from.max(due).elapsed());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) || self.stop.is_shutdown() {
                break;
            }
            let Some(current) = session.as_mut() else {
                session = self.join().await;
                continue;
            };
            let lost = match driver.next(current) {
                Step::GameOver => {
                    self.drain(current).await;
                    self.close(current, true, false);
                    session = self.join().await;
                    continue;
                }
                Step::Act(action) if !closed_loop => {
                    current.send_input(action);
                    false
                }
                Step::Act(action) => self.act(current, action).await,
                Step::Poll => {
                    current.pump();
                    self.poll(current).await
                }
            };
            if lost {
                self.close(current, false, true);
                session = self.join().await;
            }
        }
        if let Some(mut current) = session {
            self.leave(&mut current).await;
            let finished = current.latest().map(|s| s.phase) == Some(pb::Phase::Finished as i32);
            self.close(&current, finished, false);
        }
        self.log.pool_failovers = self.pool.status().failovers;
        self.log
    }

    async fn join(&mut self) -> Option<GameSession> {
        let started = Instant::now();
        let result =
            GameSession::join_as(&self.pool, &self.identity, &self.name, new_token(), "").await;
        match result {
            Ok((mut session, info)) => {
                if self.config.predict {
                    session.predict_inputs();
                }
                let version = session.latest().map(|s| s.version).unwrap_or(0);
                self.record(CallKind::Join, &session, 0, &info, started, version, false);
                self.join_backoff.seated();
                Some(session)
            }
            Err(e) => {
                if let Some(refusal) = self.record_error(CallKind::Join, 0, 0, 0, started, &e) {
                    self.pause = Some(self.join_backoff.refused(&refusal));
                }
                None
            }
        }
    }

    /// Sends one action and waits for its reply (the closed loop); true
    /// when the session turned out to be lost.
    async fn act(&mut self, session: &mut GameSession, action: pb::Action) -> bool {
        let seq = session.next_seq();
        let started = Instant::now();
        match session.act(action).await {
            Ok((reply, info)) => {
                let version = reply.state.as_ref().map(|s| s.version).unwrap_or(0);
                self.acknowledge(session, reply.ack.max(seq));
                if started >= self.clock.started() + self.config.warmup {
                    self.log
                        .input_to_apply_us
                        .push(duration_us(started.elapsed()));
                }
                self.record(
                    CallKind::Act,
                    session,
                    seq,
                    &info,
                    started,
                    version,
                    reply.replayed,
                );
                false
            }
            Err(e) => {
                self.record_error(
                    CallKind::Act,
                    session.game_id(),
                    session.seat(),
                    seq,
                    started,
                    &e,
                );
                driver::must_rejoin(&e)
            }
        }
    }

    /// Takes in the reply to a call carrying inputs; true when the session
    /// turned out to be lost.
    fn settled(&mut self, session: &mut GameSession, reply: InputReply) -> bool {
        self.applied(session, &reply.acked);
        match reply.result {
            Ok((reply, info)) => {
                let version = reply.state.as_ref().map(|s| s.version).unwrap_or(0);
                self.record(
                    CallKind::Act,
                    session,
                    reply.seq,
                    &info,
                    info.started,
                    version,
                    reply.replayed,
                );
                false
            }
            Err(e) => {
                self.record_error(
                    CallKind::Act,
                    session.game_id(),
                    session.seat(),
                    session.next_seq().saturating_sub(1),
                    reply.started,
                    &e,
                );
                driver::must_rejoin(&e)
            }
        }
    }

    /// Files the inputs a reply acknowledged: the invariants' proof and
    /// their key-to-ack latency.
    fn applied(&mut self, session: &GameSession, acked: &[Acked]) {
        let warm_from = self.clock.started() + self.config.warmup;
        let now = Instant::now();
        for input in acked {
            self.acknowledge(session, input.seq);
            if now
                .checked_sub(input.latency)
                .is_some_and(|at| at >= warm_from)
            {
                self.log.input_to_apply_us.push(duration_us(input.latency));
            }
        }
    }

    /// Waits for the inputs still on their way to be applied and
    /// acknowledged, taking in their replies: up to [`DRAIN_LIMIT`], as
    /// long as a call may take when servers fail and the database is slow
    /// (one round trip when all is well). A session closed sooner would
    /// leave them unapplied, or its leave overtaking them.
    async fn drain(&mut self, session: &mut GameSession) {
        let deadline = tokio::time::Instant::now() + DRAIN_LIMIT;
        while session.unacked().len() > 0 && tokio::time::Instant::now() < deadline {
            session.pump();
            match tokio::time::timeout_at(deadline, session.next_reply()).await {
                Ok(Some(reply)) => {
                    self.settled(session, reply);
                }
                Ok(None) => tokio::time::sleep(RESEND_AFTER_FAILURE).await,
                Err(_) => break,
            }
        }
    }

    /// Reads the state; true when the session turned out to be lost.
    async fn poll(&mut self, session: &mut GameSession) -> bool {
        let started = Instant::now();
        match session.state().await {
            Ok((state, info)) => {
                self.record(
                    CallKind::State,
                    session,
                    0,
                    &info,
                    started,
                    state.version,
                    false,
                );
                false
            }
            Err(e) => {
                self.record_error(
                    CallKind::State,
                    session.game_id(),
                    session.seat(),
                    0,
                    started,
                    &e,
                );
                driver::must_rejoin(&e)
            }
        }
    }

    async fn leave(&mut self, session: &mut GameSession) {
        self.drain(session).await;
        let seq = session.next_seq();
        let started = Instant::now();
        match session.leave().await {
            Ok(info) => {
                self.acknowledge(session, seq);
                self.record(CallKind::Leave, session, seq, &info, started, 0, false);
            }
            Err(e) => {
                self.record_error(
                    CallKind::Leave,
                    session.game_id(),
                    session.seat(),
                    seq,
                    started,
                    &e,
                );
            }
        }
    }

    fn acknowledge(&mut self, session: &GameSession, seq: u64) {
        self.log.acknowledged.push(Ack {
            token: session.token().to_vec(),
            seq,
            game_id: session.game_id(),
        });
    }

    /// Files the proof of a session that is over.
    /// `lost`: the servers no longer took the session's calls (its
    /// inputs still queued can never be applied).
    fn close(&mut self, session: &GameSession, finished: bool, lost: bool) {
        let (inputs_sent, inputs_applied) = session.input_counts();
        let (reconciled, mispredicted) = session.prediction_counts().unwrap_or_default();
        if finished {
            self.progress
                .sessions_finished
                .fetch_add(1, Ordering::Relaxed);
        }
        self.log.sessions.push(SessionLog {
            token: session.token().to_vec(),
            game_id: session.game_id(),
            seat: session.seat(),
            last_seq_sent: session.next_seq() - 1,
            regressions: session.regressions(),
            finished,
            lost,
            inputs_sent,
            inputs_applied,
            input_seqs: session.input_seqs(),
            reconciled,
            mispredicted,
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        call: CallKind,
        session: &GameSession,
        seq: u64,
        info: &CallInfo,
        started: Instant,
        version: u64,
        replayed: bool,
    ) {
        let start_us = self.clock.us(info.started.min(started));
        let timing = info.server_timing.as_ref();
        self.progress.calls.fetch_add(1, Ordering::Relaxed);
        if info.failed_over {
            self.progress.failovers.fetch_add(1, Ordering::Relaxed);
        }
        self.recorder.push(Invocation {
            start_us,
            client: self.client,
            game: session.game_id(),
            seat: session.seat(),
            call,
            seq,
            server: info.server.clone(),
            rtt_us: duration_us(info.rtt),
            tick_late_us: self.tick_late_us,
            attempts: info.attempts,
            failed_over: info.failed_over,
            hedges: info.hedges,
            hedge_won: info.hedge_won,
            first_failure_us: info
                .first_failure
                .map(|at| duration_us(at.saturating_duration_since(info.started))),
            last_attempt_us: info
                .last_attempt
                .map(|at| duration_us(at.saturating_duration_since(info.started))),
            failure: info.last_failure.clone(),
            status: STATUS_OK.into(),
            version,
            replayed,
            warmup: start_us < duration_us(self.config.warmup),
            backoff_us: duration_us(info.backoff),
            answer_sent_us: duration_us(info.answer_sent),
            server_gate_us: timing.map(|t| duration_us(t.gate)),
            server_db_us: timing.map(|t| duration_us(t.db)),
            server_cas_retries: timing.map(|t| t.cas_retries),
            server_cas_us: timing.map(|t| duration_us(t.cas)),
            server_total_us: timing.and_then(|t| t.total).map(duration_us),
            moved: info
                .moved
                .map(|m| m.as_str().to_string())
                .unwrap_or_default(),
            first_server: info.first_server.clone(),
        });
    }

    /// Records a failed call; the refusal it was, if one (its wait is
    /// already the next pause).
    fn record_error(
        &mut self,
        call: CallKind,
        game: u64,
        seat: u32,
        seq: u64,
        started: Instant,
        error: &PoolError,
    ) -> Option<driver::Refusal> {
        let start_us = self.clock.us(started);
        self.progress.calls.fetch_add(1, Ordering::Relaxed);
        let refusal = driver::refusal(error);
        match refusal {
            Some(refusal) => {
                self.progress.refusals.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(client = self.client, ?call, seq, "call refused: {error}");
                self.pause = Some(refusal.wait());
            }
            None => {
                self.progress.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(client = self.client, ?call, seq, "call failed: {error}");
            }
        }
        self.recorder.push(Invocation {
            start_us,
            client: self.client,
            game,
            seat,
            call,
            seq,
            server: self.pool.status().current.unwrap_or_default(),
            rtt_us: duration_us(started.elapsed()),
            tick_late_us: self.tick_late_us,
            attempts: 0,
            failed_over: matches!(error, PoolError::GaveUp { .. }),
            hedges: 0,
            hedge_won: false,
            first_failure_us: None,
            last_attempt_us: None,
            failure: error.to_string(),
            status: match refusal {
                Some(refusal) => format!("{REFUSED_PREFIX}{}", refusal.reason),
                None => status_text(error),
            },
            version: 0,
            replayed: false,
            warmup: start_us < duration_us(self.config.warmup),
            backoff_us: 0,
            answer_sent_us: 0,
            server_gate_us: None,
            server_db_us: None,
            server_cas_retries: None,
            server_cas_us: None,
            server_total_us: None,
            moved: String::new(),
            first_server: String::new(),
        });
        refusal
    }
}

/// Longest wait for a closing session's inputs to be acknowledged.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// What woke a client between two ticks.
enum Wake {
    Tick(tokio::time::Instant),
    Reply(Box<InputReply>),
}

/// The next reply to the session's calls; never, with no session or no
/// call in flight.
async fn next_reply(session: &mut Option<GameSession>) -> Option<InputReply> {
    match session {
        Some(session) => session.next_reply().await,
        None => None,
    }
}

/// A short status for the CSV: the gRPC code, or what the pool gave up on.
fn status_text(error: &PoolError) -> String {
    match error {
        PoolError::Status(status) => format!("{:?}", status.code()),
        PoolError::GaveUp { database: true, .. } => "gave_up_database".into(),
        PoolError::GaveUp { .. } => "gave_up".into(),
        PoolError::NoServerReachable { .. } => "no_server".into(),
        PoolError::InvalidAddress { .. } => "invalid_address".into(),
        PoolError::InvalidState(_) => "invalid_state".into(),
    }
}
