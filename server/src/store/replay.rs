//! Reads for verified replays: finished games' stored states and their
//! whole logs of changes in commit order (the lobby's `seat_log` and the
//! action log), for the game core to re-simulate
//! ([`borbaman_game::resimulate`]) and compare byte for byte.
//!
//! Read-only and off the per-call path: the two reads run in one
//! repeatable-read transaction, so states and logs agree.

use sqlx::PgPool;

use super::Store;
use crate::error::Error;
use borbaman_game::{Action, Event, GameState, Tick, resimulate};

/// `seat_log.kind` of a seat freed because its player went silent.
const SEAT_FREED: i16 = 1;
/// `seat_log.kind` of a seat a join filled.
const SEATED: i16 = 2;

/// A finished game as stored, with every logged change to it in order.
#[derive(Clone, Debug)]
pub struct LoggedGame {
    pub id: i64,
    pub state: Vec<u8>,
    pub events: Vec<Event>,
}

impl Store {
    /// One finished game with its log and its players' names, for a
    /// replay; `FailedPrecondition` if it is not a finished game.
    pub async fn replay(&self, game_id: u64) -> Result<(LoggedGame, Vec<String>), Error> {
        let id = i64::try_from(game_id)
            .map_err(|_| Error::InvalidArgument(format!("game id {game_id} is out of range")))?;
        if let super::partitions::Routed::Other(store) = self.route(game_id)? {
            return Box::pin(store.replay(game_id)).await;
        }
        self.retrying(|| async {
            let game = finished_games(&self.pool, Some(&[id]))
                .await?
                .pop()
                .ok_or_else(|| {
                    Error::FailedPrecondition(format!(
                        "game {game_id} is not a finished game; only finished games can be replayed"
                    ))
                })?;
            let names: Vec<String> = sqlx::query_scalar("SELECT names FROM games WHERE id = $1")
                .bind(id)
                .fetch_one(&self.pool)
                .await?;
            Ok((game, names))
        })
        .await
    }
}

/// What re-simulating a finished game found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The log re-simulates to the stored state, byte for byte.
    Same,
    /// It does not; says how.
    Differs(String),
    /// No seat was logged for it: it was created before joins were logged,
    /// so it cannot be replayed.
    NotLogged,
}

/// Finished games (those of `ids`, or all of them) with their logs, by id.
pub async fn finished_games(
    db: &PgPool,
    ids: Option<&[i64]>,
) -> Result<Vec<LoggedGame>, sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut *tx)
        .await?;
    let rows: Vec<(i64, Vec<u8>)> = sqlx::query_as(
        "SELECT id, state FROM games \
         WHERE phase = 3 AND ($1::bigint[] IS NULL OR id = ANY($1::bigint[])) ORDER BY id",
    )
    .bind(ids)
    .fetch_all(&mut *tx)
    .await?;
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    // Within one commit (one version) seat changes come first: a join's
    // freed seats, then its seat. The action rows of one commit are in the
    // order they were applied (`ord`; a commit may hold several sessions'
    // inputs); rows logged before `ord` existed have 0 and are one
    // session's inputs, applied in seq order.
    let log: Vec<(i64, i16, i16, i16, i32)> = sqlx::query_as(
        "SELECT game_id, src, kind, seat, tick FROM ( \
           SELECT game_id, version, 0::smallint AS src, kind, seat, tick, \
                  kind::integer AS ord, 0::bigint AS seq FROM seat_log \
             WHERE game_id = ANY($1::bigint[]) \
           UNION ALL \
           SELECT game_id, version, 1::smallint, action, seat, tick, ord, seq FROM actions \
             WHERE game_id = ANY($1::bigint[])) e \
         ORDER BY game_id, version, src, ord, seq, seat",
    )
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;

    let mut games: Vec<LoggedGame> = rows
        .into_iter()
        .map(|(id, state)| LoggedGame {
            id,
            state,
            events: Vec::new(),
        })
        .collect();
    let mut at = 0;
    for (game_id, src, kind, seat, tick) in log {
        while games[at].id != game_id {
            at += 1;
        }
        let seat = seat.clamp(0, u8::MAX.into()) as u8;
        let tick = tick.max(0) as Tick;
        let event = match (src, kind) {
            (0, SEAT_FREED) => Event::SeatFreed { seat },
            (0, SEATED) => Event::Seated { seat, tick },
            (1, Action::LEAVE_CODE) => Event::Left { seat, tick },
            (1, code) => match Action::from_code(code) {
                Some(action) => Event::Acted { seat, action, tick },
                None => continue,
            },
            _ => continue,
        };
        games[at].events.push(event);
    }
    Ok(games)
}

/// Re-simulates `game` from its creation and its log, and compares the
/// result with its stored state, byte for byte. Pure: no I/O.
pub fn verify(game: &LoggedGame) -> Verdict {
    let stored = match GameState::decode(&game.state) {
        Ok(state) => state,
        Err(e) => return Verdict::Differs(format!("its stored state does not decode: {e}")),
    };
    if !matches!(game.events.first(), Some(Event::Seated { .. })) {
        return Verdict::NotLogged;
    }
    let again = match resimulate(stored.initial(), game.events.iter().copied(), stored.tick()) {
        Ok(state) => state,
        Err(e) => return Verdict::Differs(format!("its log does not replay: {e}")),
    };
    let bytes = again.encode();
    if bytes == game.state {
        return Verdict::Same;
    }
    let at = bytes
        .iter()
        .zip(&game.state)
        .position(|(a, b)| a != b)
        .unwrap_or(bytes.len().min(game.state.len()));
    Verdict::Differs(format!(
        "re-simulated from {} logged changes it ends {:?} at tick {}, stored {:?} at tick {}; \
         the encodings first differ at byte {at}",
        game.events.len(),
        again.ending(),
        again.tick(),
        stored.ending(),
        stored.tick(),
    ))
}

/// The verdicts on a run's (or a database's) finished games.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayAudit {
    /// Games re-simulated and compared.
    pub checked: usize,
    /// Games that differ, with why.
    pub differing: Vec<(i64, String)>,
    /// Finished games created before joins were logged.
    pub not_logged: usize,
}

impl ReplayAudit {
    /// Verifies every game of `games`.
    pub fn of(games: &[LoggedGame]) -> ReplayAudit {
        let mut audit = ReplayAudit::default();
        for game in games {
            match verify(game) {
                Verdict::Same => audit.checked += 1,
                Verdict::Differs(why) => {
                    audit.checked += 1;
                    audit.differing.push((game.id, why));
                }
                Verdict::NotLogged => audit.not_logged += 1,
            }
        }
        audit
    }
}

#[cfg(test)]
mod sql_tests {
    use super::*;
    use crate::store::{ActCall, Input, LeaveCall};
    use crate::token;
    use borbaman_game::{Arena, Cell, Dir, Ending, Phase};

    /// Four players join (the first asks for the open arena), act, three
    /// leave: the game is finished, and its log re-simulates to its stored
    /// state byte for byte. Then the stored state is altered by SQL, and the
    /// replay no longer matches, naming what differs.
    #[tokio::test]
    async fn a_finished_game_replays_to_its_stored_state_until_it_is_altered() {
        let (_pg, store) = crate::store::temp_store().await;
        let mut players = Vec::new();
        for i in 0..4 {
            let token = token::hash(&token::draw());
            let arena = (i == 0).then_some(Arena::Open);
            let joined = store
                .join(
                    &token,
                    &crate::store::Identity::session_only(&token),
                    &format!("p{i}"),
                    arena,
                )
                .await
                .unwrap();
            players.push((token, joined));
        }
        let game_id = players[0].1.game_id;
        assert!(players.iter().all(|(_, j)| j.game_id == game_id));
        assert_eq!(players[3].1.snapshot.state.arena(), Arena::Open);

        let script = [
            (0, Action::Bomb),
            (1, Action::Move(Dir::Left)),
            (0, Action::Move(Dir::Right)),
            (2, Action::Idle),
            (0, Action::Move(Dir::Down)),
        ];
        for (seq, (player, action)) in script.into_iter().enumerate() {
            let (token, joined) = &players[player];
            store
                .act(&ActCall {
                    token_hash: *token,
                    game_id,
                    seat: joined.seat,
                    inputs: vec![Input {
                        seq: seq as u64 + 1,
                        action,
                    }],
                    batch: false,
                })
                .await
                .unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        }
        // Two inputs in one commit, applied in seq order (not in the order
        // of their codes: a move's is below a bomb's): seat 1 (its last seq
        // is 2) plants a bomb where it stands, then steps off it, once its
        // move cooldown is over. In the other order the bomb would lie
        // where it stepped to.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let (token, joined) = &players[1];
        let now = store.state(token, game_id).await.unwrap().state;
        let me = *now.player(joined.seat).unwrap();
        let step = [
            (Dir::Left, -1i16, 0i16),
            (Dir::Right, 1, 0),
            (Dir::Up, 0, -1),
            (Dir::Down, 0, 1),
        ]
        .into_iter()
        .find(|&(_, dx, dy)| {
            let (x, y) = ((i16::from(me.x) + dx) as u8, (i16::from(me.y) + dy) as u8);
            now.cell(x, y) == Cell::Floor && !now.bombs().any(|b| (b.x, b.y) == (x, y))
        })
        .expect("a free cell beside seat 1")
        .0;
        let acted = store
            .act(&ActCall {
                token_hash: *token,
                game_id,
                seat: joined.seat,
                inputs: vec![
                    Input {
                        seq: 3,
                        action: Action::Bomb,
                    },
                    Input {
                        seq: 4,
                        action: Action::Move(step),
                    },
                ],
                batch: true,
            })
            .await
            .unwrap();
        assert_eq!((acted.ack, acted.applied), (4, 2));
        let bomb = acted
            .snapshot
            .state
            .bombs()
            .find(|b| b.owner == joined.seat);
        assert_eq!(bomb.map(|b| (b.x, b.y)), Some((me.x, me.y)));
        for (token, joined) in &players[1..] {
            store
                .leave(&LeaveCall {
                    token_hash: *token,
                    game_id,
                    seat: joined.seat,
                    seq: 100,
                })
                .await
                .unwrap();
        }

        let games = finished_games(store.pool(), None).await.unwrap();
        assert_eq!(games.len(), 1);
        let game = &games[0];
        assert_eq!(game.id, game_id as i64);
        // Four seats, seven acts, three leaves.
        assert_eq!(game.events.len(), 14, "{:?}", game.events);
        let stored = GameState::decode(&game.state).unwrap();
        assert_eq!(stored.phase(), Phase::Finished);
        assert_eq!(stored.ending(), Some(Ending::Winner(players[0].1.seat)));
        assert_eq!(verify(game), Verdict::Same);
        assert_eq!(
            ReplayAudit::of(&games),
            ReplayAudit {
                checked: 1,
                ..ReplayAudit::default()
            }
        );

        // Seat 0's blast range, one more than it earned.
        sqlx::query(
            "UPDATE games SET state = set_byte(state, 24, get_byte(state, 24) + 8) WHERE id = $1",
        )
        .bind(game_id as i64)
        .execute(store.pool())
        .await
        .unwrap();
        let games = finished_games(store.pool(), Some(&[game_id as i64]))
            .await
            .unwrap();
        GameState::decode(&games[0].state).expect("the altered state is still a valid game");
        let Verdict::Differs(why) = verify(&games[0]) else {
            panic!("an altered state must not verify");
        };
        assert!(why.contains("differ at byte 24"), "{why}");
        assert_eq!(ReplayAudit::of(&games).differing.len(), 1);
    }
}
