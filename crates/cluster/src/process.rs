//! Child processes the cluster starts (servers, Patroni, etcd): spawned so
//! they die with their owner, signalled and reaped by PID.

use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Spawns processes from one thread that lives as long as their owner
/// (a cluster). Each child asks the kernel for SIGTERM when that thread dies
/// (`PR_SET_PDEATHSIG` is tied to the spawning *thread*, hence one
/// long-lived thread rather than whichever thread calls `start_server`), so
/// no server outlives a client that was killed outright.
pub(crate) struct Spawner {
    requests: Option<mpsc::Sender<SpawnRequest>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

impl Spawner {
    /// Starts the spawning thread, named `name`.
    pub(crate) fn start(name: &str) -> std::io::Result<Spawner> {
        let (requests, incoming) = mpsc::channel::<SpawnRequest>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                for (mut command, reply) in incoming {
                    let _ = reply.send(spawn_tied_to_this_thread(&mut command));
                }
            })?;
        Ok(Spawner {
            requests: Some(requests),
            thread: Some(thread),
        })
    }

    /// Spawns `command` from the spawning thread. Its `pre_exec` hook runs
    /// after any `uid`/`gid` change, so the death signal survives it.
    pub(crate) fn spawn(&self, command: Command) -> std::io::Result<Child> {
        let gone = || std::io::Error::other("the spawner thread is gone");
        let (reply, child) = mpsc::channel();
        let requests = self.requests.as_ref().ok_or_else(gone)?;
        requests.send((command, reply)).map_err(|_| gone())?;
        child.recv().map_err(|_| gone())?
    }
}

impl Drop for Spawner {
    /// Runs after the servers were stopped (fields drop after
    /// `LocalCluster::drop`): ending the thread then signals no one.
    fn drop(&mut self) {
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn spawn_tied_to_this_thread(command: &mut Command) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the hook makes one async-signal-safe
    // call (prctl) and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn()
}

pub(crate) fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) with a pid we spawned and have not reaped yet.
    unsafe {
        libc::kill(child.id() as libc::pid_t, signal);
    }
}

/// Waits up to `limit` until every thread of `child` is stopped (state
/// `T` in `/proc/<pid>/task/*/stat`) after a SIGSTOP: kill(2) returns
/// before the signal has reached each thread, and a thread on a core the
/// host has not run yet can still answer a call sent in between. True
/// once stopped; false at the limit (or without `/proc`).
pub(crate) fn wait_stopped(child: &Child, limit: Duration) -> bool {
    let tasks = format!("/proc/{}/task", child.id());
    let deadline = Instant::now() + limit;
    loop {
        let stopped = std::fs::read_dir(&tasks).ok().is_some_and(|dir| {
            dir.flatten().all(|task| {
                std::fs::read_to_string(task.path().join("stat"))
                    .ok()
                    .and_then(|stat| {
                        let state = stat.get(stat.rfind(')')? + 2..)?.chars().next()?;
                        Some(matches!(state, 'T' | 't'))
                    })
                    // A thread gone meanwhile is not running either.
                    .unwrap_or(true)
            })
        });
        if stopped {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits up to `grace` for `child` to exit, then SIGKILLs it.
pub(crate) fn wait_or_kill(child: &mut Child, grace: Duration) {
    let deadline = Instant::now() + grace;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) if Instant::now() >= deadline => break,
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    signal(child, libc::SIGKILL);
    let _ = child.wait();
}
