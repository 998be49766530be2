//! Borbaman on one machine, for `borbaman play`, bench and chaos runs and
//! the tests.
//!
//! - [`postgres`]: `LocalPostgres`, a private PostgreSQL from the machine's
//!   own binaries.
//! - [`ha`]: `LocalHa`, a replicated PostgreSQL (3 etcd + 3 Patroni
//!   members) and the faults failover tests inject into it.
//! - [`local`]: `LocalCluster`, a database (or several database clusters
//!   the games are partitioned over) plus N game-server processes, and the
//!   faults chaos runs inject into them.
//! - [`proxy`]: `TcpProxy`, a TCP forwarder that can be cut, to partition
//!   one server from the database, or delay every byte, to put the game
//!   servers at a distance from their clients.
//! - [`wan`]: `WanSpec`/`WanMix`, the distance a delay proxy emulates
//!   (`TcpProxy::with_wan`) between clients and game servers.
//! - [`cgroup`]: `CpuGroup`, a CPU quota for the database's or the
//!   servers' processes.
//! - [`ReadyLine`]: the line a server prints when it serves, which
//!   launchers wait for (the contract lives in `borbaman-proto`).
//! - `scratch`: where throwaway databases live (in memory when they run
//!   without fsync).
//! - [`wait`]: waiting for a condition with a deadline (a log line, a row),
//!   saying what never came when it gives up.
//!
//! Nothing here links the server or the database driver: servers are
//! processes, and the database is reached by its binaries.

pub mod cgroup;
pub mod ha;
pub mod local;
mod ports;
pub mod postgres;
mod process;
pub mod proxy;
mod scratch;
pub mod wait;
pub mod wan;

pub use borbaman_proto::ready::ReadyLine;
pub use cgroup::{CgroupError, CpuGroup, CpuQuotas};
pub use ha::{HaError, HaOptions, LocalHa, MemberStatus, Switchover};
pub use local::{
    ClusterConfig, ClusterError, Database, LocalCluster, db_cluster_name,
    no_warm_up_pace_unless_set, unlimited_unless_set,
};
pub use postgres::{LocalPostgres, PgError, PgOptions};
pub use proxy::TcpProxy;
pub use wan::{WanError, WanMix, WanSpec};
