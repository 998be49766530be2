//! Machine-readable failure reasons. A status's code says what kind of
//! failure it is; where a client must act differently on failures of the
//! same code, the server also sets the metadata key [`REASON_KEY`] to one
//! of these, and the client classifies on it, never on message text.

use std::fmt;
use std::str::FromStr;

/// The metadata key carrying a [`Reason`].
pub const REASON_KEY: &str = "borbaman-reason";

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
}

impl Reason {
    pub const ALL: [Reason; 6] = [
        Reason::DatabaseUnavailable,
        Reason::SeatGivenAway,
        Reason::UnknownSession,
        Reason::NotYours,
        Reason::RateLimited,
        Reason::NameTaken,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::DatabaseUnavailable => "database-unavailable",
            Reason::SeatGivenAway => "seat-given-away",
            Reason::UnknownSession => "unknown-session",
            Reason::NotYours => "not-yours",
            Reason::RateLimited => "rate-limited",
            Reason::NameTaken => "name-taken",
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
}
