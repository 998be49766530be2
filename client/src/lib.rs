//! Borbaman, the application: the terminal game, the bots, and every
//! subcommand of `borbaman`.
//!
//! It assembles the other crates: `borbaman-client` (pool, session, state
//! dir), `borbaman-game` (the rules), `borbaman-cluster` (a local cluster),
//! `borbaman-lab` (the measurement and fault-injection runs, re-exported
//! below) and `borbaman-server` (embedded as `borbaman server`).
//!
//! - [`brain`]: the bot AI, a pure function of the game state (it lives in
//!   `crates/brain`, crate `borbaman-brain`, re-exported by `borbaman-client`).
//! - [`driver`]: what a headless player does next, for bots and bench.
//! - [`shutdown`]: one way to tell tasks to stop, and the signals that do.
//! - [`args`]: command-line pieces shared by several subcommands.
//! - [`ui`]: the terminal screens (state, input and drawing kept apart).
//! - [`play`]: `borbaman play`, the terminal game.
//! - [`bot`]: `borbaman bot`, headless AI players.
//! - [`rankings`]: `borbaman rankings`, the top players a page at a time.
//! - [`bench`], [`chaos`], [`measure`]: `borbaman bench` and `borbaman
//!   chaos` and the measurement engine both drive (crate `borbaman-lab`).
//! - [`db`]: `borbaman db`, the database clusters the games are
//!   partitioned over.
//! - [`watch`]: `borbaman watch`, a live game seen without a seat.
//! - [`status`]: `borbaman status`, the cluster's servers on one screen.
//! - [`replay`]: `borbaman replay --verify`, finished games re-simulated
//!   and compared with their stored state.

pub mod bot;
pub use borbaman_client::brain;
pub use borbaman_lab::{args, bench, chaos, driver, measure, shutdown};
#[cfg(test)]
mod brain_tests;
pub mod db;
pub mod play;
pub mod rankings;
pub mod replay;
pub mod status;
pub mod ui;
pub mod watch;
