//! What the game calls take and answer: a join's, an Act's and a Leave's
//! request and result, and the [`Call`]s queued on a game's gate.

use super::*;
use crate::error::Error;
use crate::token::TokenHash;
use borbaman_game::{Action, Outcome, Tick};

/// Result of a join.
#[derive(Clone, Debug)]
pub struct Joined {
    pub game_id: u64,
    pub seat: u8,
    pub rejoined: bool,
    pub last_seq: u64,
    pub snapshot: Snapshot,
}

/// One player input: a sequence number and its action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Input {
    pub seq: u64,
    pub action: Action,
}

/// An Act request, validated.
#[derive(Clone, Debug)]
pub struct ActCall {
    pub token_hash: TokenHash,
    pub game_id: u64,
    pub seat: u8,
    /// Oldest first, sequence numbers strictly increasing; never empty.
    pub inputs: Vec<Input>,
    /// The request carried its inputs as a batch: those already applied are
    /// skipped, not refused (see [`plan`]). Otherwise it holds one input,
    /// applied the old way.
    pub batch: bool,
}

impl ActCall {
    /// The newest input (the request's `seq` / `action`).
    pub(super) fn newest(&self) -> Result<Input, Error> {
        self.inputs
            .last()
            .copied()
            .ok_or_else(|| Error::InvalidArgument("an Act needs an input".into()))
    }
}

/// Result of an Act.
#[derive(Clone, Debug)]
pub struct Acted {
    /// The newest input's sequence number.
    pub seq: u64,
    /// The newest input's outcome; `None` when it was applied by an
    /// earlier call that is no longer the session's last.
    pub outcome: Option<Outcome>,
    pub applied_tick: Tick,
    /// A repeat of an applied request: the original outcome and tick, the
    /// current state.
    pub replayed: bool,
    /// The session's highest applied sequence number after this call.
    pub ack: u64,
    /// Inputs this call applied.
    pub applied: u32,
    pub snapshot: Snapshot,
}

/// A Leave request, validated.
#[derive(Clone, Debug)]
pub struct LeaveCall {
    pub token_hash: TokenHash,
    pub game_id: u64,
    pub seat: u8,
    pub seq: u64,
}

/// Result of a Leave.
#[derive(Clone, Copy, Debug)]
pub struct Left {
    pub seq: u64,
}

/// Who is joining, beyond the session: the hash of its identity secret
/// (or of its token, for a client that sent none), and whether that
/// identity is long-lived and so may claim names. A session-only identity
/// claims none: a name claimed for a token would be lost with it.
#[derive(Clone, Debug)]
pub struct Identity {
    pub hash: TokenHash,
    pub claims_names: bool,
}

impl Identity {
    /// The identity of a client that sent none: its token's, claiming no
    /// names.
    pub fn session_only(token_hash: &TokenHash) -> Identity {
        Identity {
            hash: crate::token::identity_hash(token_hash),
            claims_names: false,
        }
    }
}

/// One line of the rankings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ranking {
    pub name: String,
    pub games: u32,
    pub wins: u32,
    pub draws: u32,
}

/// An Act or a Leave, as queued on its game's gate.
#[derive(Clone, Debug)]
pub(crate) enum Call {
    Act(ActCall),
    Leave(LeaveCall),
}

impl Call {
    pub(super) fn game_id(&self) -> u64 {
        match self {
            Call::Act(call) => call.game_id,
            Call::Leave(call) => call.game_id,
        }
    }

    pub(super) fn token_hash(&self) -> &TokenHash {
        match self {
            Call::Act(call) => &call.token_hash,
            Call::Leave(call) => &call.token_hash,
        }
    }

    /// Who sent it, for the gate: the first bytes of its token hash (a
    /// player's copies of a call share it).
    pub(super) fn caller(&self) -> u64 {
        let token = self.token_hash();
        let mut first = [0u8; 8];
        let n = token.len().min(8);
        first[..n].copy_from_slice(&token[..n]);
        u64::from_le_bytes(first)
    }
}

/// What a [`Call`] is answered with.
#[derive(Clone, Debug)]
pub(crate) enum Reply {
    /// Boxed: it holds a whole game state.
    Acted(Box<Acted>),
    Left(Left),
}

/// The gates of the games written through one server, queuing [`Call`]s.
pub(crate) type CallGates = crate::store::gates::Gates<Call, Result<Reply, Error>>;
