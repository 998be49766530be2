//! The app's way to stop: [`borbaman_shutdown`]'s `Stopper` and `Shutdown`,
//! shared with the server and the local cluster, and [`signal`] (Ctrl-C or
//! SIGTERM).

pub use borbaman_shutdown::{Shutdown, Stopper, channel, signal};
