//! CPU quotas for a local cluster's processes, in control groups of their
//! own.
//!
//! Every machine here has two cores, shared by the database, the servers
//! and the load generator. To show what more database clusters (or more
//! servers) buy, each is given the same CPU quota, so that a run measures
//! what a capped PostgreSQL holds rather than what is left of two cores.
//! A [`CpuGroup`] is one control group with a quota: the cgroup v1 `cpu`
//! controller (`cpu.cfs_quota_us` over `cpu.cfs_period_us`, with a group
//! of the same name under `cpuacct` to count its CPU time) where it is
//! mounted at `/sys/fs/cgroup/cpu`, else cgroup v2's `cpu.max` where the
//! unified hierarchy at `/sys/fs/cgroup` has the `cpu` controller. A
//! command is put in the group by [`CpuGroup::confine`]: the child writes
//! itself into the group between `fork` and `exec`, so the program and
//! everything it forks later (a postmaster's backends, Patroni's
//! PostgreSQL) start and stay inside.
//!
//! Writing a control group needs root (or a delegated hierarchy); where
//! neither hierarchy is writable, [`CpuGroup::create`] says so.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The scheduler period the quota is a share of: 100 ms, the kernel's
/// default; a group over its quota waits for the next period.
const PERIOD_US: u64 = 100_000;

/// Where cgroup v1 mounts its `cpu` controller on these machines.
const V1_CPU: &str = "/sys/fs/cgroup/cpu";
/// And its `cpuacct` controller, which counts a group's CPU time.
const V1_CPUACCT: &str = "/sys/fs/cgroup/cpuacct";
/// The unified (v2) hierarchy.
const V2: &str = "/sys/fs/cgroup";

/// CPU quotas for a local cluster: `None` leaves a part uncapped.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuQuotas {
    /// Cores for each database cluster's PostgreSQL processes (each
    /// cluster a group of its own).
    pub database: Option<f64>,
    /// Cores for all the game servers together (one group).
    pub servers: Option<f64>,
}

/// Why a CPU quota cannot be set.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("a CPU quota must be a positive number of cores (e.g. 0.5), got {0}")]
    BadQuota(f64),
    #[error(
        "cannot set a CPU quota: neither cgroup v1's cpu controller ({V1_CPU}) nor cgroup v2's \
         cpu.max ({V2}, with the cpu controller enabled) is writable here ({0}); run as root on \
         a machine with either, or leave the quota out"
    )]
    Unavailable(String),
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

/// Which hierarchy a group lives in.
#[derive(Clone, Debug)]
enum Kind {
    /// cgroup v1: the `cpu` group and, when that controller is mounted
    /// apart, a `cpuacct` group of the same name.
    V1 {
        acct: Option<PathBuf>,
    },
    V2,
}

/// One control group with a CPU quota, removed when dropped (once the
/// processes in it have exited).
#[derive(Debug)]
pub struct CpuGroup {
    dir: PathBuf,
    kind: Kind,
    cores: f64,
    /// The `cgroup.procs` files a confined child writes itself into.
    procs: Vec<CString>,
}

impl CpuGroup {
    /// A new group named `borbaman-<pid>-<name>` with `cores` of CPU
    /// (e.g. 0.5: 50 ms in every 100 ms).
    pub fn create(name: &str, cores: f64) -> Result<CpuGroup, CgroupError> {
        if !(cores.is_finite() && cores > 0.0) {
            return Err(CgroupError::BadQuota(cores));
        }
        let leaf = format!("borbaman-{}-{name}", std::process::id());
        let quota_us = ((cores * PERIOD_US as f64).round() as u64).max(1000);
        let v1 = Path::new(V1_CPU).join("cpu.cfs_quota_us");
        if v1.exists() {
            return Self::create_v1(&leaf, cores, quota_us);
        }
        let controllers = fs::read_to_string(Path::new(V2).join("cgroup.controllers"))
            .map_err(|e| CgroupError::Unavailable(format!("no {V1_CPU}, and {V2}: {e}")))?;
        if !controllers.split_whitespace().any(|c| c == "cpu") {
            return Err(CgroupError::Unavailable(format!(
                "no {V1_CPU}, and {V2} has no cpu controller"
            )));
        }
        Self::create_v2(&leaf, cores, quota_us)
    }

    fn create_v1(leaf: &str, cores: f64, quota_us: u64) -> Result<CpuGroup, CgroupError> {
        let dir = Path::new(V1_CPU).join(leaf);
        fs::create_dir_all(&dir).map_err(|e| unavailable(&dir, e))?;
        write(&dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
        write(&dir.join("cpu.cfs_quota_us"), &quota_us.to_string())?;
        let mut procs = vec![procs_path(&dir)];
        // `cpuacct` mounted with `cpu` is the same directory; apart, it is
        // a group of its own, for the CPU time.
        let acct = Path::new(V1_CPUACCT);
        let acct = (acct.join("cpuacct.usage").exists()
            && !Path::new(V1_CPU).join("cpuacct.usage").exists())
        .then(|| acct.join(leaf));
        if let Some(acct) = &acct {
            fs::create_dir_all(acct).map_err(|e| unavailable(acct, e))?;
            procs.push(procs_path(acct));
        }
        // A child started as another user (a Patroni member runs as the
        // PostgreSQL user) joins the group after it dropped root: cgroup
        // v1 lets a process move itself, given write access to the file.
        for group in std::iter::once(&dir).chain(acct.as_ref()) {
            let file = group.join("cgroup.procs");
            fs::set_permissions(&file, fs::Permissions::from_mode(0o666))
                .map_err(|e| unavailable(&file, e))?;
        }
        Ok(CpuGroup {
            dir,
            kind: Kind::V1 { acct },
            cores,
            procs,
        })
    }

    fn create_v2(leaf: &str, cores: f64, quota_us: u64) -> Result<CpuGroup, CgroupError> {
        let root = Path::new(V2);
        let enabled = fs::read_to_string(root.join("cgroup.subtree_control")).unwrap_or_default();
        if !enabled.split_whitespace().any(|c| c == "cpu") {
            write(&root.join("cgroup.subtree_control"), "+cpu")?;
        }
        let dir = root.join(leaf);
        fs::create_dir_all(&dir).map_err(|e| unavailable(&dir, e))?;
        write(&dir.join("cpu.max"), &format!("{quota_us} {PERIOD_US}"))?;
        Ok(CpuGroup {
            procs: vec![procs_path(&dir)],
            dir,
            kind: Kind::V2,
            cores,
        })
    }

    /// The quota, in cores.
    pub fn cores(&self) -> f64 {
        self.cores
    }

    /// The group's directory (in the `cpu` hierarchy).
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Makes `command`'s child join this group before it runs the program,
    /// so the program and everything it forks run under the quota.
    pub fn confine(&self, command: &mut Command) {
        let procs = self.procs.clone();
        // SAFETY: between fork and exec the child only calls open, write
        // and close (async-signal-safe) on paths made before the fork.
        unsafe {
            command.pre_exec(move || {
                for path in &procs {
                    join_group(path)?;
                }
                Ok(())
            });
        }
    }

    /// CPU time the group's processes used so far (processes that left
    /// or exited included), when the hierarchy counts it.
    pub fn usage(&self) -> Option<Duration> {
        match &self.kind {
            Kind::V1 { acct } => {
                let dir = acct.as_deref().unwrap_or(&self.dir);
                let ns = fs::read_to_string(dir.join("cpuacct.usage")).ok()?;
                Some(Duration::from_nanos(ns.trim().parse().ok()?))
            }
            Kind::V2 => stat_field(&self.dir, "usage_usec").map(Duration::from_micros),
        }
    }

    /// How often, and for how long in all, the group waited for its next
    /// period because it had used its quota.
    pub fn throttled(&self) -> Option<(u64, Duration)> {
        match &self.kind {
            Kind::V1 { .. } => Some((
                stat_field(&self.dir, "nr_throttled")?,
                Duration::from_nanos(stat_field(&self.dir, "throttled_time")?),
            )),
            Kind::V2 => Some((
                stat_field(&self.dir, "nr_throttled")?,
                Duration::from_micros(stat_field(&self.dir, "throttled_usec")?),
            )),
        }
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        // A group can be removed only once empty: its processes were
        // stopped by their owners before this drop; give stragglers a
        // moment to exit.
        let mut dirs = vec![self.dir.clone()];
        if let Kind::V1 { acct: Some(acct) } = &self.kind {
            dirs.push(acct.clone());
        }
        for dir in dirs {
            for _ in 0..50 {
                if fs::remove_dir(&dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn procs_path(dir: &Path) -> CString {
    CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
        .expect("a cgroup path has no NUL byte")
}

/// Writes "0" (the writing process) into `procs`: between fork and exec.
fn join_group(procs: &CString) -> io::Result<()> {
    // SAFETY: a valid NUL-terminated path; plain syscalls.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, b"0".as_ptr().cast(), 1);
        let err = io::Error::last_os_error();
        libc::close(fd);
        if written != 1 {
            return Err(err);
        }
    }
    Ok(())
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(path, value).map_err(|e| match e.kind() {
        io::ErrorKind::PermissionDenied | io::ErrorKind::NotFound => unavailable(path, e),
        _ => CgroupError::Io {
            context: format!("writing {value:?} to {}", path.display()),
            source: e,
        },
    })
}

fn unavailable(path: &Path, e: io::Error) -> CgroupError {
    CgroupError::Unavailable(format!("{}: {e}", path.display()))
}

/// A field of the group's `cpu.stat`.
fn stat_field(dir: &Path, name: &str) -> Option<u64> {
    let stat = fs::read_to_string(dir.join("cpu.stat")).ok()?;
    stat.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == name).then(|| value.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writable() -> bool {
        CpuGroup::create("probe", 0.5).is_ok()
    }

    #[test]
    fn a_quota_must_be_a_positive_number_of_cores() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                CpuGroup::create("bad", bad),
                Err(CgroupError::BadQuota(_))
            ));
        }
    }

    /// A busy loop confined to 0.2 cores for 1 s of wall time uses at most
    /// about 0.2 s of CPU (a whole core unconfined), counted by the group.
    #[test]
    fn a_confined_command_and_its_children_are_held_to_the_quota() {
        if !writable() {
            eprintln!("skipped: no writable cgroup cpu controller on this machine");
            return;
        }
        let group = CpuGroup::create("test", 0.2).unwrap();
        let mut command = Command::new("sh");
        // The loop runs in a child of the shell: forked after the join.
        command.args(["-c", "timeout 1 sh -c 'while :; do :; done'; true"]);
        group.confine(&mut command);
        let status = command.status().unwrap();
        assert!(status.success());
        let used = group.usage().expect("the group counts its CPU time");
        assert!(
            used > Duration::ZERO && used <= Duration::from_millis(450),
            "a loop held to 0.2 cores for 1 s used {used:?} of CPU"
        );
        assert!(
            group.throttled().is_some(),
            "the group counts its throttling"
        );
    }
}
