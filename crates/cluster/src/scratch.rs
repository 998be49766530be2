//! Where throwaway databases live: in memory (the tmpfs at /dev/shm) when
//! they run without fsync and there is room, else under /tmp.
//!
//! Without fsync nothing of a throwaway cluster is meant to reach the
//! disk, yet on ext4 (with `discard`, as on this project's CI machines)
//! copying the 46 MB template cluster into /tmp takes 2.3 s on a busy
//! two-core machine and deleting it another 0.1 s; in /dev/shm the copy
//! takes 0.15 s. The test suite starts a throwaway cluster for nearly
//! every end-to-end test, so the difference is minutes of its summed
//! time. A small /dev/shm (64 MB in a default Docker container) would fill
//! up under a test's writes, so it is used only with room to spare.

use std::path::Path;

/// The tmpfs tried first.
const SHM: &str = "/dev/shm";
/// The on-disk fallback.
const TMP: &str = "/tmp";
/// Free space /dev/shm must have for a throwaway cluster to go there: the
/// template's copy plus what a test or a short run writes, many times over.
const SHM_MIN_FREE: u64 = 1 << 30;

/// The root for a throwaway cluster's directory, given whether it runs
/// with fsync and the free bytes of /dev/shm (`None`: there is none).
pub(crate) fn choose_root(fsync: bool, shm_free: Option<u64>) -> &'static str {
    match shm_free {
        Some(free) if !fsync && free >= SHM_MIN_FREE => SHM,
        _ => TMP,
    }
}

/// [`choose_root`] for this machine.
pub(crate) fn throwaway_root(fsync: bool) -> &'static str {
    choose_root(fsync, free_bytes(Path::new(SHM)))
}

/// A fresh directory named `prefix…` for a throwaway cluster, under
/// [`throwaway_root`], or under /tmp if that fails; deleted when dropped.
pub(crate) fn throwaway_dir(prefix: &str, fsync: bool) -> std::io::Result<tempfile::TempDir> {
    let in_dir = |root: &str| tempfile::Builder::new().prefix(prefix).tempdir_in(root);
    in_dir(throwaway_root(fsync)).or_else(|_| in_dir(TMP))
}

/// Bytes an unprivileged process may still write to the file system at
/// `dir`, if `dir` is a directory.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    if !dir.is_dir() {
        return None;
    }
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `stat` a valid
    // statvfs for the call to fill.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_only_without_fsync_and_with_room() {
        assert_eq!(choose_root(false, Some(20 << 30)), SHM);
        assert_eq!(choose_root(true, Some(20 << 30)), TMP, "fsync wants a disk");
        assert_eq!(choose_root(false, Some(64 << 20)), TMP, "a small /dev/shm");
        assert_eq!(choose_root(false, None), TMP, "no /dev/shm");
    }

    #[test]
    fn free_space_is_read_from_the_file_system() {
        assert!(free_bytes(Path::new(TMP)).is_some_and(|free| free > 0));
        assert_eq!(free_bytes(Path::new("/no/such/directory")), None);
    }
}
