//! What a headless player does next: one decision loop for `borbaman bot`,
//! the bots of `borbaman play` and the clients of bench and chaos runs, so
//! what is measured is what plays.
//!
//! Each tick a [`Driver`] looks at the session's newest state: a running
//! game gets the [`brain`]'s action (idle included, so the player stays
//! connected), a lobby gets a poll or, when [`GameSession::lobby_idle_due`],
//! an idle act that keeps the seat, and a finished game ends the session.
//! When a call fails, [`must_rejoin`] says whether the session is gone (join
//! again) or the call merely failed (try again next tick).

use borbaman_client::pool::PoolError;
use borbaman_client::session::{self, GameSession};
use borbaman_proto::pb;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::brain;

/// The next call of a headless player.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Act(pb::Action),
    Poll,
    /// The game is over: report it and join the next one.
    GameOver,
}

/// A headless player's decisions; seeded, so runs repeat.
pub struct Driver {
    rng: StdRng,
}

impl Driver {
    pub fn new(seed: u64) -> Driver {
        Driver {
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// The next call for `session`.
    pub fn next(&mut self, session: &GameSession) -> Step {
        let Some(state) = session.latest() else {
            return Step::Poll;
        };
        match state.phase() {
            pb::Phase::Finished => Step::GameOver,
            pb::Phase::Playing => {
                // A predicting player decides on what it is shown: its own
                // inputs applied ahead of the server.
                let shown = session
                    .prediction_counts()
                    .and_then(|_| session.shown_state());
                let seen = shown.as_ref().unwrap_or(state);
                Step::Act(brain::decide(seen, session.seat(), &mut self.rng))
            }
            _ if session.lobby_idle_due() => Step::Act(pb::Action::Idle),
            _ => Step::Poll,
        }
    }
}

/// True when `error` means the session is over for good: its seat was given
/// away, the servers do not know its token, or its game is gone. Anything
/// else (a server down, the database busy) is worth another try.
pub fn must_rejoin(error: &PoolError) -> bool {
    session::seat_lost(error)
        || matches!(error, PoolError::Status(s) if s.code() == tonic::Code::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use borbaman_proto::Reason;
    use tonic::Code;

    #[test]
    fn only_a_lost_session_means_joining_again() {
        let status = |s: tonic::Status| PoolError::Status(s);
        assert!(must_rejoin(&status(
            Reason::SeatGivenAway.status(Code::PermissionDenied, "seat given away")
        )));
        assert!(must_rejoin(&status(
            Reason::UnknownSession.status(Code::Unauthenticated, "who?")
        )));
        assert!(must_rejoin(&status(tonic::Status::not_found("no game 7"))));
        // A request for another game is a mistake, not a lost seat: joining
        // again would loop.
        assert!(!must_rejoin(&status(
            Reason::NotYours.status(Code::PermissionDenied, "game 3 is not your game")
        )));
        assert!(!must_rejoin(&status(tonic::Status::permission_denied("x"))));
        assert!(!must_rejoin(&status(
            Reason::DatabaseUnavailable.status(Code::Unavailable, "down")
        )));
    }
}
