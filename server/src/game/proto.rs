//! The game as the wire sees it: [`GameState`] to `pb::GameState`. Hidden
//! power-ups stay hidden: a soft block shows as a soft block.

use borbaman_proto::pb;

use super::map::{CELLS, Cell, PowerUp};
use super::{Ending, GameState, HEIGHT, Phase, SEATS, TICK_MS, WIDTH};

impl GameState {
    /// The wire message for clients. `version` is the stored row version;
    /// `names` and `connected` come from the sessions, which the core does
    /// not know about.
    pub fn to_proto(
        &self,
        game_id: u64,
        version: u64,
        names: &[String; 4],
        connected: [bool; 4],
    ) -> pb::GameState {
        self.to_proto_with_names(game_id, version, names.clone(), connected)
    }

    /// [`GameState::to_proto`] taking the names by value, so a caller that
    /// owns them (the server, once per call) moves them instead of copying.
    pub fn to_proto_with_names(
        &self,
        game_id: u64,
        version: u64,
        names: [String; SEATS],
        connected: [bool; SEATS],
    ) -> pb::GameState {
        let cells = (0..CELLS).map(|i| wire_cell(self.cells[i]) as u8).collect();
        // One pass over the bombs for every seat's count and the total.
        let mut placed = [0u32; SEATS];
        for b in self.bombs.iter().flatten() {
            placed[usize::from(b.owner) % SEATS] += 1;
        }
        let players = names
            .into_iter()
            .enumerate()
            .map(|(seat, name)| {
                let p = &self.players[seat];
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
        }));
        let mut blasts = Vec::with_capacity(self.burn.iter().filter(|&&t| t > 0).count());
        blasts.extend(self.blasts().map(|b| pb::Blast {
            x: b.x as u32,
            y: b.y as u32,
            ticks_left: b.ticks_left as u32,
        }));
        let phase = match self.phase {
            Phase::Waiting => pb::Phase::Waiting,
            Phase::Playing => pb::Phase::Playing,
            Phase::Finished => pb::Phase::Finished,
        };
        pb::GameState {
            game_id,
            version,
            width: WIDTH as u32,
            height: HEIGHT as u32,
            cells,
            players,
            bombs,
            blasts,
            tick: self.tick,
            tick_ms: TICK_MS,
            phase: phase as i32,
            winner: match self.ending {
                Some(Ending::Winner(seat)) => Some(seat as u32),
                _ => None,
            },
            draw: self.ending == Some(Ending::Draw),
            round_ticks_left: self.round_ticks_left(),
            sudden_death: self.sudden_death(),
            seated: self.seated() as u32,
        }
    }
}

fn wire_cell(cell: Cell) -> pb::Cell {
    match cell {
        Cell::Floor => pb::Cell::Floor,
        Cell::Pillar => pb::Cell::Pillar,
        Cell::Soft { .. } => pb::Cell::Soft,
        Cell::PowerUp(PowerUp::Bomb) => pb::Cell::PowerBomb,
        Cell::PowerUp(PowerUp::Range) => pb::Cell::PowerRange,
        Cell::PowerUp(PowerUp::Speed) => pb::Cell::PowerSpeed,
        Cell::Closed => pb::Cell::Closed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::{Action, map};

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
        assert_eq!(pb.cells[map::index(0, 0)], pb::Cell::Pillar as u8);
        assert_eq!(pb.cells[map::index(1, 1)], pb::Cell::Floor as u8);
        assert!(pb.cells.iter().all(|&c| c <= pb::Cell::Soft as u8));
        assert_eq!(pb.players.len(), 4);
        assert_eq!(pb.players[1].name, "b");
        assert!(!pb.players[1].connected && pb.players[1].alive);
        assert_eq!(pb.players[0].bombs_placed, 1);
        assert_eq!(pb.bombs.len(), 1);
        assert_eq!(pb.bombs[0].fuse_ticks, 50);
        assert_eq!(pb.phase, pb::Phase::Playing as i32);
        assert_eq!(pb.seated, 4);
        assert_eq!(pb.round_ticks_left, crate::game::ROUND_TICKS - 2);
        assert!(pb.winner.is_none() && !pb.draw && !pb.sudden_death);
    }
}
