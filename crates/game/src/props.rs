//! Property tests of the whole core: random lobbies and random play never
//! panic, keep every invariant the decoder checks, stay deterministic, and
//! survive a trip through the codec at every step. Hostile bytes never
//! panic the decoder.

use proptest::prelude::*;

use super::codec::MAX_ENCODED_BYTES;
use super::{Action, Dir, GameState, Outcome, Phase, REMOTE_FUSE_TICKS, SEATS, Tick};

#[derive(Clone, Copy, Debug)]
enum Op {
    Seat,
    Unseat(u8),
    Forfeit(u8),
    Act(u8, Action),
    /// A move chosen from the state at run time, so random scripts still
    /// bring players together, onto power-ups and away from bombs.
    Steer(u8, Goal, bool),
    Advance,
}

#[derive(Clone, Copy, Debug)]
enum Goal {
    Player(u8),
    PowerUp,
    AwayFromBombs,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => prop::sample::select(Dir::ALL.to_vec()).prop_map(Action::Move),
        2 => Just(Action::Bomb),
        1 => Just(Action::Idle),
        1 => Just(Action::Detonate),
    ]
}

/// Seats 4 and 5 do not exist: they must be harmless.
fn seat() -> impl Strategy<Value = u8> {
    prop_oneof![10 => 0..SEATS as u8, 1 => 4..6u8]
}

fn goal() -> impl Strategy<Value = Goal> {
    prop_oneof![
        2 => (0..SEATS as u8).prop_map(Goal::Player),
        1 => Just(Goal::PowerUp),
        2 => Just(Goal::AwayFromBombs),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Seat),
        1 => seat().prop_map(Op::Unseat),
        1 => seat().prop_map(Op::Forfeit),
        60 => (seat(), action()).prop_map(|(s, a)| Op::Act(s, a)),
        60 => (seat(), goal(), any::<bool>()).prop_map(|(s, g, f)| Op::Steer(s, g, f)),
        3 => Just(Op::Advance),
    ]
}

/// The move `seat` makes towards `goal`: along the longer axis first (the
/// other one when `flip`), falling back to any open neighbour.
fn steer(g: &GameState, seat: u8, goal: Goal, flip: bool) -> Action {
    let Some(me) = g.player(seat).copied() else {
        return Action::Idle;
    };
    let (mx, my) = (me.x as i32, me.y as i32);
    let nearest = |cells: &mut dyn Iterator<Item = (u8, u8)>| {
        cells.min_by_key(|&(x, y)| (x as i32 - mx).abs() + (y as i32 - my).abs())
    };
    let target = match goal {
        Goal::Player(other) => g.player(other).map(|p| (p.x, p.y)),
        Goal::PowerUp => nearest(
            &mut (0..15u8)
                .flat_map(|x| (0..13u8).map(move |y| (x, y)))
                .filter(|&(x, y)| matches!(g.cell(x, y), super::Cell::PowerUp(_))),
        ),
        Goal::AwayFromBombs => nearest(&mut g.bombs().map(|b| (b.x, b.y))).map(|(x, y)| {
            (
                (2 * mx - x as i32).clamp(0, 14) as u8,
                (2 * my - y as i32).clamp(0, 12) as u8,
            )
        }),
    };
    let Some((tx, ty)) = target else {
        return Action::Bomb;
    };
    let (dx, dy) = (tx as i32 - mx, ty as i32 - my);
    let horizontal = if dx > 0 { Dir::Right } else { Dir::Left };
    let vertical = if dy > 0 { Dir::Down } else { Dir::Up };
    let mut order = if (dx.abs() >= dy.abs()) != flip {
        [horizontal, vertical]
    } else {
        [vertical, horizontal]
    }
    .to_vec();
    // A soft block in the way: blast through it.
    let ahead = super::map::step(me.x, me.y, order[0]);
    if ahead.is_some_and(|(x, y)| matches!(g.cell(x, y), super::Cell::Soft { .. })) {
        return Action::Bomb;
    }
    order.extend(Dir::ALL);
    let open = |dir: Dir| {
        let Some((x, y)) = super::map::step(me.x, me.y, dir) else {
            return false;
        };
        let free = matches!(g.cell(x, y), super::Cell::Floor | super::Cell::PowerUp(_));
        free && !g.bombs().any(|b| (b.x, b.y) == (x, y))
    };
    order
        .into_iter()
        .find(|&d| open(d))
        .map_or(Action::Bomb, Action::Move)
}

/// Ticks between operations: mostly a few, sometimes a long pause, now and
/// then a jump across the whole round.
fn gap() -> impl Strategy<Value = Tick> {
    prop_oneof![
        60 => 0..4u32,
        4 => 0..60u32,
        1 => 0..5000u32,
    ]
}

fn script() -> impl Strategy<Value = (u64, Tick, Vec<(Op, Tick)>)> {
    (
        any::<u64>(),
        0..1_000_000u32,
        prop::collection::vec((op(), gap()), 0..300),
    )
}

/// Runs one operation at `at`, checking what the outcome promises.
fn run(g: &mut GameState, op: Op, at: Tick) {
    let op = match op {
        Op::Steer(seat, goal, flip) => {
            let mut now = g.clone();
            now.advance(at);
            Op::Act(seat, steer(&now, seat, goal, flip))
        }
        op => op,
    };
    match op {
        Op::Seat => {
            let before = g.seated();
            if let Some(seat) = g.seat_player(at) {
                assert!(g.is_alive(seat));
                assert_eq!(g.seated(), before + 1);
            }
        }
        Op::Unseat(seat) => g.unseat_player(seat),
        Op::Forfeit(seat) => {
            g.forfeit(seat, at);
            if g.phase() == Phase::Playing {
                assert!(!g.is_alive(seat), "a forfeit in a running game kills");
            }
        }
        Op::Act(seat, action) => {
            let before = g.clone();
            let outcome = g.apply(seat, action, at);
            let mut advanced = before.clone();
            advanced.advance(at);
            let (p0, p1) = (advanced.player(seat).copied(), g.player(seat).copied());
            match (outcome, action) {
                (Outcome::Applied, Action::Move(dir)) => {
                    let (p0, p1) = (p0.unwrap(), p1.unwrap());
                    let dist = p0.x.abs_diff(p1.x) + p0.y.abs_diff(p1.y);
                    let kicked = dist == 0
                        && p0.kick
                        && super::map::step(p0.x, p0.y, dir).is_some_and(|(x, y)| {
                            g.bombs().any(|b| (b.x, b.y, b.slide) == (x, y, Some(dir)))
                        });
                    assert!(
                        dist == 1 || kicked,
                        "an applied move goes exactly one cell or kicks a bomb"
                    );
                    assert!(p1.move_cooldown == p1.move_cooldown_ticks() || !p1.alive);
                }
                (Outcome::Applied, Action::Detonate) => {
                    assert!(p0.unwrap().remote);
                    assert!(g.bombs().any(|b| b.owner == seat && b.fuse_ticks == 1));
                    assert!(g.bombs().all(|b| b.owner != seat || b.fuse_ticks == 1));
                }
                (Outcome::Applied, Action::Bomb) => {
                    assert_eq!(g.bombs_placed(seat), advanced.bombs_placed(seat) + 1);
                }
                (Outcome::Queued, Action::Move(dir)) => {
                    assert_eq!(p1.unwrap().buffered_move, Some(dir));
                    assert_eq!(
                        (p0.unwrap().x, p0.unwrap().y),
                        (p1.unwrap().x, p1.unwrap().y)
                    );
                }
                (Outcome::NoEffect, Action::Bomb | Action::Idle | Action::Detonate) => {
                    assert_eq!(*g, advanced, "no effect means no change");
                }
                (Outcome::NoEffect, Action::Move(_)) => {
                    // Nothing changes but an emptied move buffer.
                    let mut expected = advanced.clone();
                    if expected.phase == Phase::Playing && expected.is_alive(seat) {
                        expected.players[seat as usize].buffered_move = None;
                    }
                    assert_eq!(*g, expected);
                }
                (o, a) => panic!("{a:?} cannot end {o:?}"),
            }
        }
        Op::Advance => advance_tick_by_tick(g, at),
        Op::Steer(..) => unreachable!("resolved above"),
    }
}

/// Advances one tick at a time to `at` (the first 200 ticks), checking
/// what kicks and remote controls promise on every tick: a sliding bomb
/// moves at most one cell and only onto open floor, never onto another bomb
/// (no bomb vanishes without fire or a closing cell), and no bomb waits
/// longer than [`REMOTE_FUSE_TICKS`].
fn advance_tick_by_tick(g: &mut GameState, at: Tick) {
    let stop = at.min(g.tick().saturating_add(200));
    while g.tick() < stop && g.phase() == Phase::Playing {
        let before = g.clone();
        g.advance(g.tick() + 1);
        let lit = g.blasts().any(|b| b.ticks_left == super::BLAST_TICKS);
        let closed = g.closed != before.closed;
        if !lit && !closed {
            assert_eq!(
                g.bombs().count(),
                before.bombs().count(),
                "a bomb vanished without fire"
            );
        }
        for b in g.bombs() {
            assert!(b.fuse_ticks <= REMOTE_FUSE_TICKS);
            assert_eq!(
                g.cell(b.x, b.y),
                super::Cell::Floor,
                "a bomb on a wall or block"
            );
            let was_here = before.bombs().any(|o| (o.x, o.y) == (b.x, b.y));
            // From a neighbouring cell, by a slide under way or one a kick
            // started this tick (a buffered move that walks into a bomb).
            let slid_in = Dir::ALL.iter().any(|&d| {
                super::map::step(b.x, b.y, d).is_some_and(|(x, y)| {
                    before
                        .bombs()
                        .any(|o| (o.x, o.y) == (x, y) && (o.slide.is_some() || b.slide.is_some()))
                })
            });
            assert!(
                was_here || slid_in,
                "a bomb moved more than one cell a tick: {b:?} at tick {}; before: {:?}",
                g.tick(),
                before.bombs().collect::<Vec<_>>()
            );
        }
    }
    g.advance(at);
}

fn check(g: &GameState, before_tick: Tick, at: Tick) {
    g.validate()
        .unwrap_or_else(|e| panic!("invariant broken: {e}\n{g:?}"));
    assert!(g.tick() >= before_tick, "time went backwards");
    assert!(g.tick() >= at, "the state is behind the requested tick");
    let bytes = g.encode();
    assert!(bytes.len() <= MAX_ENCODED_BYTES);
    let back = GameState::decode(&bytes).unwrap();
    assert_eq!(&back, g);
    assert_eq!(back.encode(), bytes);
}

/// Plays a script; returns the encoding after every step.
fn play(seed: u64, created: Tick, ops: &[(Op, Tick)], checked: bool) -> Vec<Vec<u8>> {
    // Every arena in turn.
    let arena = super::Arena::ALL[(seed >> 2) as usize % super::Arena::ALL.len()];
    let mut g = GameState::on_arena(arena, seed, created, super::DEFAULT_ROUND_TICKS);
    // Half the time fill the table first, so most scripts reach real play.
    if seed & 1 == 0 {
        for _ in 0..SEATS {
            g.seat_player(created);
        }
    }
    // A quarter of the time clear the soft blocks, leaving their power-ups
    // in the open, so players meet and fight early.
    if seed & 3 == 0 {
        for cell in &mut g.cells {
            if let super::Cell::Soft { hidden } = *cell {
                *cell = hidden.map_or(super::Cell::Floor, super::Cell::PowerUp);
            }
        }
    }
    // Half the time every player holds the kick and the remote control from
    // the start, so scripts kick, slide and detonate often.
    if seed & 4 == 0 {
        for p in &mut g.players {
            p.kick = p.seated;
            p.remote = p.seated;
        }
    }
    let mut at = created;
    let mut trail = Vec::with_capacity(ops.len());
    for &(op, gap) in ops {
        at = at.saturating_add(gap);
        let before = g.tick();
        // Round-trip through the codec before each step: a stateless
        // server loads the game from bytes on every call.
        g = GameState::decode(&g.encode()).unwrap();
        run(&mut g, op, at);
        if checked {
            // Unseating takes no tick: it leaves the clock alone.
            let wanted = if matches!(op, Op::Unseat(_)) {
                before
            } else {
                at
            };
            check(&g, before, wanted);
        }
        trail.push(g.encode());
    }
    trail
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_play_keeps_invariants_and_round_trips((seed, created, ops) in script()) {
        play(seed, created, &ops, true);
    }

    /// Whatever happened before, once nobody acts every bomb on the board
    /// is gone within the longest (remote) fuse, unless the game ended.
    #[test]
    fn every_bomb_goes_off_by_the_longest_fuse((seed, created, ops) in script()) {
        let trail = play(seed, created, &ops, false);
        if let Some(bytes) = trail.last() {
            let mut g = GameState::decode(bytes).unwrap();
            let t = g.tick();
            g.advance(t + REMOTE_FUSE_TICKS as Tick);
            prop_assert!(g.phase() != Phase::Playing || g.bombs().count() == 0);
        }
    }

    #[test]
    fn random_play_is_deterministic((seed, created, ops) in script()) {
        prop_assert_eq!(play(seed, created, &ops, false), play(seed, created, &ops, false));
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(g) = GameState::decode(&bytes) {
            prop_assert_eq!(g.encode(), bytes);
        }
    }

    #[test]
    fn corrupted_encodings_give_errors_or_valid_games(
        (seed, created, ops) in script(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 0..8u8), 1..4),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let trail = play(seed, created, &ops, false);
        let mut bytes = trail.last().cloned().unwrap_or_else(|| GameState::new(seed, created).encode());
        for (i, bit) in flips {
            let i = i.index(bytes.len());
            bytes[i] ^= 1 << bit;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        if let Ok(mut g) = GameState::decode(&bytes) {
            // Whatever decodes is a game the rules can run on.
            g.validate().unwrap();
            prop_assert_eq!(g.encode(), bytes);
            let t = g.tick();
            g.apply(0, Action::Bomb, t.saturating_add(1));
            g.apply(1, Action::Move(Dir::Up), t.saturating_add(2));
            g.advance(t.saturating_add(200));
            g.validate().unwrap();
        }
    }
}

/// The scripts above are only worth something if they reach the rules they
/// claim to cover: explosions, kills, power-ups, sudden death, both endings.
#[test]
fn random_scripts_reach_every_part_of_the_rules() {
    use super::Ending;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let (mut fires, mut kills, mut powers, mut sudden, mut wins, mut draws) = (0, 0, 0, 0, 0, 0);
    let (mut slides, mut remote_waits) = (0, 0);
    for _ in 0..300 {
        let (seed, created, ops) = script().new_tree(&mut runner).unwrap().current();
        for bytes in play(seed, created, &ops, false) {
            let g = GameState::decode(&bytes).unwrap();
            fires += (g.blasts().count() > 0) as u32;
            kills += (0..4).any(|s| g.player(s).unwrap().kills > 0) as u32;
            sudden += g.sudden_death() as u32;
            slides += g.bombs().any(|b| b.slide.is_some()) as u32;
            remote_waits += g.bombs().any(|b| b.fuse_ticks > super::FUSE_TICKS) as u32;
            powers += (0..4).any(|s| {
                let p = g.player(s).unwrap();
                p.bombs_max > 1 || p.range > 2 || p.speed > 0
            }) as u32;
            match g.ending() {
                Some(Ending::Winner(_)) => wins += 1,
                Some(Ending::Draw) => draws += 1,
                None => {}
            }
        }
    }
    let seen = [
        fires,
        kills,
        powers,
        sudden,
        wins,
        draws,
        slides,
        remote_waits,
    ];
    eprintln!(
        "steps with fire, kills, power-ups, sudden death, win, draw, a sliding bomb, \
         a remote bomb waiting: {seen:?}"
    );
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
}
