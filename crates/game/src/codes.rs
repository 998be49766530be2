//! Numbers that cross a boundary: stored in SQL columns, sent on the wire,
//! compared in queries. Defined here once; the server's SQL and wire mapping
//! check themselves against these at compile time.

use crate::{Action, Dir, Outcome, Phase};

/// `games.phase` and the wire's `Phase`.
impl Phase {
    pub const WAITING_CODE: i16 = 1;
    pub const PLAYING_CODE: i16 = 2;
    pub const FINISHED_CODE: i16 = 3;

    pub const fn code(self) -> i16 {
        match self {
            Phase::Waiting => Self::WAITING_CODE,
            Phase::Playing => Self::PLAYING_CODE,
            Phase::Finished => Self::FINISHED_CODE,
        }
    }

    pub const fn from_code(code: i16) -> Option<Phase> {
        match code {
            Self::WAITING_CODE => Some(Phase::Waiting),
            Self::PLAYING_CODE => Some(Phase::Playing),
            Self::FINISHED_CODE => Some(Phase::Finished),
            _ => None,
        }
    }
}

/// `actions.action`, `sessions.last_kind` and the wire's `Action`; a leave
/// is logged as [`Action::LEAVE_CODE`].
impl Action {
    pub const UP_CODE: i16 = 1;
    pub const DOWN_CODE: i16 = 2;
    pub const LEFT_CODE: i16 = 3;
    pub const RIGHT_CODE: i16 = 4;
    pub const BOMB_CODE: i16 = 5;
    pub const IDLE_CODE: i16 = 6;
    /// Not an action a player sends: the log's mark for a leave.
    pub const LEAVE_CODE: i16 = 7;
    pub const DETONATE_CODE: i16 = 8;

    pub const fn code(self) -> i16 {
        match self {
            Action::Move(Dir::Up) => Self::UP_CODE,
            Action::Move(Dir::Down) => Self::DOWN_CODE,
            Action::Move(Dir::Left) => Self::LEFT_CODE,
            Action::Move(Dir::Right) => Self::RIGHT_CODE,
            Action::Bomb => Self::BOMB_CODE,
            Action::Idle => Self::IDLE_CODE,
            Action::Detonate => Self::DETONATE_CODE,
        }
    }

    /// The action with this code; `None` for the leave mark and unknowns.
    pub const fn from_code(code: i16) -> Option<Action> {
        match code {
            Self::UP_CODE => Some(Action::Move(Dir::Up)),
            Self::DOWN_CODE => Some(Action::Move(Dir::Down)),
            Self::LEFT_CODE => Some(Action::Move(Dir::Left)),
            Self::RIGHT_CODE => Some(Action::Move(Dir::Right)),
            Self::BOMB_CODE => Some(Action::Bomb),
            Self::IDLE_CODE => Some(Action::Idle),
            Self::DETONATE_CODE => Some(Action::Detonate),
            _ => None,
        }
    }
}

/// `actions.outcome` and the wire's `Outcome`.
impl Outcome {
    pub const APPLIED_CODE: i16 = 1;
    pub const QUEUED_CODE: i16 = 2;
    pub const NO_EFFECT_CODE: i16 = 3;

    pub const fn code(self) -> i16 {
        match self {
            Outcome::Applied => Self::APPLIED_CODE,
            Outcome::Queued => Self::QUEUED_CODE,
            Outcome::NoEffect => Self::NO_EFFECT_CODE,
        }
    }

    pub const fn from_code(code: i16) -> Option<Outcome> {
        match code {
            Self::APPLIED_CODE => Some(Outcome::Applied),
            Self::QUEUED_CODE => Some(Outcome::Queued),
            Self::NO_EFFECT_CODE => Some(Outcome::NoEffect),
            _ => None,
        }
    }
}

/// A seat counts as connected while its player acted within this window;
/// the server computes it in SQL, other players see it in the HUD.
pub const CONNECTED_WINDOW_MS: u32 = 3000;

/// A client acts (idle if nothing else) at least this often while it plays,
/// so it stays inside [`CONNECTED_WINDOW_MS`] with room for a lost call.
pub const PRESENCE_INTERVAL_MS: u32 = 2000;

const _: () = assert!(PRESENCE_INTERVAL_MS < CONNECTED_WINDOW_MS);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for p in [Phase::Waiting, Phase::Playing, Phase::Finished] {
            assert_eq!(Phase::from_code(p.code()), Some(p));
        }
        let mut actions: Vec<Action> = Dir::ALL.iter().map(|&d| Action::Move(d)).collect();
        actions.extend([Action::Bomb, Action::Idle, Action::Detonate]);
        for a in actions {
            assert_eq!(Action::from_code(a.code()), Some(a));
            assert_ne!(a.code(), Action::LEAVE_CODE);
        }
        assert_eq!(Action::from_code(Action::LEAVE_CODE), None);
        for o in [Outcome::Applied, Outcome::Queued, Outcome::NoEffect] {
            assert_eq!(Outcome::from_code(o.code()), Some(o));
        }
        assert_eq!(Phase::from_code(0), None);
    }
}
