//! The `Game` gRPC service: validates each request, delegates to the
//! [`Store`], and turns the result into a reply.
//!
//! Methods are short on purpose: all game logic lives in the core, all SQL
//! in the store, and all error mapping in [`crate::error`].

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;

use tokio::time::Instant;

use borbaman_proto::{MAX_INPUTS_PER_ACT, pb};
use tonic::{Request, Response, Status};

use crate::admission::{Admission, Permit, Priority};
use crate::company::{Call, Company};
use crate::error::Error;
use crate::limits::{CallLimiter, Read};
use crate::metrics::calls::{begin, note_game, to_the_end};
use crate::seating::Seats;
use crate::slow::SlowMode;
use crate::store::{ActCall, Identity, Input, LeaveCall, Snapshot, Store};
use crate::token::{self, JoinToken, SessionKey};
use crate::wire;
use borbaman_game::names;
use borbaman_game::{Action, Arena, Phase, SEATS};
use borbaman_proto::timing::{ALONE_KEY, COPY_KEY};

/// Rankings returned when the request asks for none in particular, and the
/// most it may ask for.
const DEFAULT_RANKINGS: u32 = 10;
const MAX_RANKINGS: u32 = 100;
/// Live games listed when the request asks for none in particular, and the
/// most it may ask for.
const DEFAULT_LIVE_GAMES: u32 = 20;
const MAX_LIVE_GAMES: u32 = 100;

/// The game service; cheap to clone.
#[derive(Clone, Debug)]
pub struct GameService {
    store: Store,
    server_id: Arc<str>,
    /// Fault injection: game calls wait while it is on (not `Ping`, the
    /// network floor, which stays a measure of the network).
    slow: Arc<SlowMode>,
    limiter: Arc<CallLimiter>,
    /// Bounds the calls in flight to the database (see [`crate::admission`]).
    admission: Admission,
    /// Which joins may open a new game, learned from the seated players'
    /// calls (see [`crate::seating`]).
    seats: Seats,
    /// Issues and checks session tokens (see [`crate::token`]).
    key: Arc<SessionKey>,
    /// Which players each game's calls came from here (see
    /// [`crate::company`]).
    company: Arc<Company>,
}

impl GameService {
    pub fn new(
        store: Store,
        server_id: Arc<str>,
        slow: Arc<SlowMode>,
        limiter: Arc<CallLimiter>,
        admission: Admission,
        seats: Seats,
        key: Arc<SessionKey>,
    ) -> Self {
        GameService {
            store,
            server_id,
            slow,
            limiter,
            admission,
            seats,
            key,
            company: Arc::default(),
        }
    }

    /// Whether `snapshot`'s game is running and the caller (`token`, in
    /// `seat` if known; `wrote`: the call wrote the snapshot's version) is
    /// alone on this server (see [`crate::company`]).
    fn alone(
        &self,
        token: &token::TokenHash,
        seat: Option<u8>,
        snapshot: &Snapshot,
        wrote: bool,
    ) -> bool {
        snapshot.state.phase() == Phase::Playing
            && self.company.called(
                Call {
                    game: snapshot.game_id,
                    token,
                    seat: seat.map(usize::from),
                    connected: &snapshot.roster.connected,
                    version: snapshot.version,
                    wrote,
                },
                Instant::now(),
            )
    }

    /// Refuses a sessionless read over `peer`'s budget.
    fn limit_read(&self, peer: Option<IpAddr>, read: Read) -> Result<(), Error> {
        if self.limiter.allow_read(peer, read) {
            Ok(())
        } else {
            Err(Error::RateLimited(
                "too many reads from this address; slow down (a spectator polls at most \
                 20 times a second)"
                    .into(),
            ))
        }
    }

    /// The call begins (a client that hung up already is dropped here,
    /// see [`begin`]), slow mode's wait (fault injection), then a place
    /// among the calls in flight, or a refusal with `server-full` before the database is asked.
    async fn enter(&self, priority: Priority, game: Option<u64>) -> Result<Permit, Status> {
        begin().await;
        self.slow.pause().await;
        self.admission
            .admit(priority, game)
            .await
            .map_err(|refused| Status::from(Error::from(refused)))
    }

    /// A seated player's call on `game`: admitted as [`Priority::Play`],
    /// carried out, and its time in the server (admission's wait included,
    /// slow mode's not) recorded for [`crate::seating`]; a refusal is
    /// recorded as one.
    async fn play<T: Send + 'static>(
        &self,
        game: u64,
        work: impl Future<Output = Result<T, Error>> + Send + 'static,
    ) -> Result<Response<T>, Status> {
        begin().await;
        self.slow.pause().await;
        let from = Instant::now();
        let permit = match self.admission.admit(Priority::Play, Some(game)).await {
            Ok(permit) => permit,
            Err(refused) => {
                if self.seats.measures() {
                    self.seats.with(|s| s.record_refused(Instant::now()));
                }
                return Err(Status::from(Error::from(refused)));
            }
        };
        note_game(game);
        let done = Self::carry_out(permit, work).await;
        if self.seats.measures() {
            let now = Instant::now();
            self.seats.with(|s| s.record(now, now - from));
        }
        done
    }

    /// Runs a call's database work to its end while holding `permit`, even
    /// if the client hangs up meanwhile (see [`to_the_end`]): a call that
    /// was admitted is carried out, and its connection goes back to the pool
    /// whole.
    async fn carry_out<T: Send + 'static>(
        permit: Permit,
        work: impl Future<Output = Result<T, Error>> + Send + 'static,
    ) -> Result<Response<T>, Status> {
        let done = to_the_end(async move {
            let _permit = permit;
            work.await
        })
        .await
        .map_err(|panic| Status::internal(format!("the call failed in the server: {panic}")))?;
        Ok(Response::new(done?))
    }

    async fn join(
        &self,
        req: pb::JoinRequest,
        peer: Option<IpAddr>,
    ) -> Result<pb::JoinReply, Error> {
        if !self.limiter.allow_join(peer) {
            return Err(Error::RateLimited(
                "too many joins from this address; wait a minute and join again".into(),
            ));
        }
        let name = names::check(&req.name).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let JoinToken { token, nonce } = self.key.for_join(req.token)?;
        let token_hash = token::hash(&token);
        if nonce
            && self
                .store
                .session_older_than(&token_hash, token::NONCE_WINDOW)
                .await?
        {
            return Err(Error::Unauthenticated(format!(
                "this join's nonce was first used more than {} s ago: rejoin with the \
                 session token the servers returned for it, or join with a fresh nonce",
                token::NONCE_WINDOW.as_secs()
            )));
        }
        // Without an identity the token is one, for this session only.
        let identity = if req.identity.is_empty() {
            Identity::session_only(&token_hash)
        } else {
            token::check_random(&req.identity, "identity")?;
            Identity {
                hash: token::identity_hash(&req.identity),
                claims_names: true,
            }
        };
        let arena = match req.map.as_str() {
            "" => None,
            map => Some(Arena::from_name(map).map_err(|e| Error::InvalidArgument(e.to_string()))?),
        };
        let joined = self
            .store
            .join_if_room(&token_hash, &identity, name, arena, &self.seats)
            .await?;
        Ok(pb::JoinReply {
            token,
            game_id: joined.game_id,
            seat: u32::from(joined.seat),
            rejoined: joined.rejoined,
            last_seq: joined.last_seq,
            state: Some(joined.snapshot.into_proto()),
        })
    }

    /// The reply, and whether the caller is alone here ([`Self::alone`];
    /// a hedged copy, `copy`, is not counted there).
    async fn act(&self, req: pb::ActRequest, copy: bool) -> Result<(pb::ActReply, bool), Error> {
        let (inputs, batch) = check_inputs(&req)?;
        let call = ActCall {
            token_hash: self.key.check(&req.token)?,
            game_id: check_game_id(req.game_id)?,
            seat: check_seat(req.seat)?,
            inputs,
            batch,
        };
        if !self.limiter.allow_act(&call.token_hash) {
            return Err(Error::RateLimited(
                "too many actions from this session; slow down".into(),
            ));
        }
        let acted = self.store.act(&call).await?;
        let alone = !copy
            && self.alone(
                &call.token_hash,
                Some(call.seat),
                &acted.snapshot,
                acted.applied > 0,
            );
        let reply = pb::ActReply {
            seq: acted.seq,
            outcome: acted
                .outcome
                .map_or(pb::Outcome::Unspecified, wire::outcome_to_proto)
                as i32,
            applied_tick: acted.applied_tick,
            replayed: acted.replayed,
            state: Some(acted.snapshot.into_proto()),
            ack: acted.ack,
            applied: acted.applied,
        };
        Ok((reply, alone))
    }

    /// The reply, and whether the caller is alone here ([`Self::alone`];
    /// a hedged copy, `copy`, is not counted there).
    async fn get_state(
        &self,
        req: pb::GetStateRequest,
        copy: bool,
    ) -> Result<(pb::StateReply, bool), Error> {
        let token_hash = self.key.check(&req.token)?;
        let game_id = check_game_id(req.game_id)?;
        if !self.limiter.allow_state(&token_hash) {
            return Err(Error::RateLimited(
                "too many state reads from this session; slow down".into(),
            ));
        }
        let snapshot = self.store.state(&token_hash, game_id).await?;
        let alone = !copy && self.alone(&token_hash, None, &snapshot, false);
        let reply = pb::StateReply {
            state: Some(snapshot.into_proto()),
        };
        Ok((reply, alone))
    }

    async fn leave(&self, req: pb::LeaveRequest) -> Result<pb::LeaveReply, Error> {
        let call = LeaveCall {
            token_hash: self.key.check(&req.token)?,
            game_id: check_game_id(req.game_id)?,
            seat: check_seat(req.seat)?,
            seq: check_seq(req.seq)?,
        };
        let left = self.store.leave(&call).await?;
        Ok(pb::LeaveReply { seq: left.seq })
    }

    async fn rankings(&self, req: pb::RankingsRequest) -> Result<pb::RankingsReply, Error> {
        let limit = match req.limit {
            0 => DEFAULT_RANKINGS,
            n => n.min(MAX_RANKINGS),
        };
        let rankings = self.store.rankings(limit).await?;
        Ok(pb::RankingsReply {
            rankings: rankings
                .into_iter()
                .map(|r| pb::Ranking {
                    name: r.name,
                    games: r.games,
                    wins: r.wins,
                    draws: r.draws,
                })
                .collect(),
        })
    }
}

impl GameService {
    async fn get_replay(&self, req: pb::ReplayRequest) -> Result<pb::ReplayReply, Error> {
        let game_id = check_game_id(req.game_id)?;
        let (game, names) = self.store.replay(game_id).await?;
        Ok(pb::ReplayReply {
            game_id,
            final_state: game.state,
            events: game.events.iter().map(wire::replay_event).collect(),
            names,
        })
    }
}

impl GameService {
    async fn list_games(&self, req: pb::ListGamesRequest) -> Result<pb::ListGamesReply, Error> {
        let limit = match req.limit {
            0 => DEFAULT_LIVE_GAMES,
            n => n.min(MAX_LIVE_GAMES),
        };
        let games = self.store.live_games(limit).await?;
        Ok(pb::ListGamesReply {
            games: games
                .into_iter()
                .map(|game| wire::live_game(&game.into_proto()))
                .collect(),
        })
    }

    async fn watch_state(&self, req: pb::WatchStateRequest) -> Result<pb::StateReply, Error> {
        let game_id = check_game_id(req.game_id)?;
        let snapshot = self.store.watch(game_id).await?;
        Ok(pb::StateReply {
            state: Some(snapshot.into_proto()),
        })
    }
}

#[tonic::async_trait]
impl pb::game_server::Game for GameService {
    async fn list_games(
        &self,
        req: Request<pb::ListGamesRequest>,
    ) -> Result<Response<pb::ListGamesReply>, Status> {
        // A flood is refused by its sender's budget before it queues
        // for a place among the database's calls.
        let peer = req.remote_addr().map(|a| a.ip());
        self.limit_read(peer, Read::ListGames)
            .map_err(Status::from)?;
        let permit = self.enter(Priority::Spectate, None).await?;
        let (this, req) = (self.clone(), req.into_inner());
        Self::carry_out(permit, async move { this.list_games(req).await }).await
    }

    async fn watch_state(
        &self,
        req: Request<pb::WatchStateRequest>,
    ) -> Result<Response<pb::StateReply>, Status> {
        // A flood is refused by its sender's budget before it queues
        // for a place among the database's calls.
        let peer = req.remote_addr().map(|a| a.ip());
        self.limit_read(peer, Read::WatchState)
            .map_err(Status::from)?;
        let permit = self.enter(Priority::Spectate, None).await?;
        note_game(req.get_ref().game_id);
        let (this, req) = (self.clone(), req.into_inner());
        Self::carry_out(permit, async move { this.watch_state(req).await }).await
    }

    async fn get_replay(
        &self,
        req: Request<pb::ReplayRequest>,
    ) -> Result<Response<pb::ReplayReply>, Status> {
        // A flood is refused by its sender's budget before it queues
        // for a place among the database's calls.
        let peer = req.remote_addr().map(|a| a.ip());
        self.limit_read(peer, Read::GetReplay)
            .map_err(Status::from)?;
        let permit = self.enter(Priority::Spectate, None).await?;
        note_game(req.get_ref().game_id);
        let (this, req) = (self.clone(), req.into_inner());
        Self::carry_out(permit, async move { this.get_replay(req).await }).await
    }

    async fn join(&self, req: Request<pb::JoinRequest>) -> Result<Response<pb::JoinReply>, Status> {
        let permit = self.enter(Priority::Join, None).await?;
        let peer = req.remote_addr().map(|a| a.ip());
        let (this, req) = (self.clone(), req.into_inner());
        let reply = Self::carry_out(permit, async move { this.join(req, peer).await }).await?;
        note_game(reply.get_ref().game_id);
        Ok(reply)
    }

    async fn act(&self, req: Request<pb::ActRequest>) -> Result<Response<pb::ActReply>, Status> {
        let game = req.get_ref().game_id;
        let copy = req.metadata().contains_key(COPY_KEY);
        let (this, req) = (self.clone(), req.into_inner());
        self.play(game, async move { this.act(req, copy).await })
            .await
            .map(told_if_alone)
    }

    async fn get_state(
        &self,
        req: Request<pb::GetStateRequest>,
    ) -> Result<Response<pb::StateReply>, Status> {
        let game = req.get_ref().game_id;
        let copy = req.metadata().contains_key(COPY_KEY);
        let (this, req) = (self.clone(), req.into_inner());
        self.play(game, async move { this.get_state(req, copy).await })
            .await
            .map(told_if_alone)
    }

    async fn leave(
        &self,
        req: Request<pb::LeaveRequest>,
    ) -> Result<Response<pb::LeaveReply>, Status> {
        let game = req.get_ref().game_id;
        let (this, req) = (self.clone(), req.into_inner());
        self.play(game, async move { this.leave(req).await }).await
    }

    async fn rankings(
        &self,
        req: Request<pb::RankingsRequest>,
    ) -> Result<Response<pb::RankingsReply>, Status> {
        // A flood is refused by its sender's budget before it queues
        // for a place among the database's calls.
        let peer = req.remote_addr().map(|a| a.ip());
        self.limit_read(peer, Read::Rankings)
            .map_err(Status::from)?;
        let permit = self.enter(Priority::Spectate, None).await?;
        let (this, req) = (self.clone(), req.into_inner());
        Self::carry_out(permit, async move { this.rankings(req).await }).await
    }

    /// No database: the network floor.
    async fn ping(&self, req: Request<pb::PingRequest>) -> Result<Response<pb::PingReply>, Status> {
        Ok(Response::new(pb::PingReply {
            payload: req.into_inner().payload,
            server_id: self.server_id.to_string(),
        }))
    }
}

fn check_game_id(game_id: u64) -> Result<u64, Error> {
    if game_id == 0 {
        return Err(Error::InvalidArgument(
            "game_id is required (from the JoinReply)".into(),
        ));
    }
    Ok(game_id)
}

/// The reply of a call, its head saying [`ALONE_KEY`] if the caller is
/// alone on this server.
fn told_if_alone<T>(response: Response<(T, bool)>) -> Response<T> {
    let (mut metadata, (reply, alone), extensions) = response.into_parts();
    if alone {
        metadata.insert(ALONE_KEY, tonic::metadata::MetadataValue::from_static("1"));
    }
    Response::from_parts(metadata, reply, extensions)
}

fn check_seat(seat: u32) -> Result<u8, Error> {
    u8::try_from(seat)
        .ok()
        .filter(|&s| usize::from(s) < SEATS)
        .ok_or_else(|| Error::InvalidArgument(format!("seat must be 0-{}, got {seat}", SEATS - 1)))
}

fn check_seq(seq: u64) -> Result<u64, Error> {
    if seq == 0 || seq > i64::MAX as u64 {
        return Err(Error::InvalidArgument(format!(
            "seq must be 1-{}, got {seq} (sequence numbers start at 1)",
            i64::MAX
        )));
    }
    Ok(seq)
}

/// An Act's inputs, oldest first, and whether the request carried them as
/// a batch (`inputs`) rather than one input in `seq` / `action`. A batch
/// holds 1 to [`MAX_INPUTS_PER_ACT`] inputs with strictly increasing
/// sequence numbers, the newest equal to `seq` / `action`.
fn check_inputs(req: &pb::ActRequest) -> Result<(Vec<Input>, bool), Error> {
    let newest = Input {
        seq: check_seq(req.seq)?,
        action: check_action(req.action)?,
    };
    if req.inputs.is_empty() {
        return Ok((vec![newest], false));
    }
    if req.inputs.len() > MAX_INPUTS_PER_ACT {
        return Err(Error::InvalidArgument(format!(
            "an Act carries at most {MAX_INPUTS_PER_ACT} inputs, got {}; send the oldest \
             {MAX_INPUTS_PER_ACT} and the rest once they are acknowledged",
            req.inputs.len()
        )));
    }
    let mut inputs = Vec::with_capacity(req.inputs.len());
    for input in &req.inputs {
        let input = Input {
            seq: check_seq(input.seq)?,
            action: check_action(input.action)?,
        };
        if inputs
            .last()
            .is_some_and(|last: &Input| last.seq >= input.seq)
        {
            return Err(Error::InvalidArgument(format!(
                "inputs must be in strictly increasing seq order, got {} after {}",
                input.seq,
                inputs.last().map_or(0, |last: &Input| last.seq)
            )));
        }
        inputs.push(input);
    }
    if inputs.last() != Some(&newest) {
        return Err(Error::InvalidArgument(
            "seq and action must repeat the newest of the inputs".into(),
        ));
    }
    Ok((inputs, true))
}

fn check_action(action: i32) -> Result<Action, Error> {
    wire::action_from_proto(action).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "action must be one of UP, DOWN, LEFT, RIGHT, BOMB, IDLE (1-6), got {action}"
        ))
    })
}

// Keeps the core's grid constants and the wire's in step.

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_fields_are_refused_with_a_reason() {
        assert!(check_action(0).unwrap_err().to_string().contains("got 0"));
        assert!(check_action(99).is_err());
        assert_eq!(check_action(5).unwrap(), Action::Bomb);
        assert!(check_seq(0).unwrap_err().to_string().contains("start at 1"));
        assert!(check_seq(u64::MAX).is_err());
        assert_eq!(check_seq(1).unwrap(), 1);
        assert!(check_seat(4).unwrap_err().to_string().contains("0-3"));
        assert_eq!(check_seat(3).unwrap(), 3);
        assert!(check_game_id(0).is_err());
    }

    fn batch(newest: (u64, pb::Action), inputs: &[(u64, pb::Action)]) -> pb::ActRequest {
        pb::ActRequest {
            seq: newest.0,
            action: newest.1 as i32,
            inputs: inputs
                .iter()
                .map(|&(seq, action)| pb::Input {
                    seq,
                    action: action as i32,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_batch_of_inputs_is_checked_whole() {
        use pb::Action::{Bomb, Left, Up};
        let plain = check_inputs(&batch((3, Up), &[])).unwrap();
        assert_eq!(plain.0.len(), 1);
        assert!(!plain.1, "no inputs: one input, the old way");
        let (inputs, is_batch) = check_inputs(&batch((4, Bomb), &[(2, Up), (4, Bomb)])).unwrap();
        assert!(is_batch);
        assert_eq!(
            inputs.iter().map(|i| (i.seq, i.action)).collect::<Vec<_>>(),
            [(2, Action::Move(borbaman_game::Dir::Up)), (4, Action::Bomb)]
        );
        let refused = |req| check_inputs(&req).unwrap_err().to_string();
        assert!(refused(batch((4, Bomb), &[(4, Bomb), (2, Up)])).contains("increasing"));
        assert!(refused(batch((4, Bomb), &[(2, Up), (2, Up), (4, Bomb)])).contains("increasing"));
        assert!(refused(batch((5, Bomb), &[(2, Up), (4, Bomb)])).contains("newest"));
        assert!(refused(batch((4, Left), &[(2, Up), (4, Bomb)])).contains("newest"));
        assert!(refused(batch((4, Bomb), &[(0, Up), (4, Bomb)])).contains("start at 1"));
        let many: Vec<_> = (1..=33).map(|seq| (seq, Up)).collect();
        let error = check_inputs(&batch((33, Up), &many)).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument(_)));
        assert!(error.to_string().contains("at most 32"));
        assert!(check_inputs(&batch((32, Up), &many[..32])).is_ok());
    }
}
