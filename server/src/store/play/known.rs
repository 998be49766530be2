//! The per-game cache: what this server knows of a game right after its
//! own commit of it, so the next commit through it skips the read.

use crate::store::tuning::*;
use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::token::TokenHash;
use borbaman_game::{GameState, TICK_MS, Tick};

/// What this server knows of a game right after its own commit of it:
/// the state and version it wrote, the sessions of the game's players as
/// it read and wrote them, and the database clock. The next commit of the
/// game through this server (behind the game's gate) writes on it instead
/// of reading the game first: one statement instead of two. If anything
/// else wrote the game since (a call through another server, a join, the
/// clock ending the game in a read), the version no longer matches: the
/// write changes nothing and returns the read again in the same round
/// trip, as any write that lost its compare-and-set does. The tick is the
/// database's clock as last read plus the time since, never ahead of the
/// database (see [`clock_since`]); the write checks it against the
/// database's own clock (`cas_game!`).
#[derive(Clone, Debug)]
pub(super) struct Known {
    pub(super) version: i64,
    pub(super) state: GameState,
    pub(super) roster: Roster,
    /// The game's seated players' sessions, as after the commit.
    pub(super) sessions: HashMap<TokenHash, SessionRead>,
    /// `games.created_at`, µs since the epoch: where the game's ticks count
    /// from.
    pub(super) created_us: i64,
    /// The database clock (µs since the epoch) as the commit's write read
    /// it, and an instant of this process no earlier than that reading.
    pub(super) clock_us: i64,
    pub(super) clock_at: Instant,
    /// When the roster was last read from the database.
    pub(super) roster_read_at: Instant,
}

/// The database clock `since` after a reading of `clock_us` (µs since the
/// epoch), and the tick of a game created at `created_us` at that clock,
/// as the database computes it (`now_tick!`). Never ahead of the
/// database's clock when `since` is measured from an instant after the
/// reading.
pub(super) fn clock_since(created_us: i64, clock_us: i64, since: Duration) -> (i64, Tick) {
    let now_us = clock_us.saturating_add(i64::try_from(since.as_micros()).unwrap_or(i64::MAX));
    let tick_us = i64::from(TICK_MS) * 1000;
    (now_us, tick_from_db((now_us - created_us).max(0) / tick_us))
}

impl Known {
    /// The read a commit of the calls of `tokens` starts from at `now`, from
    /// what is known: `None` if a caller's session is not known, or the
    /// roster is too old (see [`KNOWN_FOR`]); then the commit reads.
    pub(super) fn read_for(&self, tokens: &[&[u8]], now: Instant) -> Option<CallersRead> {
        if now.saturating_duration_since(self.roster_read_at) >= KNOWN_FOR {
            return None;
        }
        let mut sessions = HashMap::with_capacity(tokens.len());
        for &token in tokens {
            let token = TokenHash::try_from(token).ok()?;
            sessions.insert(token, *self.sessions.get(&token)?);
        }
        let (read_us, now_tick) = clock_since(
            self.created_us,
            self.clock_us,
            now.saturating_duration_since(self.clock_at),
        );
        Some(CallersRead {
            game: Some(GameRead {
                state: self.state.clone(),
                version: self.version,
                now_tick,
                read_us,
                roster: self.roster.clone(),
            }),
            sessions,
            roster_read_at: self.roster_read_at,
            known: true,
        })
    }

    /// What is known of game `game_id` after a commit: `known` holds the
    /// commit's callers' sessions; the game's other players' sessions are
    /// kept from `before` only if the commit read the very version they
    /// were known at (`read_version`: nobody wrote the game in between, so
    /// none of them changed). Only sessions seated in the game are kept.
    pub(super) fn after(
        mut known: Known,
        game_id: u64,
        read_version: i64,
        before: Option<Known>,
    ) -> Known {
        if let Some(before) = before
            && before.version == read_version
        {
            for (token, session) in before.sessions {
                known.sessions.entry(token).or_insert(session);
            }
        }
        known
            .sessions
            .retain(|_, s| s.in_game && s.seat >= 0 && s.game_id as u64 == game_id);
        known
    }
}

/// The games this server knows after its own commits (see [`Known`]),
/// taken by the commit holding a game's gate and given back after its
/// write: a commit that fails or is dropped leaves nothing behind.
#[derive(Debug, Default)]
pub(crate) struct KnownGames(std::sync::Mutex<HashMap<u64, Known>>);

impl KnownGames {
    #[cfg(test)]
    pub(super) fn contains_key(&self, game_id: &u64) -> bool {
        self.lock().contains_key(game_id)
    }

    pub(super) fn take(&self, game_id: u64) -> Option<Known> {
        self.lock().remove(&game_id)
    }

    pub(super) fn put(&self, game_id: u64, known: Known) {
        let mut games = self.lock();
        if games.len() >= KNOWN_GAMES {
            games.clear();
        }
        games.insert(game_id, known);
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Known>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
