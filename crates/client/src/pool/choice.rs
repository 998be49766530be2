//! The pool's decisions, free of I/O so they can be tested alone: what a
//! failed call's status means, and which server to try next.

use std::collections::HashSet;

use borbaman_proto::Reason;
use rand::Rng;
use tonic::Code;

/// What a failed attempt says about the server that answered (or did not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The server is gone or unusable: mark it down, retry elsewhere at once.
    ServerDown,
    /// No answer within the deadline, though the server answers its health
    /// probe: alive but slow. Retry elsewhere; the server stays up.
    Timeout,
    /// No answer, and no answer to a health probe on the warm connection
    /// either: the server is hung. Mark it down, retry elsewhere at once.
    Hung,
    /// Every server would say the same: the database is down. Back off and
    /// retry, bounded; servers stay up.
    DatabaseUnavailable,
    /// The server refused the request itself: retrying elsewhere would not
    /// help. Returned to the caller.
    Refused,
}

/// Classifies a status returned by a server or by the transport.
///
/// The first failure after a server is killed surfaces as `UNKNOWN`
/// "transport error" (the connection broke mid-call); later ones as
/// `UNAVAILABLE`. A server that closes its connections while draining on
/// SIGTERM can end a call with `INTERNAL` "h2 protocol error": that is the
/// transport too, not the server refusing the request. Servers answer
/// `UNAVAILABLE` with the reason [`Reason::DatabaseUnavailable`] when
/// PostgreSQL is unreachable. Only the transport's own failures, which no
/// server wrote, are told apart by their text.
pub fn classify(status: &tonic::Status) -> FailureKind {
    let message = status.message().to_ascii_lowercase();
    match status.code() {
        Code::Unavailable if Reason::of(status) == Some(Reason::DatabaseUnavailable) => {
            FailureKind::DatabaseUnavailable
        }
        Code::Unavailable | Code::Cancelled => FailureKind::ServerDown,
        Code::Unknown | Code::Internal if is_transport_message(&message) => FailureKind::ServerDown,
        Code::DeadlineExceeded => FailureKind::Timeout,
        _ => FailureKind::Refused,
    }
}

fn is_transport_message(message: &str) -> bool {
    [
        "transport",
        "connection",
        "broken pipe",
        "h2 protocol",
        "reset",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// What a call does when no live server is left to try: every one either
/// timed out in this call (`timed_out`) or said its database is unavailable
/// (`database_down`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exhausted {
    /// Some live servers only timed out: they are slow, not known to be
    /// cut off the database. Try them again with a longer deadline.
    RetrySlow,
    /// Every live server said its database is unavailable: it is, for
    /// everyone. Back off and ask again.
    DatabaseDown,
    /// No live server: wait for one.
    WaitForServer,
}

/// Decides [`Exhausted`]. A server that said "database unavailable" may be
/// partitioned from a database the others still reach, so the database is
/// down for everyone only when no live server is left that has not said
/// so; servers that merely timed out come first, or a call could go round
/// between backing off and the one partitioned server until it heals.
pub fn exhausted(
    live: &[&str],
    timed_out: &HashSet<String>,
    database_down: &HashSet<String>,
) -> Exhausted {
    let not_database_down = live.iter().any(|s| !database_down.contains(*s));
    if !timed_out.is_empty() && not_database_down {
        Exhausted::RetrySlow
    } else if !database_down.is_empty() && !live.is_empty() {
        Exhausted::DatabaseDown
    } else {
        Exhausted::WaitForServer
    }
}

/// Index of a server picked at random among `live`, preferring those not in
/// `avoid`. `None` when every live server is to be avoided, or none is live.
pub fn pick<R: Rng + ?Sized>(live: &[&str], avoid: &HashSet<String>, rng: &mut R) -> Option<usize> {
    let candidates: Vec<usize> = (0..live.len())
        .filter(|&i| !avoid.contains(live[i]))
        .collect();
    if candidates.is_empty() {
        return None;
    }
    Some(candidates[rng.random_range(0..candidates.len())])
}

/// Index of the server a game's calls go to, among `live` servers not in
/// `avoid`: rendezvous hashing (the highest weight of `game` and the
/// address). Every client of one game that knows the same servers picks
/// the same one, so the calls of its four players take turns in that
/// server (its per-game gates) instead of racing their compare-and-set
/// writes in the database; games spread over the servers as random picks
/// would; and when that server goes, its games move to their next choice,
/// again the same for every player. Only a preference: a player on another
/// server is slower, never wrong.
pub fn pick_for_game(live: &[&str], avoid: &HashSet<String>, game: u64) -> Option<usize> {
    (0..live.len())
        .filter(|&i| !avoid.contains(live[i]))
        .max_by_key(|&i| (weight(game, live[i]), live[i]))
}

/// FNV-1a over the game id and the address, then a 64-bit finalizer
/// (splitmix64's): the same in every client, whatever its build.
fn weight(game: u64, address: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in game.to_le_bytes().iter().chain(address.as_bytes()) {
        h ^= u64::from(*byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn a_killed_server_is_down_whatever_the_first_status_says() {
        let first = tonic::Status::unknown("transport error");
        let later = tonic::Status::unavailable("tcp connect error: Connection refused");
        assert_eq!(classify(&first), FailureKind::ServerDown);
        assert_eq!(classify(&later), FailureKind::ServerDown);
        assert_eq!(
            classify(&tonic::Status::cancelled("")),
            FailureKind::ServerDown
        );
    }

    #[test]
    fn a_connection_closed_while_draining_is_the_transport_not_a_refusal() {
        // Seen when a server drained on SIGTERM mid-call.
        let draining =
            tonic::Status::internal("h2 protocol error: error reading a body from connection");
        assert_eq!(classify(&draining), FailureKind::ServerDown);
        let reset = tonic::Status::internal("connection reset");
        assert_eq!(classify(&reset), FailureKind::ServerDown);
        // An INTERNAL that the server itself made up stays a refusal.
        let bug = tonic::Status::internal("state does not decode");
        assert_eq!(classify(&bug), FailureKind::Refused);
    }

    #[test]
    fn the_database_being_down_does_not_mark_servers_down() {
        let status = Reason::DatabaseUnavailable.status(Code::Unavailable, "connection refused");
        assert_eq!(classify(&status), FailureKind::DatabaseUnavailable);
        // The text alone decides nothing.
        let status = tonic::Status::unavailable("database unavailable: connection refused");
        assert_eq!(classify(&status), FailureKind::ServerDown);
    }

    #[test]
    fn refusals_are_returned_not_retried() {
        for status in [
            tonic::Status::invalid_argument("name too long"),
            tonic::Status::unauthenticated("bad token"),
            tonic::Status::failed_precondition("old seq"),
            tonic::Status::unknown("something the server made up"),
        ] {
            assert_eq!(classify(&status), FailureKind::Refused, "{status:?}");
        }
    }

    #[test]
    fn pick_avoids_failed_servers_and_spreads_the_rest() {
        let live = ["a:1", "b:2", "c:3"];
        let avoid: HashSet<String> = ["b:2".to_string()].into();
        let mut rng = StdRng::seed_from_u64(7);
        let mut seen = [0u32; 3];
        for _ in 0..300 {
            seen[pick(&live, &avoid, &mut rng).unwrap()] += 1;
        }
        assert_eq!(seen[1], 0, "an avoided server is never picked");
        assert!(
            seen[0] > 100 && seen[2] > 100,
            "random among the rest: {seen:?}"
        );
    }

    fn set(items: &[&str]) -> HashSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_partitioned_server_does_not_make_the_database_down_for_everyone() {
        let live = ["a:1", "b:2", "c:3"];
        // a: cut off the database; b and c: slow once.
        assert_eq!(
            exhausted(&live, &set(&["b:2", "c:3"]), &set(&["a:1"])),
            Exhausted::RetrySlow
        );
        // Every server says the database is down.
        assert_eq!(
            exhausted(&live, &set(&[]), &set(&["a:1", "b:2", "c:3"])),
            Exhausted::DatabaseDown
        );
        // Some timed out, the others say the database is down: those that
        // timed out said nothing about the database yet.
        assert_eq!(
            exhausted(&live, &set(&["a:1"]), &set(&["b:2", "c:3"])),
            Exhausted::RetrySlow
        );
        // All slow.
        assert_eq!(
            exhausted(&live, &set(&["a:1", "b:2", "c:3"]), &set(&[])),
            Exhausted::RetrySlow
        );
        // Nobody left.
        assert_eq!(
            exhausted(&[], &set(&["a:1"]), &set(&["b:2"])),
            Exhausted::WaitForServer
        );
    }

    #[test]
    fn pick_gives_none_when_nothing_is_left() {
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(pick(&[], &HashSet::new(), &mut rng), None);
        let avoid: HashSet<String> = ["a:1".to_string()].into();
        assert_eq!(pick(&["a:1"], &avoid, &mut rng), None);
    }

    #[test]
    fn a_game_goes_to_one_server_and_games_spread() {
        let live = ["127.0.0.1:5001", "127.0.0.1:5002", "127.0.0.1:5003"];
        let none = HashSet::new();
        let mut per_server = [0u32; 3];
        for game in 1..=300u64 {
            let chosen = pick_for_game(&live, &none, game).unwrap();
            // The same whatever order the servers are known in.
            let reversed: Vec<&str> = live.iter().rev().copied().collect();
            assert_eq!(
                reversed[pick_for_game(&reversed, &none, game).unwrap()],
                live[chosen]
            );
            per_server[chosen] += 1;
            // Without it, the game moves to another server, and only a
            // game on the server that went moves.
            let avoid: HashSet<String> = [live[chosen].to_string()].into();
            let next = pick_for_game(&live, &avoid, game).unwrap();
            assert_ne!(next, chosen);
            let other = (chosen + 1) % 3;
            let avoid_other: HashSet<String> = [live[other].to_string()].into();
            assert_eq!(pick_for_game(&live, &avoid_other, game), Some(chosen));
        }
        // 300 games on 3 servers: each gets a fair share.
        assert!(
            per_server.iter().all(|&n| (60..=140).contains(&n)),
            "{per_server:?}"
        );
        let all: HashSet<String> = live.iter().map(|a| a.to_string()).collect();
        assert_eq!(pick_for_game(&live, &all, 7), None);
    }
}
