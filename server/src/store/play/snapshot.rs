//! A game as the client sees it ([`Snapshot`]: state, version, roster),
//! and its state bound as a query parameter.

use sqlx::Postgres;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo};

use crate::wire::ToProto;
use borbaman_game::{GameState, MAX_ENCODED_BYTES, SEATS};
use borbaman_proto::pb;

/// Names and "connected" flags of a game's seats (not part of the state).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Roster {
    pub names: [String; SEATS],
    pub connected: [bool; SEATS],
}

/// A game as the client sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub game_id: u64,
    pub version: u64,
    pub state: GameState,
    pub roster: Roster,
}

impl Snapshot {
    /// The wire message; consumes the snapshot so the names move into it.
    pub fn into_proto(self) -> pb::GameState {
        self.state.to_proto_with_names(
            self.game_id,
            self.version,
            self.roster.names,
            self.roster.connected,
        )
    }
}

/// A state bound as a `bytea` parameter: packed straight into the query's
/// parameter buffer, with no intermediate `Vec` per call.
pub(super) struct Packed<'a>(pub(super) &'a GameState);

impl sqlx::Type<Postgres> for Packed<'_> {
    fn type_info() -> PgTypeInfo {
        <Vec<u8> as sqlx::Type<Postgres>>::type_info()
    }
}

impl sqlx::Encode<'_, Postgres> for Packed<'_> {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        self.0.encode_into(buf);
        Ok(IsNull::No)
    }

    fn size_hint(&self) -> usize {
        MAX_ENCODED_BYTES
    }
}
