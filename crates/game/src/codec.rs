//! The packed binary storage format of a [`GameState`]: what the database
//! row holds, read and written on every call, so it is small (at most
//! [`MAX_ENCODED_BYTES`]) and the decoder trusts nothing.
//!
//! Format 3, integers little-endian, bit fields filled from the low bit:
//!
//! | bytes | field |
//! | --- | --- |
//! | 1 | version (3) |
//! | 8 | seed |
//! | 4 | tick |
//! | 4 | start tick (0 while waiting) |
//! | 2 | round length in ticks (from format 2; format 1 had none) |
//! | 1 | arena: 0 classic, 1 open, 2 corridors (format 3; older formats are classic) |
//! | 1 | phase (bits 0-1), ending 0 none / 1 winner / 2 draw (bits 2-3), winner seat (bits 4-5) |
//! | 1 | cells closed by sudden death (a prefix of the spiral) |
//! | 4 × 4 | players: flags (seated, alive, buffered move 0 none / 1-4 up-down-left-right in bits 2-4, speed in bits 5-6); x \| y << 4; bombs_max − 1 \| (range − 1) << 3 \| kills << 6; move cooldown |
//! | 43–54 | 3 bits per open cell of the arena (113 classic, 143 open), in row-major order: floor, soft, soft hiding bomb / range / speed, power-up bomb / range / speed (a closed cell reads floor) |
//! | 15–18 | bitmap of open cells holding a bomb |
//! | 2 per bomb | owner \| (range − 1) << 2; fuse ticks |
//! | 15–18 | bitmap of burning open cells |
//! | ½ per burning cell | ticks left, one nibble each, low nibble first |
//!
//! A waiting classic game encodes in 111 bytes. The worst case is the open
//! arena with 32 bombs (4 × [`MAX_BOMBS`]) and every other open cell
//! burning: 248 bytes. A bomb's cell never burns, because fire sets bombs
//! off.
//!
//! Every value has exactly one encoding: padding bits are zero, empty seats
//! hold fixed values, and closed cells read as floor. So a decoded state
//! encodes back to the same bytes.

use super::map::{self, Arena, CELLS, Cell, MAX_OPEN_CELLS, PowerUp};
use super::{
    BLAST_TICKS, BombSlot, CLOSE_EVERY_TICKS, DEFAULT_ROUND_TICKS, Dir, Ending, FUSE_TICKS,
    GameState, MAX_BOMBS, MAX_RANGE, MAX_SPEED, Phase, Player, SEATS, START_RANGE,
};

/// The format version written first; a decoder refuses versions it does
/// not know.
pub const CODEC_VERSION: u8 = 3;
/// The first format: no round length (every game had [`DEFAULT_ROUND_TICKS`])
/// and no arena (every game was classic); still read, never written.
const CODEC_VERSION_1: u8 = 1;
/// The second format: no arena (every game was classic); still read, never
/// written.
const CODEC_VERSION_2: u8 = 2;
/// Upper bound on an encoded state, in bytes.
pub const MAX_ENCODED_BYTES: usize = 256;

const HEADER_BYTES: usize = 1 + 8 + 4 + 4 + 2 + 1 + 1 + 1;
const PLAYER_BYTES: usize = 4;
const CELL_BITS: u32 = 3;
const BOMB_BYTES: usize = 2;
const MAX_BOMBS_ON_BOARD: usize = SEATS * MAX_BOMBS as usize;

const fn cell_bytes(open_cells: usize) -> usize {
    (open_cells * CELL_BITS as usize).div_ceil(8)
}

const fn bitmap_bytes(open_cells: usize) -> usize {
    open_cells.div_ceil(8)
}

/// Bytes of a state with no bombs and no fire on an arena with
/// `open_cells` open cells.
pub(crate) const fn base_bytes(open_cells: usize) -> usize {
    HEADER_BYTES + SEATS * PLAYER_BYTES + cell_bytes(open_cells) + 2 * bitmap_bytes(open_cells)
}

/// Bytes in the worst case: the arena with the most open cells, the most
/// bombs, every other open cell burning.
pub(crate) const WORST_CASE_BYTES: usize = base_bytes(MAX_OPEN_CELLS)
    + BOMB_BYTES * MAX_BOMBS_ON_BOARD
    + (MAX_OPEN_CELLS - MAX_BOMBS_ON_BOARD).div_ceil(2);
const _: () = assert!(WORST_CASE_BYTES <= MAX_ENCODED_BYTES);

/// Why stored bytes are not a valid game.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("game state is empty")]
    Empty,
    #[error(
        "game state has format version {0}, this build reads version {CODEC_VERSION}; upgrade the server"
    )]
    UnsupportedVersion(u8),
    #[error("game state is {0} bytes, more than the {MAX_ENCODED_BYTES} any game needs")]
    TooLong(usize),
    #[error("game state ends early")]
    Truncated,
    #[error("game state has {0} unexpected bytes at its end")]
    TrailingBytes(usize),
    #[error("game state is inconsistent: {0}")]
    Invalid(&'static str),
}

impl GameState {
    /// The packed binary form: version byte first, at most
    /// [`MAX_ENCODED_BYTES`].
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(WORST_CASE_BYTES);
        self.encode_into(&mut out);
        out
    }

    /// [`GameState::encode`] appended to `out`: lets a caller pack the state
    /// straight into a buffer it already has (the store writes it into the
    /// query's parameter buffer) instead of allocating one per call.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.reserve(WORST_CASE_BYTES);
        out.push(CODEC_VERSION);
        out.extend_from_slice(&self.seed.to_le_bytes());
        out.extend_from_slice(&self.tick.to_le_bytes());
        out.extend_from_slice(&self.start_tick.to_le_bytes());
        out.extend_from_slice(&self.round_ticks.to_le_bytes());
        out.push(self.arena.code());
        let (ending, winner) = match self.ending {
            None => (0, 0),
            Some(Ending::Winner(seat)) => (1, seat),
            Some(Ending::Draw) => (2, 0),
        };
        let phase = match self.phase {
            Phase::Waiting => 0,
            Phase::Playing => 1,
            Phase::Finished => 2,
        };
        out.push(phase | ending << 2 | winner << 4);
        out.push(self.closed);
        for p in &self.players {
            let buffered = match p.buffered_move {
                None => 0,
                Some(Dir::Up) => 1,
                Some(Dir::Down) => 2,
                Some(Dir::Left) => 3,
                Some(Dir::Right) => 4,
            };
            out.push(p.seated as u8 | (p.alive as u8) << 1 | buffered << 2 | p.speed << 5);
            out.push(p.x | p.y << 4);
            out.push((p.bombs_max - 1) | (p.range - 1) << 3 | p.kills << 6);
            out.push(p.move_cooldown);
        }

        let open = self.arena.layout().open();
        let mut bits = BitWriter::new(out);
        for &i in open {
            bits.put(cell_code(self.cells[i as usize]), CELL_BITS);
        }
        bits.finish();

        let mut bits = BitWriter::new(out);
        for &i in open {
            bits.put(self.bombs[i as usize].is_some() as u32, 1);
        }
        bits.finish();
        for b in open.iter().filter_map(|&i| self.bombs[i as usize]) {
            out.push(b.owner | (b.range - 1) << 2);
            out.push(b.fuse_ticks);
        }

        let mut bits = BitWriter::new(out);
        for &i in open {
            bits.put((self.burn[i as usize] > 0) as u32, 1);
        }
        bits.finish();
        let mut bits = BitWriter::new(out);
        for &i in open {
            let t = self.burn[i as usize];
            if t > 0 {
                bits.put(t as u32, 4);
            }
        }
        bits.finish();
    }

    /// Reads a state back. Never panics and allocates nothing that depends
    /// on the input: corrupt or hostile bytes give an error. A state it
    /// returns obeys every rule invariant, so the rules can run on it.
    pub fn decode(bytes: &[u8]) -> Result<GameState, DecodeError> {
        if bytes.is_empty() {
            return Err(DecodeError::Empty);
        }
        if bytes.len() > MAX_ENCODED_BYTES {
            return Err(DecodeError::TooLong(bytes.len()));
        }
        let mut r = Reader { bytes, pos: 0 };
        let version = r.u8()?;
        if !matches!(version, CODEC_VERSION | CODEC_VERSION_1 | CODEC_VERSION_2) {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let seed = u64::from_le_bytes(r.array()?);
        let tick = u32::from_le_bytes(r.array()?);
        let start_tick = u32::from_le_bytes(r.array()?);
        let round_ticks = match version {
            CODEC_VERSION_1 => DEFAULT_ROUND_TICKS,
            _ => u16::from_le_bytes(r.array()?),
        };
        if round_ticks == 0 {
            return invalid("a round of no ticks");
        }
        let arena = match version {
            CODEC_VERSION_1 | CODEC_VERSION_2 => Arena::Classic,
            _ => Arena::from_code(r.u8()?).ok_or(DecodeError::Invalid("unknown arena"))?,
        };
        let layout = arena.layout();
        let open = layout.open();
        let open_cells = layout.open_cells();
        let status = r.u8()?;
        let phase = match status & 3 {
            0 => Phase::Waiting,
            1 => Phase::Playing,
            2 => Phase::Finished,
            _ => return invalid("unknown phase"),
        };
        let winner = (status >> 4) & 3;
        let ending = match (status >> 2) & 3 {
            0 => None,
            1 => Some(Ending::Winner(winner)),
            2 => Some(Ending::Draw),
            _ => return invalid("unknown ending"),
        };
        if status >> 6 != 0 || (winner != 0 && !matches!(ending, Some(Ending::Winner(_)))) {
            return invalid("stray bits in the status byte");
        }
        let closed = r.u8()?;
        if closed as usize > open_cells {
            return invalid("more cells closed than the arena has");
        }

        let mut players = [0, 1, 2, 3].map(Player::empty);
        for p in &mut players {
            *p = decode_player(r.array()?)?;
        }

        let mut cells = [Cell::Pillar; CELLS];
        let mut bits = BitReader::new(r.take(cell_bytes(open_cells))?);
        for &i in open {
            cells[i as usize] = cell_from_code(bits.get(CELL_BITS));
        }
        bits.end()?;
        for &i in &layout.spiral()[..closed as usize] {
            if cells[i as usize] != Cell::Floor {
                return invalid("a closed cell holds something");
            }
            cells[i as usize] = Cell::Closed;
        }

        let mut bombs = [None; CELLS];
        let mut bits = BitReader::new(r.take(bitmap_bytes(open_cells))?);
        let mut has_bomb = [false; MAX_OPEN_CELLS];
        for slot in &mut has_bomb[..open_cells] {
            *slot = bits.get(1) == 1;
        }
        bits.end()?;
        for (slot, &i) in open.iter().enumerate() {
            if has_bomb[slot] {
                let [packed, fuse_ticks] = r.array()?;
                if packed >> 5 != 0 {
                    return invalid("stray bits in a bomb");
                }
                bombs[i as usize] = Some(BombSlot {
                    owner: packed & 3,
                    range: (packed >> 2) + 1,
                    fuse_ticks,
                });
            }
        }

        let mut burn = [0u8; CELLS];
        let mut bits = BitReader::new(r.take(bitmap_bytes(open_cells))?);
        let mut burning = [false; MAX_OPEN_CELLS];
        for slot in &mut burning[..open_cells] {
            *slot = bits.get(1) == 1;
        }
        bits.end()?;
        let count = burning.iter().filter(|&&b| b).count();
        let mut bits = BitReader::new(r.take(count.div_ceil(2))?);
        for (slot, &i) in open.iter().enumerate() {
            if burning[slot] {
                burn[i as usize] = bits.get(4) as u8;
                if burn[i as usize] == 0 {
                    return invalid("a burning cell has no time left");
                }
            }
        }
        bits.end()?;

        if r.pos != bytes.len() {
            return Err(DecodeError::TrailingBytes(bytes.len() - r.pos));
        }
        let state = GameState {
            seed,
            tick,
            start_tick,
            round_ticks,
            arena,
            phase,
            ending,
            closed,
            players,
            cells,
            bombs,
            burn,
        };
        state.validate()?;
        Ok(state)
    }

    /// Checks every invariant the rules keep. Decoding runs it so the rules
    /// never see a state they could not have produced.
    pub(crate) fn validate(&self) -> Result<(), DecodeError> {
        let seated = self.seated() as usize;
        // Seats alive, without allocating: decode runs on every call.
        let mut alive_seats = [0u8; SEATS];
        let mut alive_count = 0;
        for seat in (0..SEATS as u8).filter(|&s| self.is_alive(s)) {
            alive_seats[alive_count] = seat;
            alive_count += 1;
        }
        let alive = &alive_seats[..alive_count];
        match (self.phase, self.ending) {
            (Phase::Waiting, None) => return self.validate_waiting(),
            (Phase::Waiting | Phase::Playing, Some(_)) => {
                return invalid("a game not finished has an ending");
            }
            (Phase::Playing, None) if alive.len() < 2 => {
                return invalid("a running game has fewer than two players alive");
            }
            (Phase::Finished, None) => return invalid("a finished game has no ending"),
            (Phase::Finished, Some(Ending::Winner(s))) if alive != [s] => {
                return invalid("the winner is not the only player alive");
            }
            (Phase::Finished, Some(Ending::Draw)) if !alive.is_empty() => {
                return invalid("a drawn game has a player alive");
            }
            _ => {}
        }
        if seated != SEATS {
            return invalid("a started game has an empty seat");
        }
        if self.start_tick > self.tick {
            return invalid("play starts after the current tick");
        }
        let played = self.tick - self.start_tick;
        let layout = self.arena.layout();
        let due_closed = match (self.tick as u64).checked_sub(self.sudden_death_tick()) {
            None => 0,
            Some(since) => {
                (since / CLOSE_EVERY_TICKS as u64 + 1).min(layout.open_cells() as u64) as u8
            }
        };
        let closed_ok = match self.phase {
            Phase::Playing => self.closed == due_closed,
            _ => self.closed <= due_closed,
        };
        if !closed_ok {
            return invalid("closed cells do not match the sudden-death clock");
        }

        let dead = SEATS - alive.len();
        let kills: usize = self.players.iter().map(|p| p.kills as usize).sum();
        if kills > dead {
            return invalid("more kills than dead players");
        }
        for p in &self.players {
            validate_player(p, layout)?;
            let i = map::index(p.x, p.y);
            if p.alive && (self.cells[i] != Cell::Floor || self.burn[i] > 0) {
                return invalid("a live player stands in a block, a closed cell or fire");
            }
        }

        let mut placed = [0u8; SEATS];
        for &i in layout.open() {
            let i = i as usize;
            if let Some(b) = self.bombs[i] {
                let owner = &self.players[b.owner as usize];
                placed[b.owner as usize] += 1;
                if self.cells[i] != Cell::Floor || self.burn[i] > 0 {
                    return invalid("a bomb lies in a block, a closed cell or fire");
                }
                if !(1..=FUSE_TICKS).contains(&b.fuse_ticks)
                    || ((FUSE_TICKS - b.fuse_ticks) as u32) > played
                {
                    return invalid("a bomb's fuse is out of range");
                }
                if !(START_RANGE..=owner.range).contains(&b.range) {
                    return invalid("a bomb's range is out of range");
                }
                if placed[b.owner as usize] > owner.bombs_max {
                    return invalid("a player has more bombs out than allowed");
                }
            }
            let t = self.burn[i];
            if t > 0 {
                if t > BLAST_TICKS || ((BLAST_TICKS - t) as u32) > played {
                    return invalid("a fire's time left is out of range");
                }
                if !matches!(self.cells[i], Cell::Floor | Cell::PowerUp(_)) {
                    return invalid("a block or closed cell is burning");
                }
            }
        }
        Ok(())
    }

    fn validate_waiting(&self) -> Result<(), DecodeError> {
        if self.start_tick != 0 || self.closed != 0 {
            return invalid("a waiting game has a start tick or closed cells");
        }
        if self.seated() as usize == SEATS {
            return invalid("a waiting game has every seat taken");
        }
        if self.bombs.iter().any(Option::is_some) || self.burn.iter().any(|&t| t > 0) {
            return invalid("a waiting game has bombs or fire");
        }
        for (seat, p) in self.players.iter().enumerate() {
            let seat = seat as u8;
            let expected = if p.seated {
                Player::fresh(seat)
            } else {
                Player::empty(seat)
            };
            if *p != expected {
                return invalid("a waiting player is not fresh in its corner");
            }
        }
        if self.cells != map::generate(self.arena, self.seed) {
            return invalid("a waiting game's map does not match its seed");
        }
        Ok(())
    }
}

fn invalid<T>(what: &'static str) -> Result<T, DecodeError> {
    Err(DecodeError::Invalid(what))
}

fn decode_player(
    [flags, pos, stats, move_cooldown]: [u8; PLAYER_BYTES],
) -> Result<Player, DecodeError> {
    if flags >> 7 != 0 {
        return invalid("stray bits in a player");
    }
    let buffered_move = match (flags >> 2) & 7 {
        0 => None,
        1 => Some(Dir::Up),
        2 => Some(Dir::Down),
        3 => Some(Dir::Left),
        4 => Some(Dir::Right),
        _ => return invalid("unknown buffered move"),
    };
    Ok(Player {
        x: pos & 15,
        y: pos >> 4,
        seated: flags & 1 == 1,
        alive: flags & 2 == 2,
        bombs_max: (stats & 7) + 1,
        range: ((stats >> 3) & 7) + 1,
        speed: (flags >> 5) & 3,
        kills: stats >> 6,
        move_cooldown,
        buffered_move,
    })
}

/// Checks one seated player of a started game on its own.
fn validate_player(p: &Player, layout: &map::Layout) -> Result<(), DecodeError> {
    if !p.seated {
        return invalid("a started game has an empty seat");
    }
    if layout.is_pillar(p.x, p.y) {
        return invalid("a player stands on a pillar or off the grid");
    }
    if p.range < START_RANGE || p.range > MAX_RANGE || p.bombs_max > MAX_BOMBS {
        return invalid("a player's range or bomb count is out of range");
    }
    if p.speed > MAX_SPEED || p.kills as usize >= SEATS {
        return invalid("a player's speed or kills are out of range");
    }
    if p.move_cooldown > p.move_cooldown_ticks() {
        return invalid("a player's move cooldown is too long");
    }
    if p.buffered_move.is_some() && p.move_cooldown == 0 {
        return invalid("a move is buffered with no cooldown to wait for");
    }
    if !p.alive && (p.move_cooldown != 0 || p.buffered_move.is_some()) {
        return invalid("a dead player is still moving");
    }
    Ok(())
}

fn cell_code(cell: Cell) -> u32 {
    match cell {
        Cell::Floor | Cell::Pillar | Cell::Closed => 0,
        Cell::Soft { hidden: None } => 1,
        Cell::Soft {
            hidden: Some(PowerUp::Bomb),
        } => 2,
        Cell::Soft {
            hidden: Some(PowerUp::Range),
        } => 3,
        Cell::Soft {
            hidden: Some(PowerUp::Speed),
        } => 4,
        Cell::PowerUp(PowerUp::Bomb) => 5,
        Cell::PowerUp(PowerUp::Range) => 6,
        Cell::PowerUp(PowerUp::Speed) => 7,
    }
}

fn cell_from_code(code: u32) -> Cell {
    match code {
        1 => Cell::Soft { hidden: None },
        2 => Cell::Soft {
            hidden: Some(PowerUp::Bomb),
        },
        3 => Cell::Soft {
            hidden: Some(PowerUp::Range),
        },
        4 => Cell::Soft {
            hidden: Some(PowerUp::Speed),
        },
        5 => Cell::PowerUp(PowerUp::Bomb),
        6 => Cell::PowerUp(PowerUp::Range),
        7 => Cell::PowerUp(PowerUp::Speed),
        _ => Cell::Floor,
    }
}

/// A cursor over the input that fails with `Truncated` instead of panicking.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::Truncated)?;
        let out = self
            .bytes
            .get(self.pos..end)
            .ok_or(DecodeError::Truncated)?;
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }
}

/// Appends bit fields, low bit first; `finish` pads the last byte with zeros.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u32,
    bits: u32,
}

impl<'a> BitWriter<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        BitWriter {
            out,
            acc: 0,
            bits: 0,
        }
    }

    fn put(&mut self, value: u32, width: u32) {
        self.acc |= value << self.bits;
        self.bits += width;
        while self.bits >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.bits -= 8;
        }
    }

    fn finish(self) {
        if self.bits > 0 {
            self.out.push(self.acc as u8);
        }
    }
}

/// Reads bit fields written by `BitWriter` from a section of known length.
struct BitReader<'a> {
    bytes: &'a [u8],
    bit: usize,
}

impl<'a> BitReader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        BitReader { bytes, bit: 0 }
    }

    /// The next `width` (at most 8) bits; past the end of the section reads
    /// zeros (the sections are sized so that never happens).
    fn get(&mut self, width: u32) -> u32 {
        let byte = |i: usize| self.bytes.get(i).copied().unwrap_or(0) as u32;
        let (at, shift) = (self.bit / 8, self.bit % 8);
        let window = byte(at) | byte(at + 1) << 8;
        self.bit += width as usize;
        (window >> shift) & ((1 << width) - 1)
    }

    /// Checks that the padding after the last field is zero.
    fn end(mut self) -> Result<(), DecodeError> {
        while self.bit < self.bytes.len() * 8 {
            if self.get(1) != 0 {
                return invalid("stray padding bits");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Action;

    fn started(seed: u64) -> GameState {
        let mut g = GameState::new(seed, 0);
        for _ in 0..SEATS {
            g.seat_player(0);
        }
        g
    }

    /// The largest state the rules allow: the open arena, every player at
    /// 8 bombs, all 32 on the board, every other open cell burning.
    fn worst_case() -> GameState {
        let mut g = GameState::on_arena(Arena::Open, 7, 0, DEFAULT_ROUND_TICKS);
        for _ in 0..SEATS {
            g.seat_player(0);
        }
        g.tick = 60;
        g.cells = [Cell::Pillar; CELLS];
        let open = Arena::Open.layout().open();
        for &i in open {
            g.cells[i as usize] = Cell::Floor;
        }
        for (k, &i) in open.iter().enumerate() {
            let owner = (k / MAX_BOMBS as usize) as u8;
            if (owner as usize) < SEATS {
                g.bombs[i as usize] = Some(BombSlot {
                    owner,
                    range: MAX_RANGE,
                    fuse_ticks: 1,
                });
                let (x, y) = map::coords(i as usize);
                let p = &mut g.players[owner as usize];
                (p.x, p.y) = (x, y);
            } else {
                g.burn[i as usize] = BLAST_TICKS;
            }
        }
        for p in &mut g.players {
            p.bombs_max = MAX_BOMBS;
            p.range = MAX_RANGE;
        }
        g
    }

    #[test]
    fn a_new_game_round_trips_in_111_bytes() {
        for seed in [0, 1, u64::MAX] {
            let g = GameState::new(seed, 12345);
            let bytes = g.encode();
            assert_eq!(bytes.len(), base_bytes(113));
            assert_eq!(bytes.len(), 111);
            assert_eq!(bytes[0], CODEC_VERSION);
            assert_eq!(GameState::decode(&bytes).unwrap(), g);
            for arena in Arena::ALL {
                let g = GameState::on_arena(arena, seed, 5, 100);
                let bytes = g.encode();
                assert_eq!(bytes.len(), base_bytes(arena.layout().open_cells()));
                assert_eq!(GameState::decode(&bytes).unwrap(), g);
            }
        }
    }

    #[test]
    fn encode_into_appends_the_same_bytes() {
        let g = worst_case();
        let mut buf = vec![0xAB, 0xCD];
        g.encode_into(&mut buf);
        assert_eq!(buf[..2], [0xAB, 0xCD]);
        assert_eq!(buf[2..], g.encode()[..]);
    }

    #[test]
    fn the_worst_case_state_fits_in_256_bytes() {
        let g = worst_case();
        g.validate().unwrap();
        let bytes = g.encode();
        assert_eq!(bytes.len(), WORST_CASE_BYTES);
        assert_eq!(bytes.len(), 248);
        assert!(bytes.len() <= MAX_ENCODED_BYTES, "{} bytes", bytes.len());
        assert_eq!(GameState::decode(&bytes).unwrap(), g);
        // And the rules can run on it: all 32 bombs go off together.
        let mut g = g;
        g.advance(61);
        assert_eq!(g.bombs().count(), 0);
        assert_eq!(g.ending(), Some(Ending::Draw));
    }

    #[test]
    fn a_played_game_round_trips() {
        let mut g = started(11);
        g.apply(0, Action::Move(Dir::Right), 1);
        g.apply(0, Action::Bomb, 1);
        g.apply(0, Action::Move(Dir::Left), 2);
        g.apply(1, Action::Move(Dir::Left), 3);
        g.advance(52);
        assert!(g.blasts().count() > 0);
        let bytes = g.encode();
        let back = GameState::decode(&bytes).unwrap();
        assert_eq!(back, g);
        assert_eq!(back.encode(), bytes);
    }

    #[test]
    fn bad_bytes_give_errors_that_say_why() {
        let bytes = started(3).encode();
        assert_eq!(GameState::decode(&[]), Err(DecodeError::Empty));
        assert_eq!(
            GameState::decode(&[9, 0, 0]),
            Err(DecodeError::UnsupportedVersion(9))
        );
        assert_eq!(GameState::decode(&[1; 300]), Err(DecodeError::TooLong(300)));
        assert_eq!(
            GameState::decode(&bytes[..bytes.len() - 1]),
            Err(DecodeError::Truncated)
        );
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            GameState::decode(&longer),
            Err(DecodeError::TrailingBytes(1))
        );
    }

    #[test]
    fn inconsistent_states_are_refused() {
        let g = started(3);
        let refused = |edit: &dyn Fn(&mut GameState)| {
            let mut bad = g.clone();
            edit(&mut bad);
            GameState::decode(&bad.encode()).unwrap_err()
        };
        // Player 0 inside a pillar.
        refused(&|s| (s.players[0].x, s.players[0].y) = (2, 2));
        refused(&|s| (s.players[0].x, s.players[0].y) = (0, 5));
        refused(&|s| (s.players[0].x, s.players[0].y) = (15, 15));
        // A live player inside a soft block.
        let soft = Arena::Classic
            .layout()
            .open()
            .iter()
            .find(|&&i| matches!(g.cells[i as usize], Cell::Soft { .. }))
            .copied()
            .unwrap();
        refused(&|s| (s.players[0].x, s.players[0].y) = map::coords(soft as usize));
        // More bombs than allowed.
        refused(&|s| {
            for i in [16, 18] {
                s.bombs[i] = Some(BombSlot {
                    owner: 0,
                    range: 2,
                    fuse_ticks: 50,
                })
            }
        });
        // A winner while running; a finished game with two alive.
        refused(&|s| s.ending = Some(Ending::Winner(1)));
        refused(&|s| {
            s.phase = Phase::Finished;
            s.ending = Some(Ending::Draw);
        });
        // A waiting game whose map is not its seed's.
        let mut waiting = GameState::new(3, 0);
        waiting.cells[map::index(1, 1)] = Cell::Soft { hidden: None };
        assert!(GameState::decode(&waiting.encode()).is_err());
        // Burning too long, a fuse too long, a closed cell before its time.
        refused(&|s| s.burn[16] = 11);
        refused(&|s| {
            s.bombs[16] = Some(BombSlot {
                owner: 0,
                range: 2,
                fuse_ticks: 51,
            })
        });
        refused(&|s| s.closed = 1);
    }
}

#[cfg(test)]
mod golden {
    use super::*;

    /// Stored games must decode the same forever: a waiting game is checked
    /// against the map its seed draws, so a change to the generator or to
    /// the format breaks rows already in the database. If this fails on
    /// purpose, bump CODEC_VERSION and keep a reader for the old version.
    #[test]
    fn the_format_and_the_map_of_a_seed_do_not_drift() {
        let hex =
            |g: GameState| -> String { g.encode().iter().map(|b| format!("{b:02x}")).collect() };
        assert_eq!(hex(GameState::new(42, 7)), GOLDEN_CLASSIC);
        assert_eq!(
            hex(GameState::on_arena(Arena::Open, 42, 7, DEFAULT_ROUND_TICKS)),
            GOLDEN_OPEN
        );
        assert_eq!(
            hex(GameState::on_arena(
                Arena::Corridors,
                42,
                7,
                DEFAULT_ROUND_TICKS
            )),
            GOLDEN_CORRIDORS
        );
    }

    const GOLDEN_CLASSIC: &str = "032a000000000000000700000000000000100e00000000110800001d080000b1080000bd0800009424c1000411000048964111112a01102049100018920458922480142459800148002002002459921000000000000000000000000000000000000000000000000000000000000000";
    const GOLDEN_OPEN: &str = "032a000000000000000700000000000000100e01000000110800001d080000b1080000bd0800009424c1000411000041964111112a01102049100018920458922480142459800148004440922509136c09120049200c008021c81000000000000000000000000000000000000000000000000000000000000000000000000000";
    const GOLDEN_CORRIDORS: &str = "032a000000000000000700000000000000100e02000000110800001d080000b1080000bd0800009424c1000488000048964111112a011020491000189204589224801424c10004188004000000000000000000000000000000000000000000000000000000";

    fn from_hex(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Games stored in the second format (no arena) still decode, as
    /// classic games.
    #[test]
    fn version_2_states_still_decode() {
        let v2 = concat!(
            "022a000000000000000700000000000000100e000000110800001d080000b1080000bd08",
            "00009424c1000411000048964111112a0110204910001892045892248014245980014800",
            "200200245992100000000000000000000000000000000000000000000000000000000000",
            "0000",
        );
        let g = GameState::decode(&from_hex(v2)).unwrap();
        assert_eq!(g, GameState::new(42, 7));
        assert_eq!(g.arena(), Arena::Classic);
    }

    /// Games stored in the first format (no round length) still decode, as
    /// standard 3-minute games.
    #[test]
    fn version_1_states_still_decode() {
        let v1 = concat!(
            "012a000000000000000700000000000000000000110800001d080000b1080000bd080000",
            "9424c1000411000048964111112a01102049100018920458922480142459800148002002",
            "002459921000000000000000000000000000000000000000000000000000000000000000",
        );
        let bytes: Vec<u8> = (0..v1.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&v1[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(GameState::decode(&bytes).unwrap(), GameState::new(42, 7));
    }
}
