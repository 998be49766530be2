//! The arenas: geometry, each layout's fixed pillars, spawn corners, the
//! sudden-death spiral and map generation from a seed. Tables are built at
//! compile time.

use super::rng::SplitMix64;
use super::{Dir, HEIGHT, WIDTH};

/// What a cell holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cell {
    Floor,
    /// Indestructible: the outer ring and the arena's inner pillars.
    Pillar,
    /// Destructible block, possibly hiding a power-up.
    Soft {
        hidden: Option<PowerUp>,
    },
    /// An exposed power-up, taken by walking onto it.
    PowerUp(PowerUp),
    /// Closed by sudden death: a wall.
    Closed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PowerUp {
    /// One more bomb on the board at once.
    Bomb,
    /// One more cell of blast range.
    Range,
    /// One tick less of move cooldown.
    Speed,
    /// Walking into a bomb kicks it: it slides until something stops it.
    Kick,
    /// The player's bombs wait for its detonator, up to
    /// [`REMOTE_FUSE_TICKS`](crate::REMOTE_FUSE_TICKS).
    Remote,
}

impl PowerUp {
    pub const ALL: [PowerUp; 5] = [
        PowerUp::Bomb,
        PowerUp::Range,
        PowerUp::Speed,
        PowerUp::Kick,
        PowerUp::Remote,
    ];
}

/// Which power-ups a game's soft blocks may hide: fixed when the game is
/// created and kept in it, so a stored map always redraws the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PowerSet {
    /// Extra bomb, longer blast and speed (40/40/20%) on every arena: every
    /// game stored before the kick and the remote control.
    Basic,
    /// The arena's full mix ([`Arena::power_mix`]), kick and remote
    /// control included: every new game.
    #[default]
    Full,
}

pub const CELLS: usize = WIDTH as usize * HEIGHT as usize;

/// Share of open cells (outside the spawn corners) drawn as soft blocks, %.
const SOFT_PERCENT: u32 = 65;
/// Share of soft blocks hiding a power-up, %.
const POWER_PERCENT: u32 = 30;

/// Spawn corners of seats 0-3: top-left, top-right, bottom-left,
/// bottom-right.
pub(crate) const SPAWNS: [(u8, u8); 4] = [
    (1, 1),
    (WIDTH - 2, 1),
    (1, HEIGHT - 2),
    (WIDTH - 2, HEIGHT - 2),
];

/// Row-major index of (x, y).
pub const fn index(x: u8, y: u8) -> usize {
    y as usize * WIDTH as usize + x as usize
}

pub(crate) const fn coords(i: usize) -> (u8, u8) {
    ((i % WIDTH as usize) as u8, (i / WIDTH as usize) as u8)
}

/// The arenas a game can be played on. Every layout is symmetric about
/// both axes through the centre, so all four spawn corners see the same
/// arena; a game's arena is chosen when it is created and stored in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Arena {
    /// Pillars on every cell whose coordinates are both even: short lanes
    /// and many corners to hide behind.
    #[default]
    Classic,
    /// No pillars inside the ring: blasts run the whole width of the board.
    Open,
    /// The classic pillars joined into walls, leaving long horizontal
    /// corridors linked only along the edges and a central cross.
    Corridors,
}

/// Why a map name was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown map {0:?}; the maps are: classic, open, corridors")]
pub struct UnknownArena(pub String);

impl Arena {
    pub const ALL: [Arena; 3] = [Arena::Classic, Arena::Open, Arena::Corridors];

    /// The name players type (`play --map NAME`) and screens show.
    pub const fn name(self) -> &'static str {
        match self {
            Arena::Classic => "classic",
            Arena::Open => "open",
            Arena::Corridors => "corridors",
        }
    }

    /// The arena called `name` (case-insensitive).
    pub fn from_name(name: &str) -> Result<Arena, UnknownArena> {
        let wanted = name.trim().to_ascii_lowercase();
        Arena::ALL
            .into_iter()
            .find(|a| a.name() == wanted)
            .ok_or_else(|| UnknownArena(name.to_string()))
    }

    /// The number stored in a state, in SQL and on the wire (0 classic).
    pub const fn code(self) -> u8 {
        match self {
            Arena::Classic => 0,
            Arena::Open => 1,
            Arena::Corridors => 2,
        }
    }

    pub const fn from_code(code: u8) -> Option<Arena> {
        match code {
            0 => Some(Arena::Classic),
            1 => Some(Arena::Open),
            2 => Some(Arena::Corridors),
            _ => None,
        }
    }

    /// The shares, in percent, of the power-ups a soft block of a new game
    /// on this arena hides, in the order of [`PowerUp::ALL`] (bomb, range,
    /// speed, kick, remote). The kick is worth most where bombs have room to
    /// slide; the remote where blasts are long.
    pub const fn power_mix(self) -> [u32; 5] {
        match self {
            Arena::Classic => [30, 30, 15, 15, 10],
            Arena::Open => [30, 25, 15, 20, 10],
            Arena::Corridors => [30, 30, 10, 15, 15],
        }
    }

    /// The arena's precomputed tables.
    pub(crate) fn layout(self) -> &'static Layout {
        &LAYOUTS[self.code() as usize]
    }
}

impl std::fmt::Display for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether (x, y) is a pillar in `arena`: the outer ring and cells off the
/// grid always are.
pub(crate) const fn is_pillar(arena: Arena, x: u8, y: u8) -> bool {
    if x == 0 || y == 0 || x >= WIDTH - 1 || y >= HEIGHT - 1 {
        return true;
    }
    let grid = (x | y) & 1 == 0;
    match arena {
        Arena::Classic => grid,
        Arena::Open => false,
        // Even rows other than the centre row are walls, except for the
        // edge columns and the centre column.
        Arena::Corridors => {
            grid || (y & 1 == 0 && y != HEIGHT / 2 && x != 1 && x != WIDTH / 2 && x != WIDTH - 2)
        }
    }
}

/// The neighbour of (x, y) in `dir`, if it is on the grid.
pub(crate) fn step(x: u8, y: u8, dir: Dir) -> Option<(u8, u8)> {
    let (x, y) = match dir {
        Dir::Up => (x, y.checked_sub(1)?),
        Dir::Down => (x, y + 1),
        Dir::Left => (x.checked_sub(1)?, y),
        Dir::Right => (x + 1, y),
    };
    (x < WIDTH && y < HEIGHT).then_some((x, y))
}

/// Cells inside the outer ring: the most open cells an arena can have.
pub(crate) const MAX_OPEN_CELLS: usize = (WIDTH as usize - 2) * (HEIGHT as usize - 2);

/// An arena's tables, built at compile time.
pub(crate) struct Layout {
    pub(crate) arena: Arena,
    /// Grid indices of the open (non-pillar) cells, row-major, in the first
    /// `open_len` entries: the only cells whose content can change. The
    /// codec stores one entry per open cell in this order.
    open: [u8; MAX_OPEN_CELLS],
    open_len: usize,
    /// Sudden-death closing order: the open cells ring by ring from the
    /// edge inwards, each ring clockwise from its top-left corner.
    spiral: [u8; MAX_OPEN_CELLS],
}

impl Layout {
    pub(crate) fn open(&self) -> &[u8] {
        &self.open[..self.open_len]
    }

    pub(crate) fn spiral(&self) -> &[u8] {
        &self.spiral[..self.open_len]
    }

    pub(crate) fn open_cells(&self) -> usize {
        self.open_len
    }

    pub(crate) fn is_pillar(&self, x: u8, y: u8) -> bool {
        is_pillar(self.arena, x, y)
    }
}

static LAYOUTS: [Layout; 3] = [
    layout(Arena::Classic),
    layout(Arena::Open),
    layout(Arena::Corridors),
];

const fn layout(arena: Arena) -> Layout {
    let mut open = [0u8; MAX_OPEN_CELLS];
    let (mut i, mut n) = (0, 0);
    while i < CELLS {
        let (x, y) = coords(i);
        if !is_pillar(arena, x, y) {
            open[n] = i as u8;
            n += 1;
        }
        i += 1;
    }
    Layout {
        arena,
        open,
        open_len: n,
        spiral: spiral(arena, n),
    }
}

const fn spiral(arena: Arena, open_len: usize) -> [u8; MAX_OPEN_CELLS] {
    let mut out = [0u8; MAX_OPEN_CELLS];
    let mut n = 0;
    let (mut left, mut top, mut right, mut bottom) = (1u8, 1u8, WIDTH - 2, HEIGHT - 2);
    // Visits each cell of the inner rectangle once, keeping the open ones.
    macro_rules! visit {
        ($x:expr, $y:expr) => {
            if !is_pillar(arena, $x, $y) {
                out[n] = index($x, $y) as u8;
                n += 1;
            }
        };
    }
    while left <= right && top <= bottom {
        let mut x = left;
        while x <= right {
            visit!(x, top);
            x += 1;
        }
        let mut y = top + 1;
        while y <= bottom {
            visit!(right, y);
            y += 1;
        }
        if bottom > top {
            let mut x = right;
            while x > left {
                x -= 1;
                visit!(x, bottom);
            }
        }
        if right > left {
            let mut y = bottom;
            while y > top + 1 {
                y -= 1;
                visit!(left, y);
            }
        }
        left += 1;
        top += 1;
        right -= 1;
        bottom -= 1;
    }
    assert!(n == open_len);
    out
}

/// True for a spawn corner and its two open neighbours (the L kept clear).
pub(crate) fn is_spawn_clear(x: u8, y: u8) -> bool {
    SPAWNS
        .iter()
        .any(|&(sx, sy)| sx.abs_diff(x) as u16 + sy.abs_diff(y) as u16 <= 1)
}

/// Draws the starting map of a game on `arena` from its seed.
pub(crate) fn generate(arena: Arena, powers: PowerSet, seed: u64) -> [Cell; CELLS] {
    let mut rng = SplitMix64::new(seed);
    let mut cells = [Cell::Pillar; CELLS];
    for &i in arena.layout().open() {
        let (x, y) = coords(i as usize);
        cells[i as usize] = if is_spawn_clear(x, y) || rng.below(100) >= SOFT_PERCENT {
            Cell::Floor
        } else if rng.below(100) < POWER_PERCENT {
            let hidden = match powers {
                // The draw every basic game was made with: keep it as is.
                PowerSet::Basic => match rng.below(5) {
                    0 | 1 => PowerUp::Bomb,
                    2 | 3 => PowerUp::Range,
                    _ => PowerUp::Speed,
                },
                PowerSet::Full => pick(arena.power_mix(), rng.below(100)),
            };
            Cell::Soft {
                hidden: Some(hidden),
            }
        } else {
            Cell::Soft { hidden: None }
        };
    }
    cells
}

/// The power-up whose share of `mix` (percent, in [`PowerUp::ALL`] order)
/// holds `roll` (0..100).
fn pick(mix: [u32; 5], roll: u32) -> PowerUp {
    let mut upto = 0;
    for (power, share) in PowerUp::ALL.into_iter().zip(mix) {
        upto += share;
        if roll < upto {
            return power;
        }
    }
    PowerUp::Bomb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_has_113_open_cells_and_a_pillar_ring() {
        let classic = Arena::Classic.layout();
        assert_eq!(classic.open_cells(), 113);
        assert_eq!(Arena::Open.layout().open_cells(), MAX_OPEN_CELLS);
        for arena in Arena::ALL {
            let l = arena.layout();
            for x in 0..WIDTH {
                assert!(l.is_pillar(x, 0) && l.is_pillar(x, HEIGHT - 1));
            }
            for y in 0..HEIGHT {
                assert!(l.is_pillar(0, y) && l.is_pillar(WIDTH - 1, y));
            }
        }
        assert!(classic.is_pillar(2, 2) && !classic.is_pillar(1, 2) && !classic.is_pillar(3, 3));
        assert!(!Arena::Open.layout().is_pillar(2, 2));
        // Corridors: row 2 is a wall but for the edge and centre columns.
        let corridors = Arena::Corridors.layout();
        assert!(corridors.is_pillar(3, 2) && corridors.is_pillar(11, 10));
        assert!(!corridors.is_pillar(1, 2) && !corridors.is_pillar(7, 2));
        assert!(!corridors.is_pillar(3, 6));
    }

    /// Every layout is the same seen from each corner: symmetric about both
    /// centre lines, so no seat starts on a different arena.
    #[test]
    fn every_arena_is_symmetric_about_both_centre_lines() {
        for arena in Arena::ALL {
            for y in 0..HEIGHT {
                for x in 0..WIDTH {
                    let p = is_pillar(arena, x, y);
                    assert_eq!(p, is_pillar(arena, WIDTH - 1 - x, y), "{arena} ({x}, {y})");
                    assert_eq!(p, is_pillar(arena, x, HEIGHT - 1 - y), "{arena} ({x}, {y})");
                }
            }
        }
    }

    /// Every open cell of every arena can be walked to from every spawn
    /// (ignoring soft blocks): no part of an arena is walled off.
    #[test]
    fn every_arena_is_connected() {
        for arena in Arena::ALL {
            let l = arena.layout();
            let mut seen = [false; CELLS];
            let mut stack = vec![SPAWNS[0]];
            seen[index(1, 1)] = true;
            while let Some((x, y)) = stack.pop() {
                for d in Dir::ALL {
                    if let Some((nx, ny)) = step(x, y, d)
                        && !l.is_pillar(nx, ny)
                        && !seen[index(nx, ny)]
                    {
                        seen[index(nx, ny)] = true;
                        stack.push((nx, ny));
                    }
                }
            }
            for &i in l.open() {
                assert!(
                    seen[i as usize],
                    "{arena}: cell {:?} walled off",
                    coords(i as usize)
                );
            }
        }
    }

    #[test]
    fn map_names_round_trip_and_unknown_names_list_the_valid_ones() {
        for arena in Arena::ALL {
            assert_eq!(Arena::from_name(arena.name()), Ok(arena));
            assert_eq!(Arena::from_code(arena.code()), Some(arena));
        }
        assert_eq!(Arena::from_name(" Open "), Ok(Arena::Open));
        let err = Arena::from_name("lava").unwrap_err().to_string();
        assert!(
            err.contains("\"lava\"") && err.contains("classic, open, corridors"),
            "{err}"
        );
    }

    #[test]
    fn spiral_visits_every_open_cell_once_from_the_edge() {
        let classic = Arena::Classic.layout();
        assert_eq!(
            classic.spiral()[classic.open_cells() - 1] as usize,
            index(7, 6)
        );
        for arena in Arena::ALL {
            let l = arena.layout();
            let mut seen = [false; CELLS];
            for &i in l.spiral() {
                assert!(
                    !seen[i as usize] && !l.is_pillar(coords(i as usize).0, coords(i as usize).1)
                );
                seen[i as usize] = true;
            }
            assert_eq!(l.spiral().len(), l.open_cells());
            assert_eq!(l.spiral()[0] as usize, index(1, 1));
            assert_eq!(l.spiral()[1] as usize, index(2, 1));
            // The centre row closes last.
            let (x, y) = coords(l.spiral()[l.open_cells() - 1] as usize);
            assert!(
                y == HEIGHT / 2 && (6..=8).contains(&x),
                "{arena} ends at ({x}, {y})"
            );
        }
    }

    #[test]
    fn spawn_corners_are_clear_and_map_is_seeded() {
        for (arena, seed) in Arena::ALL
            .into_iter()
            .flat_map(|a| (0..200).map(move |s| (a, s)))
        {
            let cells = generate(arena, PowerSet::Full, seed);
            for &(sx, sy) in &SPAWNS {
                assert_eq!(cells[index(sx, sy)], Cell::Floor);
                let around = Dir::ALL
                    .iter()
                    .filter_map(|&d| step(sx, sy, d))
                    .filter(|&(x, y)| cells[index(x, y)] == Cell::Floor)
                    .count();
                assert!(
                    around >= 2,
                    "{arena} seed {seed}: L at ({sx}, {sy}) not clear"
                );
            }
        }
        assert_eq!(
            generate(Arena::Open, PowerSet::Full, 42),
            generate(Arena::Open, PowerSet::Full, 42)
        );
        assert_ne!(
            generate(Arena::Open, PowerSet::Full, 42),
            generate(Arena::Open, PowerSet::Full, 43)
        );
        assert_ne!(
            generate(Arena::Open, PowerSet::Full, 42),
            generate(Arena::Classic, PowerSet::Full, 42)
        );
    }

    #[test]
    fn soft_blocks_and_power_ups_have_the_intended_density() {
        let (mut open, mut soft, mut power) = (0, 0, 0);
        for seed in 0..500 {
            for cell in generate(Arena::Classic, PowerSet::Full, seed) {
                match cell {
                    Cell::Pillar => {}
                    Cell::Soft { hidden } => {
                        open += 1;
                        soft += 1;
                        power += hidden.is_some() as u32;
                    }
                    _ => open += 1,
                }
            }
        }
        let soft_pct = soft * 100 / open;
        let power_pct = power * 100 / soft;
        assert!((55..=68).contains(&soft_pct), "soft {soft_pct}%");
        assert!((25..=35).contains(&power_pct), "power-ups {power_pct}%");
    }

    /// Each arena's mix adds up, and the drawn maps follow it: every kind
    /// turns up near its share, and a basic game never hides a kick or a
    /// remote control.
    #[test]
    fn each_arena_hides_its_own_mix_of_power_ups() {
        for arena in Arena::ALL {
            let mix = arena.power_mix();
            assert_eq!(mix.iter().sum::<u32>(), 100, "{arena}");
            let mut seen = [0u32; 5];
            let mut basic = [0u32; 5];
            for seed in 0..400 {
                for (set, counts) in [(PowerSet::Full, &mut seen), (PowerSet::Basic, &mut basic)] {
                    for cell in generate(arena, set, seed) {
                        if let Cell::Soft { hidden: Some(p) } = cell {
                            counts[PowerUp::ALL.iter().position(|&q| q == p).unwrap()] += 1;
                        }
                    }
                }
            }
            let total: u32 = seen.iter().sum();
            for k in 0..5 {
                let pct = seen[k] * 100 / total;
                assert!(
                    pct.abs_diff(mix[k]) <= 3,
                    "{arena}: kind {k} at {pct}%, mix {mix:?}"
                );
            }
            assert_eq!(
                basic[3] + basic[4],
                0,
                "{arena}: a basic game hid a kick or remote"
            );
        }
    }
}
