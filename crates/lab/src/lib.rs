//! The measurement lab: `borbaman bench` and `borbaman chaos`, the
//! measurement engine both drive, and the pieces the app shares with them.
//!
//! - [`bench`]: `borbaman bench`, RTT and jitter measurement runs.
//! - [`chaos`]: `borbaman chaos`, fault-injection runs.
//! - [`measure`]: the measurement engine both drive.
//! - [`driver`]: what a headless player does next, for bots and bench.
//! - [`shutdown`]: one way to tell tasks to stop, and the signals that do.
//! - [`args`]: command-line pieces shared by several subcommands.
//! - [`brain`]: the bot AI (crate `borbaman-brain`, re-exported by
//!   `borbaman-client`).
//!
//! The app (`client/`, crate `borbaman`) re-exports each of these under
//! its own name, so `borbaman::measure` and `crate::args` there mean the
//! same modules.

pub mod args;
pub mod bench;
pub use borbaman_client::brain;
pub mod chaos;
pub mod driver;
pub mod measure;
pub mod shutdown;
