//! Processes as `/proc` shows them: a PID with its start time (so a reused
//! PID is not mistaken for the process), children, signals, and stopping a
//! postmaster.

use super::*;

impl LocalHa {
    /// Member `i`'s live postmaster, from `postmaster.pid` in its data dir.
    pub(super) fn postmaster(&self, i: usize) -> Option<Proc> {
        let member = self.members.get(i)?;
        let text = fs::read_to_string(member.data_dir.join("postmaster.pid")).ok()?;
        let pid: u32 = text.lines().next()?.trim().parse().ok()?;
        let proc = Proc::get(pid)?;
        // It must be a postmaster of this data dir, not a reused PID.
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let data_dir = member.data_dir.to_string_lossy();
        let ours = cmdline
            .split(|&b| b == 0)
            .any(|arg| arg == data_dir.as_bytes());
        ours.then_some(proc)
    }
}

/// A process, by PID and start time (which tells a reused PID apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Proc {
    pub(super) pid: u32,
    pub(super) ppid: u32,
    pub(super) start: u64,
}

impl Proc {
    /// The live (not zombie) process `pid`.
    pub(super) fn get(pid: u32) -> Option<Proc> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) state ppid … starttime(22nd field) …"; comm may hold
        // spaces and parentheses.
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let state = fields.first()?;
        if *state == "Z" || *state == "X" {
            return None;
        }
        Some(Proc {
            pid,
            ppid: fields.get(1)?.parse().ok()?,
            start: fields.get(19)?.parse().ok()?,
        })
    }

    pub(super) fn is_same_process(&self) -> bool {
        Proc::get(self.pid).is_some_and(|now| now.start == self.start)
    }
}

/// Whether `pid` is a live process (a zombie is not).
pub(super) fn alive(pid: u32) -> bool {
    Proc::get(pid).is_some()
}

/// The live children of `pid`.
pub(super) fn children_of(pid: u32) -> Vec<Proc> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(Proc::get)
        .filter(|p| p.ppid == pid)
        .collect()
}

pub(super) fn kill(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) on a PID of a process we started (checked by the
    // callers), with no memory involved.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// Stops a postmaster not under Patroni: fast shutdown (SIGINT), SIGKILL
/// to it and its children after `grace`.
pub(super) fn stop_postmaster(pm: Proc, grace: Duration) {
    let children = children_of(pm.pid);
    kill(pm.pid, libc::SIGINT);
    let deadline = Instant::now() + grace;
    while pm.is_same_process() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for p in std::iter::once(pm).chain(children) {
        if p.is_same_process() {
            kill(p.pid, libc::SIGKILL);
        }
    }
}
