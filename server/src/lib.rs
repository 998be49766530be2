//! Borbaman game server.
//!
//! - [`game`]: the pure, deterministic game core (rules, ticks, codec).
//! - [`cli`]: the `borbaman-server` command line.

pub mod cli;
pub mod game;
