//! Whether a player is alone on this server: the other connected players
//! of its game have not called it lately, and the game was written
//! meanwhile by calls this server did not serve (their calls go to another
//! server, which serves them), so its answer says so ([`ALONE_KEY`]).
//!
//! A game's players all send their calls to the same server, the game's
//! choice among the live ones, and a player whose copies, sent to another
//! server, beat its own twice moves its calls there. A moment in which one
//! server is slow (a process not scheduled for 30 ms on a busy machine)
//! can give one player of a game those two wins and the others none: the
//! game is then split over two servers, whose commits race for its row,
//! until the mover's pool tries its game's server again a cool-off later.
//! Told it is alone, the mover goes back at once.
//!
//! Players are told apart by their session tokens (a state poll names no
//! seat); whether the others are connected is the game's roster as the
//! answer carries it (acted within the connected window). The game written
//! elsewhere is what tells a split game from one whose other players are
//! connected but not calling (a server slow for the whole game, its
//! players moving away one by one: the first is not sent back to it while
//! nobody's calls are served there).
//!
//! [`ALONE_KEY`]: borbaman_proto::timing::ALONE_KEY

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use borbaman_game::SEATS;

use crate::token::TokenHash;

/// How recently another player of the game must have called this server
/// for a caller not to be alone here: a few of a player's call intervals
/// (a bot acts every 50 ms, a terminal polls every 50 ms), so a late call
/// or two of a game-mate that is here is not taken for its absence.
pub const COMPANY_WINDOW: Duration = Duration::from_millis(250);

/// A game not called here for this long is forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(5);

/// The players each game's calls came from on this server, and when.
#[derive(Debug, Default)]
pub struct Company {
    games: Mutex<Games>,
}

#[derive(Debug, Default)]
struct Games {
    seen: HashMap<u64, Seen>,
    swept_at: Option<Instant>,
}

/// One game's callers here, and its version as this server last answered.
#[derive(Debug, Default)]
struct Seen {
    players: Vec<(TokenHash, Instant)>,
    version: Option<u64>,
}

/// A game call as [`Company::called`] notes it.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    pub game: u64,
    /// The caller's session token.
    pub token: &'a TokenHash,
    /// The caller's seat, if the call names it.
    pub seat: Option<usize>,
    /// The game's connected seats, as answered.
    pub connected: &'a [bool; SEATS],
    /// The game's version, as answered.
    pub version: u64,
    /// Whether this call wrote that version.
    pub wrote: bool,
}

impl Company {
    /// Notes `call` at `now`, and says whether its caller is alone here:
    /// its game has another connected player, no other player's call on
    /// the game came here within [`COMPANY_WINDOW`], and the game was
    /// written since this server last answered on it by a call it did not
    /// serve.
    pub fn called(&self, call: Call<'_>, now: Instant) -> bool {
        let mut games = self.games.lock().unwrap();
        if games
            .swept_at
            .is_none_or(|at| now.saturating_duration_since(at) >= FORGET_AFTER)
        {
            games.seen.retain(|_, seen| {
                seen.players
                    .retain(|(_, at)| now.saturating_duration_since(*at) < FORGET_AFTER);
                !seen.players.is_empty()
            });
            games.swept_at = Some(now);
        }
        let seen = games.seen.entry(call.game).or_default();
        let company = seen.players.iter().any(|(other, at)| {
            other != call.token && now.saturating_duration_since(*at) < COMPANY_WINDOW
        });
        match seen
            .players
            .iter_mut()
            .find(|(other, _)| other == call.token)
        {
            Some((_, at)) => *at = now,
            None => seen.players.push((*call.token, now)),
        }
        let written_elsewhere = seen
            .version
            .is_some_and(|v| call.version > v + u64::from(call.wrote));
        seen.version = Some(seen.version.map_or(call.version, |v| v.max(call.version)));
        !company && written_elsewhere && others_connected(call.connected, call.seat)
    }
}

/// Whether the game has a connected player besides the caller: besides
/// seat `own`, or (its seat unknown) two connected seats, the caller's and
/// another.
fn others_connected(connected: &[bool; SEATS], own: Option<usize>) -> bool {
    match own {
        Some(own) => connected
            .iter()
            .enumerate()
            .any(|(seat, on)| *on && seat != own),
        None => connected.iter().filter(|on| **on).count() >= 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [bool; SEATS] = [true; SEATS];

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// An act of `token` in seat `seat` of game 7 that wrote `version`.
    fn act<'a>(token: &'a TokenHash, seat: usize, version: u64) -> Call<'a> {
        Call {
            game: 7,
            token,
            seat: Some(seat),
            connected: &ALL,
            version,
            wrote: true,
        }
    }

    #[test]
    fn a_player_is_alone_where_its_game_mates_do_not_call_and_their_calls_are_served_elsewhere() {
        let company = Company::default();
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let at = Instant::now();
        assert!(!company.called(act(&a, 0, 10), at), "nothing known yet");
        assert!(
            !company.called(act(&a, 0, 11), at + ms(50)),
            "nobody else here, but nobody wrote the game elsewhere either"
        );
        assert!(
            company.called(act(&a, 0, 14), at + ms(100)),
            "versions 12 and 13 were written elsewhere"
        );
        let poll = Call {
            wrote: false,
            seat: None,
            ..act(&a, 0, 15)
        };
        assert!(company.called(poll, at + ms(120)), "a poll is alone too");
        assert!(!company.called(act(&b, 1, 17), at + ms(130)), "a was here");
        assert!(!company.called(act(&a, 0, 19), at + ms(150)), "b was here");
        // b's calls went elsewhere: a is alone again once the window passes.
        let b_left = at + ms(130);
        assert!(!company.called(act(&a, 0, 21), b_left + COMPANY_WINDOW - ms(1)));
        assert!(company.called(act(&a, 0, 23), b_left + COMPANY_WINDOW));
        // Another game's players are no company, nor its versions.
        let other = Call {
            game: 8,
            ..act(&b, 1, 50)
        };
        assert!(!company.called(other, at + ms(400)));
    }

    #[test]
    fn a_player_whose_game_mates_are_gone_is_not_alone() {
        let company = Company::default();
        let a = [1u8; 32];
        let at = Instant::now();
        let only_a = [true, false, false, false];
        let alone_with = |connected: &[bool; SEATS], seat: Option<usize>, version: u64| {
            company.called(
                Call {
                    connected,
                    seat,
                    ..act(&a, 0, version)
                },
                at,
            )
        };
        alone_with(&only_a, Some(0), 1);
        assert!(!alone_with(&only_a, Some(0), 5));
        // A poll names no seat: one connected seat is the caller's own.
        assert!(!alone_with(&only_a, None, 10));
        assert!(alone_with(&[true, true, false, false], None, 15));
        // Seat 0 connected, the caller in seat 1 not (yet): 0 is another.
        assert!(alone_with(&only_a, Some(1), 20));
    }

    #[test]
    fn games_not_called_for_a_while_are_forgotten() {
        let company = Company::default();
        let at = Instant::now();
        for game in 0..100 {
            company.called(
                Call {
                    game,
                    ..act(&[1u8; 32], 0, 1)
                },
                at,
            );
        }
        company.called(
            Call {
                game: 500,
                ..act(&[1u8; 32], 0, 1)
            },
            at + FORGET_AFTER,
        );
        assert_eq!(company.games.lock().unwrap().seen.len(), 1);
    }
}
