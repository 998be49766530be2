//! `GameSession`: one player's seat in one game, spoken through a
//! [`ServerPool`].
//!
//! The session owns what makes retries safe: the join's nonce (16 random
//! bytes the client draws, so a `Join` can be retried on any server and is
//! answered with the same session), the session token the servers issue
//! for it (a MAC only the cluster can make: every later call, and a rejoin
//! after a crash, carries it, never the nonce), and the next
//! sequence number (each `Act`/`Leave` gets one, kept across the pool's
//! retries, so a request is applied at most once). It also guards the
//! player's view: it remembers the highest state version seen and never
//! hands out an older state; a server that answers with one is counted as a
//! regression (bench and chaos report them).
//!
//! Inputs do not wait for round trips: [`GameSession::send_input`] numbers
//! a key press, queues it and returns at once, a call carrying every
//! unacknowledged input leaves in the background (see [`crate::inputs`]),
//! and the replies come back through [`GameSession::next_reply`] /
//! [`GameSession::try_reply`], each saying which inputs it acknowledged
//! and how long they took. [`GameSession::act`] is the same thing, waited
//! for.
//!
//! It also knows when the player must be heard from: the servers give the
//! seat of a player who sent nothing for a few seconds in a game still
//! waiting for players to the next joiner (a crashed client must not start
//! a game as a player who never moves), and reading the state does not
//! count. Every front end asks [`GameSession::lobby_idle_due`] before it
//! polls, and sends `Act(IDLE)` instead when it is due.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use borbaman_proto::pb::{
    self, ActReply, ActRequest, GameState, GetStateRequest, JoinRequest, LeaveRequest, Ranking,
    RankingsRequest,
};

use borbaman_proto::Reason;

use crate::inputs::{Acked, Input, InputQueue};
use crate::pool::{CallInfo, PoolError, ServerPool};
use crate::predict::{Predictor, Pressed};
use crate::wire_check::check_state;

/// Bytes in a join's nonce.
pub const TOKEN_BYTES: usize = 16;

/// A fresh random nonce for a first join. The servers answer it with the
/// session token ([`GameSession::token`]), which is what a client saves to
/// rejoin: a nonce alone rejoins only within half a minute of its join.
pub fn new_token() -> Vec<u8> {
    rand::random::<[u8; TOKEN_BYTES]>().to_vec()
}

/// Bytes in a player identity.
pub const IDENTITY_BYTES: usize = 32;

/// A fresh random player identity: a long-lived secret that owns the
/// player's name and its rankings (kept in the state directory by
/// `play`; a bench or chaos client draws one per simulated player).
pub fn new_identity() -> Vec<u8> {
    rand::random::<[u8; IDENTITY_BYTES]>().to_vec()
}

/// How often a player whose game is waiting for players acts (idle): well
/// within the servers' lobby seat TTL (`--lobby-seat-ttl-ms`, 3 s by
/// default), past which its seat goes to the next joiner.
pub const LOBBY_PRESENCE_INTERVAL: Duration = Duration::from_secs(1);

/// When the server last heard from a session, as far as the client can
/// tell, after a reply to a call sent at `sent`: the server records the
/// activity when the call commits, anywhere between the send and the reply,
/// so the client counts from the send (the latest of those, replies to
/// calls in flight together coming back in any order). Counting from the
/// reply, a client whose call took a second lost its lobby seat with a
/// second of its TTL still seemingly ahead.
fn heard_since(before: Option<Instant>, sent: Instant) -> Instant {
    before.map_or(sent, |at| at.max(sent))
}

/// An `Act` call that ended, as its background task hands it back: its
/// result, and the newest state version the session had seen when it was
/// sent (a reply older than that is a regression; one older than a reply
/// to a later call is only late).
struct CallDone {
    result: Result<(ActReply, CallInfo), PoolError>,
    seen_version: u64,
    started: Instant,
}

/// A `GetState` started by [`GameSession::poll_state`] that ended.
struct PollDone {
    result: Result<(pb::StateReply, CallInfo), PoolError>,
    seen_version: u64,
}

/// What [`GameSession::next_event`] hands back.
#[derive(Debug)]
pub enum SessionEvent {
    /// A reply to an `Act`.
    Input(InputReply),
    /// The answer to a [`GameSession::poll_state`]: the state (never older
    /// than one the session handed out), or why it failed.
    State(Result<(GameState, CallInfo), PoolError>),
}

/// A reply to one of the session's `Act` calls.
#[derive(Debug)]
pub struct InputReply {
    /// The reply (its state never older than one the session handed out)
    /// and how the call went, or why it failed (its inputs are still
    /// queued, and go out again with the next call).
    pub result: Result<(ActReply, CallInfo), PoolError>,
    /// The inputs this reply acknowledged, oldest first (none when another
    /// reply already had, or on a failure).
    pub acked: Vec<Acked>,
    /// When the call was sent.
    pub started: Instant,
}

/// A player's seat in a game.
pub struct GameSession {
    pool: ServerPool,
    token: Vec<u8>,
    game_id: u64,
    seat: u32,
    inputs: InputQueue,
    done_tx: mpsc::UnboundedSender<CallDone>,
    done_rx: mpsc::UnboundedReceiver<CallDone>,
    polls_tx: mpsc::UnboundedSender<PollDone>,
    polls_rx: mpsc::UnboundedReceiver<PollDone>,
    poll_in_flight: bool,
    /// Draws the player's unacknowledged inputs ahead of the server (see
    /// [`GameSession::predict_inputs`]).
    predictor: Option<Predictor>,
    rejoined: bool,
    latest: Option<GameState>,
    regressions: u64,
    /// When the last join or act that the server records as activity was
    /// sent; `None` after a rejoin, which records none.
    last_heard: Option<Instant>,
}

impl GameSession {
    /// Joins (with a fresh nonce, see [`new_token`]) or, with the session
    /// token of a running session, rejoins a game. Retrying with the same
    /// nonce or token is safe: the servers seat a session once.
    pub async fn join(
        pool: &ServerPool,
        name: &str,
        token: Vec<u8>,
    ) -> Result<(GameSession, CallInfo), PoolError> {
        Self::join_map(pool, name, token, "").await
    }

    /// [`GameSession::join`] asking for the arena `map` ("classic", "open",
    /// "corridors"; empty: any): a new seat is taken only in a game on it.
    pub async fn join_map(
        pool: &ServerPool,
        name: &str,
        token: Vec<u8>,
        map: &str,
    ) -> Result<(GameSession, CallInfo), PoolError> {
        Self::join_as(pool, &[], name, token, map).await
    }

    /// [`GameSession::join_map`] as the player `identity` (see
    /// [`new_identity`]; empty: none, the token is the identity for this
    /// session only and claims no name). A name belongs to the identity that
    /// first claimed it; another identity's name is refused with
    /// `ALREADY_EXISTS` ([`Reason::NameTaken`]).
    pub async fn join_as(
        pool: &ServerPool,
        identity: &[u8],
        name: &str,
        token: Vec<u8>,
        map: &str,
    ) -> Result<(GameSession, CallInfo), PoolError> {
        let request = JoinRequest {
            name: name.to_string(),
            token: token.clone(),
            map: map.to_string(),
            identity: identity.to_vec(),
        };
        let (reply, info) = pool
            .call(|mut client| {
                let request = pool.request(request.clone());
                async move { client.join(request).await }
            })
            .await?;
        // The servers' token, not the nonce, is the session's credential
        // (a server of an older version echoes the client's).
        let token = if reply.token.is_empty() {
            token
        } else {
            reply.token
        };
        // The game's players share a server from now on (see
        // `ServerPool::set_game`).
        pool.set_game(Some(reply.game_id));
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let (polls_tx, polls_rx) = mpsc::unbounded_channel();
        let mut session = GameSession {
            pool: pool.clone(),
            token,
            game_id: reply.game_id,
            seat: reply.seat,
            inputs: InputQueue::new(reply.last_seq + 1),
            done_tx,
            done_rx,
            polls_tx,
            polls_rx,
            poll_in_flight: false,
            predictor: None,
            rejoined: reply.rejoined,
            latest: None,
            regressions: 0,
            // From when the join was sent: the server recorded the
            // activity when it committed, up to a round trip before the
            // reply came (a second or more under load), and counts its
            // seat TTL from there.
            last_heard: (!reply.rejoined).then_some(info.started),
        };
        if let Some(state) = reply.state {
            session.observe(state, false)?;
        }
        Ok((session, info))
    }

    /// Queues one input (a key press) with the next sequence number and
    /// returns its seq at once; a call carrying it (and every other
    /// unacknowledged input) leaves in the background, without waiting for
    /// the calls already on their way. Its reply comes back through
    /// [`GameSession::next_reply`] or [`GameSession::try_reply`].
    pub fn send_input(&mut self, action: pb::Action) -> u64 {
        let seq = self.inputs.push(action, Instant::now());
        self.pump();
        seq
    }

    /// Starts the calls that are due (see [`InputQueue::send_due`]): one
    /// for inputs no call carried yet, or, after a failure, one sending the
    /// queue again. Call it now and then while inputs wait (every frame).
    pub fn pump(&mut self) {
        while self.inputs.send_due(Instant::now()) {
            let batch = self.inputs.start_call();
            let Some(newest) = batch.last().copied() else {
                return;
            };
            let request = ActRequest {
                token: self.token.clone(),
                game_id: self.game_id,
                seat: self.seat,
                seq: newest.seq,
                action: newest.action,
                inputs: batch,
            };
            let pool = self.pool.clone();
            let done = self.done_tx.clone();
            let seen_version = self.latest.as_ref().map_or(0, |s| s.version);
            let started = Instant::now();
            tokio::spawn(async move {
                let result = pool
                    .call(|mut client| {
                        let request = pool.request(request.clone());
                        async move { client.act(request).await }
                    })
                    .await;
                // The session may be gone; then so is the interest.
                let _ = done.send(CallDone {
                    result,
                    seen_version,
                    started,
                });
            });
        }
    }

    /// The next reply to an `Act` call, waiting for it; `None` when no
    /// call is in flight.
    pub async fn next_reply(&mut self) -> Option<InputReply> {
        if self.inputs.in_flight() == 0 {
            return None;
        }
        let done = self.done_rx.recv().await?;
        Some(self.settle(done))
    }

    /// A reply that has arrived, if any, without waiting.
    pub fn try_reply(&mut self) -> Option<InputReply> {
        let done = self.done_rx.try_recv().ok()?;
        Some(self.settle(done))
    }

    fn settle(&mut self, done: CallDone) -> InputReply {
        let now = Instant::now();
        let mut acked = Vec::new();
        let before = self.latest_version();
        let result = match done.result {
            Ok((mut reply, info)) => {
                acked = self.inputs.answered(reply.ack, now);
                self.last_heard = Some(heard_since(self.last_heard, info.started));
                if let Some(predictor) = &mut self.predictor {
                    predictor.observe_rtt(info.rtt);
                }
                match reply.state.take() {
                    Some(state) => {
                        // Replies to calls in flight together may come
                        // back in any order: only a state older than the
                        // newest seen when the call left is a regression.
                        let excused = reply.replayed || state.version >= done.seen_version;
                        self.observe(state, excused).map(|state| {
                            reply.state = Some(state);
                            (reply, info)
                        })
                    }
                    None => Ok((reply, info)),
                }
            }
            Err(e) => {
                self.inputs.failed(now);
                Err(e)
            }
        };
        self.reconcile(before, &acked, now);
        self.pump();
        InputReply {
            result,
            acked,
            started: done.started,
        }
    }

    /// Reads the state in the background (unless a read is already on its
    /// way); the answer comes back through [`GameSession::next_event`].
    pub fn poll_state(&mut self) {
        if self.poll_in_flight {
            return;
        }
        self.poll_in_flight = true;
        let request = GetStateRequest {
            token: self.token.clone(),
            game_id: self.game_id,
        };
        let pool = self.pool.clone();
        let done = self.polls_tx.clone();
        let seen_version = self.latest_version();
        tokio::spawn(async move {
            let result = pool
                .call(|mut client| {
                    let request = pool.request(request.clone());
                    async move { client.get_state(request).await }
                })
                .await;
            let _ = done.send(PollDone {
                result,
                seen_version,
            });
        });
    }

    /// The next reply to an `Act` or a [`GameSession::poll_state`],
    /// waiting for it; `None` when nothing is in flight.
    pub async fn next_event(&mut self) -> Option<SessionEvent> {
        enum Done {
            Act(CallDone),
            Poll(PollDone),
        }
        let acting = self.inputs.in_flight() > 0;
        let polling = self.poll_in_flight;
        let done = tokio::select! {
            Some(done) = self.done_rx.recv(), if acting => Done::Act(done),
            Some(done) = self.polls_rx.recv(), if polling => Done::Poll(done),
            else => return None,
        };
        Some(match done {
            Done::Act(done) => SessionEvent::Input(self.settle(done)),
            Done::Poll(done) => {
                self.poll_in_flight = false;
                let before = self.latest_version();
                let result = done.result.and_then(|(reply, info)| {
                    let state = reply.state.ok_or_else(|| {
                        PoolError::Status(tonic::Status::internal("server sent no state"))
                    })?;
                    let excused = state.version >= done.seen_version;
                    Ok((self.observe(state, excused)?, info))
                });
                if let (Ok((_, info)), Some(predictor)) = (&result, &mut self.predictor) {
                    predictor.observe_rtt(info.rtt);
                }
                self.reconcile(before, &[], Instant::now());
                SessionEvent::State(result)
            }
        })
    }

    /// Draws the player's unacknowledged inputs ahead of the server from
    /// now on: [`GameSession::shown_state`] applies them, with the game
    /// core, on the newest state the server sent (see [`crate::predict`]).
    pub fn predict_inputs(&mut self) {
        let mut predictor = Predictor::new(self.seat);
        if let Some(latest) = &self.latest {
            predictor.reconcile(latest, &[], &[], Instant::now());
        }
        self.predictor = Some(predictor);
    }

    /// The state to draw: the newest from the server with the player's own
    /// unacknowledged inputs applied on top when predicting, else the
    /// newest as it came.
    pub fn shown_state(&self) -> Option<GameState> {
        match &self.predictor {
            Some(predictor) => predictor.shown(&self.pending(), Instant::now()),
            None => self.latest.clone(),
        }
    }

    /// When predicting: states that replaced the base of the prediction,
    /// and of them those that moved the player's drawn position (a
    /// misprediction, corrected).
    pub fn prediction_counts(&self) -> Option<(u64, u64)> {
        self.predictor.as_ref().map(Predictor::counts)
    }

    /// The smoothed round trip of this session's calls (when predicting).
    pub fn srtt(&self) -> Option<Duration> {
        self.predictor.as_ref().and_then(Predictor::srtt)
    }

    fn pending(&self) -> Vec<Pressed> {
        self.inputs.unacked().map(Pressed::from).collect()
    }

    fn latest_version(&self) -> u64 {
        self.latest.as_ref().map_or(0, |s| s.version)
    }

    /// A newer state than version `before` became the newest: it is the
    /// prediction's new base (with the inputs just acknowledged).
    fn reconcile(&mut self, before: u64, acked: &[Acked], now: Instant) {
        if self.predictor.is_none() || self.latest_version() <= before {
            return;
        }
        let pending = self.pending();
        if let (Some(predictor), Some(latest)) = (&mut self.predictor, &self.latest) {
            predictor.reconcile(latest, acked, &pending, now);
        }
    }

    /// Sends one action and waits until the server has applied it. The
    /// reply's state is never older than one this session already handed
    /// out. A failure leaves the input queued: it goes out again with the
    /// next call, and is applied once.
    pub async fn act(&mut self, action: pb::Action) -> Result<(ActReply, CallInfo), PoolError> {
        let seq = self.send_input(action);
        loop {
            let Some(reply) = self.next_reply().await else {
                // Nothing in flight: a failure kept the input back; send it.
                tokio::time::sleep(crate::inputs::RESEND_AFTER_FAILURE).await;
                self.pump();
                continue;
            };
            let (reply, info) = reply.result?;
            if self.inputs.acked() >= seq {
                return Ok((reply, info));
            }
        }
    }

    /// Waits, at most `within`, until every input sent is acknowledged;
    /// true if they all were.
    pub async fn flush(&mut self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while self.inputs.unacked().len() > 0 {
            self.pump();
            let wait = async {
                match self.next_reply().await {
                    Some(_) => {}
                    None => tokio::time::sleep(crate::inputs::RESEND_AFTER_FAILURE).await,
                }
            };
            if tokio::time::timeout_at(deadline, wait).await.is_err() {
                return false;
            }
        }
        true
    }

    /// True when the game is waiting for players and the server has not
    /// heard from this session (a join or an act) for
    /// [`LOBBY_PRESENCE_INTERVAL`]: send `Act(IDLE)` rather than only read
    /// the state, or the seat may go to someone else.
    pub fn lobby_idle_due(&self) -> bool {
        let waiting = self
            .latest
            .as_ref()
            .is_some_and(|s| s.phase() == pb::Phase::Waiting);
        waiting
            && self
                .last_heard
                .is_none_or(|at| at.elapsed() >= LOBBY_PRESENCE_INTERVAL)
    }

    /// The game's state, advanced to the current tick by the server.
    pub async fn state(&mut self) -> Result<(GameState, CallInfo), PoolError> {
        let request = GetStateRequest {
            token: self.token.clone(),
            game_id: self.game_id,
        };
        let (reply, info) = self
            .pool
            .call(|mut client| {
                let request = self.pool.request(request.clone());
                async move { client.get_state(request).await }
            })
            .await?;
        let state = reply
            .state
            .ok_or_else(|| PoolError::Status(tonic::Status::internal("server sent no state")))?;
        let before = self.latest_version();
        let state = self.observe(state, false)?;
        self.reconcile(before, &[], Instant::now());
        Ok((state, info))
    }

    /// Leaves the game (forfeiting it if it is running), after the inputs
    /// sent so far are applied (waiting up to 5 s for them: a leave applied
    /// first would leave them behind, and a player who quits must not wait
    /// longer).
    pub async fn leave(&mut self) -> Result<CallInfo, PoolError> {
        self.flush(Duration::from_secs(5)).await;
        let request = LeaveRequest {
            token: self.token.clone(),
            game_id: self.game_id,
            seat: self.seat,
            seq: self.inputs.take_seq(),
        };
        let info = self
            .pool
            .call_without_copies(|mut client| {
                let request = self.pool.request(request.clone());
                async move { client.leave(request).await }
            })
            .await;
        Ok(info?.1)
    }

    /// Keeps the newest state: returns `state` if it is not older than the
    /// newest seen, else that newest one. A stored reply replayed for a
    /// retried request legitimately carries an old state and is not counted,
    /// nor is a reply overtaken by the reply to a later call (`excused`).
    /// A state that fails [`check_state`] is refused here, once, so nothing
    /// downstream meets it.
    fn observe(&mut self, state: GameState, excused: bool) -> Result<GameState, PoolError> {
        check_state(&state).map_err(PoolError::InvalidState)?;
        Ok(match &self.latest {
            Some(latest) if latest.version > state.version => {
                if !excused {
                    self.regressions += 1;
                    tracing::warn!(
                        seen = latest.version,
                        got = state.version,
                        "server sent an older state"
                    );
                }
                latest.clone()
            }
            _ => {
                self.latest = Some(state.clone());
                state
            }
        })
    }

    pub fn token(&self) -> &[u8] {
        &self.token
    }
    pub fn game_id(&self) -> u64 {
        self.game_id
    }
    pub fn seat(&self) -> u32 {
        self.seat
    }
    /// The sequence number the next input or `leave` will carry.
    pub fn next_seq(&self) -> u64 {
        self.inputs.next_seq()
    }
    /// Inputs not acknowledged yet, oldest first.
    pub fn unacked(&self) -> impl ExactSizeIterator<Item = &Input> {
        self.inputs.unacked()
    }
    /// Inputs sent (key presses), and of them acknowledged as applied.
    pub fn input_counts(&self) -> (u64, u64) {
        self.inputs.counts()
    }
    /// The first and newest sequence number of the inputs sent, if any.
    pub fn input_seqs(&self) -> Option<(u64, u64)> {
        self.inputs.sent_seqs()
    }
    /// `Act` calls on their way.
    pub fn calls_in_flight(&self) -> usize {
        self.inputs.in_flight()
    }
    /// True when the join put the player back in a game it was already in.
    pub fn rejoined(&self) -> bool {
        self.rejoined
    }
    /// The newest state seen.
    pub fn latest(&self) -> Option<&GameState> {
        self.latest.as_ref()
    }
    /// Times a server answered with a state older than one already seen.
    pub fn regressions(&self) -> u64 {
        self.regressions
    }
    pub fn pool(&self) -> &ServerPool {
        &self.pool
    }
}

/// True when a call failed because the session no longer holds its seat
/// (its lobby seat went to another player, or the server does not know its
/// token): the player must join again to play on.
///
/// Decided by the status's [`Reason`], not its code: a `PERMISSION_DENIED`
/// for a request naming another game is the caller's mistake, and joining
/// again would not fix it.
pub fn seat_lost(error: &PoolError) -> bool {
    matches!(error, PoolError::Status(status)
        if matches!(Reason::of(status), Some(Reason::SeatGivenAway | Reason::UnknownSession)))
}

/// The top `limit` players across all finished games.
pub async fn rankings(pool: &ServerPool, limit: u32) -> Result<Vec<Ranking>, PoolError> {
    let (reply, _) = pool
        .call(|mut client| async move { client.rankings(RankingsRequest { limit }).await })
        .await?;
    Ok(reply.rankings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_is_taken_to_have_heard_a_call_when_it_was_sent() {
        let sent = Instant::now();
        let later = sent + Duration::from_millis(800);
        assert_eq!(heard_since(None, sent), sent);
        // An older call's reply after a newer one's does not move it back.
        assert_eq!(heard_since(Some(later), sent), later);
        assert_eq!(heard_since(Some(sent), later), later);
    }
}
