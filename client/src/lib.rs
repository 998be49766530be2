//! Borbaman terminal client.
//!
//! - [`play`]: `borbaman play`, the terminal game.
//! - [`bot`]: `borbaman bot`, headless AI players.

pub mod bot;
pub mod play;
