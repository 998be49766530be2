//! The arena: geometry, fixed pillars, spawn corners, the sudden-death
//! spiral and map generation from a seed. Tables are built at compile time.

use super::rng::SplitMix64;
use super::{Dir, HEIGHT, WIDTH};

/// What a cell holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cell {
    Floor,
    /// Indestructible: the outer ring and cells with both coordinates even.
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

/// The outer ring, cells off the grid, and cells with both coordinates even
/// (`(x | y) & 1 == 0`).
pub(crate) const fn is_pillar(x: u8, y: u8) -> bool {
    x == 0 || y == 0 || x >= WIDTH - 1 || y >= HEIGHT - 1 || (x | y) & 1 == 0
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

/// Open (non-pillar) cells: the only cells whose content can change.
pub(crate) const OPEN_CELLS: usize = count_open();

/// Grid indices of the open cells, row-major. The codec stores one entry
/// per open cell in this order.
pub(crate) const OPEN: [u8; OPEN_CELLS] = open_cells();

/// Sudden-death closing order: the open cells ring by ring from the edge
/// inwards, each ring clockwise from its top-left corner.
pub(crate) const SPIRAL: [u8; OPEN_CELLS] = spiral();

const fn count_open() -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < CELLS {
        let (x, y) = coords(i);
        if !is_pillar(x, y) {
            n += 1;
        }
        i += 1;
    }
    n
}

const fn open_cells() -> [u8; OPEN_CELLS] {
    let mut out = [0u8; OPEN_CELLS];
    let (mut i, mut n) = (0, 0);
    while i < CELLS {
        let (x, y) = coords(i);
        if !is_pillar(x, y) {
            out[n] = i as u8;
            n += 1;
        }
        i += 1;
    }
    out
}

const fn spiral() -> [u8; OPEN_CELLS] {
    let mut out = [0u8; OPEN_CELLS];
    let mut n = 0;
    let (mut left, mut top, mut right, mut bottom) = (1u8, 1u8, WIDTH - 2, HEIGHT - 2);
    // Visits each cell of the inner rectangle once, keeping the open ones.
    macro_rules! visit {
        ($x:expr, $y:expr) => {
            if !is_pillar($x, $y) {
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
    assert!(n == OPEN_CELLS);
    out
}

/// True for a spawn corner and its two open neighbours (the L kept clear).
pub(crate) fn is_spawn_clear(x: u8, y: u8) -> bool {
    SPAWNS
        .iter()
        .any(|&(sx, sy)| sx.abs_diff(x) as u16 + sy.abs_diff(y) as u16 <= 1)
}

/// Draws the starting map of a game from its seed.
pub(crate) fn generate(seed: u64) -> [Cell; CELLS] {
    let mut rng = SplitMix64::new(seed);
    let mut cells = [Cell::Pillar; CELLS];
    for &i in &OPEN {
        let (x, y) = coords(i as usize);
        cells[i as usize] = if is_spawn_clear(x, y) || rng.below(100) >= SOFT_PERCENT {
            Cell::Floor
        } else if rng.below(100) < POWER_PERCENT {
            let hidden = match rng.below(5) {
                0 | 1 => PowerUp::Bomb,
                2 | 3 => PowerUp::Range,
                _ => PowerUp::Speed,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_has_113_open_cells_and_a_pillar_ring() {
        assert_eq!(OPEN_CELLS, 113);
        for x in 0..WIDTH {
            assert!(is_pillar(x, 0) && is_pillar(x, HEIGHT - 1));
        }
        for y in 0..HEIGHT {
            assert!(is_pillar(0, y) && is_pillar(WIDTH - 1, y));
        }
        assert!(is_pillar(2, 2) && !is_pillar(1, 2) && !is_pillar(3, 3));
    }

    #[test]
    fn spiral_visits_every_open_cell_once_from_the_edge() {
        let mut seen = [false; CELLS];
        for &i in &SPIRAL {
            assert!(!seen[i as usize]);
            seen[i as usize] = true;
        }
        assert_eq!(SPIRAL[0] as usize, index(1, 1));
        assert_eq!(SPIRAL[1] as usize, index(2, 1));
        // The centre cell (7, 6) closes last.
        assert_eq!(SPIRAL[OPEN_CELLS - 1] as usize, index(7, 6));
    }

    #[test]
    fn spawn_corners_are_clear_and_map_is_seeded() {
        for seed in 0..200 {
            let cells = generate(seed);
            for &(sx, sy) in &SPAWNS {
                assert_eq!(cells[index(sx, sy)], Cell::Floor);
                let around = Dir::ALL
                    .iter()
                    .filter_map(|&d| step(sx, sy, d))
                    .filter(|&(x, y)| cells[index(x, y)] == Cell::Floor)
                    .count();
                assert_eq!(around, 2, "seed {seed}: L at ({sx}, {sy}) not clear");
            }
        }
        assert_eq!(generate(42), generate(42));
        assert_ne!(generate(42), generate(43));
    }

    #[test]
    fn soft_blocks_and_power_ups_have_the_intended_density() {
        let (mut open, mut soft, mut power) = (0, 0, 0);
        for seed in 0..500 {
            for cell in generate(seed) {
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
}
