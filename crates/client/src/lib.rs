//! How a Borbaman client reaches its game, whatever it draws or decides:
//! the terminal game, the bots, bench and chaos runs all sit on this.
//!
//! - [`brain`]: the bot AI, a pure function of the game state (the app's
//!   bots and the server's benchmarks play with it); the crate
//!   `borbaman-brain`, here under its old name.
//! - [`pool`]: `ServerPool`, discovery, health and failover across servers.
//! - [`session`]: `GameSession`, one player's seat, safe to retry.
//! - [`inputs`]: the unacknowledged inputs, numbered, and when to send them.
//! - [`predict`]: the player's own inputs drawn before the server applied them.
//! - [`spectator`]: watching a game by its id, with no seat; the live games.
//! - [`state_dir`]: the saved session that lets a restarted client rejoin.
//! - [`wire_check`]: a server's game state checked before anyone uses it.
//!
//! It knows the wire contract and the game core, never the server or the
//! database.

pub use borbaman_brain as brain;
pub mod inputs;
pub mod pool;
pub mod predict;
pub mod session;
pub mod spectator;
pub mod state_dir;
pub mod wire_check;
