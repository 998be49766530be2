//! Borbaman, the application: the terminal game, the bots, the
//! measurement and fault-injection runs, and `borbaman server`.
//!
//! It assembles the other crates: `borbaman-client` (pool, session, state
//! dir), `borbaman-game` (the rules), `borbaman-cluster` (a local cluster)
//! and `borbaman-server` (embedded as `borbaman server`).
//!
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
pub mod play;
pub mod ui;
