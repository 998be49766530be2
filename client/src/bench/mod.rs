//! `borbaman bench`: headless clients play real games through the same
//! `ServerPool` as players, one invocation every interval, and the run is
//! written up as per-invocation records, a summary and two charts.
//!
//! - [`record`]: per-invocation records and CSV.
//! - [`report`]: percentiles, jitter, failover gaps, time breakdown.
//! - [`plot`]: `ecdf.svg` and `rtt.svg`.
//! - [`workload`]: the headless clients.

pub mod plot;
pub mod record;
pub mod report;
pub mod workload;
