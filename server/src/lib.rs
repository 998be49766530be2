//! Borbaman game server: stateless gRPC servers in front of one PostgreSQL.
//!
//! A server keeps nothing between calls: every call loads the game from the
//! database, applies the request with the pure game core, and commits
//! before it answers, so any live server can serve any game.
//!
//! The rules themselves are `borbaman-game`; this crate holds what stands
//! around them:
//!
//! - [`wire`]: the core's types to and from the wire messages.
//! - [`store`]: all SQL: the game transactions and the registry rows.
//! - [`service`]: the `Game` gRPC service (validate, delegate, reply).
//! - [`registry`]: heartbeats and the `Registry` gRPC service.
//! - [`patroni`]: asking Patroni's REST API which member is the primary.
//! - [`etcd`]: watching Patroni's leader key in etcd.
//! - [`server`]: assembles a server; health and graceful shutdown.
//! - [`incoming`]: the accept loop: connection limits and back-off.
//! - [`admission`]: admission control: a bound on calls in flight to the
//!   database, with priorities; refusals say `server-full`.
//! - [`company`]: whether a player's game-mates call this server too.
//! - [`seating`]: join admission by whole games, keyed to measured
//!   capacity: no new game while the running games are at the limit.
//! - [`limits`]: call rate limits (acts per session, joins per address).
//! - [`metrics`]: Prometheus metrics and the per-call wrapper that counts.
//! - [`status`]: the `Status` gRPC service behind `borbaman status`.
//! - [`health`]: the game service's health, from database writes.
//! - [`slow`]: slow mode, a fault-injection hook (SIGUSR1/SIGUSR2).
//! - [`cli`]: the `borbaman-server` command line.
//! - [`error`]: failures and their gRPC statuses.
//! - [`token`]: session tokens.
//!
//! Only what other crates use is public (the store's audit and replay, the
//! wire mapping, the command line, the server's assembly and its limits);
//! the services, the Patroni and etcd followers, health, slow mode and the
//! errors are the crate's own.

pub mod admission;
pub mod cli;
pub(crate) mod company;
pub(crate) mod error;
pub(crate) mod etcd;
pub(crate) mod health;
pub mod incoming;
pub mod limits;
pub mod metrics;
pub(crate) mod patroni;
pub(crate) mod registry;
pub mod seating;
pub mod server;
pub(crate) mod service;
pub(crate) mod slow;
pub mod status;
pub mod store;
pub mod token;
pub mod wire;
