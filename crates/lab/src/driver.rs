//! What a headless player does next: one decision loop for `borbaman bot`,
//! the bots of `borbaman play` and the clients of bench and chaos runs, so
//! what is measured is what plays.
//!
//! Each tick a [`Driver`] looks at the session's newest state: a running
//! game gets the [`brain`]'s action (idle included, so the player stays
//! connected), a lobby gets a poll or, when [`GameSession::lobby_idle_due`],
//! an idle act that keeps the seat, and a finished game ends the session.
//! When a call fails, [`must_rejoin`] says whether the session is gone (join
//! again) or the call merely failed (try again next tick), and [`refusal`]
//! whether a server turned it away for load (`server-full`) or a rate
//! limit, and how long to wait before the next try ([`Refusal::wait`]).

use std::time::Duration;

use borbaman_client::pool::PoolError;
use borbaman_client::session::{self, GameSession};
use borbaman_proto::{Reason, pb};
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
    level: brain::Level,
}

impl Driver {
    /// A driver of the normal bot level.
    pub fn new(seed: u64) -> Driver {
        Driver::at_level(seed, brain::Level::Normal)
    }

    pub fn at_level(seed: u64, level: brain::Level) -> Driver {
        Driver {
            rng: StdRng::seed_from_u64(seed),
            level,
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
                Step::Act(brain::decide_at(
                    seen,
                    session.seat(),
                    self.level,
                    &mut self.rng,
                ))
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

/// A server refused a call for load or a rate limit: not an error, the
/// call may be sent again after [`Refusal::wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// [`Reason::ServerFull`] or [`Reason::RateLimited`].
    pub reason: Reason,
    /// The server's pushback (`grpc-retry-pushback-ms`), if it sent one.
    pub pushback: Option<Duration>,
}

/// The longest wait a pushback can impose: a server asking for more is
/// broken or hostile, and a player would rather see a retry.
pub const MAX_PUSHBACK: Duration = Duration::from_secs(10);
/// The wait after a refusal that came without a pushback.
pub const DEFAULT_REFUSAL_WAIT: Duration = Duration::from_secs(1);

impl Refusal {
    /// How long to wait before the next try: the server's pushback,
    /// capped at [`MAX_PUSHBACK`], or [`DEFAULT_REFUSAL_WAIT`].
    pub fn wait(&self) -> Duration {
        self.pushback
            .map_or(DEFAULT_REFUSAL_WAIT, |p| p.min(MAX_PUSHBACK))
    }
}

/// The refusal `error` is, if it is one: `RESOURCE_EXHAUSTED` with the
/// reason `server-full` or `rate-limited`.
pub fn refusal(error: &PoolError) -> Option<Refusal> {
    let status = error.status()?;
    if status.code() != tonic::Code::ResourceExhausted {
        return None;
    }
    let reason =
        Reason::of(status).filter(|r| matches!(r, Reason::ServerFull | Reason::RateLimited))?;
    Some(Refusal {
        reason,
        pushback: error.retry_pushback(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use borbaman_proto::reason;
    use tonic::Code;

    #[test]
    fn a_refusal_says_when_to_try_again() {
        let full = |ms| {
            PoolError::Status(reason::with_retry_pushback(
                Reason::ServerFull.status(Code::ResourceExhausted, "server full"),
                Duration::from_millis(ms),
            ))
        };
        let r = refusal(&full(750)).expect("server-full is a refusal");
        assert_eq!(r.reason, Reason::ServerFull);
        assert_eq!(r.wait(), Duration::from_millis(750));
        assert_eq!(refusal(&full(3_600_000)).unwrap().wait(), MAX_PUSHBACK);
        let limited =
            PoolError::Status(Reason::RateLimited.status(Code::ResourceExhausted, "slow"));
        let r = refusal(&limited).expect("a rate limit is a refusal");
        assert_eq!(
            (r.reason, r.wait()),
            (Reason::RateLimited, DEFAULT_REFUSAL_WAIT)
        );
        // Not refusals: a plain RESOURCE_EXHAUSTED (a message too large), a
        // database that is down, a session that is gone.
        assert_eq!(
            refusal(&PoolError::Status(tonic::Status::resource_exhausted(
                "too big"
            ))),
            None
        );
        assert_eq!(
            refusal(&PoolError::Status(
                Reason::DatabaseUnavailable.status(Code::Unavailable, "down")
            )),
            None
        );
        assert!(!must_rejoin(&full(10)), "a full server keeps the seat");
    }

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
