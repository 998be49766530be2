//! What a commit starts from: the callers' sessions and their game, as one
//! statement read them ([`Read`]) or as this server knows them.

use std::collections::HashMap;

use tokio::time::Instant;

use super::*;
use crate::token::TokenHash;
use borbaman_game::{GameState, Tick};

/// The caller's session and game, as one statement read them.
pub(super) struct Read {
    pub(super) session: SessionRead,
    pub(super) state: GameState,
    pub(super) version: i64,
    pub(super) now_tick: Tick,
    /// The database clock at the read, in microseconds.
    pub(super) read_us: i64,
    pub(super) roster: Roster,
}

/// The reads of a commit's callers, by token hash (one per known token).
pub(super) type Reads = Vec<(TokenHash, Read)>;

/// A caller's session as read, and as the calls of a commit before its own
/// left it (its last sequence number and reply move on as they apply).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SessionRead {
    pub(super) session_id: i64,
    /// The session's game (not necessarily the one the call names).
    pub(super) game_id: i64,
    /// -1 once its lobby seat was given away.
    pub(super) seat: i16,
    pub(super) in_game: bool,
    pub(super) last_seq: i64,
    pub(super) last_kind: i16,
    pub(super) last_outcome: i16,
    pub(super) last_tick: i32,
}

/// The game a commit writes, as read.
pub(super) struct GameRead {
    pub(super) state: GameState,
    pub(super) version: i64,
    pub(super) now_tick: Tick,
    /// The database clock at the read, in microseconds.
    pub(super) read_us: i64,
    pub(super) roster: Roster,
}

/// The callers' sessions (by token hash) and their game (`None` if no
/// caller's session is in it), as one commit starts from.
pub(super) struct CallersRead {
    pub(super) game: Option<GameRead>,
    pub(super) sessions: HashMap<TokenHash, SessionRead>,
    /// When the game's roster (its "connected" flags, which the database
    /// derives from its clock) was read from the database.
    pub(super) roster_read_at: Instant,
    /// Taken from what this server knew of the game ([`Known`]), not read:
    /// only a write's compare-and-set can confirm it, so a commit that
    /// writes nothing (every call refused or a repeat) reads first.
    pub(super) known: bool,
}

/// Splits the callers' reads into the game `game_id` (`None` if no
/// caller's session is in it) and each caller's session. `None` if the
/// reads saw the game at different versions (a read again after a lost
/// write reads each caller apart): read them anew, in one snapshot.
pub(super) fn split_reads(reads: Reads, game_id: u64) -> Option<CallersRead> {
    let roster_read_at = Instant::now();
    let mut game: Option<GameRead> = None;
    let mut sessions = HashMap::with_capacity(reads.len());
    for (token, read) in reads {
        sessions.insert(token, read.session);
        if read.session.game_id as u64 != game_id {
            continue;
        }
        match &game {
            Some(seen) if seen.version != read.version => return None,
            Some(_) => {}
            None => {
                game = Some(GameRead {
                    state: read.state,
                    version: read.version,
                    now_tick: read.now_tick,
                    read_us: read.read_us,
                    roster: read.roster,
                })
            }
        }
    }
    Some(CallersRead {
        game,
        sessions,
        roster_read_at,
        known: false,
    })
}
