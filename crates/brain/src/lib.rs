//! The bot AI: a pure function from a [`GameState`] and a seat to the next
//! action. No I/O and no clock; randomness comes from the caller's `Rng`.
//!
//! The bot, in order: flees any cell a bomb will hit (a danger map built from
//! every bomb's fuse and range, chain reactions included) by the shortest
//! path to a safe cell it can reach in time; plants a bomb beside a soft block
//! or in line with an opponent, but only when it can still escape its own
//! blast, and, with an opponent within a few steps, only with two ways out
//! (one could be closed by the opponent's bomb) unless the bomb leaves that
//! opponent none; walks to power-ups, then to places worth bombing, then to
//! where a bomb would reach an opponent. During sudden death it heads for the
//! free cell that closes last, not one an opponent holds (dying together
//! there would be a draw). Otherwise it wanders. It never steps onto a cell a
//! bomb will hit unless it is fleeing, and it sends a move only when the move
//! can land at once: one sent during the move cooldown would be buffered and
//! made later on a changed board.
//!
//! Three levels ([`Level`]) share this one brain. *Normal* is the bot above.
//! *Easy* still flees and takes power-ups, but bombs only now and then and
//! never hunts: it mostly wanders. *Hard* plays normal and also hunts
//! before it clears blocks, kicks bombs down a lane at an opponent, and with
//! the remote control keeps its bombs until an opponent is in their blast
//! (its traps: a bomb that leaves an opponent no way out is planted even
//! with one way out for itself). Every level sets off its remote bombs: easy
//! and normal as soon as they are out of the blast.
//!
//! `arena` (tests) plays whole games of four brains on the real game core
//! and checks that they make a game of it; its `report` prints the figures
//! to tune by.

use std::collections::VecDeque;

use borbaman_proto::pb::{self, Cell, GameState};
use rand::{Rng, RngCore};

/// Ticks a one-cell move is assumed to take before any speed power-up; an
/// overestimate only makes the bot more careful.
pub const STEP_TICKS: u32 = 5;

/// An opponent this close (in steps, as the crow flies) could plant a bomb
/// across a single way out.
const NEAR_CELLS: i32 = 4;

/// Ticks an opponent's remote-controlled bomb is taken to wait at most: it
/// may go off whenever its owner likes.
const REMOTE_DANGER_TICKS: u32 = 15;

/// Share of the chances to bomb an easy bot takes, each tick it has one.
const EASY_BOMB_CHANCE: f64 = 0.02;

/// How well a bot plays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Level {
    /// Wanders, bombs rarely, never hunts.
    Easy,
    /// Clears blocks, takes power-ups, hunts, bombs only with a way out.
    #[default]
    Normal,
    /// Hunts first, kicks bombs at opponents, holds its remote bombs for
    /// them and lays traps.
    Hard,
}

impl Level {
    pub const ALL: [Level; 3] = [Level::Easy, Level::Normal, Level::Hard];

    /// The name players type (`--bots NAME`).
    pub const fn name(self) -> &'static str {
        match self {
            Level::Easy => "easy",
            Level::Normal => "normal",
            Level::Hard => "hard",
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Level {
    type Err = String;

    fn from_str(name: &str) -> Result<Level, String> {
        let wanted = name.trim().to_ascii_lowercase();
        Level::ALL
            .into_iter()
            .find(|l| l.name() == wanted)
            .ok_or_else(|| {
                format!("unknown bot level {name:?}; the levels are: easy, normal, hard")
            })
    }
}

const DIRS: [(i32, i32, pb::Action); 4] = [
    (0, -1, pb::Action::Up),
    (0, 1, pb::Action::Down),
    (-1, 0, pb::Action::Left),
    (1, 0, pb::Action::Right),
];

/// The board as the bot sees it.
pub struct Board<'a> {
    pub width: usize,
    pub height: usize,
    cells: &'a [u8],
    bombs: Vec<usize>,
}

impl<'a> Board<'a> {
    pub fn new(state: &'a GameState) -> Board<'a> {
        let width = state.width as usize;
        let height = state.height as usize;
        let cells = &state.cells[..state.cells.len().min(width * height)];
        let mut board = Board {
            width,
            height,
            cells,
            bombs: Vec::new(),
        };
        board.bombs = state
            .bombs
            .iter()
            .filter_map(|b| board.index(b.x as i32, b.y as i32))
            .collect();
        board
    }

    pub fn index(&self, x: i32, y: i32) -> Option<usize> {
        let in_bounds = x >= 0 && y >= 0 && (x as usize) < self.width && (y as usize) < self.height;
        let i = in_bounds.then(|| y as usize * self.width + x as usize)?;
        (i < self.cells.len()).then_some(i)
    }

    pub fn xy(&self, i: usize) -> (i32, i32) {
        ((i % self.width) as i32, (i / self.width) as i32)
    }

    pub fn cell(&self, i: usize) -> Cell {
        Cell::try_from(self.cells[i] as i32).unwrap_or(Cell::Pillar)
    }

    /// A player can stand here (floor or power-up; bombs are separate).
    pub fn walkable(&self, i: usize) -> bool {
        matches!(self.cell(i), Cell::Floor) || is_power_cell(self.cell(i))
    }

    pub fn has_bomb(&self, i: usize) -> bool {
        self.bombs.contains(&i)
    }

    fn neighbours(&self, i: usize) -> impl Iterator<Item = (usize, pb::Action)> + '_ {
        let (x, y) = self.xy(i);
        DIRS.iter()
            .filter_map(move |&(dx, dy, action)| Some((self.index(x + dx, y + dy)?, action)))
    }

    /// Cells a blast of `range` centred on `at` covers: it stops before a
    /// pillar or closed cell and on the first soft block.
    pub fn blast_cells(&self, at: usize, range: u32) -> Vec<usize> {
        let mut cells = vec![at];
        let (x, y) = self.xy(at);
        for (dx, dy, _) in DIRS {
            for step in 1..=range as i32 {
                let Some(i) = self.index(x + dx * step, y + dy * step) else {
                    break;
                };
                match self.cell(i) {
                    Cell::Pillar | Cell::Closed => break,
                    Cell::Soft => {
                        cells.push(i);
                        break;
                    }
                    _ => cells.push(i),
                }
            }
        }
        cells
    }
}

/// A power-up lies here.
fn is_power_cell(cell: Cell) -> bool {
    matches!(
        cell,
        Cell::PowerBomb | Cell::PowerRange | Cell::PowerSpeed | Cell::PowerKick | Cell::PowerRemote
    )
}

/// Per cell: in how many ticks a blast reaches it (0: a blast is on it now),
/// or `None` if no bomb on the board will reach it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DangerMap {
    pub hit_in: Vec<Option<u32>>,
}

impl DangerMap {
    pub fn safe(&self, i: usize) -> bool {
        self.hit_in[i].is_none()
    }
}

/// Builds the danger map of `state`, as if `extra` were also on the board.
/// A bomb caught in another's blast explodes with it (chain reactions). A
/// remote-controlled bomb of a live player may go off at any time: it is
/// taken to go off within [`REMOTE_DANGER_TICKS`].
pub fn danger_map(state: &GameState, extra: Option<&pb::Bomb>) -> DangerMap {
    danger_map_for(state, extra, None)
}

/// [`danger_map`] as `me` sees it: its own remote bombs go off when it
/// says, so they count at their fuse.
fn danger_map_for(state: &GameState, extra: Option<&pb::Bomb>, me: Option<u32>) -> DangerMap {
    let board = Board::new(state);
    let bombs: Vec<&pb::Bomb> = state.bombs.iter().chain(extra).collect();
    let at: Vec<Option<usize>> = bombs
        .iter()
        .map(|b| board.index(b.x as i32, b.y as i32))
        .collect();
    let blasts: Vec<Vec<usize>> = bombs
        .iter()
        .zip(&at)
        .map(|(b, at)| {
            at.map(|i| board.blast_cells(i, b.range))
                .unwrap_or_default()
        })
        .collect();
    let remote = |owner: u32| {
        state
            .players
            .iter()
            .any(|p| p.seat == owner && p.alive && p.remote && Some(owner) != me)
    };
    let mut explode_in: Vec<u32> = bombs
        .iter()
        .map(|b| {
            if remote(b.owner) {
                b.fuse_ticks.min(REMOTE_DANGER_TICKS)
            } else {
                b.fuse_ticks
            }
        })
        .collect();
    // Relax until stable: a bomb explodes no later than any bomb whose blast
    // covers it. At most n rounds.
    for _ in 0..bombs.len() {
        let mut changed = false;
        for a in 0..bombs.len() {
            for b in 0..bombs.len() {
                if let Some(cell) = at[b]
                    && explode_in[a] < explode_in[b]
                    && blasts[a].contains(&cell)
                {
                    explode_in[b] = explode_in[a];
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let mut hit_in = vec![None; board.cells.len()];
    let mut mark = |i: usize, t: u32| {
        let slot: &mut Option<u32> = &mut hit_in[i];
        *slot = Some(slot.map_or(t, |old: u32| old.min(t)));
    };
    for (blast, &t) in blasts.iter().zip(&explode_in) {
        for &i in blast {
            mark(i, t);
        }
    }
    for blast in &state.blasts {
        if let Some(i) = board.index(blast.x as i32, blast.y as i32)
            && blast.ticks_left > 0
        {
            mark(i, 0);
        }
    }
    DangerMap { hit_in }
}

/// Ticks one move takes for `player` (speed power-ups shorten it).
fn step_ticks(player: &pb::Player) -> u32 {
    STEP_TICKS.saturating_sub(player.speed).max(1)
}

/// Shortest paths from `from` over cells `pass` allows, with the arrival
/// time of each step; returns the first action toward the nearest cell
/// `goal` accepts, and that cell. `goal(from)` is not considered.
fn search(
    board: &Board,
    from: usize,
    start_ticks: u32,
    step: u32,
    pass: impl Fn(usize, u32) -> bool,
    goal: impl Fn(usize) -> bool,
) -> Option<(pb::Action, usize)> {
    let mut first: Vec<Option<pb::Action>> = vec![None; board.cells.len()];
    let mut seen = vec![false; board.cells.len()];
    seen[from] = true;
    let mut queue = VecDeque::from([(from, start_ticks)]);
    while let Some((i, t)) = queue.pop_front() {
        for (n, action) in board.neighbours(i) {
            let arrive = t + step;
            if seen[n] || !board.walkable(n) || board.has_bomb(n) || !pass(n, arrive) {
                continue;
            }
            seen[n] = true;
            first[n] = Some(first[i].unwrap_or(action));
            if goal(n) {
                return Some((first[n].unwrap(), n));
            }
            queue.push_back((n, arrive));
        }
    }
    None
}

/// Every cell reachable from `from` over walkable, bomb-free cells that
/// `pass` allows (given the tick of arrival), nearest first, with the first
/// action toward it (`None` for `from` itself).
fn explore(
    board: &Board,
    from: usize,
    start_ticks: u32,
    step: u32,
    pass: impl Fn(usize, u32) -> bool,
) -> Vec<(usize, Option<pb::Action>)> {
    let mut seen = vec![false; board.cells.len()];
    seen[from] = true;
    let mut out = vec![(from, None, start_ticks)];
    let mut next = 0;
    while let Some(&(i, first, t)) = out.get(next) {
        next += 1;
        for (n, action) in board.neighbours(i) {
            let arrive = t + step;
            if seen[n] || !board.walkable(n) || board.has_bomb(n) || !pass(n, arrive) {
                continue;
            }
            seen[n] = true;
            out.push((n, Some(first.unwrap_or(action)), arrive));
        }
    }
    out.into_iter().map(|(i, first, _)| (i, first)).collect()
}

/// In sudden death: the way to the free cell that closes last, over cells
/// left before a blast reaches them. Two players on one cell would die in
/// the same tick (a draw), so a cell an opponent holds is left to them; on
/// a shared cell the lower seat stays. `Some(Idle)` when already there,
/// `None` when no such cell can be reached.
fn last_cell(
    state: &GameState,
    board: &Board,
    danger: &DangerMap,
    me: &pb::Player,
    here: usize,
) -> Option<pb::Action> {
    let order = closing_order(board);
    let claimed = |i: usize| {
        state.players.iter().any(|p| {
            p.alive
                && p.seat != me.seat
                && board.index(p.x as i32, p.y as i32) == Some(i)
                && (i != here || p.seat < me.seat)
        })
    };
    let step = step_ticks(me);
    let pass = |i: usize, arrive: u32| danger.hit_in[i].is_none_or(|t| arrive + step < t);
    explore(board, here, me.move_cooldown, step, pass)
        .into_iter()
        .filter(|&(i, _)| danger.safe(i) && !claimed(i))
        .max_by_key(|&(i, _)| order[i])
        .map(|(_, first)| first.unwrap_or(pb::Action::Idle))
}

/// Per cell, its place in the order sudden death closes the arena: a
/// clockwise spiral over the cells inside the outer wall, from the top-left
/// corner inwards (the game core's rule). Higher closes later.
pub fn closing_order(board: &Board) -> Vec<u32> {
    let mut order = vec![0; board.cells.len()];
    if board.width < 3 || board.height < 3 {
        return order;
    }
    let (mut left, mut top) = (1i32, 1i32);
    let (mut right, mut bottom) = (board.width as i32 - 2, board.height as i32 - 2);
    let mut rank = 0;
    let mut visit = |x: i32, y: i32| {
        if let Some(i) = board.index(x, y) {
            rank += 1;
            order[i] = rank;
        }
    };
    while left <= right && top <= bottom {
        for x in left..=right {
            visit(x, top);
        }
        for y in top + 1..=bottom {
            visit(right, y);
        }
        if bottom > top {
            for x in (left..right).rev() {
                visit(x, bottom);
            }
        }
        if right > left {
            for y in (top + 1..bottom).rev() {
                visit(left, y);
            }
        }
        left += 1;
        top += 1;
        right -= 1;
        bottom -= 1;
    }
    order
}

/// The way out of danger from `from`: a path whose every cell is left
/// before its blast arrives, ending on a cell no blast will reach.
fn escape(
    board: &Board,
    danger: &DangerMap,
    from: usize,
    player: &pb::Player,
) -> Option<pb::Action> {
    let step = step_ticks(player);
    let start = player.move_cooldown;
    let pass = |i: usize, arrive: u32| match danger.hit_in[i] {
        None => true,
        // Must be off this cell (one more step) before it is hit.
        Some(t) => arrive + step < t,
    };
    search(board, from, start, step, pass, |i| danger.safe(i)).map(|(a, _)| a)
}

/// How many different first steps lead out of danger from `from` (see
/// [`escape`]): one is enough until an opponent, by planting a bomb in the
/// way, can close it.
fn escape_routes(board: &Board, danger: &DangerMap, from: usize, player: &pb::Player) -> usize {
    let step = step_ticks(player);
    let pass = |i: usize, arrive: u32| danger.hit_in[i].is_none_or(|t| arrive + step < t);
    let mut firsts: Vec<pb::Action> = explore(board, from, player.move_cooldown, step, pass)
        .into_iter()
        .filter(|&(i, _)| danger.safe(i))
        .filter_map(|(_, first)| first)
        .collect();
    firsts.sort_by_key(|a| *a as i32);
    firsts.dedup();
    firsts.len()
}

/// The next action for the player in `seat`. [`pb::Action::Idle`] when there
/// is nothing useful to do (or the player is dead, or the game not running).
///
/// Not generic over the random source, so that the whole decision is
/// compiled (and optimised, see the workspace's `Cargo.toml`) in this
/// crate rather than in each caller's.
pub fn decide(state: &GameState, seat: u32, rng: &mut dyn RngCore) -> pb::Action {
    decide_at(state, seat, Level::Normal, rng)
}

/// [`decide`] for a bot of `level`.
pub fn decide_at(state: &GameState, seat: u32, level: Level, rng: &mut dyn RngCore) -> pb::Action {
    let Some(me) = state.players.iter().find(|p| p.seat == seat) else {
        return pb::Action::Idle;
    };
    if !me.alive || state.phase != pb::Phase::Playing as i32 {
        return pb::Action::Idle;
    }
    let board = Board::new(state);
    let Some(here) = board.index(me.x as i32, me.y as i32) else {
        return pb::Action::Idle;
    };
    let danger = danger_map_for(state, None, Some(seat));

    // A move sent during the cooldown is buffered and made when it ends,
    // even if the board has changed by then (a stale step into a blast).
    // One sent when a single tick is left lands as the cooldown ends.
    let may_move = me.move_cooldown <= 1;

    // 0. A hard bot with the kick sends a bomb beside it down a lane at an
    // opponent, when that leaves it out of every blast.
    if level == Level::Hard
        && me.kick
        && may_move
        && let Some(action) = kick_at(state, &board, seat, here)
    {
        return action;
    }

    // 1. Flee (in sudden death, toward the cell that closes last).
    if !danger.safe(here) {
        if !may_move {
            return pb::Action::Idle;
        }
        let sudden_death = state
            .sudden_death
            .then(|| last_cell(state, &board, &danger, me, here))
            .flatten();
        return sudden_death
            .or_else(|| escape(&board, &danger, here, me))
            .unwrap_or(pb::Action::Idle);
    }

    let rivals: Vec<&pb::Player> = state
        .players
        .iter()
        .filter(|p| p.alive && p.seat != seat)
        .collect();
    let opponents: Vec<usize> = rivals
        .iter()
        .filter_map(|p| board.index(p.x as i32, p.y as i32))
        .collect();

    // 2. Set off our remote bombs once we are out of their blast: at once
    // (easy, normal), or when they would catch an opponent (hard; after the
    // normal fuse's time, whatever they catch).
    if me.remote
        && let Some(action) = detonate(state, level, seat, here, &opponents)
    {
        return action;
    }

    let worth_bombing = |at: usize| {
        let blast = board.blast_cells(at, me.range.max(1));
        blast.iter().any(|&i| board.cell(i) == Cell::Soft)
            || opponents.iter().any(|o| blast.contains(o))
    };

    // 3. Bomb, when it hits something and we can get away from it (an easy
    // bot lets most chances go).
    let takes_chance = level != Level::Easy || rng.random_bool(EASY_BOMB_CHANCE);
    if me.bombs_placed < me.bombs_max
        && !board.has_bomb(here)
        && worth_bombing(here)
        && takes_chance
        && can_get_away(state, &board, me, here, &rivals, &opponents)
    {
        return pb::Action::Bomb;
    }

    if !may_move {
        return pb::Action::Idle;
    }

    // 4. Walk, only over cells no bomb will reach.
    let step = step_ticks(me);
    let safe_path = |i: usize, _t: u32| danger.safe(i);
    let go = |goal: &dyn Fn(usize) -> bool| {
        search(&board, here, 0, step, safe_path, goal).map(|(action, _)| action)
    };
    if state.sudden_death
        && let Some(action) = last_cell(state, &board, &danger, me, here)
    {
        return action;
    }
    let is_power = |i: usize| is_power_cell(board.cell(i));
    if let Some(action) = go(&is_power) {
        return action;
    }
    // A hard bot's trap: the nearest cell where its bomb would leave an
    // opponent no way out and itself one.
    if level == Level::Hard
        && me.bombs_placed < me.bombs_max
        && let Some(action) = trap(state, &board, &danger, me, here, &rivals)
    {
        return action;
    }
    // Hunt: a cell from which a bomb would reach an opponent.
    let hunt = || {
        go(&|i| {
            let blast = board.blast_cells(i, me.range.max(1));
            opponents.iter().any(|o| blast.contains(o))
        })
    };
    if level != Level::Easy
        && me.bombs_placed < me.bombs_max
        && let Some(action) = go(&|i| worth_bombing(i) && !board.has_bomb(i))
    {
        return action;
    }
    if level != Level::Easy
        && let Some(action) = hunt()
    {
        return action;
    }
    // 5. Wander (an easy bot also heads for blocks to clear, now and then).
    if level == Level::Easy
        && me.bombs_placed < me.bombs_max
        && rng.random_bool(0.1)
        && let Some(action) = go(&|i| worth_bombing(i) && !board.has_bomb(i))
    {
        return action;
    }
    let moves: Vec<pb::Action> = board
        .neighbours(here)
        .filter(|&(n, _)| board.walkable(n) && !board.has_bomb(n) && danger.safe(n))
        .map(|(_, action)| action)
        .collect();
    if moves.is_empty() || rng.random_bool(0.5) {
        return pb::Action::Idle;
    }
    moves[rng.random_range(0..moves.len())]
}

/// Whether `me`, bombing at `here`, can get away from its own blast:
/// two ways out, or one when no opponent is near (who could block it) or
/// the bomb leaves an opponent no way out (worth the risk).
fn can_get_away(
    state: &GameState,
    board: &Board,
    me: &pb::Player,
    here: usize,
    rivals: &[&pb::Player],
    opponents: &[usize],
) -> bool {
    let bomb = pb::Bomb {
        x: me.x,
        y: me.y,
        owner: me.seat,
        range: me.range.max(1),
        fuse_ticks: u32::from(borbaman_game::FUSE_TICKS),
        slide: 0,
    };
    let with_bomb = danger_map_for(state, Some(&bomb), Some(me.seat));
    let routes = escape_routes(board, &with_bomb, here, me);
    let (x, y) = board.xy(here);
    let rival_near = opponents.iter().any(|&o| {
        let (ox, oy) = board.xy(o);
        (ox - x).abs() + (oy - y).abs() <= NEAR_CELLS
    });
    let traps = rivals.iter().any(|r| {
        board
            .index(r.x as i32, r.y as i32)
            .is_some_and(|at| !with_bomb.safe(at) && escape_routes(board, &with_bomb, at, r) == 0)
    });
    routes >= 2 || (routes == 1 && (!rival_near || traps))
}

/// Cells near enough to weigh as a trap's place, nearest first.
const TRAP_CELLS: usize = 24;

/// The first step toward the nearest safe cell (among [`TRAP_CELLS`]) where
/// a bomb of `me` would leave a rival in its blast with no way out, while
/// `me` keeps one; `Bomb` when that cell is `here`.
fn trap(
    state: &GameState,
    board: &Board,
    danger: &DangerMap,
    me: &pb::Player,
    here: usize,
    rivals: &[&pb::Player],
) -> Option<pb::Action> {
    let step = step_ticks(me);
    let cells = explore(board, here, 0, step, |i, _| danger.safe(i));
    for (at, first) in cells.into_iter().take(TRAP_CELLS) {
        if board.has_bomb(at) {
            continue;
        }
        let (x, y) = board.xy(at);
        let bomb = pb::Bomb {
            x: x as u32,
            y: y as u32,
            owner: me.seat,
            range: me.range.max(1),
            fuse_ticks: u32::from(borbaman_game::FUSE_TICKS),
            slide: 0,
        };
        let with_bomb = danger_map_for(state, Some(&bomb), Some(me.seat));
        let traps = rivals.iter().any(|r| {
            board
                .index(r.x as i32, r.y as i32)
                .is_some_and(|o| !with_bomb.safe(o) && escape_routes(board, &with_bomb, o, r) == 0)
        });
        if !traps {
            continue;
        }
        let there = pb::Player {
            x: x as u32,
            y: y as u32,
            move_cooldown: 0,
            ..me.clone()
        };
        if escape_routes(board, &with_bomb, at, &there) == 0 {
            continue;
        }
        return Some(first.unwrap_or(pb::Action::Bomb));
    }
    None
}

/// Whether to set off `seat`'s remote bombs now: only when `here` is out of
/// their blast (chains included); a hard bot waits for an opponent in it,
/// or for the normal fuse's time to have passed.
fn detonate(
    state: &GameState,
    level: Level,
    seat: u32,
    here: usize,
    opponents: &[usize],
) -> Option<pb::Action> {
    let mine: Vec<&pb::Bomb> = state
        .bombs
        .iter()
        .filter(|b| b.owner == seat && b.fuse_ticks > 1)
        .collect();
    if mine.is_empty() {
        return None;
    }
    // Our bombs going off now, with whatever they set off.
    let mut now = state.clone();
    now.bombs = mine
        .iter()
        .map(|&b| pb::Bomb {
            fuse_ticks: 0,
            ..*b
        })
        .collect();
    now.blasts.clear();
    let danger = danger_map_for(&now, None, Some(seat));
    if !danger.safe(here) {
        return None;
    }
    let catches = opponents.iter().any(|&o| !danger.safe(o));
    let aged = mine.iter().any(|b| {
        b.fuse_ticks + u32::from(borbaman_game::FUSE_TICKS)
            <= u32::from(borbaman_game::REMOTE_FUSE_TICKS)
    });
    (level != Level::Hard || catches || aged).then_some(pb::Action::Detonate)
}

/// With the kick: the move that kicks a neighbouring bomb down a lane to
/// where its blast reaches an opponent, if after the kick the kicker stands
/// in no blast.
fn kick_at(state: &GameState, board: &Board, seat: u32, here: usize) -> Option<pb::Action> {
    let opponents: Vec<usize> = state
        .players
        .iter()
        .filter(|p| p.alive && p.seat != seat)
        .filter_map(|p| board.index(p.x as i32, p.y as i32))
        .collect();
    let (x, y) = board.xy(here);
    for (dx, dy, action) in DIRS {
        let Some(at) = board.index(x + dx, y + dy) else {
            continue;
        };
        let Some(k) = state
            .bombs
            .iter()
            .position(|b| board.index(b.x as i32, b.y as i32) == Some(at))
        else {
            continue;
        };
        // Where it would stop: the last free floor cell down the lane.
        let (mut cx, mut cy) = (x + dx, y + dy);
        let mut stop = at;
        while let Some(next) = board.index(cx + dx, cy + dy) {
            let occupied = board.cell(next) != Cell::Floor
                || board.has_bomb(next)
                || opponents.contains(&next);
            if occupied {
                break;
            }
            (cx, cy) = (cx + dx, cy + dy);
            stop = next;
        }
        if stop == at {
            continue;
        }
        let blast = board.blast_cells(stop, state.bombs[k].range.max(1));
        if !opponents.iter().any(|o| blast.contains(o)) {
            continue;
        }
        let mut kicked = state.clone();
        (kicked.bombs[k].x, kicked.bombs[k].y) = (cx as u32, cy as u32);
        if danger_map_for(&kicked, None, Some(seat)).safe(here) {
            return Some(action);
        }
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    /// A state from a picture: `#` pillar, `+` soft, `b` power-up bomb,
    /// `r` range, `s` speed, `x` closed, `.` floor, digits 0-3 players on
    /// floor, `@` a bomb on floor.
    pub(crate) fn state_from(rows: &[&str]) -> GameState {
        let height = rows.len() as u32;
        let width = rows[0].len() as u32;
        let mut state = GameState {
            game_id: 1,
            version: 1,
            width,
            height,
            tick: 100,
            tick_ms: 50,
            phase: pb::Phase::Playing as i32,
            round_ticks_left: 1000,
            seated: 4,
            ..GameState::default()
        };
        for (y, row) in rows.iter().enumerate() {
            for (x, c) in row.chars().enumerate() {
                let cell = match c {
                    '#' => Cell::Pillar,
                    '+' => Cell::Soft,
                    'b' => Cell::PowerBomb,
                    'r' => Cell::PowerRange,
                    's' => Cell::PowerSpeed,
                    'x' => Cell::Closed,
                    _ => Cell::Floor,
                };
                state.cells.push(cell as u8);
                if let Some(seat) = c.to_digit(10) {
                    state.players.push(pb::Player {
                        seat,
                        name: format!("p{seat}"),
                        x: x as u32,
                        y: y as u32,
                        alive: true,
                        bombs_max: 1,
                        range: 2,
                        connected: true,
                        seated: true,
                        ..pb::Player::default()
                    });
                }
                if c == '@' {
                    state.bombs.push(pb::Bomb {
                        x: x as u32,
                        y: y as u32,
                        owner: 9,
                        range: 2,
                        fuse_ticks: 30,
                        slide: 0,
                    });
                }
            }
        }
        state.players.sort_by_key(|p| p.seat);
        state
    }

    fn hits(state: &GameState) -> Vec<String> {
        let danger = danger_map(state, None);
        (0..state.height as usize)
            .map(|y| {
                (0..state.width as usize)
                    .map(|x| match danger.hit_in[y * state.width as usize + x] {
                        None => '.',
                        Some(0) => '!',
                        Some(_) => '*',
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_blast_covers_its_range_stops_at_pillars_and_on_soft_blocks() {
        let state = state_from(&[
            "#######", //
            "#.....#", //
            "#.#@+.#", //
            "#.....#", //
            "#######",
        ]);
        assert_eq!(
            hits(&state),
            [
                "#######".replace('#', "."),
                "...*...".to_string(),
                "...**..".to_string(),
                "...*...".to_string(),
                ".......".to_string(),
            ]
        );
    }

    #[test]
    fn chained_bombs_explode_with_the_first() {
        let mut state = state_from(&[
            "#########", //
            "#.@.@...#", //
            "#########",
        ]);
        state.bombs[0].fuse_ticks = 5;
        state.bombs[1].fuse_ticks = 40;
        let danger = danger_map(&state, None);
        let w = state.width as usize;
        // The second bomb's far reach is hit at the first one's time.
        assert_eq!(danger.hit_in[w + 6], Some(5));
        assert_eq!(danger.hit_in[w + 7], None);
    }

    #[test]
    fn active_blasts_are_dangerous_now() {
        let mut state = state_from(&["#####", "#...#", "#####"]);
        state.blasts.push(pb::Blast {
            x: 2,
            y: 1,
            ticks_left: 3,
        });
        assert_eq!(hits(&state)[1], "..!..");
    }

    #[test]
    fn a_bot_on_a_bomb_runs_round_the_corner() {
        // Standing on a bomb in a corridor: the only safe cells are out of
        // line, down the side passage.
        let mut state = state_from(&[
            "#######", //
            "#0....#", //
            "#.#####", //
            "#.#####", //
            "#.#####", //
            "#######",
        ]);
        state.bombs.push(pb::Bomb {
            x: 1,
            y: 1,
            owner: 0,
            range: 2,
            fuse_ticks: 40,
            slide: 0,
        });
        let mut rng = StdRng::seed_from_u64(1);
        // Down leads to (1,4), three cells away: out of a range-2 blast.
        // Right leads to (4,1) and (5,1), also out of range.
        let action = decide(&state, 0, &mut rng);
        assert!(
            matches!(action, pb::Action::Down | pb::Action::Right),
            "{action:?}"
        );
    }

    #[test]
    fn a_bot_waits_out_its_cooldown_before_moving() {
        // A move sent now would be buffered and made later, whatever the
        // board looks like then; it is sent when it can land at once.
        let mut state = state_from(&[
            "#######", //
            "#0....#", //
            "#.#####", //
            "#######",
        ]);
        state.bombs.push(pb::Bomb {
            x: 1,
            y: 1,
            owner: 0,
            range: 2,
            fuse_ticks: 40,
            slide: 0,
        });
        let mut rng = StdRng::seed_from_u64(6);
        state.players[0].move_cooldown = 3;
        assert_eq!(decide(&state, 0, &mut rng), pb::Action::Idle);
        state.players[0].move_cooldown = 1;
        assert_eq!(decide(&state, 0, &mut rng), pb::Action::Right);
    }

    #[test]
    fn a_bot_bombs_a_soft_block_only_with_a_way_out() {
        let mut rng = StdRng::seed_from_u64(2);
        // Room to flee: bombs.
        let open = state_from(&[
            "#######", //
            "#0+...#", //
            "#.#.#.#", //
            "#.....#", //
            "#######",
        ]);
        assert_eq!(decide(&open, 0, &mut rng), pb::Action::Bomb);
        // A dead end two cells long with range 2: no way out, no bomb.
        let trapped = state_from(&[
            "#####", //
            "#0+##", //
            "#.###", //
            "#####",
        ]);
        assert_ne!(decide(&trapped, 0, &mut rng), pb::Action::Bomb);
    }

    #[test]
    fn with_an_opponent_near_a_bot_bombs_only_with_two_ways_out() {
        let mut rng = StdRng::seed_from_u64(8);
        // One way out, down the left side: fine with nobody around.
        let alone = state_from(&[
            "#########", //
            "#0+.....#", //
            "#.#######", //
            "#.......#", //
            "#########",
        ]);
        assert_eq!(decide(&alone, 0, &mut rng), pb::Action::Bomb);
        // An opponent two steps from that way could plant a bomb across it.
        let watched = state_from(&[
            "#########", //
            "#0+.....#", //
            "#.#######", //
            "#..1....#", //
            "#########",
        ]);
        assert_ne!(decide(&watched, 0, &mut rng), pb::Action::Bomb);
        // Two ways out: it bombs even so.
        let open = state_from(&[
            "#########", //
            "#..0+...#", //
            "#.#.#####", //
            "#...1...#", //
            "#########",
        ]);
        assert_eq!(decide(&open, 0, &mut rng), pb::Action::Bomb);
    }

    #[test]
    fn a_bot_takes_a_power_up_in_reach() {
        let state = state_from(&[
            "#######", //
            "#0..r.#", //
            "#######",
        ]);
        let mut rng = StdRng::seed_from_u64(3);
        assert_eq!(decide(&state, 0, &mut rng), pb::Action::Right);
    }

    #[test]
    fn a_bot_does_not_walk_into_a_coming_blast() {
        // The power-up lies in a bomb's line: the bot must not go for it.
        let state = state_from(&[
            "#########", //
            "#.0r.@..#", //
            "#########",
        ]);
        let mut rng = StdRng::seed_from_u64(4);
        for _ in 0..20 {
            let action = decide(&state, 0, &mut rng);
            assert_ne!(action, pb::Action::Right, "walks into the blast line");
        }
    }

    #[test]
    fn in_sudden_death_a_bot_leaves_the_last_cell_to_an_opponent_holding_it() {
        // (7,6) closes last, then (6,5)... The opponent holds (7,6).
        let mut state = state_from(&[
            "###############",
            "#xxxxxxxxxxxxx#",
            "#x#x#x#x#x#x#x#",
            "#xxxxxxxxxxxxx#",
            "#x#x#x#x#x#x#x#",
            "#xxxx.....xxxx#",
            "#x#x#.#.#.#x#x#",
            "#xxxx..0..xxxx#",
            "#x#x#x#x#x#x#x#",
            "#xxxxxxxxxxxxx#",
            "#x#x#x#x#x#x#x#",
            "#xxxxxxxxxxxxx#",
            "###############",
        ]);
        state.sudden_death = true;
        let board = Board::new(&state);
        let order = closing_order(&board);
        let open = |i: usize| board.walkable(i);
        let last = (0..order.len())
            .filter(|&i| open(i))
            .max_by_key(|&i| order[i]);
        assert_eq!(last.map(|i| board.xy(i)), Some((7, 6)));
        let mut rng = StdRng::seed_from_u64(7);
        // Alone, it heads for (7,6): up from (7,7).
        assert_eq!(decide(&state, 0, &mut rng), pb::Action::Up);
        // With an opponent on (7,6), it goes elsewhere: never up.
        let mut rival = state.players[0].clone();
        (rival.seat, rival.x, rival.y) = (1, 7, 6);
        state.players.push(rival);
        assert_ne!(decide(&state, 0, &mut rng), pb::Action::Up);
    }

    #[test]
    fn levels_are_named_as_typed() {
        for level in Level::ALL {
            assert_eq!(level.name().parse::<Level>(), Ok(level));
        }
        assert_eq!(" Hard ".parse::<Level>(), Ok(Level::Hard));
        let err = "expert".parse::<Level>().unwrap_err();
        assert!(err.contains("easy, normal, hard"), "{err}");
        assert_eq!(Level::default(), Level::Normal);
    }

    #[test]
    fn a_hard_bot_with_the_kick_sends_a_bomb_down_the_lane_at_an_opponent() {
        let mut state = state_from(&[
            "##########", //
            "#0@.....1#", //
            "#.########", //
            "#.########", //
            "##########",
        ]);
        state.players[0].kick = true;
        let mut rng = StdRng::seed_from_u64(9);
        assert_eq!(
            decide_at(&state, 0, Level::Hard, &mut rng),
            pb::Action::Right,
            "kicks"
        );
        // Without the kick it would not walk into the bomb.
        state.players[0].kick = false;
        assert_ne!(
            decide_at(&state, 0, Level::Hard, &mut rng),
            pb::Action::Right
        );
    }

    #[test]
    fn a_bot_sets_off_its_remote_bombs_once_out_of_their_blast() {
        // Its bomb at (1,1), range 2; the bot at (4,1) is out of it, an
        // opponent at (6,3) is not in it either.
        let mut state = state_from(&[
            "#########", //
            "#@..0...#", //
            "#.#.###.#", //
            "#.....1.#", //
            "#########",
        ]);
        state.bombs[0].owner = 0;
        state.bombs[0].fuse_ticks = 190;
        state.players[0].remote = true;
        state.players[0].bombs_placed = 1;
        let mut rng = StdRng::seed_from_u64(10);
        assert_eq!(
            decide_at(&state, 0, Level::Normal, &mut rng),
            pb::Action::Detonate
        );
        // A hard bot holds it for an opponent...
        assert_ne!(
            decide_at(&state, 0, Level::Hard, &mut rng),
            pb::Action::Detonate
        );
        // ... and sets it off once one stands in the blast.
        state.players[1].x = 1;
        state.players[1].y = 3;
        assert_eq!(
            decide_at(&state, 0, Level::Hard, &mut rng),
            pb::Action::Detonate
        );
        // Nobody detonates while standing in its own blast.
        state.players[0].x = 2;
        for level in Level::ALL {
            assert_ne!(decide_at(&state, 0, level, &mut rng), pb::Action::Detonate);
        }
    }

    #[test]
    fn the_dead_and_the_waiting_idle() {
        let mut state = state_from(&["#####", "#0..#", "#####"]);
        let mut rng = StdRng::seed_from_u64(5);
        state.phase = pb::Phase::Waiting as i32;
        assert_eq!(decide(&state, 0, &mut rng), pb::Action::Idle);
        state.phase = pb::Phase::Playing as i32;
        state.players[0].alive = false;
        assert_eq!(decide(&state, 0, &mut rng), pb::Action::Idle);
    }
}
