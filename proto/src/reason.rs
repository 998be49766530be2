//! Machine-readable failure reasons. A status's code says what kind of
//! failure it is; where a client must act differently on failures of the
//! same code, the server also sets the metadata key [`REASON_KEY`] to one
//! of these, and the client classifies on it, never on message text.

use std::fmt;
use std::str::FromStr;

/// The metadata key carrying a [`Reason`].
pub const REASON_KEY: &str = "borbaman-reason";

/// The metadata key of a server's pushback: how many milliseconds the
/// client waits before it sends this call again (gRPC's retry design,
/// proposal A6, names it so). Absent: the client's own backoff decides.
pub const RETRY_PUSHBACK_KEY: &str = "grpc-retry-pushback-ms";

/// Why a call failed, where the code alone does not say enough.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// `UNAVAILABLE`: the server is up but its database is not answering;
    /// every server would say the same, so failing over does not help.
    DatabaseUnavailable,
    /// `PERMISSION_DENIED`: the session's lobby seat went to another player;
    /// join again with the same token.
    SeatGivenAway,
    /// `UNAUTHENTICATED`: no session has this token; join afresh.
    UnknownSession,
    /// `PERMISSION_DENIED`: the request names another game or seat than the
    /// session's; a bug in the caller, not a lost seat.
    NotYours,
    /// `RESOURCE_EXHAUSTED`: too many calls of this kind from this session
    /// or address; slow down.
    RateLimited,
    /// `ALREADY_EXISTS`: the name (or one that looks like it) belongs to
    /// another player identity; pick another name.
    NameTaken,
    /// `RESOURCE_EXHAUSTED`: the server admits no more work of this kind
    /// now (admission control); the status carries [`RETRY_PUSHBACK_KEY`],
    /// the time after which to try again. Not an error of the request.
    ServerFull,
}

impl Reason {
    pub const ALL: [Reason; 7] = [
        Reason::DatabaseUnavailable,
        Reason::SeatGivenAway,
        Reason::UnknownSession,
        Reason::NotYours,
        Reason::RateLimited,
        Reason::NameTaken,
        Reason::ServerFull,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::DatabaseUnavailable => "database-unavailable",
            Reason::SeatGivenAway => "seat-given-away",
            Reason::UnknownSession => "unknown-session",
            Reason::NotYours => "not-yours",
            Reason::RateLimited => "rate-limited",
            Reason::NameTaken => "name-taken",
            Reason::ServerFull => "server-full",
        }
    }

    /// The reason a status carries, if any.
    pub fn of(status: &tonic::Status) -> Option<Reason> {
        status
            .metadata()
            .get(REASON_KEY)?
            .to_str()
            .ok()?
            .parse()
            .ok()
    }

    /// A status with this reason attached.
    pub fn status(self, code: tonic::Code, message: impl Into<String>) -> tonic::Status {
        let mut status = tonic::Status::new(code, message);
        status.metadata_mut().insert(
            REASON_KEY,
            tonic::metadata::MetadataValue::from_static(self.as_str()),
        );
        status
    }
}

/// The pushback a status carries ([`RETRY_PUSHBACK_KEY`]), if any.
pub fn retry_pushback(status: &tonic::Status) -> Option<std::time::Duration> {
    let ms: u64 = status
        .metadata()
        .get(RETRY_PUSHBACK_KEY)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(std::time::Duration::from_millis(ms))
}

/// Attaches a pushback to `status`: try again after `after`.
pub fn with_retry_pushback(mut status: tonic::Status, after: std::time::Duration) -> tonic::Status {
    let ms = after.as_millis().min(u128::from(u32::MAX)).to_string();
    if let Ok(value) = ms.parse() {
        status.metadata_mut().insert(RETRY_PUSHBACK_KEY, value);
    }
    status
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Reason {
    type Err = ();

    fn from_str(s: &str) -> Result<Reason, ()> {
        Reason::ALL.into_iter().find(|r| r.as_str() == s).ok_or(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_survive_a_status() {
        for reason in Reason::ALL {
            let status = reason.status(tonic::Code::Unavailable, "whatever the text says");
            assert_eq!(Reason::of(&status), Some(reason));
        }
        assert_eq!(Reason::of(&tonic::Status::unavailable("database")), None);
    }

    #[test]
    fn pushback_survives_a_status() {
        let status = Reason::ServerFull.status(tonic::Code::ResourceExhausted, "full");
        assert_eq!(retry_pushback(&status), None);
        let status = with_retry_pushback(status, std::time::Duration::from_millis(750));
        assert_eq!(
            retry_pushback(&status),
            Some(std::time::Duration::from_millis(750))
        );
        assert_eq!(Reason::of(&status), Some(Reason::ServerFull));
    }
}
