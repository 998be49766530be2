//! Borbaman game server: stateless gRPC servers in front of one PostgreSQL.
//!
//! A server keeps nothing between calls: every call loads the game from the
//! database, applies the request with the pure game core, and commits
//! before it answers, so any live server can serve any game.
//!
//! - [`game`]: the pure, deterministic game core (rules, ticks, codec).
//! - [`store`]: all SQL: the game transactions and the registry rows.
//! - [`service`]: the `Game` gRPC service (validate, delegate, reply).
//! - [`registry`]: heartbeats and the `Registry` gRPC service.
//! - [`server`]: assembles a server; health and graceful shutdown.
//! - [`cli`]: the `borbaman-server` command line.
//! - [`error`]: failures and their gRPC statuses.
//! - [`token`], [`names`]: session tokens and player names.
//! - [`postgres`]: a private PostgreSQL for tests and local clusters.

pub mod cli;
pub mod error;
pub mod game;
pub mod names;
pub mod postgres;
pub mod registry;
pub mod server;
pub mod service;
pub mod store;
pub mod token;
