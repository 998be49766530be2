//! The game core: the rules of Borbaman as a pure, deterministic state
//! machine. (Placeholder API; the rules are being filled in.)

#![allow(unused_variables)]

use borbaman_proto::pb;

pub const WIDTH: u8 = 15;
pub const HEIGHT: u8 = 13;
pub const SEATS: usize = 4;
pub const TICK_MS: u32 = 50;
pub type Tick = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    Up,
    Down,
    Left,
    Right,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Move(Dir),
    Bomb,
    Idle,
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

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GameState {
    tick: Tick,
}

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("state encoding is corrupt")]
    Corrupt,
}

impl GameState {
    pub fn new(seed: u64, created_tick: Tick) -> Self {
        todo!()
    }
    pub fn seat_player(&mut self, at_tick: Tick) -> Option<u8> {
        todo!()
    }
    pub fn unseat_player(&mut self, seat: u8) {
        todo!()
    }
    pub fn forfeit(&mut self, seat: u8, at_tick: Tick) {
        todo!()
    }
    pub fn advance(&mut self, to_tick: Tick) {
        todo!()
    }
    pub fn apply(&mut self, seat: u8, action: Action, at_tick: Tick) -> Outcome {
        todo!()
    }
    pub fn tick(&self) -> Tick {
        self.tick
    }
    pub fn phase(&self) -> Phase {
        todo!()
    }
    pub fn ending(&self) -> Option<Ending> {
        todo!()
    }
    pub fn seated(&self) -> u8 {
        todo!()
    }
    pub fn is_alive(&self, seat: u8) -> bool {
        todo!()
    }
    pub fn encode(&self) -> Vec<u8> {
        todo!()
    }
    pub fn decode(bytes: &[u8]) -> Result<GameState, DecodeError> {
        todo!()
    }
    pub fn to_proto(
        &self,
        game_id: u64,
        version: u64,
        names: &[String; 4],
        connected: [bool; 4],
    ) -> pb::GameState {
        todo!()
    }
}
