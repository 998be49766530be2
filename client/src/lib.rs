//! Borbaman terminal client.
//!
//! - [`pool`]: `ServerPool`, discovery, health and failover across servers.
//! - [`session`]: `GameSession`, one player's seat, safe to retry.
//! - [`state_dir`]: the saved session that lets a restarted client rejoin.
//! - [`cluster`]: `LocalCluster`, PostgreSQL plus server processes on this
//!   machine, for `play`, tests, bench and chaos.
//! - [`brain`]: the bot AI, a pure function of the game state.
//! - [`ui`]: the terminal screens (state, input and drawing kept apart).
//! - [`play`]: `borbaman play`, the terminal game.
//! - [`bot`]: `borbaman bot`, headless AI players.
//! - [`bench`]: `borbaman bench`, RTT and jitter measurement runs.
//! - [`chaos`]: `borbaman chaos`, fault-injection runs.

pub mod bench;
pub mod bot;
pub mod brain;
pub mod chaos;
pub mod cluster;
pub mod play;
pub mod pool;
pub mod session;
pub mod state_dir;
pub mod ui;
