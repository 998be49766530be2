//! The game core: the rules of Borbaman as a pure, deterministic state
//! machine.
//!
//! Nothing here reads a clock, touches the network or draws unseeded random
//! numbers. A [`GameState`] plus the ticks and actions fed to it decide
//! everything, so every server replica that loads the same bytes and applies
//! the same calls computes byte-identical results.
//!
//! # The rules
//!
//! **Arena.** 15×13 cells inside an indestructible ring of pillars, in one
//! of three layouts ([`Arena`]), chosen when the game is created: *classic*
//! (every cell whose x and y are both even is a pillar; 113 open cells),
//! *open* (no inner pillars; 143 open cells) and *corridors* (the classic
//! pillars joined into walls along the even rows, leaving long corridors
//! linked by the edge columns, the centre column and the centre row). Each
//! is symmetric about both centre lines, so every corner starts alike. The
//! seed stored in the state fills about 65% of the open cells with soft
//! blocks, and about 30% of soft blocks hide a power-up, in the arena's own
//! mix ([`Arena::power_mix`]: on classic, extra bomb 30%, longer blast 30%,
//! speed 15%, kick 15%, remote control 10%). Games made before the kick and
//! the remote control keep their basic mix (extra bomb 40%, longer blast 40%,
//! speed 20%; [`PowerSet::Basic`]). Each spawn corner and its two open
//! neighbours (an L of three cells) are always clear: plant a bomb on one arm
//! of the L, step back around the pillar onto the other arm, and the blast
//! misses you.
//!
//! **Lobby.** A game waits ([`Phase::Waiting`]) until four players are
//! seated. Seats 0-3 spawn in the top-left, top-right, bottom-left and
//! bottom-right corners. The fourth seat starts play ([`Phase::Playing`])
//! and the round timer.
//!
//! **Time.** The game runs in ticks of [`TICK_MS`] = 50 ms. Server replicas
//! agree on the current tick; [`GameState::advance`] catches the state up to
//! it before every action.
//!
//! **Moving.** A move goes one cell up, down, left or right, into a floor or
//! power-up cell. Pillars, soft blocks, bombs and closed cells block. Players
//! do not block each other: several may share a cell. A player standing on
//! a bomb (usually the one just planted) may walk off it. After a move the
//! player waits out a cooldown of 4 ticks (200 ms), one tick shorter per
//! speed power-up, never below 2 ticks. A move requested during the
//! cooldown goes into a one-move buffer (a newer request replaces it) and is
//! made on the tick the cooldown ends. So holding a key or flooding the
//! server with requests cannot make anyone faster. A move into a blocked
//! cell has no effect and empties the buffer. Walking into a burning cell
//! kills.
//!
//! **Bombs.** A player starts with 1 bomb (at most 8 with power-ups) on the
//! board at a time, and a blast range of 2 (at most 8). Planting needs a
//! bomb left and no bomb already in the cell. A bomb's range is fixed when
//! it is planted. Its fuse burns 50 ticks (2.5 s).
//!
//! **Kick.** A player holding the kick who walks into a bomb does not move:
//! the bomb starts sliding that way, one cell per tick, and the player waits
//! out its move cooldown. A bomb only starts (and only goes on) sliding onto
//! floor with no bomb and no live player; anything else (a pillar, a block,
//! a power-up, a bomb, a player, a closed cell) stops it for good. A kick
//! that could not move the bomb a cell is a blocked move. A sliding bomb
//! keeps its fuse; fire that reaches it sets it off as any bomb, and one that
//! slides into a burning cell goes off in that tick.
//!
//! **Remote control.** The bombs of a player holding the remote control are
//! planted with a fuse of [`REMOTE_FUSE_TICKS`] (10 s): they wait for
//! [`Action::Detonate`], which sets every one of them off on the next tick,
//! or for that fuse, or for another blast (chain reaction). When the player
//! dies or leaves, its bombs fall back to at most the normal fuse.
//!
//! **Blasts.** An exploding bomb sets its own cell on fire, and the fire
//! runs up to its range in each of the four directions. An arm stops before
//! a pillar or closed cell. It stops *on* the first soft block it meets,
//! which is destroyed and reveals whatever it hid. It also stops on another
//! bomb, which explodes in the same tick (chain reaction). The arm passes
//! over players and exposed power-ups; those power-ups burn. A power-up that
//! the blast just uncovered survives it. Every cell reached burns for 10
//! ticks (0.5 s). A player in a burning cell dies. A kill counts for the
//! owner of the bomb whose fire reached that cell first, unless it was the
//! victim's own bomb. Walking into fire that is already burning counts for
//! no one.
//!
//! **Power-ups.** Walking onto one takes it: extra bomb (+1 bomb, up to 8),
//! longer blast (+1 range, up to 8), speed (−1 tick of move cooldown, up
//! to 2 taken), kick or remote control (held for the rest of the game). One
//! taken at its cap (or held already) is used up with no effect.
//!
//! **Sudden death.** After a 3-minute round ([`ROUND_TICKS`]; a game may
//! be created with a shorter one, see [`GameState::with_round`]), the arena
//! closes in. Every [`CLOSE_EVERY_TICKS`] ticks the next open cell along a
//! clockwise spiral (outer ring first, starting top-left) becomes a closed
//! wall. Whoever stands there dies, and any bomb or fire there is gone. In
//! the end the whole arena is closed, so every game finishes.
//!
//! **End.** When at most one player is alive the game is
//! [`Phase::Finished`]. The last player alive wins. If the last players all
//! die in the same tick, it is a draw. A player who leaves a running game
//! forfeits: they die at once, credited to no one. A finished game is
//! frozen: time still passes, nothing else changes.
//!
//! **Order within a tick.** Each tick runs these steps, in this order:
//! 1. fires age, and fire that has burned 10 ticks goes out;
//! 2. move cooldowns count down, and buffered moves whose cooldown ends are
//!    made, in seat order;
//! 3. kicked bombs slide one cell, in row-major order of where they were;
//! 4. fuses count down, and the bombs that reach zero explode together with
//!    every bomb their fire reaches. All arms are traced on the board as it
//!    was before this step. Then soft blocks are destroyed, power-ups burn
//!    and the new fire is lit;
//! 5. every player in a burning cell dies;
//! 6. in sudden death, the next cell closes (killing anyone there);
//! 7. the game ends if at most one player is alive.
//!
//! An action requested at tick `t` runs after tick `t` is done. The result
//! is [`Outcome::Applied`] (it happened), [`Outcome::Queued`] (a move was
//! buffered) or [`Outcome::NoEffect`] (it was blocked, no bomb was left, a
//! detonate found no remote control or no bomb to set off, the player is dead, the game is not running, or it was [`Action::Idle`], which
//! only advances time).
//!
//! # Modules
//!
//! - `map`: geometry, pillars, spawns, the sudden-death spiral and map
//!   generation;
//! - `rng`: the seeded generator the map is drawn from;
//! - `rules`: the tick loop and the actions;
//! - `codec`: the packed binary storage format (at most 256 bytes, 248 in
//!   the worst case: every player holding every power-up, all 32 bombs on
//!   the board);
//! - `seen`: a game rebuilt from what a client is shown of it, on which a
//!   client predicts its own inputs ([`GameState::from_seen`]);
//! - `replay`: a game re-simulated from its creation and its log of
//!   changes ([`resimulate`]), to check a stored game byte for byte;
//! - [`names`]: what a player name may hold;
//! - [`codes`]: the numbers that stand for phases, actions and outcomes in
//!   SQL and on the wire, and the presence windows.
//!
//! Conversion to the wire message lives with the server (`borbaman-server`'s
//! `wire` module): the core knows nothing of gRPC.

mod codec;
pub mod codes;
mod map;
pub mod names;
mod replay;
mod rng;
mod rules;
mod seen;

#[cfg(test)]
mod props;

pub use codec::{CODEC_VERSION, DecodeError, MAX_ENCODED_BYTES};
pub use map::{Arena, CELLS, Cell, PowerSet, PowerUp, UnknownArena, index};
pub use replay::{Event, ReplayError, resimulate};
pub use seen::Seen;

pub const WIDTH: u8 = 15;
pub const HEIGHT: u8 = 13;
pub const SEATS: usize = 4;
pub const TICK_MS: u32 = 50;

/// Game-relative ticks since the game was created.
pub type Tick = u32;

/// Ticks a bomb's fuse burns (2.5 s).
pub const FUSE_TICKS: u8 = 50;
/// Ticks a cell keeps burning after a blast reaches it (0.5 s).
pub const BLAST_TICKS: u8 = 10;
/// Ticks of normal play before sudden death in a standard game (3 minutes).
pub const ROUND_TICKS: u32 = 3 * 60 * 1000 / TICK_MS;
/// [`ROUND_TICKS`] as stored in a state.
pub const DEFAULT_ROUND_TICKS: u16 = ROUND_TICKS as u16;
const _: () = assert!(ROUND_TICKS <= u16::MAX as u32);
/// In sudden death, one more cell closes every this many ticks.
pub const CLOSE_EVERY_TICKS: u32 = 3;
/// Move cooldown without speed power-ups (200 ms).
pub const BASE_MOVE_COOLDOWN_TICKS: u8 = 4;
/// Bombs on the board at once, at the start and at most.
pub const START_BOMBS: u8 = 1;
pub const MAX_BOMBS: u8 = 8;
/// Blast range in cells, at the start and at most.
pub const START_RANGE: u8 = 2;
pub const MAX_RANGE: u8 = 8;
/// Speed power-ups that count; each takes one tick off the move cooldown.
pub const MAX_SPEED: u8 = 2;
/// The longest a remote-controlled bomb waits for its detonator (10 s): a
/// game cannot stall on bombs nobody sets off.
pub const REMOTE_FUSE_TICKS: u8 = 200;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    Up,
    Down,
    Left,
    Right,
}

impl Dir {
    pub const ALL: [Dir; 4] = [Dir::Up, Dir::Down, Dir::Left, Dir::Right];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Move(Dir),
    Bomb,
    Idle,
    /// Sets off the player's bombs at once (with the remote control).
    Detonate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    Queued,
    NoEffect,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Waiting,
    Playing,
    Finished,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Winner(u8),
    Draw,
}

/// One seat. Read-only outside the core: only the rules change it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Player {
    pub x: u8,
    pub y: u8,
    pub seated: bool,
    pub alive: bool,
    pub bombs_max: u8,
    pub range: u8,
    /// Speed power-ups taken (0..=MAX_SPEED).
    pub speed: u8,
    /// Other players this one killed in this game.
    pub kills: u8,
    /// Ticks until the next move may be made.
    pub move_cooldown: u8,
    /// The move to make when the cooldown ends.
    pub buffered_move: Option<Dir>,
    /// Holds the kick: walking into a bomb sends it sliding.
    pub kick: bool,
    /// Holds the remote control: its bombs wait for [`Action::Detonate`].
    pub remote: bool,
}

impl Player {
    /// An empty seat: canonical values, so equal states encode equally.
    fn empty(seat: u8) -> Self {
        let (x, y) = map::SPAWNS[seat as usize];
        Player {
            x,
            y,
            seated: false,
            alive: false,
            bombs_max: START_BOMBS,
            range: START_RANGE,
            speed: 0,
            kills: 0,
            move_cooldown: 0,
            buffered_move: None,
            kick: false,
            remote: false,
        }
    }

    /// A freshly seated player in its spawn corner.
    fn fresh(seat: u8) -> Self {
        Player {
            seated: true,
            alive: true,
            ..Player::empty(seat)
        }
    }

    /// Ticks this player waits after a move.
    pub fn move_cooldown_ticks(&self) -> u8 {
        BASE_MOVE_COOLDOWN_TICKS - self.speed.min(MAX_SPEED)
    }
}

/// A bomb on the board.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bomb {
    pub x: u8,
    pub y: u8,
    pub owner: u8,
    pub range: u8,
    /// Ticks until it explodes (1..=FUSE_TICKS, or up to
    /// REMOTE_FUSE_TICKS while its owner holds the remote control).
    pub fuse_ticks: u8,
    /// The way it slides after a kick; `None` at rest.
    pub slide: Option<Dir>,
}

/// A burning cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blast {
    pub x: u8,
    pub y: u8,
    /// Ticks it keeps burning (1..=BLAST_TICKS).
    pub ticks_left: u8,
}

/// What sits in a cell with a bomb, besides its position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BombSlot {
    owner: u8,
    range: u8,
    fuse_ticks: u8,
    slide: Option<Dir>,
}

/// A whole game. Per-cell arrays (rather than lists) keep the in-memory
/// form canonical, so `decode(encode(s)) == s` holds field by field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GameState {
    /// Drew the map; kept for reference and for validating waiting games.
    seed: u64,
    tick: Tick,
    /// The tick play started (0 while waiting).
    start_tick: Tick,
    /// Ticks of normal play before sudden death; chosen when the game is
    /// created ([`ROUND_TICKS`] unless a server was told otherwise).
    round_ticks: u16,
    /// The layout played on; chosen when the game is created.
    arena: Arena,
    /// The power-ups its soft blocks may hide; chosen when the game is
    /// created (games stored before the kick and the remote have the
    /// basic set).
    powers: PowerSet,
    phase: Phase,
    ending: Option<Ending>,
    /// Cells closed by sudden death so far (a prefix of the spiral).
    closed: u8,
    players: [Player; SEATS],
    cells: [Cell; map::CELLS],
    bombs: [Option<BombSlot>; map::CELLS],
    /// Ticks each cell keeps burning; 0 = not burning.
    burn: [u8; map::CELLS],
}

impl GameState {
    /// A waiting game with nobody seated and the map drawn from `seed`, and
    /// the standard round of [`ROUND_TICKS`].
    pub fn new(seed: u64, created_tick: Tick) -> Self {
        Self::with_round(seed, created_tick, DEFAULT_ROUND_TICKS)
    }

    /// [`GameState::new`] with a round of `round_ticks` (at least 1) before
    /// sudden death: tests and demonstrations play whole games in seconds.
    pub fn with_round(seed: u64, created_tick: Tick, round_ticks: u16) -> Self {
        Self::on_arena(Arena::Classic, seed, created_tick, round_ticks)
    }

    /// [`GameState::with_round`] on `arena`, with the arena's full mix of
    /// power-ups (kick and remote control included).
    pub fn on_arena(arena: Arena, seed: u64, created_tick: Tick, round_ticks: u16) -> Self {
        Self::with_powers(arena, PowerSet::Full, seed, created_tick, round_ticks)
    }

    /// [`GameState::on_arena`] with the power-ups of `powers`: the basic
    /// set is how every game was made before the kick and the remote.
    pub fn with_powers(
        arena: Arena,
        powers: PowerSet,
        seed: u64,
        created_tick: Tick,
        round_ticks: u16,
    ) -> Self {
        GameState {
            seed,
            tick: created_tick,
            start_tick: 0,
            round_ticks: round_ticks.max(1),
            arena,
            powers,
            phase: Phase::Waiting,
            ending: None,
            closed: 0,
            players: [0, 1, 2, 3].map(Player::empty),
            cells: map::generate(arena, powers, seed),
            bombs: [None; map::CELLS],
            burn: [0; map::CELLS],
        }
    }

    /// Seats a player in the lowest free seat. Returns `None` when the game
    /// is full or no longer waiting. The fourth seat starts play at
    /// `at_tick` (or at the current tick, if that is later).
    pub fn seat_player(&mut self, at_tick: Tick) -> Option<u8> {
        self.advance(at_tick);
        if self.phase != Phase::Waiting {
            return None;
        }
        let seat = self.players.iter().position(|p| !p.seated)? as u8;
        self.players[seat as usize] = Player::fresh(seat);
        if self.seated() as usize == SEATS {
            self.phase = Phase::Playing;
            self.start_tick = self.tick;
        }
        Some(seat)
    }

    /// Frees a seat while the game is waiting; does nothing otherwise.
    pub fn unseat_player(&mut self, seat: u8) {
        if self.phase == Phase::Waiting && (seat as usize) < SEATS {
            self.players[seat as usize] = Player::empty(seat);
        }
    }

    /// A player leaves a running game: they die at `at_tick`, credited to
    /// no one. This may end the game.
    pub fn forfeit(&mut self, seat: u8, at_tick: Tick) {
        self.advance(at_tick);
        if self.phase == Phase::Playing && self.is_alive(seat) {
            self.kill(seat);
            self.check_ending();
        }
    }

    /// Runs every tick up to `to_tick`. It does nothing if `to_tick` is not
    /// ahead. Waiting and finished games jump straight there. A running game
    /// steps tick by tick, at most a few thousand ticks, since sudden death
    /// always ends it.
    pub fn advance(&mut self, to_tick: Tick) {
        self.run_ticks(to_tick);
    }

    /// Advances to `at_tick`, then applies one action of `seat`. Never
    /// panics; a bad seat has no effect.
    pub fn apply(&mut self, seat: u8, action: Action, at_tick: Tick) -> Outcome {
        self.advance(at_tick);
        self.act(seat, action)
    }

    pub fn tick(&self) -> Tick {
        self.tick
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn ending(&self) -> Option<Ending> {
        self.ending
    }

    pub fn seated(&self) -> u8 {
        self.players.iter().filter(|p| p.seated).count() as u8
    }

    pub fn is_alive(&self, seat: u8) -> bool {
        self.players
            .get(seat as usize)
            .is_some_and(|p| p.seated && p.alive)
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The layout this game is played on.
    pub fn arena(&self) -> Arena {
        self.arena
    }

    /// The power-ups this game's soft blocks may hide.
    pub fn powers(&self) -> PowerSet {
        self.powers
    }

    /// The tick play started (0 while waiting).
    pub fn start_tick(&self) -> Tick {
        self.start_tick
    }

    /// Ticks left before sudden death (the full round while waiting).
    pub fn round_ticks_left(&self) -> u32 {
        match self.phase {
            Phase::Waiting => u32::from(self.round_ticks),
            _ => self.sudden_death_tick().saturating_sub(self.tick as u64) as u32,
        }
    }

    /// True once the round timer has run out in a started game.
    pub fn sudden_death(&self) -> bool {
        self.phase != Phase::Waiting && self.tick as u64 >= self.sudden_death_tick()
    }

    pub fn player(&self, seat: u8) -> Option<&Player> {
        self.players.get(seat as usize)
    }

    /// The cell at (x, y); out of range reads as a pillar.
    pub fn cell(&self, x: u8, y: u8) -> Cell {
        if x < WIDTH && y < HEIGHT {
            self.cells[map::index(x, y)]
        } else {
            Cell::Pillar
        }
    }

    /// Bombs on the board, row-major.
    pub fn bombs(&self) -> impl Iterator<Item = Bomb> + '_ {
        self.bombs.iter().enumerate().filter_map(|(i, b)| {
            let b = (*b)?;
            let (x, y) = map::coords(i);
            Some(Bomb {
                x,
                y,
                owner: b.owner,
                range: b.range,
                fuse_ticks: b.fuse_ticks,
                slide: b.slide,
            })
        })
    }

    /// Every cell, row-major (see [`index`]).
    pub fn cells(&self) -> &[Cell; CELLS] {
        &self.cells
    }

    /// Every seat, seated or not.
    pub fn players(&self) -> &[Player; SEATS] {
        &self.players
    }

    /// Bombs on the board per seat, in one pass.
    pub fn bombs_per_seat(&self) -> [u8; SEATS] {
        let mut placed = [0u8; SEATS];
        for b in self.bombs.iter().flatten() {
            placed[usize::from(b.owner) % SEATS] += 1;
        }
        placed
    }

    /// How many cells burn.
    pub fn burning_cells(&self) -> usize {
        self.burn.iter().filter(|&&t| t > 0).count()
    }

    /// Bombs `seat` has on the board.
    pub fn bombs_placed(&self, seat: u8) -> u8 {
        self.bombs
            .iter()
            .flatten()
            .filter(|b| b.owner == seat)
            .count() as u8
    }

    /// Burning cells, row-major.
    pub fn blasts(&self) -> impl Iterator<Item = Blast> + '_ {
        self.burn
            .iter()
            .enumerate()
            .filter(|&(_, &t)| t > 0)
            .map(|(i, &ticks_left)| {
                let (x, y) = map::coords(i);
                Blast { x, y, ticks_left }
            })
    }

    /// Whether (x, y) is burning.
    pub fn is_burning(&self, x: u8, y: u8) -> bool {
        x < WIDTH && y < HEIGHT && self.burn[map::index(x, y)] > 0
    }

    /// The tick sudden death starts (u64: a game may start near u32::MAX).
    fn sudden_death_tick(&self) -> u64 {
        self.start_tick as u64 + u64::from(self.round_ticks)
    }

    /// Ticks of normal play before sudden death in this game.
    pub fn round_ticks(&self) -> u32 {
        u32::from(self.round_ticks)
    }
}
