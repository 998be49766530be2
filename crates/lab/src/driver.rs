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
//! limit, and how long to wait before the next try ([`Refusal::wait`]);
//! a player whose joins are refused again and again waits longer each
//! time ([`JoinBackoff`]).

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

/// The most a player's wait after refused joins grows past the server's
/// pushback: the third refusal in a row and those after it wait four
/// pushbacks (still at most [`MAX_PUSHBACK`]).
pub const JOIN_BACKOFF_FACTOR: u32 = 4;

/// One player's joins refused in a row, and how long each makes it wait:
/// the server's pushback, doubled for each refusal before it in the row,
/// up to [`JOIN_BACKOFF_FACTOR`] times, capped at [`MAX_PUSHBACK`] (gRPC's
/// retry backoff, on top of the server's pushback, which already spreads
/// the tries at random). Past capacity a crowd that cannot be seated
/// asks again and again: with the server's 1–3 s alone, 256 players
/// without a seat sent ~200 refused joins a second, each a read of the
/// database and a call a full server answers; growing, they send about
/// a quarter of that. A seat that frees is still found at once: four
/// joiners fill a game, and the players of a game just ended ask at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JoinBackoff {
    refused: u32,
}

impl JoinBackoff {
    /// A join was refused for load or a rate limit: how long to wait
    /// before the next.
    pub fn refused(&mut self, refusal: &Refusal) -> Duration {
        let factor = 1u32
            .checked_shl(self.refused)
            .unwrap_or(u32::MAX)
            .min(JOIN_BACKOFF_FACTOR);
        self.refused = self.refused.saturating_add(1);
        (refusal.wait() * factor).min(MAX_PUSHBACK)
    }

    /// A join was seated: the next refusal starts the row again.
    pub fn seated(&mut self) {
        self.refused = 0;
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
    fn joins_refused_in_a_row_wait_longer_up_to_a_bound() {
        let refusal = |ms| Refusal {
            reason: Reason::ServerFull,
            pushback: Some(Duration::from_millis(ms)),
        };
        let mut backoff = JoinBackoff::default();
        let waits: Vec<u64> = (0..6)
            .map(|_| backoff.refused(&refusal(1_500)).as_millis() as u64)
            .collect();
        assert_eq!(waits, [1_500, 3_000, 6_000, 6_000, 6_000, 6_000]);
        // Never past the longest pushback a client accepts.
        assert_eq!(backoff.refused(&refusal(3_000)), MAX_PUSHBACK);
        // A join seated starts the row again.
        backoff.seated();
        assert_eq!(
            backoff.refused(&refusal(1_500)),
            Duration::from_millis(1_500)
        );
        // A refusal without a pushback grows from the default wait.
        let mut backoff = JoinBackoff::default();
        let limited = Refusal {
            reason: Reason::RateLimited,
            pushback: None,
        };
        backoff.refused(&limited);
        assert_eq!(backoff.refused(&limited), DEFAULT_REFUSAL_WAIT * 2);
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
