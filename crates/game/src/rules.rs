//! The rules in motion: the tick loop (in the order documented in the
//! module above) and the effect of each action.

use super::map::{self, CELLS, Cell, PowerUp};
use super::{
    Action, BLAST_TICKS, BombSlot, CLOSE_EVERY_TICKS, Dir, Ending, FUSE_TICKS, GameState,
    MAX_BOMBS, MAX_RANGE, MAX_SPEED, Outcome, Phase, REMOTE_FUSE_TICKS, SEATS, Tick,
};

/// "No one" in the per-tick table of who lit each cell.
const NO_OWNER: u8 = u8::MAX;

impl GameState {
    /// Steps a running game tick by tick up to `to_tick`; waiting and
    /// finished games jump there at once.
    pub(super) fn run_ticks(&mut self, to_tick: Tick) {
        while self.tick < to_tick {
            if self.phase != Phase::Playing {
                self.tick = to_tick;
                return;
            }
            self.tick += 1;
            self.step();
        }
    }

    /// One tick, in the documented order.
    fn step(&mut self) {
        self.age_fires();
        self.make_buffered_moves();
        self.slide_bombs();
        let lit_by = self.explode_bombs();
        self.burn_players(&lit_by);
        self.close_next_cell();
        self.check_ending();
    }

    /// Step 1: fires age; those that burned their 10 ticks go out.
    fn age_fires(&mut self) {
        for t in &mut self.burn {
            *t = t.saturating_sub(1);
        }
    }

    /// Step 2: cooldowns count down; buffered moves due now are made.
    fn make_buffered_moves(&mut self) {
        for seat in 0..SEATS {
            let p = &mut self.players[seat];
            if !p.alive || p.move_cooldown == 0 {
                continue;
            }
            p.move_cooldown -= 1;
            if p.move_cooldown > 0 {
                continue;
            }
            if let Some(dir) = p.buffered_move.take() {
                self.try_move(seat, dir);
            }
        }
    }

    /// Step 3: kicked bombs slide one cell, in row-major order of where
    /// they were, each onto floor with no bomb and no live player; one that
    /// cannot stops for good. One that slides into fire goes off this tick.
    fn slide_bombs(&mut self) {
        let mut sliding = [0u8; CELLS];
        let mut len = 0;
        for (i, b) in self.bombs.iter().enumerate() {
            if b.is_some_and(|b| b.slide.is_some()) {
                sliding[len] = i as u8;
                len += 1;
            }
        }
        for &from in &sliding[..len] {
            let from = from as usize;
            let Some(mut bomb) = self.bombs[from] else {
                continue;
            };
            let Some(dir) = bomb.slide else { continue };
            let (x, y) = map::coords(from);
            let Some(to) = self.slide_target(x, y, dir) else {
                bomb.slide = None;
                self.bombs[from] = Some(bomb);
                continue;
            };
            if self.burn[to] > 0 {
                bomb.fuse_ticks = 1;
            }
            self.bombs[from] = None;
            self.bombs[to] = Some(bomb);
        }
    }

    /// The cell a bomb at (x, y) slides into going `dir`, if nothing stops
    /// it there: a wall, a block, a power-up, another bomb or a live player.
    fn slide_target(&self, x: u8, y: u8, dir: Dir) -> Option<usize> {
        let (x, y) = map::step(x, y, dir)?;
        let i = map::index(x, y);
        let taken = self.cells[i] != Cell::Floor
            || self.bombs[i].is_some()
            || self.players.iter().any(|p| p.alive && (p.x, p.y) == (x, y));
        (!taken).then_some(i)
    }

    /// Step 4: fuses burn down; due bombs explode with everything they set
    /// off. Returns, per cell, the owner of the bomb whose fire reached it
    /// first this tick (for kill credit), or `NO_OWNER`.
    fn explode_bombs(&mut self) -> [u8; CELLS] {
        let mut lit_by = [NO_OWNER; CELLS];
        // Exploding bombs, in the order they go off: due bombs row-major,
        // then each chain in the order its fire reaches them.
        let mut queue = [0u8; CELLS];
        let mut queued = [false; CELLS];
        let mut len = 0;
        for (i, bomb) in self.bombs.iter_mut().enumerate() {
            if let Some(b) = bomb {
                b.fuse_ticks = b.fuse_ticks.saturating_sub(1);
                if b.fuse_ticks == 0 {
                    queue[len] = i as u8;
                    queued[i] = true;
                    len += 1;
                }
            }
        }
        if len == 0 {
            return lit_by;
        }

        // Trace every arm on the board as it was before this step, so the
        // result does not depend on which bomb goes first.
        let mut head = 0;
        while head < len {
            let at = queue[head] as usize;
            head += 1;
            let Some(bomb) = self.bombs[at] else { continue };
            light(&mut lit_by, at, bomb.owner);
            let (bx, by) = map::coords(at);
            for dir in Dir::ALL {
                let (mut x, mut y) = (bx, by);
                for _ in 0..bomb.range {
                    let Some(next) = map::step(x, y, dir) else {
                        break;
                    };
                    (x, y) = next;
                    let i = map::index(x, y);
                    match self.cells[i] {
                        Cell::Pillar | Cell::Closed => break,
                        Cell::Soft { .. } => {
                            light(&mut lit_by, i, bomb.owner);
                            break;
                        }
                        Cell::Floor | Cell::PowerUp(_) => {
                            light(&mut lit_by, i, bomb.owner);
                            if self.bombs[i].is_some() {
                                if !queued[i] {
                                    queued[i] = true;
                                    queue[len] = i as u8;
                                    len += 1;
                                }
                                break;
                            }
                        }
                    }
                }
            }
        }

        for i in 0..CELLS {
            if queued[i] {
                self.bombs[i] = None;
            }
            if lit_by[i] == NO_OWNER {
                continue;
            }
            self.burn[i] = BLAST_TICKS;
            self.cells[i] = match self.cells[i] {
                // Uncovered now: survives the fire that uncovered it.
                Cell::Soft { hidden: Some(p) } => Cell::PowerUp(p),
                // Exposed before: burns.
                Cell::Soft { hidden: None } | Cell::PowerUp(_) => Cell::Floor,
                other => other,
            };
        }
        lit_by
    }

    /// Step 5: every player in a burning cell dies; a kill counts for the
    /// owner of the fire lit there this tick, unless it is the victim.
    fn burn_players(&mut self, lit_by: &[u8; CELLS]) {
        for seat in 0..SEATS {
            let p = self.players[seat];
            let at = map::index(p.x, p.y);
            if !p.alive || self.burn[at] == 0 {
                continue;
            }
            self.kill(seat as u8);
            let killer = lit_by[at];
            if killer != NO_OWNER && killer as usize != seat {
                let k = &mut self.players[killer as usize].kills;
                *k = (*k + 1).min(SEATS as u8 - 1);
            }
        }
    }

    /// Step 6: in sudden death, every `CLOSE_EVERY_TICKS` ticks the next
    /// spiral cell closes, crushing whatever is there.
    fn close_next_cell(&mut self) {
        let Some(since) = (self.tick as u64).checked_sub(self.sudden_death_tick()) else {
            return;
        };
        let layout = self.arena.layout();
        if since % CLOSE_EVERY_TICKS as u64 != 0 || self.closed as usize >= layout.open_cells() {
            return;
        }
        let i = layout.spiral()[self.closed as usize] as usize;
        self.closed += 1;
        self.cells[i] = Cell::Closed;
        self.bombs[i] = None;
        self.burn[i] = 0;
        for seat in 0..SEATS {
            let p = self.players[seat];
            if p.alive && map::index(p.x, p.y) == i {
                self.kill(seat as u8);
            }
        }
    }

    /// Step 7 (and after any death outside the tick loop): the game ends
    /// when at most one player is alive.
    pub(super) fn check_ending(&mut self) {
        if self.phase != Phase::Playing {
            return;
        }
        let mut alive = (0..SEATS as u8).filter(|&s| self.players[s as usize].alive);
        let ending = match (alive.next(), alive.next()) {
            (None, _) => Ending::Draw,
            (Some(seat), None) => Ending::Winner(seat),
            _ => return,
        };
        self.phase = Phase::Finished;
        self.ending = Some(ending);
    }

    /// A player dies; its remote-controlled bombs fall back to the
    /// normal fuse, since nobody is left to set them off.
    pub(super) fn kill(&mut self, seat: u8) {
        let p = &mut self.players[seat as usize];
        p.alive = false;
        p.move_cooldown = 0;
        p.buffered_move = None;
        for b in self.bombs.iter_mut().flatten() {
            if b.owner == seat {
                b.fuse_ticks = b.fuse_ticks.min(FUSE_TICKS);
            }
        }
    }

    /// Applies one action at the current tick.
    pub(super) fn act(&mut self, seat: u8, action: Action) -> Outcome {
        if self.phase != Phase::Playing || !self.is_alive(seat) {
            return Outcome::NoEffect;
        }
        let seat = seat as usize;
        match action {
            Action::Idle => Outcome::NoEffect,
            Action::Bomb => self.plant_bomb(seat),
            Action::Detonate => self.detonate(seat),
            Action::Move(dir) => {
                let p = self.players[seat];
                if p.move_cooldown == 0 {
                    if self.try_move(seat, dir) {
                        self.check_ending();
                        return Outcome::Applied;
                    }
                    return Outcome::NoEffect;
                }
                if self.can_enter(p.x, p.y, dir).is_some() || self.kickable(seat, dir).is_some() {
                    self.players[seat].buffered_move = Some(dir);
                    Outcome::Queued
                } else {
                    self.players[seat].buffered_move = None;
                    Outcome::NoEffect
                }
            }
        }
    }

    /// The cell one step from (x, y) in `dir`, if a player may enter it.
    fn can_enter(&self, x: u8, y: u8, dir: Dir) -> Option<(u8, u8)> {
        let (x, y) = map::step(x, y, dir)?;
        let i = map::index(x, y);
        let open = matches!(self.cells[i], Cell::Floor | Cell::PowerUp(_));
        (open && self.bombs[i].is_none()).then_some((x, y))
    }

    /// The cell of the bomb `seat` would kick by moving `dir`: it holds the
    /// kick, the next cell holds a bomb, and that bomb can slide on.
    fn kickable(&self, seat: usize, dir: Dir) -> Option<usize> {
        let p = self.players[seat];
        if !p.kick {
            return None;
        }
        let (x, y) = map::step(p.x, p.y, dir)?;
        let at = map::index(x, y);
        self.bombs[at]?;
        self.slide_target(x, y, dir)?;
        Some(at)
    }

    /// Moves `seat` one cell if it may: starts its cooldown, burns it in
    /// fire, or hands it a power-up. With the kick, walking into a bomb
    /// that can slide sends it sliding instead, and the player stays and
    /// waits out its cooldown. Returns whether it moved or kicked.
    fn try_move(&mut self, seat: usize, dir: Dir) -> bool {
        let p = self.players[seat];
        if let Some(at) = self.kickable(seat, dir) {
            if let Some(b) = &mut self.bombs[at] {
                b.slide = Some(dir);
            }
            let p = &mut self.players[seat];
            p.move_cooldown = p.move_cooldown_ticks();
            return true;
        }
        let Some((x, y)) = self.can_enter(p.x, p.y, dir) else {
            self.players[seat].buffered_move = None;
            return false;
        };
        let i = map::index(x, y);
        let p = &mut self.players[seat];
        p.x = x;
        p.y = y;
        if self.burn[i] > 0 {
            self.kill(seat as u8);
            return true;
        }
        if let Cell::PowerUp(power) = self.cells[i] {
            self.cells[i] = Cell::Floor;
            match power {
                PowerUp::Bomb => p.bombs_max = (p.bombs_max + 1).min(MAX_BOMBS),
                PowerUp::Range => p.range = (p.range + 1).min(MAX_RANGE),
                PowerUp::Speed => p.speed = (p.speed + 1).min(MAX_SPEED),
                PowerUp::Kick => p.kick = true,
                PowerUp::Remote => p.remote = true,
            }
        }
        // Taken after the power-up, so a speed power-up counts at once.
        p.move_cooldown = p.move_cooldown_ticks();
        true
    }

    fn plant_bomb(&mut self, seat: usize) -> Outcome {
        let p = self.players[seat];
        let i = map::index(p.x, p.y);
        if self.bombs[i].is_some() || self.bombs_placed(seat as u8) >= p.bombs_max {
            return Outcome::NoEffect;
        }
        self.bombs[i] = Some(BombSlot {
            owner: seat as u8,
            range: p.range,
            fuse_ticks: if p.remote {
                REMOTE_FUSE_TICKS
            } else {
                FUSE_TICKS
            },
            slide: None,
        });
        Outcome::Applied
    }

    /// With the remote control, every bomb of `seat` goes off on the next
    /// tick; without it, or with no bomb that is not already due, nothing.
    fn detonate(&mut self, seat: usize) -> Outcome {
        if !self.players[seat].remote {
            return Outcome::NoEffect;
        }
        let mut set_off = false;
        for b in self.bombs.iter_mut().flatten() {
            if b.owner as usize == seat && b.fuse_ticks > 1 {
                b.fuse_ticks = 1;
                set_off = true;
            }
        }
        if set_off {
            Outcome::Applied
        } else {
            Outcome::NoEffect
        }
    }
}

/// Marks cell `i` as lit this tick, keeping the first owner.
fn light(lit_by: &mut [u8; CELLS], i: usize, owner: u8) {
    if lit_by[i] == NO_OWNER {
        lit_by[i] = owner;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Arena, BASE_MOVE_COOLDOWN_TICKS, DEFAULT_ROUND_TICKS, ROUND_TICKS, START_BOMBS};

    /// A started game (tick 0) with every soft block cleared.
    fn open_arena() -> GameState {
        let mut g = GameState::new(1, 0);
        for _ in 0..SEATS {
            g.seat_player(0);
        }
        assert_eq!(g.phase, Phase::Playing);
        for c in &mut g.cells {
            if let Cell::Soft { .. } = c {
                *c = Cell::Floor;
            }
        }
        g
    }

    fn put(g: &mut GameState, seat: usize, x: u8, y: u8) {
        g.players[seat].x = x;
        g.players[seat].y = y;
    }

    fn bomb(g: &mut GameState, x: u8, y: u8, owner: u8, range: u8, fuse_ticks: u8) {
        g.bombs[map::index(x, y)] = Some(BombSlot {
            owner,
            range,
            fuse_ticks,
            slide: None,
        });
    }

    fn set(g: &mut GameState, x: u8, y: u8, cell: Cell) {
        g.cells[map::index(x, y)] = cell;
    }

    fn pos(g: &GameState, seat: u8) -> (u8, u8) {
        let p = g.player(seat).unwrap();
        (p.x, p.y)
    }

    /// Moves the four players out of the way, to the far right column.
    fn park_others(g: &mut GameState, except: &[usize]) {
        for seat in 0..SEATS {
            if !except.contains(&seat) {
                put(g, seat, 13, 3 + 2 * seat as u8);
            }
        }
    }

    #[test]
    fn a_bomb_explodes_after_its_fuse_and_burns_for_half_a_second() {
        let mut g = open_arena();
        park_others(&mut g, &[]);
        put(&mut g, 0, 5, 5);
        assert_eq!(g.apply(0, Action::Bomb, 10), Outcome::Applied);
        g.apply(0, Action::Move(Dir::Right), 10);
        g.apply(0, Action::Move(Dir::Right), 14);
        g.apply(0, Action::Move(Dir::Up), 18);
        g.advance(59);
        assert_eq!(g.bombs().count(), 1);
        assert!(!g.is_burning(5, 5));
        g.advance(60);
        assert_eq!(g.bombs().count(), 0);
        assert!(g.is_burning(5, 5) && g.is_burning(7, 5) && g.is_burning(5, 3));
        g.advance(69);
        assert!(g.is_burning(5, 5));
        g.advance(70);
        assert_eq!(g.blasts().count(), 0);
        assert!(g.is_alive(0));
        g.validate().unwrap();
    }

    #[test]
    fn blast_stops_at_a_pillar() {
        let mut g = open_arena();
        park_others(&mut g, &[]);
        bomb(&mut g, 2, 1, 0, 3, 1);
        g.advance(1);
        // Down from (2, 1) the pillar at (2, 2) stops the fire at once.
        assert!(!g.is_burning(2, 2) && !g.is_burning(2, 3));
        assert_eq!(g.cell(2, 2), Cell::Pillar);
        // Along the open row it runs its full range and no further.
        assert!(g.is_burning(1, 1) && g.is_burning(3, 1) && g.is_burning(5, 1));
        assert!(!g.is_burning(6, 1) && !g.is_burning(0, 1));
    }

    #[test]
    fn blast_destroys_only_the_first_soft_block() {
        let mut g = open_arena();
        park_others(&mut g, &[]);
        set(&mut g, 5, 1, Cell::Soft { hidden: None });
        set(&mut g, 6, 1, Cell::Soft { hidden: None });
        bomb(&mut g, 3, 1, 0, 5, 1);
        g.advance(1);
        assert_eq!(g.cell(5, 1), Cell::Floor);
        assert!(g.is_burning(5, 1));
        assert_eq!(g.cell(6, 1), Cell::Soft { hidden: None });
        assert!(!g.is_burning(6, 1) && !g.is_burning(7, 1));
    }

    #[test]
    fn blasts_are_traced_on_the_board_as_it_was_before_the_tick() {
        let mut g = open_arena();
        park_others(&mut g, &[]);
        // Two arms meet the soft block at (5, 3) from the left and from
        // below, in the same tick: both stop there, whichever goes first.
        set(&mut g, 5, 3, Cell::Soft { hidden: None });
        bomb(&mut g, 3, 3, 0, 2, 1);
        bomb(&mut g, 5, 5, 1, 4, 1);
        g.advance(1);
        assert_eq!(g.cell(5, 3), Cell::Floor);
        assert!(g.is_burning(5, 3) && g.is_burning(5, 4));
        assert!(!g.is_burning(5, 2) && !g.is_burning(5, 1));
    }

    #[test]
    fn chain_reaction_sets_off_bombs_in_the_same_tick() {
        let mut g = open_arena();
        park_others(&mut g, &[]);
        bomb(&mut g, 1, 3, 0, 2, 1);
        bomb(&mut g, 3, 3, 1, 2, FUSE_TICKS);
        bomb(&mut g, 5, 3, 2, 2, FUSE_TICKS);
        g.advance(1);
        assert_eq!(g.bombs().count(), 0);
        assert!(
            g.is_burning(7, 3),
            "the third bomb's fire reaches its full range"
        );
        assert!(!g.is_burning(8, 3));
    }

    #[test]
    fn blast_kills_players_and_credits_the_bomb_owner() {
        let mut g = open_arena();
        park_others(&mut g, &[0, 1, 2]);
        put(&mut g, 0, 1, 5);
        put(&mut g, 1, 3, 5);
        put(&mut g, 2, 5, 5);
        bomb(&mut g, 3, 5, 0, 2, 1);
        g.advance(1);
        assert!(!g.is_alive(0) && !g.is_alive(1) && !g.is_alive(2));
        assert!(g.is_alive(3));
        // Two others killed; the owner's own death earns nothing.
        assert_eq!(g.player(0).unwrap().kills, 2);
        assert_eq!(g.ending(), Some(Ending::Winner(3)));
        assert_eq!(g.phase(), Phase::Finished);
        g.validate().unwrap();
    }

    #[test]
    fn walking_into_fire_kills_with_no_credit() {
        let mut g = open_arena();
        park_others(&mut g, &[0, 1]);
        put(&mut g, 0, 1, 7);
        put(&mut g, 1, 5, 7);
        bomb(&mut g, 1, 9, 0, 1, 1);
        g.advance(1);
        assert!(g.is_burning(1, 8) && g.is_alive(0));
        assert_eq!(g.apply(0, Action::Move(Dir::Down), 2), Outcome::Applied);
        assert!(!g.is_alive(0));
        assert_eq!(g.player(1).unwrap().kills, 0);
        assert_eq!(g.player(0).unwrap().kills, 0);
    }

    #[test]
    fn last_players_dying_in_the_same_tick_draw() {
        let mut g = open_arena();
        park_others(&mut g, &[0, 1]);
        g.forfeit(2, 0);
        g.forfeit(3, 0);
        assert_eq!(g.phase(), Phase::Playing);
        put(&mut g, 0, 1, 5);
        put(&mut g, 1, 3, 5);
        bomb(&mut g, 1, 5, 0, 2, 1);
        g.advance(1);
        assert_eq!(g.ending(), Some(Ending::Draw));
        assert_eq!(g.phase(), Phase::Finished);
        g.validate().unwrap();
    }

    #[test]
    fn last_player_standing_wins_and_the_game_freezes() {
        let mut g = open_arena();
        park_others(&mut g, &[]);
        g.forfeit(0, 5);
        g.forfeit(1, 6);
        assert_eq!(g.phase(), Phase::Playing);
        g.forfeit(3, 7);
        assert_eq!(g.ending(), Some(Ending::Winner(2)));
        assert_eq!(g.apply(2, Action::Bomb, 8), Outcome::NoEffect);
        let frozen = g.clone();
        g.advance(u32::MAX);
        assert_eq!(g.tick(), u32::MAX);
        assert_eq!(g.ending(), frozen.ending());
        g.validate().unwrap();
    }

    #[test]
    fn power_ups_are_taken_by_walking_onto_them() {
        let mut g = open_arena();
        park_others(&mut g, &[0]);
        put(&mut g, 0, 1, 5);
        set(&mut g, 1, 6, Cell::PowerUp(PowerUp::Bomb));
        set(&mut g, 1, 7, Cell::PowerUp(PowerUp::Range));
        set(&mut g, 1, 8, Cell::PowerUp(PowerUp::Speed));
        let before = *g.player(0).unwrap();
        g.apply(0, Action::Move(Dir::Down), 0);
        g.apply(0, Action::Move(Dir::Down), 4);
        g.apply(0, Action::Move(Dir::Down), 8);
        let p = *g.player(0).unwrap();
        assert_eq!(p.bombs_max, before.bombs_max + 1);
        assert_eq!(p.range, before.range + 1);
        assert_eq!(p.speed, 1);
        assert_eq!(p.move_cooldown, 3, "speed shortens the cooldown");
        assert_eq!(g.cell(1, 6), Cell::Floor);
        assert_eq!(g.cell(1, 8), Cell::Floor);
    }

    #[test]
    fn power_ups_stop_at_their_caps() {
        let mut g = open_arena();
        park_others(&mut g, &[0]);
        put(&mut g, 0, 1, 5);
        g.players[0].speed = MAX_SPEED;
        g.players[0].range = MAX_RANGE;
        set(&mut g, 1, 6, Cell::PowerUp(PowerUp::Speed));
        set(&mut g, 1, 7, Cell::PowerUp(PowerUp::Range));
        g.apply(0, Action::Move(Dir::Down), 0);
        g.apply(0, Action::Move(Dir::Down), 2);
        let p = g.player(0).unwrap();
        assert_eq!(
            (p.speed, p.range, p.move_cooldown),
            (MAX_SPEED, MAX_RANGE, 2)
        );
        assert_eq!(g.cell(1, 7), Cell::Floor, "used up with no effect");
    }

    #[test]
    fn fire_burns_exposed_power_ups_but_not_the_ones_it_uncovers() {
        let mut g = open_arena();
        park_others(&mut g, &[]);
        set(&mut g, 3, 1, Cell::PowerUp(PowerUp::Bomb));
        set(
            &mut g,
            1,
            3,
            Cell::Soft {
                hidden: Some(PowerUp::Range),
            },
        );
        bomb(&mut g, 1, 1, 0, 2, 1);
        g.advance(1);
        assert_eq!(g.cell(3, 1), Cell::Floor, "exposed power-up burned");
        assert_eq!(
            g.cell(1, 3),
            Cell::PowerUp(PowerUp::Range),
            "uncovered one survives"
        );
        // A later blast burns the uncovered one.
        g.advance(20);
        bomb(&mut g, 1, 1, 0, 2, 1);
        g.advance(21);
        assert_eq!(g.cell(1, 3), Cell::Floor);
    }

    #[test]
    fn sudden_death_closes_the_arena_and_kills() {
        let mut g = open_arena();
        let sd = ROUND_TICKS;
        // Seat 0 waits in the first spiral cell, seat 1 next to it.
        put(&mut g, 0, 1, 1);
        put(&mut g, 1, 3, 1);
        g.advance(sd - 1);
        assert!(!g.sudden_death() && g.is_alive(0));
        assert_eq!(g.round_ticks_left(), 1);
        g.advance(sd);
        assert!(g.sudden_death());
        assert_eq!(g.cell(1, 1), Cell::Closed);
        assert!(!g.is_alive(0));
        assert_eq!(g.cell(2, 1), Cell::Floor);
        g.advance(sd + CLOSE_EVERY_TICKS);
        assert_eq!(g.cell(2, 1), Cell::Closed);
        assert!(g.is_alive(1));
        // Walking into a closed cell is blocked.
        assert_eq!(
            g.apply(1, Action::Move(Dir::Left), sd + 3),
            Outcome::NoEffect
        );
        g.advance(sd + 2 * CLOSE_EVERY_TICKS);
        assert!(!g.is_alive(1));
        g.validate().unwrap();
        // Everyone dies in the end: the game always finishes.
        g.advance(u32::MAX);
        assert_eq!(g.phase(), Phase::Finished);
        assert!(g.ending().is_some());
        assert!(g.tick() == u32::MAX);
    }

    #[test]
    fn a_flood_of_moves_cannot_beat_the_cooldown() {
        let mut g = open_arena();
        park_others(&mut g, &[0]);
        put(&mut g, 0, 1, 1);
        let mut outcomes = Vec::new();
        for t in 0..=11 {
            for _ in 0..10 {
                outcomes.push(g.apply(0, Action::Move(Dir::Right), t));
            }
        }
        // Moves at ticks 0, 4 (buffered from 1) and 8 (buffered): 3 cells.
        assert_eq!(pos(&g, 0), (4, 1));
        assert_eq!(outcomes[0], Outcome::Applied);
        assert!(outcomes[1..].iter().all(|&o| o == Outcome::Queued));
        g.advance(12);
        assert_eq!(pos(&g, 0), (5, 1));
        g.advance(100);
        assert_eq!(pos(&g, 0), (5, 1), "the buffer holds one move only");
    }

    #[test]
    fn a_buffered_move_is_made_when_the_cooldown_ends_and_newer_replaces_it() {
        let mut g = open_arena();
        park_others(&mut g, &[0]);
        put(&mut g, 0, 3, 3);
        assert_eq!(g.apply(0, Action::Move(Dir::Right), 0), Outcome::Applied);
        assert_eq!(g.apply(0, Action::Move(Dir::Left), 1), Outcome::Queued);
        assert_eq!(g.apply(0, Action::Move(Dir::Right), 2), Outcome::Queued);
        g.advance(3);
        assert_eq!(pos(&g, 0), (4, 3));
        g.advance(4);
        assert_eq!(pos(&g, 0), (5, 3));
        // A blocked request empties the buffer: (5, 2) is open but (5, 4)...
        assert_eq!(g.apply(0, Action::Move(Dir::Down), 5), Outcome::Queued);
        set(&mut g, 5, 4, Cell::Soft { hidden: None });
        g.advance(8);
        assert_eq!(pos(&g, 0), (5, 3), "the buffered move was blocked by then");
        assert_eq!(g.apply(0, Action::Move(Dir::Left), 8), Outcome::Applied);
        assert_eq!(g.apply(0, Action::Move(Dir::Up), 9), Outcome::NoEffect);
        assert_eq!(g.player(0).unwrap().buffered_move, None);
    }

    #[test]
    fn bomb_limit_holds() {
        let mut g = open_arena();
        park_others(&mut g, &[0]);
        put(&mut g, 0, 3, 3);
        assert_eq!(g.player(0).unwrap().bombs_max, START_BOMBS);
        assert_eq!(g.apply(0, Action::Bomb, 0), Outcome::Applied);
        assert_eq!(g.apply(0, Action::Bomb, 0), Outcome::NoEffect, "cell taken");
        g.apply(0, Action::Move(Dir::Right), 1);
        assert_eq!(g.apply(0, Action::Bomb, 1), Outcome::NoEffect, "none left");
        g.players[0].bombs_max = 2;
        assert_eq!(g.apply(0, Action::Bomb, 1), Outcome::Applied);
        assert_eq!(g.bombs_placed(0), 2);
    }

    #[test]
    fn bombs_block_movement_but_one_may_walk_off_a_bomb() {
        let mut g = open_arena();
        park_others(&mut g, &[0, 1]);
        put(&mut g, 0, 3, 3);
        put(&mut g, 1, 5, 3);
        assert_eq!(g.apply(1, Action::Bomb, 0), Outcome::Applied);
        g.apply(1, Action::Move(Dir::Right), 0);
        assert_eq!(g.apply(0, Action::Move(Dir::Right), 0), Outcome::Applied);
        assert_eq!(g.apply(0, Action::Move(Dir::Right), 4), Outcome::NoEffect);
        assert_eq!(pos(&g, 0), (4, 3));
        // Own bomb: planted underfoot, walked off.
        assert_eq!(g.apply(0, Action::Bomb, 4), Outcome::Applied);
        assert_eq!(g.apply(0, Action::Move(Dir::Left), 4), Outcome::Applied);
        assert_eq!(g.apply(0, Action::Move(Dir::Right), 8), Outcome::NoEffect);
    }

    #[test]
    fn a_kicked_bomb_slides_a_cell_a_tick_until_something_stops_it() {
        let mut g = open_arena();
        park_others(&mut g, &[0, 1]);
        put(&mut g, 0, 1, 3);
        put(&mut g, 1, 9, 3);
        g.players[0].kick = true;
        bomb(&mut g, 2, 3, 1, 2, FUSE_TICKS);
        assert_eq!(g.apply(0, Action::Move(Dir::Right), 0), Outcome::Applied);
        assert_eq!(pos(&g, 0), (1, 3), "the kicker stays");
        assert_eq!(g.player(0).unwrap().move_cooldown, BASE_MOVE_COOLDOWN_TICKS);
        for t in 1..=6 {
            g.advance(t);
            let b = g.bombs().next().unwrap();
            assert_eq!((b.x, b.y), (2 + t as u8, 3), "tick {t}");
            assert_eq!(b.fuse_ticks, FUSE_TICKS - t as u8, "it keeps its fuse");
        }
        // Seat 1 stands at (9, 3): the bomb stops next to it, for good.
        g.advance(10);
        let b = g.bombs().next().unwrap();
        assert_eq!(((b.x, b.y), b.slide), ((8, 3), None));
        g.validate().unwrap();
    }

    #[test]
    fn a_kick_stops_at_blocks_power_ups_and_bombs_and_needs_the_power_up() {
        let mut g = open_arena();
        park_others(&mut g, &[0]);
        put(&mut g, 0, 3, 3);
        g.players[0].bombs_max = 3;
        bomb(&mut g, 4, 3, 0, 2, FUSE_TICKS);
        // Without the kick a bomb blocks as before.
        assert_eq!(g.apply(0, Action::Move(Dir::Right), 0), Outcome::NoEffect);
        g.players[0].kick = true;
        // A bomb with a power-up behind it cannot be kicked.
        set(&mut g, 5, 3, Cell::PowerUp(PowerUp::Range));
        assert_eq!(g.apply(0, Action::Move(Dir::Right), 0), Outcome::NoEffect);
        set(&mut g, 5, 3, Cell::Floor);
        set(&mut g, 7, 3, Cell::Soft { hidden: None });
        bomb(&mut g, 3, 4, 0, 2, FUSE_TICKS);
        bomb(&mut g, 3, 6, 0, 2, FUSE_TICKS);
        assert_eq!(g.apply(0, Action::Move(Dir::Right), 0), Outcome::Applied);
        g.advance(5);
        assert!(g.bombs().any(|b| (b.x, b.y, b.slide) == (6, 3, None)));
        assert_eq!(g.apply(0, Action::Move(Dir::Down), 5), Outcome::Applied);
        g.advance(9);
        assert!(
            g.bombs().any(|b| (b.x, b.y, b.slide) == (3, 5, None)),
            "stopped by a bomb"
        );
        assert_eq!(g.bombs().count(), 3);
        g.validate().unwrap();
    }

    #[test]
    fn a_sliding_bomb_is_set_off_by_a_blast_and_by_sliding_into_fire() {
        // Fuse 3: the fire crosses the lane at (5, 5) as the bomb gets
        // there; fuse 1: it burns there already.
        for fuse in [3, 1] {
            let mut g = open_arena();
            park_others(&mut g, &[0]);
            put(&mut g, 0, 1, 5);
            g.players[0].kick = true;
            bomb(&mut g, 2, 5, 0, 1, FUSE_TICKS);
            bomb(&mut g, 5, 4, 3, 1, fuse);
            assert_eq!(g.apply(0, Action::Move(Dir::Right), 0), Outcome::Applied);
            g.advance(2);
            assert_eq!(g.bombs().count(), 2 - (fuse == 1) as usize);
            g.advance(3);
            assert_eq!(
                g.bombs().count(),
                0,
                "fuse {fuse}: the sliding bomb went off"
            );
            assert!(g.is_burning(4, 5) && g.is_burning(6, 5), "fuse {fuse}");
            g.validate().unwrap();
        }
    }

    #[test]
    fn remote_bombs_wait_for_the_detonator_up_to_the_longest_fuse() {
        let mut g = open_arena();
        park_others(&mut g, &[0]);
        put(&mut g, 0, 3, 3);
        assert_eq!(
            g.apply(0, Action::Detonate, 0),
            Outcome::NoEffect,
            "no remote"
        );
        g.players[0].remote = true;
        g.players[0].bombs_max = 2;
        assert_eq!(g.apply(0, Action::Bomb, 0), Outcome::Applied);
        g.apply(0, Action::Move(Dir::Right), 0);
        g.apply(0, Action::Move(Dir::Right), 4);
        assert_eq!(g.apply(0, Action::Bomb, 8), Outcome::Applied);
        for t in [8, 12, 16] {
            g.apply(0, Action::Move(Dir::Down), t);
        }
        assert_eq!(pos(&g, 0), (5, 6));
        g.advance(100);
        assert_eq!(g.bombs().count(), 2, "past the normal fuse they still wait");
        assert_eq!(g.apply(0, Action::Detonate, 100), Outcome::Applied);
        assert_eq!(g.apply(0, Action::Detonate, 100), Outcome::NoEffect, "once");
        g.advance(101);
        assert_eq!(g.bombs().count(), 0);
        assert!(g.is_burning(3, 3) && g.is_burning(5, 3));
        // Left alone, a remote bomb still goes off at its longest fuse.
        g.advance(120);
        g.apply(0, Action::Bomb, 120);
        g.advance(120 + REMOTE_FUSE_TICKS as Tick - 1);
        assert_eq!(g.bombs().count(), 1);
        g.advance(120 + REMOTE_FUSE_TICKS as Tick);
        assert_eq!(g.bombs().count(), 0);
        g.validate().unwrap();
    }

    #[test]
    fn a_chain_reaction_sets_off_remote_bombs_and_losing_the_player_restores_the_fuse() {
        let mut g = open_arena();
        park_others(&mut g, &[0, 1]);
        put(&mut g, 0, 1, 1);
        put(&mut g, 1, 9, 9);
        g.players[0].remote = true;
        g.players[0].bombs_max = 2;
        g.apply(0, Action::Bomb, 0);
        bomb(&mut g, 1, 3, 1, 2, 5);
        g.advance(5);
        assert_eq!(g.bombs().count(), 0, "the chain took the remote bomb too");
        assert!(!g.is_alive(0));
        // A player who leaves: its remote bombs fall back to the normal fuse.
        let g = {
            let mut g = open_arena();
            park_others(&mut g, &[1, 2]);
            put(&mut g, 1, 9, 9);
            put(&mut g, 2, 1, 9);
            g.players[1].remote = true;
            g.apply(1, Action::Bomb, 0);
            g.forfeit(1, 10);
            g
        };
        assert_eq!(g.bombs().next().unwrap().fuse_ticks, FUSE_TICKS);
        g.validate().unwrap();
    }

    #[test]
    fn kick_and_remote_are_taken_by_walking_onto_them() {
        let mut g = open_arena();
        park_others(&mut g, &[0]);
        put(&mut g, 0, 1, 5);
        set(&mut g, 1, 6, Cell::PowerUp(PowerUp::Kick));
        set(&mut g, 1, 7, Cell::PowerUp(PowerUp::Remote));
        g.apply(0, Action::Move(Dir::Down), 0);
        g.apply(0, Action::Move(Dir::Down), 4);
        let p = g.player(0).unwrap();
        assert!(p.kick && p.remote);
        assert_eq!(g.apply(0, Action::Bomb, 8), Outcome::Applied);
        assert_eq!(g.bombs().next().unwrap().fuse_ticks, REMOTE_FUSE_TICKS);
    }

    #[test]
    fn players_may_share_a_cell() {
        let mut g = open_arena();
        park_others(&mut g, &[0, 1]);
        put(&mut g, 0, 3, 3);
        put(&mut g, 1, 4, 3);
        assert_eq!(g.apply(0, Action::Move(Dir::Right), 0), Outcome::Applied);
        assert_eq!(pos(&g, 0), pos(&g, 1));
    }

    #[test]
    fn every_spawn_corner_lets_its_player_escape_a_first_bomb() {
        // (arm, back, hide) moves per seat: bomb on an arm of the L, then
        // around the pillar onto the other arm.
        use Dir::*;
        let plans = [
            (Right, Left, Down),
            (Left, Right, Down),
            (Right, Left, Up),
            (Left, Right, Up),
        ];
        for seed in 0..50 {
            let mut g = GameState::new(seed, 0);
            for _ in 0..SEATS {
                g.seat_player(0);
            }
            for (seat, &(arm, _, _)) in plans.iter().enumerate() {
                let seat = seat as u8;
                assert_eq!(g.apply(seat, Action::Move(arm), 1), Outcome::Applied);
                assert_eq!(g.apply(seat, Action::Bomb, 1), Outcome::Applied);
            }
            for (seat, &(_, back, _)) in plans.iter().enumerate() {
                assert_eq!(g.apply(seat as u8, Action::Move(back), 5), Outcome::Applied);
            }
            for (seat, &(_, _, hide)) in plans.iter().enumerate() {
                assert_eq!(g.apply(seat as u8, Action::Move(hide), 9), Outcome::Applied);
            }
            g.advance(1 + FUSE_TICKS as u32);
            for &(sx, sy) in &map::SPAWNS {
                assert!(g.is_burning(sx, sy), "seed {seed}: fire reaches the corner");
            }
            g.advance(100);
            assert!((0..4).all(|s| g.is_alive(s)), "seed {seed}");
            g.validate().unwrap();
        }
    }

    #[test]
    fn waiting_games_seat_unseat_and_ignore_actions() {
        let mut g = GameState::new(5, 100);
        assert_eq!(g.tick(), 100);
        assert_eq!(g.seat_player(100), Some(0));
        assert_eq!(g.seat_player(101), Some(1));
        g.unseat_player(0);
        assert_eq!(g.seated(), 1);
        assert_eq!(g.apply(1, Action::Bomb, 200), Outcome::NoEffect);
        // Huge jumps in the lobby are free.
        g.advance(u32::MAX - 10);
        assert_eq!(g.tick(), u32::MAX - 10);
        assert_eq!(g.seat_player(0), Some(0));
        assert_eq!(g.seat_player(0), Some(2));
        assert_eq!(g.seat_player(0), Some(3));
        assert_eq!(g.phase(), Phase::Playing);
        assert_eq!(g.start_tick(), u32::MAX - 10);
        assert_eq!(g.seat_player(0), None);
        g.unseat_player(1);
        assert_eq!(g.seated(), 4, "no unseating once started");
        // A game starting near the end of time never overflows.
        g.advance(u32::MAX);
        assert_eq!(g.tick(), u32::MAX);
        g.validate().unwrap();
    }

    #[test]
    fn bad_seats_and_dead_players_have_no_effect() {
        let mut g = open_arena();
        assert_eq!(g.apply(4, Action::Bomb, 1), Outcome::NoEffect);
        assert_eq!(g.apply(255, Action::Move(Dir::Up), 1), Outcome::NoEffect);
        assert_eq!(g.apply(0, Action::Idle, 1), Outcome::NoEffect);
        g.forfeit(9, 1);
        g.unseat_player(200);
        assert!(!g.is_alive(7));
        assert!(g.player(4).is_none());
        g.forfeit(0, 2);
        assert!(!g.is_alive(0));
        // A dead player's bomb changes nothing at all: no bomb, no state.
        let before = g.clone();
        assert_eq!(g.apply(0, Action::Bomb, 2), Outcome::NoEffect);
        assert_eq!(g, before);
        assert_eq!(g.bombs_placed(0), 0);
    }

    /// Whether `seat` of the freshly started `g` survives its first bomb
    /// with some short plan: at most one move, plant, at most three moves.
    fn can_escape_first_bomb(g: &GameState, seat: u8) -> bool {
        let mut plans: Vec<(Option<Dir>, Vec<Dir>)> = Vec::new();
        for pre in [None].into_iter().chain(Dir::ALL.map(Some)) {
            for len in 1..=3u32 {
                for code in 0..4usize.pow(len) {
                    let moves = (0..len)
                        .map(|k| Dir::ALL[code / 4usize.pow(k) % 4])
                        .collect();
                    plans.push((pre, moves));
                }
            }
        }
        plans.into_iter().any(|(pre, moves)| {
            let mut g = g.clone();
            let mut t = 1;
            if let Some(dir) = pre {
                g.apply(seat, Action::Move(dir), t);
                t += BASE_MOVE_COOLDOWN_TICKS as Tick;
            }
            if g.apply(seat, Action::Bomb, t) != Outcome::Applied {
                return false;
            }
            for dir in moves {
                t += 1;
                g.apply(seat, Action::Move(dir), t);
                t += BASE_MOVE_COOLDOWN_TICKS as Tick;
            }
            g.advance(t + FUSE_TICKS as Tick + BLAST_TICKS as Tick);
            g.bombs_placed(seat) == 0 && g.is_alive(seat)
        })
    }

    /// Fairness: on every arena, whatever the seed drew, every corner can
    /// plant its first bomb and walk out of its blast.
    #[test]
    fn every_corner_can_escape_its_first_bomb_on_every_arena() {
        for arena in Arena::ALL {
            for seed in 0..25 {
                let mut g = GameState::on_arena(arena, seed, 0, DEFAULT_ROUND_TICKS);
                for _ in 0..SEATS {
                    g.seat_player(0);
                }
                for seat in 0..SEATS as u8 {
                    assert!(
                        can_escape_first_bomb(&g, seat),
                        "{arena} seed {seed}: seat {seat} cannot escape its first bomb"
                    );
                }
            }
        }
    }
}
