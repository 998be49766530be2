//! Stopping everything on drop, by PID only: every Patroni SIGKILLed
//! first (so that none restarts its PostgreSQL or moves the leader while
//! the rest stops), then each postmaster told to shut down immediately
//! (SIGQUIT: it stops its backends and removes its shared memory), etcd
//! SIGKILLed; SIGKILL to what is left after a grace period.
//!
//! Nothing is asked to stop gracefully because nothing is kept that a
//! graceful stop would save: a throwaway layout is deleted right after,
//! and a kept one is only read (logs) or started again, which recovers
//! PostgreSQL from its WAL and etcd from its log like after a crash. A
//! graceful stop cost 6-8 s on a busy 2-core machine (the leader's Patroni
//! asks the other members over REST whether it may stop, while they stop
//! too); this one costs well under a second.

use super::*;

impl Drop for LocalHa {
    fn drop(&mut self) {
        // PostgreSQL processes, found while their postmasters still live.
        let mut postmasters: Vec<Proc> = Vec::new();
        let mut backends: Vec<Proc> = Vec::new();
        for i in 0..MEMBERS {
            if let Some(pm) = self.postmaster(i) {
                postmasters.push(pm);
                backends.extend(children_of(pm.pid));
            }
        }
        let patronis: Vec<Child> = self
            .members
            .iter_mut()
            .filter_map(|m| m.patroni.take())
            .collect();
        let etcds: Vec<Child> = self
            .etcds
            .iter_mut()
            .filter_map(|e| e.child.take())
            .collect();
        for child in &patronis {
            kill(child.id(), libc::SIGKILL);
        }
        for pm in &postmasters {
            if pm.is_same_process() {
                kill(pm.pid, libc::SIGQUIT);
            }
        }
        for child in &etcds {
            kill(child.id(), libc::SIGKILL);
        }
        for mut child in patronis.into_iter().chain(etcds) {
            let _ = child.wait();
        }
        // A postmaster Patroni was starting as it died shows up now (its
        // postmaster.pid is written first thing): stop it too. A postmaster
        // answers SIGQUIT within milliseconds; one that does not (stopped,
        // or stuck on a disk) is killed with its backends. (Should one
        // still slip through, it shuts itself down once its data directory
        // is gone.)
        for i in 0..MEMBERS {
            if let Some(pm) = self.postmaster(i).filter(|pm| !postmasters.contains(pm)) {
                kill(pm.pid, libc::SIGQUIT);
                backends.extend(children_of(pm.pid));
                postmasters.push(pm);
            }
        }
        let deadline = Instant::now() + STOP_GRACE;
        while postmasters.iter().any(Proc::is_same_process) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for p in postmasters.iter().chain(&backends) {
            if p.is_same_process() {
                kill(p.pid, libc::SIGKILL);
            }
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
