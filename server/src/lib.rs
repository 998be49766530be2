//! Borbaman game server: stateless gRPC servers in front of one PostgreSQL.
//!
//! - [`game`]: the pure, deterministic game core (rules, ticks, codec).
//! - [`cli`]: the `borbaman-server` command line.
//! - [`postgres`]: a private PostgreSQL from the machine's binaries, for
//!   tests and local clusters.

pub mod cli;
pub mod game;
pub mod postgres;
