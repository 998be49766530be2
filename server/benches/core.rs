//! Micro-benchmarks of the game core: one tick of `advance`, one `apply`,
//! `encode`, `decode` and `to_proto`, on a mid-game state with bombs. Also
//! prints the encoded size at the start, middle and end of bot games, and,
//! after criterion, the heap allocations and bytes allocated per operation
//! (a counting global allocator; a separate pass, so counting costs the
//! timed loops nothing beyond two relaxed atomic adds per allocation).
//!
//! The games are played by the app's bot AI (`borbaman_client::brain`),
//! seeded per game, so each seed plays the same game every time.
//!
//! Run: `cargo bench -p borbaman-server --bench core -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;

use borbaman_client::brain;
use borbaman_game::{Action, Dir, GameState, MAX_ENCODED_BYTES, Phase, SEATS, Tick};
use borbaman_server::wire::{ToProto, action_from_proto};
use criterion::{BatchSize, Criterion, criterion_group};
use rand::SeedableRng;
use rand::rngs::StdRng;

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{Allocated, CountingAlloc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// A bot acts every this many ticks (100 ms: a brisk human).
const BOT_EVERY_TICKS: Tick = 2;

/// What the bot in `seat` does now: the app's bot AI
/// (`borbaman_client::brain`), on the state as clients see it, with a
/// generator seeded per game so that a seed always plays the same game.
fn bot(g: &GameState, seat: u8, rng: &mut StdRng) -> Action {
    let names = ["a", "b", "c", "d"].map(String::from);
    let state = g.to_proto(0, 0, &names, [true; SEATS]);
    let action = brain::decide(&state, u32::from(seat), rng);
    action_from_proto(action as i32).unwrap_or(Action::Idle)
}

/// A whole bot game; returns the state after every tick.
fn bot_game(seed: u64) -> Vec<GameState> {
    let mut g = GameState::new(seed, 0);
    let mut rng = StdRng::seed_from_u64(seed);
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
                let action = bot(&g, seat, &mut rng);
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
