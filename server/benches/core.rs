//! Micro-benchmarks of the game core: one tick of `advance`, one `apply`,
//! `encode`, `decode` and `to_proto`, on a mid-game state with bombs. Also
//! prints the encoded size at the start, middle and end of bot games, and,
//! after criterion, the heap allocations and bytes allocated per operation
//! (a counting global allocator; a separate pass, so counting costs the
//! timed loops nothing beyond two relaxed atomic adds per allocation).
//!
//! The games are played by a simple deterministic bot: flee danger, plant
//! a bomb next to a soft block or a rival when an escape exists, otherwise
//! walk towards power-ups, soft blocks and rivals.
//!
//! Run: `cargo bench -p borbaman-server --bench core -- --warm-up-time 1 --measurement-time 2`

use std::collections::VecDeque;
use std::hint::black_box;

use borbaman_game::{
    Action, Cell, Dir, GameState, HEIGHT, MAX_ENCODED_BYTES, Phase, SEATS, Tick, WIDTH,
};
use borbaman_server::wire::ToProto;
use criterion::{BatchSize, Criterion, criterion_group};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{Allocated, CountingAlloc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const CELLS: usize = WIDTH as usize * HEIGHT as usize;
/// A bot acts every this many ticks (100 ms: a brisk human).
const BOT_EVERY_TICKS: Tick = 2;

fn index(x: u8, y: u8) -> usize {
    y as usize * WIDTH as usize + x as usize
}

fn step(x: u8, y: u8, dir: Dir) -> (u8, u8) {
    match dir {
        Dir::Up => (x, y.saturating_sub(1)),
        Dir::Down => (x, (y + 1).min(HEIGHT - 1)),
        Dir::Left => (x.saturating_sub(1), y),
        Dir::Right => ((x + 1).min(WIDTH - 1), y),
    }
}

/// Cells a player may stand in or walk through.
fn walkable(g: &GameState, bombs: &[bool; CELLS], x: u8, y: u8) -> bool {
    matches!(g.cell(x, y), Cell::Floor | Cell::PowerUp(_)) && !bombs[index(x, y)]
}

/// Cells burning now or in the path of a bomb (traced like the rules do).
fn danger(g: &GameState, bombs: &[bool; CELLS], extra: Option<(u8, u8, u8)>) -> [bool; CELLS] {
    let mut out = [false; CELLS];
    for b in g.blasts() {
        out[index(b.x, b.y)] = true;
    }
    let sources = g.bombs().map(|b| (b.x, b.y, b.range)).chain(extra);
    for (bx, by, range) in sources {
        out[index(bx, by)] = true;
        for dir in Dir::ALL {
            let (mut x, mut y) = (bx, by);
            for _ in 0..range {
                (x, y) = step(x, y, dir);
                match g.cell(x, y) {
                    Cell::Pillar | Cell::Closed => break,
                    Cell::Soft { .. } => {
                        out[index(x, y)] = true;
                        break;
                    }
                    _ => {
                        out[index(x, y)] = true;
                        if bombs[index(x, y)] {
                            break;
                        }
                    }
                }
            }
        }
    }
    out
}

/// Breadth-first search from (x, y) over walkable cells that are not
/// `avoid`; returns the first step towards the nearest cell `goal` accepts.
fn first_step(
    g: &GameState,
    bombs: &[bool; CELLS],
    from: (u8, u8),
    avoid: &[bool; CELLS],
    goal: impl Fn(u8, u8) -> bool,
) -> Option<Option<Dir>> {
    let mut seen = [false; CELLS];
    let mut queue = VecDeque::new();
    seen[index(from.0, from.1)] = true;
    queue.push_back((from, None));
    while let Some(((x, y), first)) = queue.pop_front() {
        if goal(x, y) {
            return Some(first);
        }
        for dir in Dir::ALL {
            let (nx, ny) = step(x, y, dir);
            let i = index(nx, ny);
            if !seen[i] && walkable(g, bombs, nx, ny) && !avoid[i] {
                seen[i] = true;
                queue.push_back(((nx, ny), first.or(Some(dir))));
            }
        }
    }
    None
}

/// What the bot in `seat` does now.
fn bot(g: &GameState, seat: u8) -> Action {
    let me = *g.player(seat).expect("seat exists");
    let mut bombs = [false; CELLS];
    for b in g.bombs() {
        bombs[index(b.x, b.y)] = true;
    }
    let here = (me.x, me.y);
    let unsafe_now = danger(g, &bombs, None);
    let move_to = |step: Option<Option<Dir>>| match step {
        Some(Some(dir)) => Action::Move(dir),
        _ => Action::Idle,
    };

    // 1. In danger: run to the nearest safe cell, through fire-free cells.
    if unsafe_now[index(me.x, me.y)] {
        let mut burning = [false; CELLS];
        for b in g.blasts() {
            burning[index(b.x, b.y)] = true;
        }
        return move_to(first_step(g, &bombs, here, &burning, |x, y| {
            !unsafe_now[index(x, y)]
        }));
    }

    let rivals: Vec<(u8, u8)> = (0..SEATS as u8)
        .filter(|&s| s != seat && g.is_alive(s))
        .filter_map(|s| g.player(s).map(|p| (p.x, p.y)))
        .collect();
    let near_target = |x: u8, y: u8| {
        let soft = Dir::ALL
            .iter()
            .any(|&d| matches!(g.cell(step(x, y, d).0, step(x, y, d).1), Cell::Soft { .. }));
        let rival = rivals
            .iter()
            .any(|&(rx, ry)| rx.abs_diff(x) + ry.abs_diff(y) <= 2);
        soft || rival
    };

    // 2. Next to a target with a bomb in hand: plant if an escape exists.
    if near_target(me.x, me.y) && g.bombs_placed(seat) < me.bombs_max && !bombs[index(me.x, me.y)] {
        let after = danger(g, &bombs, Some((me.x, me.y, me.range)));
        // The search starts on the bomb's cell: a player may walk off it.
        if first_step(g, &bombs, here, &unsafe_now, |x, y| !after[index(x, y)]).is_some() {
            return Action::Bomb;
        }
    }

    // 3. Walk (through safe cells) to a power-up, else to a target.
    let power = first_step(g, &bombs, here, &unsafe_now, |x, y| {
        matches!(g.cell(x, y), Cell::PowerUp(_))
    });
    let step = power.or_else(|| first_step(g, &bombs, here, &unsafe_now, near_target));
    move_to(step)
}

/// A whole bot game; returns the state after every tick.
fn bot_game(seed: u64) -> Vec<GameState> {
    let mut g = GameState::new(seed, 0);
    for _ in 0..SEATS {
        g.seat_player(0);
    }
    let mut trail = vec![g.clone()];
    let mut tick = 0;
    while g.phase() == Phase::Playing {
        tick += 1;
        g.advance(tick);
        for seat in 0..SEATS as u8 {
            // Bots act on staggered ticks, like players on different links.
            let turn = (tick + seat as Tick) % BOT_EVERY_TICKS;
            if g.is_alive(seat) && turn == 0 {
                let action = bot(&g, seat);
                g.apply(seat, action, tick);
            }
        }
        trail.push(g.clone());
    }
    trail
}

fn report_sizes() {
    println!("encoded state size (bytes; limit {MAX_ENCODED_BYTES}) over bot games:");
    println!("seed  ticks  ending       start  middle  end  max  mean");
    for seed in 1..=8u64 {
        let trail = bot_game(seed);
        let sizes: Vec<usize> = trail.iter().map(|g| g.encode().len()).collect();
        let last = trail.last().expect("at least one state");
        let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
        println!(
            "{seed:>4}  {:>5}  {:<11}  {:>5}  {:>6}  {:>3}  {:>3}  {mean:>5.1}",
            last.tick(),
            format!("{:?}", last.ending().expect("finished")),
            sizes[0],
            sizes[sizes.len() / 2],
            sizes[sizes.len() - 1],
            sizes.iter().max().expect("non-empty"),
        );
    }
}

/// A state from the middle of a bot game with the most bombs on the board.
fn mid_game() -> GameState {
    let trail = bot_game(1);
    let half = &trail[..trail.len() / 2];
    half.iter()
        .max_by_key(|g| (g.bombs().count(), g.blasts().count()))
        .expect("non-empty")
        .clone()
}

fn benches(c: &mut Criterion) {
    report_sizes();
    let state = mid_game();
    let bytes = state.encode();
    let tick = state.tick();
    println!(
        "benchmark state: tick {tick}, {} bombs, {} burning cells, {} bytes",
        state.bombs().count(),
        state.blasts().count(),
        bytes.len()
    );
    let seat = (0..SEATS as u8)
        .find(|&s| state.is_alive(s))
        .expect("someone alive");

    c.bench_function("advance one tick", |b| {
        b.iter_batched_ref(
            || state.clone(),
            |g| g.advance(tick + 1),
            BatchSize::SmallInput,
        )
    });
    c.bench_function("apply move", |b| {
        b.iter_batched_ref(
            || state.clone(),
            |g| g.apply(seat, Action::Move(Dir::Down), tick),
            BatchSize::SmallInput,
        )
    });
    c.bench_function("apply bomb", |b| {
        b.iter_batched_ref(
            || state.clone(),
            |g| g.apply(seat, Action::Bomb, tick),
            BatchSize::SmallInput,
        )
    });
    c.bench_function("encode", |b| b.iter(|| black_box(&state).encode()));
    c.bench_function("decode", |b| {
        b.iter(|| GameState::decode(black_box(&bytes)).expect("valid"))
    });
    let names = ["ann", "bob", "cy", "dee"].map(String::from);
    c.bench_function("to_proto", |b| {
        b.iter(|| black_box(&state).to_proto(1, 1, &names, [true; 4]))
    });
    // What the server does once per call: the names move into the reply.
    c.bench_function("to_proto, names moved", |b| {
        b.iter_batched(
            || names.clone(),
            |n| black_box(&state).to_proto_with_names(1, 1, n, [true; 4]),
            BatchSize::SmallInput,
        )
    });
    c.bench_function("load, apply, store (decode + apply + encode)", |b| {
        b.iter(|| {
            let mut g = GameState::decode(black_box(&bytes)).expect("valid");
            g.apply(seat, Action::Move(Dir::Down), tick + 1);
            g.encode()
        })
    });
}

/// Runs `op` on a fresh `setup()` value `ITERS` times, counting only what
/// `op` allocates.
fn allocs_per_op<T, R>(
    mut setup: impl FnMut() -> T,
    mut op: impl FnMut(&mut T) -> R,
) -> (f64, f64) {
    const ITERS: u64 = 2000;
    let mut total = Allocated::default();
    for _ in 0..ITERS {
        let mut input = setup();
        let before = Allocated::now();
        let out = op(&mut input);
        total.add(Allocated::since(before));
        drop(black_box(out));
    }
    total.per_op(ITERS)
}

fn report_allocations() {
    let state = mid_game();
    let bytes = state.encode();
    let tick = state.tick();
    let seat = (0..SEATS as u8)
        .find(|&s| state.is_alive(s))
        .expect("someone alive");
    let names = ["ann", "bob", "cy", "dee"].map(String::from);
    let rows: [(&str, (f64, f64)); 8] = [
        (
            "advance one tick",
            allocs_per_op(|| state.clone(), |g| g.advance(tick + 1)),
        ),
        (
            "apply move",
            allocs_per_op(
                || state.clone(),
                |g| g.apply(seat, Action::Move(Dir::Down), tick),
            ),
        ),
        (
            "apply bomb",
            allocs_per_op(|| state.clone(), |g| g.apply(seat, Action::Bomb, tick)),
        ),
        ("encode", allocs_per_op(|| (), |_| state.encode())),
        (
            "decode",
            allocs_per_op(|| (), |_| GameState::decode(&bytes).expect("valid")),
        ),
        (
            "to_proto",
            allocs_per_op(|| (), |_| state.to_proto(1, 1, &names, [true; 4])),
        ),
        (
            "to_proto, names moved",
            allocs_per_op(
                || names.clone(),
                |n| state.to_proto_with_names(1, 1, std::mem::take(n), [true; 4]),
            ),
        ),
        (
            "decode + apply + encode",
            allocs_per_op(
                || (),
                |_| {
                    let mut g = GameState::decode(&bytes).expect("valid");
                    g.apply(seat, Action::Move(Dir::Down), tick + 1);
                    g.encode()
                },
            ),
        ),
    ];
    println!();
    println!("heap allocations per op (counting allocator; realloc counts as one)");
    println!("{:<26} {:>10} {:>10}", "op", "allocs/op", "bytes/op");
    for (name, (allocs, bytes)) in rows {
        println!("{name:<26} {allocs:>10.2} {bytes:>10.0}");
    }
}

criterion_group!(core, benches);

fn main() {
    core();
    Criterion::default().configure_from_args().final_summary();
    report_allocations();
}
