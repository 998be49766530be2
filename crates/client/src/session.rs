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
//! It also knows when the player must be heard from: the servers give the
//! seat of a player who sent nothing for a few seconds in a game still
//! waiting for players to the next joiner (a crashed client must not start
//! a game as a player who never moves), and reading the state does not
//! count. Every front end asks [`GameSession::lobby_idle_due`] before it
//! polls, and sends `Act(IDLE)` instead when it is due.

use std::time::{Duration, Instant};

use borbaman_proto::pb::{
    self, ActReply, ActRequest, GameState, GetStateRequest, JoinRequest, LeaveRequest, Ranking,
    RankingsRequest,
};

use borbaman_proto::Reason;

use crate::pool::{CallInfo, PoolError, ServerPool};
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

/// A player's seat in a game.
pub struct GameSession {
    pool: ServerPool,
    token: Vec<u8>,
    game_id: u64,
    seat: u32,
    next_seq: u64,
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
                let request = request.clone();
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
        let mut session = GameSession {
            pool: pool.clone(),
            token,
            game_id: reply.game_id,
            seat: reply.seat,
            next_seq: reply.last_seq + 1,
            rejoined: reply.rejoined,
            latest: None,
            regressions: 0,
            last_heard: (!reply.rejoined).then(Instant::now),
        };
        if let Some(state) = reply.state {
            session.observe(state, false)?;
        }
        Ok((session, info))
    }

    /// Sends one action with the next sequence number. The reply's state is
    /// never older than one this session already handed out.
    pub async fn act(&mut self, action: pb::Action) -> Result<(ActReply, CallInfo), PoolError> {
        let request = ActRequest {
            token: self.token.clone(),
            game_id: self.game_id,
            seat: self.seat,
            seq: self.next_seq,
            action: action as i32,
        };
        let result = self
            .pool
            .call(|mut client| {
                let request = request.clone();
                async move { client.act(request).await }
            })
            .await;
        // The number is used up whatever happened: a request that may have
        // been applied must not be re-sent with a different action.
        self.next_seq += 1;
        let (mut reply, info) = result?;
        self.last_heard = Some(Instant::now());
        if let Some(state) = reply.state.take() {
            reply.state = Some(self.observe(state, reply.replayed)?);
        }
        Ok((reply, info))
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
                let request = request.clone();
                async move { client.get_state(request).await }
            })
            .await?;
        let state = reply
            .state
            .ok_or_else(|| PoolError::Status(tonic::Status::internal("server sent no state")))?;
        Ok((self.observe(state, false)?, info))
    }

    /// Leaves the game (forfeiting it if it is running).
    pub async fn leave(&mut self) -> Result<CallInfo, PoolError> {
        let request = LeaveRequest {
            token: self.token.clone(),
            game_id: self.game_id,
            seat: self.seat,
            seq: self.next_seq,
        };
        let info = self
            .pool
            .call(|mut client| {
                let request = request.clone();
                async move { client.leave(request).await }
            })
            .await;
        self.next_seq += 1;
        Ok(info?.1)
    }

    /// Keeps the newest state: returns `state` if it is not older than the
    /// newest seen, else that newest one. A stored reply replayed for a
    /// retried request legitimately carries an old state and is not counted.
    /// A state that fails [`check_state`] is refused here, once, so nothing
    /// downstream meets it.
    fn observe(&mut self, state: GameState, replayed: bool) -> Result<GameState, PoolError> {
        check_state(&state).map_err(PoolError::InvalidState)?;
        Ok(match &self.latest {
            Some(latest) if latest.version > state.version => {
                if !replayed {
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
    /// The sequence number the next `act` or `leave` will carry.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
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
