//! A game state from a server is checked once, where it arrives, before
//! anything draws it or plans with it: the numbers that size allocations,
//! index the board or multiply into durations must be the core's. A server
//! of another version, or a hostile one, gets a clear refusal instead of a
//! client that panics, allocates wildly or overflows.

use borbaman_game::{
    BLAST_TICKS, HEIGHT, MAX_BOMBS, MAX_RANGE, REMOTE_FUSE_TICKS, SEATS, TICK_MS, WIDTH,
};
use borbaman_proto::pb;

/// Longest player name a state may carry, in bytes (names are at most 16
/// characters of at most 4 bytes).
const MAX_NAME_BYTES: usize = 64;

/// `Ok` when `state` is a game this client can draw and play; else why not.
pub fn check_state(state: &pb::GameState) -> Result<(), String> {
    let cells = usize::from(WIDTH) * usize::from(HEIGHT);
    if state.width != u32::from(WIDTH) || state.height != u32::from(HEIGHT) {
        return Err(format!(
            "grid {}×{} (expected {WIDTH}×{HEIGHT})",
            state.width, state.height
        ));
    }
    if state.cells.len() != cells {
        return Err(format!("{} cells (expected {cells})", state.cells.len()));
    }
    if let Some(&bad) = state
        .cells
        .iter()
        .find(|&&c| pb::Cell::try_from(i32::from(c)).is_err())
    {
        return Err(format!("unknown cell kind {bad}"));
    }
    if state.tick_ms != TICK_MS {
        return Err(format!("tick of {} ms (expected {TICK_MS})", state.tick_ms));
    }
    if pb::Phase::try_from(state.phase).is_err() {
        return Err(format!("unknown phase {}", state.phase));
    }
    if state.players.len() != SEATS {
        return Err(format!(
            "{} players (expected {SEATS})",
            state.players.len()
        ));
    }
    let on_board = |x: u32, y: u32| x < u32::from(WIDTH) && y < u32::from(HEIGHT);
    for (i, p) in state.players.iter().enumerate() {
        if p.seat as usize != i {
            return Err(format!("player {i} says seat {}", p.seat));
        }
        if !on_board(p.x, p.y) {
            return Err(format!("player {i} at ({}, {}), off the board", p.x, p.y));
        }
        if p.name.len() > MAX_NAME_BYTES {
            return Err(format!("player {i}'s name is {} bytes long", p.name.len()));
        }
        if p.bombs_max > u32::from(MAX_BOMBS) || p.range > u32::from(MAX_RANGE) {
            return Err(format!("player {i} has impossible power-ups"));
        }
    }
    if state.bombs.len() > cells || state.blasts.len() > cells {
        return Err("more bombs or blasts than cells".into());
    }
    for b in &state.bombs {
        if !on_board(b.x, b.y)
            || b.fuse_ticks > u32::from(REMOTE_FUSE_TICKS)
            || b.owner as usize >= SEATS
        {
            return Err(format!("impossible bomb at ({}, {})", b.x, b.y));
        }
    }
    for b in &state.blasts {
        if !on_board(b.x, b.y) || b.ticks_left > u32::from(BLAST_TICKS) {
            return Err(format!("impossible blast at ({}, {})", b.x, b.y));
        }
    }
    if state.winner.is_some_and(|w| w as usize >= SEATS) {
        return Err("winner is not a seat".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> pb::GameState {
        let cells = usize::from(WIDTH) * usize::from(HEIGHT);
        pb::GameState {
            width: u32::from(WIDTH),
            height: u32::from(HEIGHT),
            cells: vec![pb::Cell::Floor as u8; cells],
            players: (0..SEATS as u32)
                .map(|seat| pb::Player {
                    seat,
                    x: 1,
                    y: 1,
                    bombs_max: 1,
                    range: 2,
                    ..Default::default()
                })
                .collect(),
            tick_ms: TICK_MS,
            phase: pb::Phase::Playing as i32,
            ..Default::default()
        }
    }

    #[test]
    fn a_sane_state_passes() {
        assert_eq!(check_state(&valid()), Ok(()));
    }

    #[test]
    fn hostile_states_are_refused_with_a_reason() {
        type Spoil = Box<dyn Fn(&mut pb::GameState)>;
        let cases: Vec<(&str, Spoil)> = vec![
            ("grid", Box::new(|s| s.width = u32::MAX)),
            ("grid", Box::new(|s| s.height = 0)),
            ("cells", Box::new(|s| s.cells.truncate(3))),
            ("cell kind", Box::new(|s| s.cells[0] = 200)),
            ("tick", Box::new(|s| s.tick_ms = u32::MAX)),
            ("phase", Box::new(|s| s.phase = 77)),
            ("players", Box::new(|s| s.players.clear())),
            ("off the board", Box::new(|s| s.players[2].x = 4000)),
            ("name", Box::new(|s| s.players[0].name = "x".repeat(10_000))),
            (
                "bomb",
                Box::new(|s| {
                    s.bombs.push(pb::Bomb {
                        x: 1,
                        y: 1,
                        owner: 0,
                        range: 2,
                        fuse_ticks: u32::MAX,
                        slide: 0,
                    })
                }),
            ),
            (
                "blast",
                Box::new(|s| {
                    s.blasts.push(pb::Blast {
                        x: 99,
                        y: 1,
                        ticks_left: 1,
                    })
                }),
            ),
            ("winner", Box::new(|s| s.winner = Some(9))),
        ];
        for (what, spoil) in cases {
            let mut state = valid();
            spoil(&mut state);
            let err = check_state(&state).expect_err(what);
            assert!(err.contains(what), "{what}: {err}");
        }
    }
}
