//! Every way a call can fail, and the one place where failures become gRPC
//! statuses.
//!
//! Validation, the store and the service return [`Error`]; tonic sees only
//! the [`tonic::Status`] built by `impl From<Error> for Status`.

use std::time::Duration;

use borbaman_proto::Reason;
use borbaman_proto::reason::with_retry_pushback;
use tonic::{Code, Status};

use crate::admission::{Priority, Refused};

/// Why a call failed. Clone: one failed commit fails each call it held.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed; the message says which field and why.
    #[error("{0}")]
    InvalidArgument(String),
    /// The session token is unknown.
    #[error("{0}")]
    Unauthenticated(String),
    /// The token is valid, but the game or seat is not the caller's.
    #[error("{0}")]
    PermissionDenied(String),
    /// A call only the operator may make (`Status`), without the
    /// operator's token.
    #[error("{0}")]
    OperatorOnly(String),
    /// The session's lobby seat went to another player; joining again with
    /// the same token seats it anew.
    #[error("{0}")]
    SeatGivenAway(String),
    /// The request is well formed but out of order (an older sequence
    /// number, a call after leaving).
    #[error("{0}")]
    FailedPrecondition(String),
    /// The name, or one that looks like it, belongs to another identity.
    #[error("{0}")]
    NameTaken(String),
    /// The caller went over a rate limit; nothing was done.
    #[error("{0}")]
    RateLimited(String),
    /// Admission control turned the call away before it reached the
    /// database (see [`crate::admission`]); try again after `pushback`.
    #[error("{message}")]
    ServerFull { message: String, pushback: Duration },
    /// The database cannot be reached or did not answer in time.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// A conflict worth retrying at once (serialization failure, deadlock,
    /// lock timeout, the database overloaded or restarting). Retried inside
    /// the store; if retries run out it reaches the client as
    /// `UNAVAILABLE`.
    #[error("database busy: {0}")]
    Transient(String),
    /// The connection cannot be used again: it broke, its server is
    /// shutting down or restarting, or that server is no longer the
    /// primary (a read-only transaction). Retried inside the store on
    /// another connection (and, when following Patroni, the primary is
    /// looked up at once); if retries run out it reaches the client as
    /// `UNAVAILABLE`.
    #[error("database connection lost: {0}")]
    ConnectionLost(String),
    /// The game's partition is not writable on the cluster the call went
    /// to: it is moving to another cluster, or moved (this server's map was
    /// stale). The store re-reads the map and goes where it says; if the
    /// move outlasts the call's deadline it reaches the client as
    /// `UNAVAILABLE`.
    #[error("partition moving: {0}")]
    Moved(String),
    /// A stored game state could not be decoded.
    #[error("stored game state is corrupt: {0}")]
    Corrupt(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Whether the store should run the transaction again.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Transient(_) | Error::ConnectionLost(_))
    }

    /// Whether the connection the error came from must not be reused.
    pub fn is_connection_lost(&self) -> bool {
        matches!(self, Error::ConnectionLost(_))
    }
}

/// SQLSTATEs for conflicts that a retry resolves: serialization failure,
/// deadlock, lock not available, unique violation (two joins racing on one
/// token: the retry finds the winner's session), and a transaction the
/// database ended because this server went quiet in it for longer than the
/// idle-in-transaction timeout (a CPU stall; nothing was committed).
const RETRY_STATES: &[&str] = &["40001", "40P01", "55P03", "23505", "25P03"];

/// The unique index that refuses a second commit at a game version
/// already claimed (migration `actions_one_claim_per_version`).
const ONE_CLAIM_PER_VERSION: &str = "actions_one_claim_per_version";

/// SQLSTATE classes and codes that mean the database is overloaded or
/// intervened (53: insufficient resources, 57: operator intervention).
fn is_unavailable_state(code: &str) -> bool {
    code.starts_with("53") || code.starts_with("57")
}

/// SQLSTATEs after which the connection is no use: connection exceptions
/// (08), the server shutting down, crashed or starting (57P01-57P03,
/// 57P04 database dropped, 57P05 idle session timeout), and a read-only
/// transaction (25006: the server is a standby now, or was never the
/// primary).
fn is_connection_lost_state(code: &str) -> bool {
    code.starts_with("08") || code.starts_with("57P") || code == "25006"
}

impl Error {
    /// A failure to get a connection from the pool. An I/O error there
    /// means a new connection could not be opened: sqlx retries a refused
    /// connection itself until the acquire timeout, but returns any other
    /// failure at once (reset, closed during the handshake: the path to the
    /// database is broken, as in a partition). That is `Unavailable`, not a
    /// lost connection to retry: the next attempts would find the same, and
    /// the caller is better served by an answer now, so that it moves to a
    /// server that can reach the database.
    pub fn from_acquire(err: sqlx::Error) -> Error {
        match err {
            sqlx::Error::Io(io) => {
                Error::Unavailable(format!("cannot connect to the database: {io}"))
            }
            other => Error::from(other),
        }
    }
}

impl From<sqlx::Error> for Error {
    fn from(err: sqlx::Error) -> Self {
        match &err {
            sqlx::Error::Database(db) => {
                let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                if db.constraint() == Some(ONE_CLAIM_PER_VERSION) {
                    // Not a race to retry: the game's row is behind its own
                    // action log, and every write on it would meet this.
                    Error::Corrupt(format!(
                        "the game's stored state is older than its action log, so no \
                         commit can follow it ({}, {code})",
                        db.message()
                    ))
                } else if RETRY_STATES.contains(&code.as_str()) {
                    Error::Transient(format!("{} ({code})", db.message()))
                } else if code == "57014" {
                    Error::Unavailable(format!("statement timed out ({code})"))
                } else if is_connection_lost_state(&code) {
                    Error::ConnectionLost(format!("{} ({code})", db.message()))
                } else if is_unavailable_state(&code) {
                    // The server is shutting down or restarting: a fresh
                    // connection may already work.
                    Error::Transient(format!("{} ({code})", db.message()))
                } else {
                    Error::Internal(format!("{} ({code})", db.message()))
                }
            }
            // A pooled connection the database closed (restart, network):
            // another connection may work.
            sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => {
                Error::ConnectionLost(err.to_string())
            }
            sqlx::Error::Tls(_) => Error::Unavailable(err.to_string()),
            sqlx::Error::PoolTimedOut => {
                Error::Unavailable("no database connection could be opened in time".into())
            }
            sqlx::Error::PoolClosed => Error::Unavailable("the server is shutting down".into()),
            _ => Error::Internal(err.to_string()),
        }
    }
}

impl From<Refused> for Error {
    fn from(refused: Refused) -> Self {
        let what = match refused.priority {
            Priority::Play => "game calls",
            Priority::Join => "new players",
            Priority::Spectate => "spectators",
        };
        Error::ServerFull {
            message: format!(
                "server full: it admits no more {what} now; try again in {} ms",
                refused.pushback.as_millis()
            ),
            pushback: refused.pushback,
        }
    }
}

impl From<borbaman_game::DecodeError> for Error {
    fn from(err: borbaman_game::DecodeError) -> Self {
        Error::Corrupt(err.to_string())
    }
}

impl From<Error> for Status {
    fn from(err: Error) -> Self {
        let (code, reason) = match &err {
            Error::InvalidArgument(_) => (Code::InvalidArgument, None),
            Error::Unauthenticated(_) => (Code::Unauthenticated, Some(Reason::UnknownSession)),
            Error::PermissionDenied(_) => (Code::PermissionDenied, Some(Reason::NotYours)),
            Error::SeatGivenAway(_) => (Code::PermissionDenied, Some(Reason::SeatGivenAway)),
            Error::OperatorOnly(_) => (Code::PermissionDenied, None),
            Error::FailedPrecondition(_) => (Code::FailedPrecondition, None),
            Error::RateLimited(_) => (Code::ResourceExhausted, Some(Reason::RateLimited)),
            Error::ServerFull { .. } => (Code::ResourceExhausted, Some(Reason::ServerFull)),
            Error::NameTaken(_) => (Code::AlreadyExists, Some(Reason::NameTaken)),
            Error::Unavailable(_)
            | Error::Transient(_)
            | Error::ConnectionLost(_)
            | Error::Moved(_) => (Code::Unavailable, Some(Reason::DatabaseUnavailable)),
            Error::Corrupt(_) | Error::Internal(_) => (Code::Internal, None),
        };
        if code == Code::Internal {
            tracing::error!(error = %err, "call failed");
        }
        let pushback = match &err {
            Error::ServerFull { pushback, .. } => Some(*pushback),
            _ => None,
        };
        let message = match err {
            // Retries ran out: for the client it is the same as unreachable.
            Error::Transient(m) | Error::ConnectionLost(m) => {
                format!("database unavailable: retries ran out: {m}")
            }
            other => other.to_string(),
        };
        let status = match reason {
            Some(reason) => reason.status(code, message),
            None => Status::new(code, message),
        };
        match pushback {
            Some(after) => with_retry_pushback(status, after),
            None => status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_carry_the_right_code_and_message() {
        let s = Status::from(Error::Unavailable("no answer within 500 ms".into()));
        assert_eq!(s.code(), Code::Unavailable);
        assert_eq!(s.message(), "database unavailable: no answer within 500 ms");
        let s = Status::from(Error::Transient("deadlock detected (40P01)".into()));
        assert_eq!(s.code(), Code::Unavailable);
        assert!(s.message().starts_with("database unavailable"));
        let s = Status::from(Error::InvalidArgument("seq must be at least 1".into()));
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(s.message(), "seq must be at least 1");
        assert_eq!(
            Status::from(Error::Unauthenticated("x".into())).code(),
            Code::Unauthenticated
        );
        assert_eq!(
            Status::from(Error::PermissionDenied("x".into())).code(),
            Code::PermissionDenied
        );
    }

    #[test]
    fn statuses_say_why_in_a_reason_clients_can_read() {
        let reason = |e: Error| Reason::of(&Status::from(e));
        assert_eq!(
            reason(Error::Unavailable("x".into())),
            Some(Reason::DatabaseUnavailable)
        );
        assert_eq!(
            reason(Error::Transient("x".into())),
            Some(Reason::DatabaseUnavailable)
        );
        assert_eq!(
            reason(Error::SeatGivenAway("x".into())),
            Some(Reason::SeatGivenAway)
        );
        assert_eq!(
            reason(Error::PermissionDenied("x".into())),
            Some(Reason::NotYours)
        );
        assert_eq!(
            reason(Error::Unauthenticated("x".into())),
            Some(Reason::UnknownSession)
        );
        let limited = Status::from(Error::RateLimited("too many acts".into()));
        assert_eq!(limited.code(), Code::ResourceExhausted);
        assert_eq!(Reason::of(&limited), Some(Reason::RateLimited));
        assert_eq!(reason(Error::InvalidArgument("database".into())), None);
    }

    #[test]
    fn a_refusal_for_load_is_server_full_with_a_pushback() {
        let status = Status::from(Error::from(Refused {
            priority: Priority::Join,
            pushback: Duration::from_millis(820),
        }));
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(Reason::of(&status), Some(Reason::ServerFull));
        assert_eq!(
            borbaman_proto::reason::retry_pushback(&status),
            Some(Duration::from_millis(820))
        );
        assert!(
            status.message().contains("try again in 820 ms"),
            "{status:?}"
        );
        // A rate limit is not a server that is full.
        let limited = Status::from(Error::RateLimited("slow down".into()));
        assert_eq!(borbaman_proto::reason::retry_pushback(&limited), None);
    }

    #[test]
    fn pool_and_io_failures_are_unavailable_or_retried() {
        assert!(matches!(
            Error::from(sqlx::Error::PoolTimedOut),
            Error::Unavailable(_)
        ));
        let io = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "closed");
        let lost = Error::from(sqlx::Error::Io(io));
        assert!(lost.is_transient() && lost.is_connection_lost(), "{lost:?}");
        assert_eq!(Status::from(lost).code(), Code::Unavailable);
        assert!(matches!(
            Error::from(sqlx::Error::RowNotFound),
            Error::Internal(_)
        ));
    }

    #[test]
    fn a_connection_that_cannot_be_opened_is_unavailable_at_once() {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let err = Error::from_acquire(sqlx::Error::Io(reset));
        assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
        assert!(!err.is_transient(), "not retried in the store");
        assert_eq!(
            Reason::of(&Status::from(err)),
            Some(Reason::DatabaseUnavailable)
        );
        assert!(matches!(
            Error::from_acquire(sqlx::Error::PoolTimedOut),
            Error::Unavailable(_)
        ));
    }
}
