//! Borbaman terminal client.
//!
//! - [`play`]: `borbaman play`, the terminal game.
//! - [`bot`]: `borbaman bot`, headless AI players.
//! - [`bench`]: `borbaman bench`, RTT and jitter measurement runs.

pub mod bot;
pub mod play;
pub mod bench;
