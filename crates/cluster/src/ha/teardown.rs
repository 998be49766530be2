//! Stopping everything on drop: Patroni first (it stops its PostgreSQL),
//! then etcd, SIGKILL after a grace period, by PID only.

use super::*;

impl Drop for LocalHa {
    fn drop(&mut self) {
        let deadline = Instant::now() + STOP_GRACE;
        // PostgreSQL processes, found while their postmasters still live.
        let mut postgres: Vec<Proc> = Vec::new();
        for i in 0..MEMBERS {
            if let Some(pm) = self.postmaster(i) {
                postgres.push(pm);
                postgres.extend(children_of(pm.pid));
            }
        }
        // Patroni stops its PostgreSQL on SIGTERM, then exits.
        let patronis: Vec<Child> = self
            .members
            .iter_mut()
            .filter_map(|m| m.patroni.take())
            .collect();
        for child in &patronis {
            kill(child.id(), libc::SIGTERM);
        }
        let patroni_deadline = Instant::now() + PATRONI_GRACE;
        for mut child in patronis {
            wait_or_kill(
                &mut child,
                patroni_deadline.saturating_duration_since(Instant::now()),
            );
        }
        // Postmasters left behind (their Patroni was killed, or took too
        // long), and their backends.
        for p in &postgres {
            if p.is_same_process() {
                kill(p.pid, libc::SIGKILL);
            }
        }
        let etcds: Vec<Child> = self
            .etcds
            .iter_mut()
            .filter_map(|e| e.child.take())
            .collect();
        for child in &etcds {
            kill(child.id(), libc::SIGTERM);
        }
        // SIGTERM to a member of a dying etcd cluster can take seconds
        // (it tries to hand over leadership to peers that are gone); its
        // log is fsynced, so SIGKILL after a short grace loses nothing.
        let etcd_deadline = deadline.min(Instant::now() + ETCD_GRACE);
        for mut child in etcds {
            wait_or_kill(
                &mut child,
                etcd_deadline.saturating_duration_since(Instant::now()),
            );
        }
        if self._temp.is_some() {
            // Unlinking is slow on some disks (ext4 with `discard`: a few ms
            // a file, ~1000 files a data dir) and much faster in parallel.
            let dirs = self
                .members
                .iter()
                .map(|m| &m.dir)
                .chain(self.etcds.iter().map(|e| &e.data_dir));
            std::thread::scope(|scope| {
                for dir in dirs {
                    scope.spawn(move || fs::remove_dir_all(dir));
                }
            });
        }
        // `_temp` drops after this: it deletes the directory.
    }
}
