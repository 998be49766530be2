//! The bot AI: a pure function from a [`GameState`] and a seat to the next
//! action. No I/O and no clock; randomness comes from the caller's `Rng`.
//!
//! The bot, in order: flees any cell a bomb will hit (a danger map built from
//! every bomb's fuse and range, chain reactions included) by the shortest
//! path to a safe cell it can reach in time; plants a bomb beside a soft block
//! or in line with an opponent, but only when it can still escape its own
//! blast; walks to power-ups, then to places worth bombing, then toward
//! opponents; during sudden death it heads for the centre; otherwise it
//! wanders. It never steps onto a cell a bomb will hit unless it is fleeing,
//! and it sends a move only when the move can land at once: one sent during
//! the move cooldown would be buffered and made later on a changed board.
//!
//! `arena` (tests) plays whole games of four brains on the real game core
//! and checks that they make a game of it; its `report` prints the figures
//! to tune by.

use std::collections::VecDeque;

use borbaman_proto::pb::{self, Cell, GameState};
use rand::Rng;

/// Ticks a blast stays on its cells.
pub const BLAST_TICKS: u32 = 10;
/// Fuse of a freshly planted bomb, in ticks.
pub const FUSE_TICKS: u32 = 50;
/// Ticks a one-cell move is assumed to take before any speed power-up; an
/// overestimate only makes the bot more careful.
pub const STEP_TICKS: u32 = 5;

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
        matches!(
            self.cell(i),
            Cell::Floor | Cell::PowerBomb | Cell::PowerRange | Cell::PowerSpeed
        )
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
/// A bomb caught in another's blast explodes with it (chain reactions).
pub fn danger_map(state: &GameState, extra: Option<&pb::Bomb>) -> DangerMap {
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
    let mut explode_in: Vec<u32> = bombs.iter().map(|b| b.fuse_ticks).collect();
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

/// The next action for the player in `seat`. [`pb::Action::Idle`] when there
/// is nothing useful to do (or the player is dead, or the game not running).
pub fn decide<R: Rng + ?Sized>(state: &GameState, seat: u32, rng: &mut R) -> pb::Action {
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
    let danger = danger_map(state, None);

    // A move sent during the cooldown is buffered and made when it ends,
    // even if the board has changed by then (a stale step into a blast).
    // One sent when a single tick is left lands as the cooldown ends.
    let may_move = me.move_cooldown <= 1;

    // 1. Flee.
    if !danger.safe(here) {
        if !may_move {
            return pb::Action::Idle;
        }
        return escape(&board, &danger, here, me).unwrap_or(pb::Action::Idle);
    }

    let opponents: Vec<usize> = state
        .players
        .iter()
        .filter(|p| p.alive && p.seat != seat)
        .filter_map(|p| board.index(p.x as i32, p.y as i32))
        .collect();
    let worth_bombing = |at: usize| {
        let blast = board.blast_cells(at, me.range.max(1));
        blast.iter().any(|&i| board.cell(i) == Cell::Soft)
            || opponents.iter().any(|o| blast.contains(o))
    };

    // 2. Bomb, when it hits something and we can get away from it.
    if me.bombs_placed < me.bombs_max && !board.has_bomb(here) && worth_bombing(here) {
        let bomb = pb::Bomb {
            x: me.x,
            y: me.y,
            owner: seat,
            range: me.range.max(1),
            fuse_ticks: FUSE_TICKS,
        };
        let with_bomb = danger_map(state, Some(&bomb));
        if escape(&board, &with_bomb, here, me).is_some() {
            return pb::Action::Bomb;
        }
    }

    if !may_move {
        return pb::Action::Idle;
    }

    // 3. Walk, only over cells no bomb will reach.
    let step = step_ticks(me);
    let safe_path = |i: usize, _t: u32| danger.safe(i);
    let go = |goal: &dyn Fn(usize) -> bool| {
        search(&board, here, 0, step, safe_path, goal).map(|(action, _)| action)
    };
    if state.sudden_death {
        let centre = ((board.width / 2) as i32, (board.height / 2) as i32);
        let dist = |i: usize| {
            let (x, y) = board.xy(i);
            (x - centre.0).abs() + (y - centre.1).abs()
        };
        let mine = dist(here);
        if mine > 1
            && let Some(action) = go(&|i| dist(i) < mine)
        {
            return action;
        }
    }
    let is_power = |i: usize| {
        matches!(
            board.cell(i),
            Cell::PowerBomb | Cell::PowerRange | Cell::PowerSpeed
        )
    };
    if let Some(action) = go(&is_power) {
        return action;
    }
    if me.bombs_placed < me.bombs_max
        && let Some(action) = go(&|i| worth_bombing(i) && !board.has_bomb(i))
    {
        return action;
    }
    if let Some(action) = go(&|i| {
        opponents
            .iter()
            .any(|&o| board.neighbours(i).any(|(n, _)| n == o))
    }) {
        return action;
    }
    // 4. Wander.
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

/// Whole games of four brains on the real game core, without a network:
/// how often a game ends with a winner, how players die.
#[cfg(test)]
pub(crate) mod arena {
    use borbaman_server::game::{self, Cell as CoreCell, Dir, Phase};
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    /// How one game went.
    #[derive(Clone, Debug, Default)]
    pub struct GameReport {
        pub winner: Option<u32>,
        pub draw: bool,
        pub end_tick: u32,
        /// Deaths credited to another player's bomb.
        pub kills: u32,
        /// Deaths by one's own bomb or by walking into fire.
        pub own_fault: u32,
        /// Deaths in a cell closed by sudden death.
        pub closed_in: u32,
        pub reached_sudden_death: bool,
        pub power_ups_taken: u32,
        pub bombs_planted: u32,
    }

    fn core_action(action: pb::Action) -> game::Action {
        match action {
            pb::Action::Up => game::Action::Move(Dir::Up),
            pb::Action::Down => game::Action::Move(Dir::Down),
            pb::Action::Left => game::Action::Move(Dir::Left),
            pb::Action::Right => game::Action::Move(Dir::Right),
            pb::Action::Bomb => game::Action::Bomb,
            _ => game::Action::Idle,
        }
    }

    /// Plays one game: each bot decides on the state of the tick before its
    /// action lands (a call's round trip), as over a network.
    pub fn play(seed: u64) -> GameReport {
        let mut g = game::GameState::new(seed, 0);
        for _ in 0..4 {
            g.seat_player(0);
        }
        let names = ["a", "b", "c", "d"].map(String::from);
        let mut rngs: Vec<StdRng> = (0..4)
            .map(|s| StdRng::seed_from_u64(seed * 4 + s))
            .collect();
        let mut pending = [pb::Action::Idle; 4];
        let mut report = GameReport::default();
        let mut tick = 0;
        while g.phase() == Phase::Playing {
            tick += 1;
            let before = g.clone();
            g.advance(tick);
            for seat in 0..4u8 {
                if pending[seat as usize] == pb::Action::Bomb
                    && g.apply(seat, game::Action::Bomb, tick) == game::Outcome::Applied
                {
                    report.bombs_planted += 1;
                } else {
                    g.apply(seat, core_action(pending[seat as usize]), tick);
                }
            }
            account(&before, &g, &mut report);
            let state = g.to_proto(1, tick as u64, &names, [true; 4]);
            for seat in 0..4u32 {
                pending[seat as usize] = decide(&state, seat, &mut rngs[seat as usize]);
            }
        }
        report.end_tick = tick - g.start_tick();
        match g.ending() {
            Some(game::Ending::Winner(seat)) => report.winner = Some(seat as u32),
            Some(game::Ending::Draw) => report.draw = true,
            None => {}
        }
        report
    }

    /// Attributes this tick's deaths and power-ups.
    fn account(before: &game::GameState, after: &game::GameState, report: &mut GameReport) {
        let kills = |g: &game::GameState| -> u32 {
            (0..4).map(|s| g.player(s).unwrap().kills as u32).sum()
        };
        let credited = kills(after) - kills(before);
        let mut uncredited = 0u32;
        for seat in 0..4u8 {
            let (was, now) = (before.player(seat).unwrap(), after.player(seat).unwrap());
            if before.is_alive(seat) && !after.is_alive(seat) {
                if after.cell(now.x, now.y) == CoreCell::Closed {
                    report.closed_in += 1;
                } else {
                    uncredited += 1;
                }
            }
            let gained =
                (now.bombs_max - was.bombs_max) + (now.range - was.range) + (now.speed - was.speed);
            report.power_ups_taken += gained as u32;
        }
        report.kills += credited;
        report.own_fault += uncredited.saturating_sub(credited);
        report.reached_sudden_death |= after.sudden_death();
    }

    /// Sums over `games` seeded games.
    pub fn season(games: u64) -> Vec<GameReport> {
        (0..games).map(play).collect()
    }

    /// Over seeded games the bots make a game of it: most games have a
    /// winner, few players blow themselves up, power-ups get taken and
    /// opponents get killed. (Before bots waited out their move cooldown,
    /// stale buffered moves made them walk into fire: 2.7 of 3 deaths per
    /// game were their own fault.)
    #[test]
    fn bots_play_decent_games() {
        let games = season(40);
        let n = games.len() as f64;
        let winners = games.iter().filter(|g| g.winner.is_some()).count() as f64;
        let own_fault = games.iter().map(|g| g.own_fault).sum::<u32>() as f64;
        let kills = games.iter().map(|g| g.kills).sum::<u32>() as f64;
        let power_ups = games.iter().map(|g| g.power_ups_taken).sum::<u32>() as f64;
        assert!(winners / n >= 0.75, "winner in {winners} of {n} games");
        assert!(
            own_fault / n <= 1.5,
            "{own_fault} own-fault deaths in {n} games"
        );
        assert!(kills / n >= 1.0, "{kills} kills in {n} games");
        assert!(
            power_ups / n >= 5.0,
            "{power_ups} power-ups taken in {n} games"
        );
    }

    #[test]
    #[ignore = "a report for tuning the brain: cargo test -p borbaman --release brain::arena -- --ignored --nocapture"]
    fn report() {
        let games = season(200);
        let n = games.len() as f64;
        let sum = |f: fn(&GameReport) -> u32| games.iter().map(f).sum::<u32>() as f64;
        println!(
            "{} games: winner {:.0}%  draw {:.0}%  sudden death reached {:.0}%",
            games.len(),
            100.0 * games.iter().filter(|g| g.winner.is_some()).count() as f64 / n,
            100.0 * games.iter().filter(|g| g.draw).count() as f64 / n,
            100.0 * games.iter().filter(|g| g.reached_sudden_death).count() as f64 / n,
        );
        println!(
            "per game: {:.1} s long, kills {:.2}, own-fault deaths {:.2}, closed in {:.2}, \
             power-ups {:.1}, bombs {:.1}",
            sum(|g| g.end_tick) / n * 0.05,
            sum(|g| g.kills) / n,
            sum(|g| g.own_fault) / n,
            sum(|g| g.closed_in) / n,
            sum(|g| g.power_ups_taken) / n,
            sum(|g| g.bombs_planted) / n,
        );
    }
}
