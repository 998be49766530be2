//! A game rebuilt from what a client is shown of it, for prediction.
//!
//! A client is never sent a game's seed or what its soft blocks hide, so
//! it cannot hold the server's state; but the rules that move a player, plant
//! a bomb and run the clock need only what it is shown. [`GameState::from_seen`]
//! builds a state from that, on which a client applies its own inputs ahead
//! of the server's answer, with the same rules the server will apply them
//! with. Such a state is never stored nor sent: the soft blocks hide nothing
//! in it, buffered moves and kills are not known, and the round timer runs
//! from the tick it was seen at.

use super::map::{self, CELLS, Cell};
use super::{Arena, Blast, Bomb, BombSlot, GameState, Phase, Player, SEATS, Tick};

/// What a client is shown of a game.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub arena: Arena,
    pub tick: Tick,
    pub phase: Phase,
    pub round_ticks_left: u32,
    pub sudden_death: bool,
    /// Row-major, as [`GameState::cells`] (soft blocks hiding nothing).
    pub cells: [Cell; CELLS],
    pub players: [Player; SEATS],
    pub bombs: Vec<Bomb>,
    pub blasts: Vec<Blast>,
}

impl GameState {
    /// A state that plays on from `seen` as the server's would, as far as
    /// what a client is shown decides it (see the module doc).
    pub fn from_seen(seen: &Seen) -> GameState {
        let closed = seen.cells.iter().filter(|c| **c == Cell::Closed).count();
        let (start_tick, round_ticks) = if seen.sudden_death {
            (seen.tick.saturating_sub(1), 1)
        } else {
            (
                seen.tick,
                seen.round_ticks_left.clamp(1, u32::from(u16::MAX)) as u16,
            )
        };
        let mut bombs = [None; CELLS];
        for b in &seen.bombs {
            if b.x < super::WIDTH && b.y < super::HEIGHT {
                bombs[map::index(b.x, b.y)] = Some(BombSlot {
                    owner: b.owner,
                    range: b.range,
                    fuse_ticks: b.fuse_ticks.max(1),
                    slide: b.slide,
                });
            }
        }
        let mut burn = [0; CELLS];
        for b in &seen.blasts {
            if b.x < super::WIDTH && b.y < super::HEIGHT {
                burn[map::index(b.x, b.y)] = b.ticks_left;
            }
        }
        GameState {
            seed: 0,
            tick: seen.tick,
            start_tick,
            round_ticks,
            arena: seen.arena,
            powers: super::PowerSet::Full,
            phase: seen.phase,
            ending: None,
            closed: closed.min(usize::from(u8::MAX)) as u8,
            players: seen.players,
            cells: seen.cells,
            bombs,
            burn,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Action, Dir};

    /// What a client is shown of `g`, soft blocks hiding nothing.
    fn seen(g: &GameState) -> Seen {
        Seen {
            arena: g.arena(),
            tick: g.tick(),
            phase: g.phase(),
            round_ticks_left: g.round_ticks_left(),
            sudden_death: g.sudden_death(),
            cells: g.cells().map(|c| match c {
                Cell::Soft { .. } => Cell::Soft { hidden: None },
                other => other,
            }),
            players: *g.players(),
            bombs: g.bombs().collect(),
            blasts: g.blasts().collect(),
        }
    }

    /// Moves and bombs applied on the rebuilt state put the player where
    /// the server's own state puts it.
    #[test]
    fn a_rebuilt_game_moves_its_players_as_the_real_one() {
        let mut real = GameState::new(7, 0);
        for t in 0..4 {
            real.seat_player(t);
        }
        real.advance(10);
        let mut rebuilt = GameState::from_seen(&seen(&real));
        let script = [
            (11, Action::Bomb),
            (11, Action::Move(Dir::Right)),
            (12, Action::Move(Dir::Left)),
            (16, Action::Move(Dir::Down)),
            (40, Action::Move(Dir::Up)),
        ];
        for (tick, action) in script {
            let outcome = real.apply(0, action, tick);
            assert_eq!(
                rebuilt.apply(0, action, tick),
                outcome,
                "{action:?} at {tick}"
            );
        }
        let (p, q) = (real.player(0).unwrap(), rebuilt.player(0).unwrap());
        assert_eq!((p.x, p.y, p.alive), (q.x, q.y, q.alive));
        assert_eq!(real.bombs_placed(0), rebuilt.bombs_placed(0));
    }
}
