//! Rows to values: the columns of the game calls' statements, and the
//! checks that turn bad stored data into [`Error::Corrupt`].

use sqlx::Row;
use sqlx::postgres::PgRow;

use super::*;
use crate::error::Error;
use crate::token::TokenHash;
use borbaman_game::{GameState, Outcome, SEATS, Tick};

/// Parses [`LOAD_CALLERS`]'s columns, starting at column `at`.
pub(super) fn caller_row(row: &PgRow, at: usize) -> Result<(TokenHash, Read), Error> {
    let token: &[u8] = row.try_get(at)?;
    let token = TokenHash::try_from(token)
        .map_err(|_| Error::Corrupt(format!("a stored token hash has {} bytes", token.len())))?;
    Ok((token, read_row(row, at + 1)?))
}

/// Parses `game_call_read`'s columns, starting at column `at`.
pub(super) fn read_row(row: &PgRow, at: usize) -> Result<Read, Error> {
    let (now_tick, snapshot) = game_row(row, at + 7)?;
    Ok(Read {
        session: SessionRead {
            session_id: row.try_get(at)?,
            game_id: snapshot.game_id as i64,
            seat: row.try_get(at + 1)?,
            in_game: row.try_get(at + 2)?,
            last_seq: row.try_get(at + 3)?,
            last_kind: row.try_get(at + 4)?,
            last_outcome: row.try_get(at + 5)?,
            last_tick: row.try_get(at + 6)?,
        },
        state: snapshot.state,
        version: snapshot.version as i64,
        now_tick,
        read_us: row.try_get(at + 13)?,
        roster: snapshot.roster,
    })
}

/// Parses the columns of `game_cols!` (`id, state, version, now_tick,
/// names, connected`) starting at column `at`; returns the clock's tick and
/// the snapshot.
pub(in crate::store) fn game_row(row: &PgRow, at: usize) -> Result<(Tick, Snapshot), Error> {
    let game_id: i64 = row.try_get(at)?;
    let state = GameState::decode(row.try_get::<&[u8], _>(at + 1)?)?;
    let version: i64 = row.try_get(at + 2)?;
    let now_tick = tick_from_db(row.try_get(at + 3)?);
    let names: Vec<String> = row.try_get(at + 4)?;
    let connected: Vec<bool> = row.try_get(at + 5)?;
    let mut roster = Roster::default();
    for (i, name) in names.into_iter().take(SEATS).enumerate() {
        roster.names[i] = name;
    }
    for (i, connected) in connected.into_iter().take(SEATS).enumerate() {
        roster.connected[i] = connected;
    }
    Ok((
        now_tick,
        Snapshot {
            game_id: game_id as u64,
            version: version as u64,
            state,
            roster,
        },
    ))
}

pub(super) fn tick_from_db(ticks: i64) -> Tick {
    ticks.clamp(0, i64::from(Tick::MAX)) as Tick
}

/// A seat number read from the database as an index into the game's
/// seats; a number out of range is corrupt data, never seat 0 or 3.
pub(super) fn seat_index(seat: i16) -> Result<usize, Error> {
    usize::try_from(seat)
        .ok()
        .filter(|&index| index < SEATS)
        .ok_or_else(|| {
            Error::Corrupt(format!(
                "stored seat {seat} is not a seat (0-{})",
                SEATS - 1
            ))
        })
}

pub(super) fn to_db_id(id: u64) -> Result<i64, Error> {
    i64::try_from(id).map_err(|_| Error::Internal(format!("game id {id} out of range")))
}

pub(super) fn to_db_seq(seq: u64) -> Result<i64, Error> {
    i64::try_from(seq)
        .map_err(|_| Error::InvalidArgument(format!("seq {seq} is too large (max {})", i64::MAX)))
}

/// An outcome code read from the action log; an unknown code is corrupt
/// data, never "no effect".
pub(super) fn outcome_from_code(code: i16) -> Result<Outcome, Error> {
    Outcome::from_code(code)
        .ok_or_else(|| Error::Corrupt(format!("stored outcome code {code} is not an outcome")))
}
