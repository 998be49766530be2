//! The game as the wire sees it: the core's types to and from `pb`.
//!
//! [`ToProto`] turns a [`GameState`] into a `pb::GameState`; hidden
//! power-ups stay hidden: a soft block shows as a soft block. Phase, action
//! and outcome numbers are the core's [`borbaman_game::codes`]; the
//! assertions below keep the `.proto` enums equal to them.

use borbaman_game::{
    Action, Cell, Ending, Event, GameState, HEIGHT, Outcome, Phase, PowerUp, SEATS, TICK_MS, WIDTH,
};
use borbaman_proto::pb;

/// The wire message of a game.
pub trait ToProto {
    /// The wire message for clients. `version` is the stored row version;
    /// `names` and `connected` come from the sessions, which the core does
    /// not know about.
    fn to_proto(
        &self,
        game_id: u64,
        version: u64,
        names: &[String; 4],
        connected: [bool; 4],
    ) -> pb::GameState;

    /// [`ToProto::to_proto`] taking the names by value, so a caller that
    /// owns them (the server, once per call) moves them instead of copying.
    fn to_proto_with_names(
        &self,
        game_id: u64,
        version: u64,
        names: [String; SEATS],
        connected: [bool; SEATS],
    ) -> pb::GameState;
}

impl ToProto for GameState {
    fn to_proto(
        &self,
        game_id: u64,
        version: u64,
        names: &[String; 4],
        connected: [bool; 4],
    ) -> pb::GameState {
        self.to_proto_with_names(game_id, version, names.clone(), connected)
    }

    fn to_proto_with_names(
        &self,
        game_id: u64,
        version: u64,
        names: [String; SEATS],
        connected: [bool; SEATS],
    ) -> pb::GameState {
        let cells = self.cells().iter().map(|&c| wire_cell(c) as u8).collect();
        let placed = self.bombs_per_seat().map(u32::from);
        let players = names
            .into_iter()
            .enumerate()
            .map(|(seat, name)| {
                let p = &self.players()[seat];
                pb::Player {
                    seat: seat as u32,
                    name,
                    x: p.x as u32,
                    y: p.y as u32,
                    alive: p.seated && p.alive,
                    bombs_max: p.bombs_max as u32,
                    bombs_placed: placed[seat],
                    range: p.range as u32,
                    speed: p.speed as u32,
                    score: p.kills as u32,
                    connected: connected[seat],
                    seated: p.seated,
                    move_cooldown: p.move_cooldown as u32,
                    kick: p.kick,
                    remote: p.remote,
                }
            })
            .collect();
        // Sized up front: collecting a filtered iterator would grow (and
        // reallocate) the vectors as it goes.
        let mut bombs = Vec::with_capacity(placed.iter().sum::<u32>() as usize);
        bombs.extend(self.bombs().map(|b| pb::Bomb {
            x: b.x as u32,
            y: b.y as u32,
            owner: b.owner as u32,
            range: b.range as u32,
            fuse_ticks: b.fuse_ticks as u32,
            slide: b.slide.map_or(0, |d| i32::from(Action::Move(d).code())),
        }));
        let mut blasts = Vec::with_capacity(self.burning_cells());
        blasts.extend(self.blasts().map(|b| pb::Blast {
            x: b.x as u32,
            y: b.y as u32,
            ticks_left: b.ticks_left as u32,
        }));
        pb::GameState {
            game_id,
            version,
            width: WIDTH as u32,
            height: HEIGHT as u32,
            cells,
            players,
            bombs,
            blasts,
            tick: self.tick(),
            tick_ms: TICK_MS,
            phase: i32::from(self.phase().code()),
            winner: match self.ending() {
                Some(Ending::Winner(seat)) => Some(seat as u32),
                _ => None,
            },
            draw: self.ending() == Some(Ending::Draw),
            round_ticks_left: self.round_ticks_left(),
            sudden_death: self.sudden_death(),
            seated: self.seated() as u32,
            map: self.arena().name().to_string(),
        }
    }
}

/// A logged change to a game as the wire carries it.
pub fn replay_event(event: &Event) -> pb::ReplayEvent {
    use pb::replay_event::Kind;
    let (kind, seat, tick, action) = match *event {
        Event::Seated { seat, tick } => (Kind::Seated, seat, tick, 0),
        Event::SeatFreed { seat } => (Kind::SeatFreed, seat, 0, 0),
        Event::Acted { seat, action, tick } => (Kind::Acted, seat, tick, action.code().into()),
        Event::Left { seat, tick } => (Kind::Left, seat, tick, 0),
    };
    pb::ReplayEvent {
        kind: kind as i32,
        seat: u32::from(seat),
        tick,
        action,
    }
}

/// The core's logged change for a wire event; `None` for unknown kinds,
/// seats or actions.
pub fn event_from_wire(event: &pb::ReplayEvent) -> Option<Event> {
    use pb::replay_event::Kind;
    let seat = u8::try_from(event.seat).ok()?;
    let tick = event.tick;
    Some(match Kind::try_from(event.kind).ok()? {
        Kind::Seated => Event::Seated { seat, tick },
        Kind::SeatFreed => Event::SeatFreed { seat },
        Kind::Acted => Event::Acted {
            seat,
            action: Action::from_code(i16::try_from(event.action).ok()?)?,
            tick,
        },
        Kind::Left => Event::Left { seat, tick },
        Kind::Unspecified => return None,
    })
}

/// The core's action for a wire number; `None` for UNSPECIFIED and unknowns.
pub fn action_from_proto(action: i32) -> Option<Action> {
    i16::try_from(action).ok().and_then(Action::from_code)
}

pub fn outcome_to_proto(outcome: Outcome) -> pb::Outcome {
    pb::Outcome::try_from(i32::from(outcome.code())).unwrap_or(pb::Outcome::Unspecified)
}

// The wire's enum numbers are the core's codes.
const _: () = {
    assert!(pb::Phase::Waiting as i32 == Phase::WAITING_CODE as i32);
    assert!(pb::Phase::Playing as i32 == Phase::PLAYING_CODE as i32);
    assert!(pb::Phase::Finished as i32 == Phase::FINISHED_CODE as i32);
    assert!(pb::Action::Up as i32 == Action::UP_CODE as i32);
    assert!(pb::Action::Down as i32 == Action::DOWN_CODE as i32);
    assert!(pb::Action::Left as i32 == Action::LEFT_CODE as i32);
    assert!(pb::Action::Right as i32 == Action::RIGHT_CODE as i32);
    assert!(pb::Action::Bomb as i32 == Action::BOMB_CODE as i32);
    assert!(pb::Action::Idle as i32 == Action::IDLE_CODE as i32);
    assert!(pb::Action::Detonate as i32 == Action::DETONATE_CODE as i32);
    assert!(pb::Outcome::Applied as i32 == Outcome::APPLIED_CODE as i32);
    assert!(pb::Outcome::Queued as i32 == Outcome::QUEUED_CODE as i32);
    assert!(pb::Outcome::NoEffect as i32 == Outcome::NO_EFFECT_CODE as i32);
    assert!(SEATS == 4);
};

fn wire_cell(cell: Cell) -> pb::Cell {
    match cell {
        Cell::Floor => pb::Cell::Floor,
        Cell::Pillar => pb::Cell::Pillar,
        Cell::Soft { .. } => pb::Cell::Soft,
        Cell::PowerUp(PowerUp::Bomb) => pb::Cell::PowerBomb,
        Cell::PowerUp(PowerUp::Range) => pb::Cell::PowerRange,
        Cell::PowerUp(PowerUp::Speed) => pb::Cell::PowerSpeed,
        Cell::PowerUp(PowerUp::Kick) => pb::Cell::PowerKick,
        Cell::PowerUp(PowerUp::Remote) => pb::Cell::PowerRemote,
        Cell::Closed => pb::Cell::Closed,
    }
}

/// A live game's line in a `ListGames` reply, from its state.
pub fn live_game(state: &pb::GameState) -> pb::LiveGame {
    let seated = || state.players.iter().filter(|p| p.seated);
    pb::LiveGame {
        game_id: state.game_id,
        map: state.map.clone(),
        phase: state.phase,
        seated: state.seated,
        alive: seated().filter(|p| p.alive).count() as u32,
        names: seated().map(|p| p.name.clone()).collect(),
        tick: state.tick,
        round_ticks_left: state.round_ticks_left,
        sudden_death: state.sudden_death,
        tick_ms: state.tick_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use borbaman_game::{CELLS, ROUND_TICKS, index};

    #[test]
    fn proto_carries_the_board_players_and_hides_power_ups() {
        let mut g = GameState::new(3, 0);
        for t in 0..4 {
            g.seat_player(t);
        }
        g.apply(0, Action::Bomb, 5);
        let names = ["a", "b", "c", "d"].map(String::from);
        let pb = g.to_proto(9, 17, &names, [true, false, true, true]);
        assert_eq!((pb.game_id, pb.version, pb.tick), (9, 17, 5));
        assert_eq!(pb.cells.len(), CELLS);
        assert_eq!(pb.cells[index(0, 0)], pb::Cell::Pillar as u8);
        assert_eq!(pb.cells[index(1, 1)], pb::Cell::Floor as u8);
        assert!(pb.cells.iter().all(|&c| c <= pb::Cell::Soft as u8));
        assert_eq!(pb.players.len(), 4);
        assert_eq!(pb.players[1].name, "b");
        assert!(!pb.players[1].connected && pb.players[1].alive);
        assert_eq!(pb.players[0].bombs_placed, 1);
        assert_eq!(pb.bombs.len(), 1);
        assert_eq!(pb.bombs[0].fuse_ticks, 50);
        assert_eq!(pb.phase, pb::Phase::Playing as i32);
        assert_eq!(pb.seated, 4);
        assert_eq!(pb.round_ticks_left, ROUND_TICKS - 2);
        assert!(pb.winner.is_none() && !pb.draw && !pb.sudden_death);
    }

    /// The kick and the remote reach the client: held power-ups, their
    /// cells on the board, a sliding bomb's way and a remote bomb's fuse.
    #[test]
    fn proto_carries_the_kick_and_the_remote() {
        use borbaman_game::{Bomb, Dir, PowerUp, REMOTE_FUSE_TICKS, Seen};
        let mut g = GameState::new(3, 0);
        for t in 0..4 {
            g.seat_player(t);
        }
        let mut players = *g.players();
        players[0].kick = true;
        players[1].remote = true;
        let mut cells = *g.cells();
        cells[index(1, 2)] = Cell::PowerUp(PowerUp::Kick);
        cells[index(2, 1)] = Cell::PowerUp(PowerUp::Remote);
        let seen = Seen {
            arena: g.arena(),
            tick: g.tick(),
            phase: g.phase(),
            round_ticks_left: g.round_ticks_left(),
            sudden_death: false,
            cells,
            players,
            bombs: vec![
                Bomb {
                    x: 13,
                    y: 1,
                    owner: 1,
                    range: 2,
                    fuse_ticks: REMOTE_FUSE_TICKS,
                    slide: None,
                },
                Bomb {
                    x: 1,
                    y: 11,
                    owner: 2,
                    range: 2,
                    fuse_ticks: 30,
                    slide: Some(Dir::Left),
                },
            ],
            blasts: vec![],
        };
        let names = ["a", "b", "c", "d"].map(String::from);
        let pb = GameState::from_seen(&seen).to_proto(1, 1, &names, [true; 4]);
        assert!(pb.players[0].kick && !pb.players[0].remote);
        assert!(pb.players[1].remote && !pb.players[1].kick);
        assert_eq!(pb.cells[index(1, 2)], pb::Cell::PowerKick as u8);
        assert_eq!(pb.cells[index(2, 1)], pb::Cell::PowerRemote as u8);
        let remote = pb.bombs.iter().find(|b| b.owner == 1).unwrap();
        assert_eq!(remote.fuse_ticks, u32::from(REMOTE_FUSE_TICKS));
        assert_eq!(remote.slide(), pb::Action::Unspecified);
        let kicked = pb.bombs.iter().find(|b| b.owner == 2).unwrap();
        assert_eq!(kicked.slide(), pb::Action::Left);
        assert_eq!(
            action_from_proto(pb::Action::Detonate as i32),
            Some(Action::Detonate)
        );
    }

    #[test]
    fn logged_changes_cross_the_wire_unchanged() {
        use borbaman_game::Dir;
        let events = [
            Event::Seated { seat: 2, tick: 7 },
            Event::SeatFreed { seat: 1 },
            Event::Acted {
                seat: 3,
                action: Action::Move(Dir::Left),
                tick: 90,
            },
            Event::Acted {
                seat: 0,
                action: Action::Idle,
                tick: 91,
            },
            Event::Left { seat: 1, tick: 400 },
        ];
        for event in events {
            assert_eq!(event_from_wire(&replay_event(&event)), Some(event));
        }
        let unknown = pb::ReplayEvent {
            kind: 3,
            seat: 0,
            tick: 1,
            action: 7,
        };
        assert_eq!(event_from_wire(&unknown), None, "a leave is not an action");
    }
}
