//! A private PostgreSQL started from the machine's own binaries.
//!
//! Tests, `borbaman play`/`bench`/`chaos` and the chaos `db-restart` fault
//! need a database without asking the user to set one up. [`LocalPostgres`]
//! runs `initdb` and `pg_ctl` from Debian's `postgresql` package (the highest
//! version under `/usr/lib/postgresql/*/bin`, else `pg_config --bindir`),
//! listening only on 127.0.0.1. `initdb` and `postgres` refuse to run as
//! root, so when we are root they run as the `postgres` user through
//! `runuser`, and the data directory is handed to that user.
//!
//! The handle stops the cluster when dropped; a throwaway cluster
//! ([`LocalPostgres::start_temp`]) also removes its directory.
//!
//! A throwaway cluster is a copy of a template that `initdb` made once per
//! machine (per PostgreSQL binaries and user, under a lock in /tmp), with
//! the `borbaman` database already in it: `initdb` starts a dozen
//! processes and takes seconds on a busy machine, and the test suite starts
//! a throwaway cluster per test; a copy of 40 MB takes a fraction of that.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use std::sync::Arc;

use crate::cgroup::CpuGroup;
use crate::ports::free_port;

/// Name of the database created in every cluster.
pub const DATABASE: &str = "borbaman";

/// Longest unix socket path PostgreSQL accepts (sun_path is 108 bytes).
pub(crate) const MAX_SOCKET_DIR_BYTES: usize = 90;

/// Bumped when the template's contents change, so that an old one is not
/// copied.
const TEMPLATE_FORMAT: u32 = 1;

/// The file that marks a template complete.
const TEMPLATE_READY: &str = "ready";

/// How an empty data directory is filled.
#[derive(Clone, Copy, Debug)]
enum Init {
    /// `initdb`, then the database is created once the server runs.
    Initdb,
    /// A copy of the template ([`LocalPostgres::template`]), database
    /// included.
    FromTemplate,
}

/// How a cluster runs.
#[derive(Clone, Copy, Debug)]
pub struct PgOptions {
    /// `false` turns off fsync, synchronous commit and full-page writes:
    /// fast and fine for tests, unsafe for data anyone wants to keep.
    pub fsync: bool,
    /// Port to listen on; `None` picks a free one.
    pub port: Option<u16>,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            fsync: true,
            port: None,
        }
    }
}

/// Why a local PostgreSQL could not be started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error(
        "PostgreSQL server binaries (initdb, pg_ctl) not found in /usr/lib/postgresql/*/bin \
         or via pg_config; install them with `apt-get install postgresql` (Debian/Ubuntu), \
         or set DATABASE_URL to an existing database"
    )]
    NotInstalled,
    #[error(
        "running as root, but there is no `postgres` user to run PostgreSQL as; \
         install Debian's `postgresql` package (it creates that user)"
    )]
    NoPostgresUser,
    #[error(
        "the `postgres` user cannot reach {0}: a parent directory is not traversable \
         (as root, choose a data directory outside /root, e.g. under /var/lib or /tmp)"
    )]
    Unreachable(PathBuf),
    #[error("{what} failed: {detail}")]
    Command { what: String, detail: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

/// What moving partitions between clusters needs of a cluster (logical
/// replication, see `server/src/store/mover.rs`): logical decoding, and
/// the slots, senders and workers of a move's copy. PostgreSQL's
/// launcher starts a subscription's worker no sooner than
/// `wal_retrieve_retry_interval` after it last started one (5 s by
/// default), which made every move of a `db rebalance` after the first
/// wait ~5 s for its copy to begin; Patroni's clusters have it at 100 ms
/// too (`server/patroni/patroni.yml`).
pub const MOVES: &[(&str, &str)] = &[
    ("wal_level", "logical"),
    ("max_replication_slots", "16"),
    ("max_wal_senders", "16"),
    ("max_logical_replication_workers", "8"),
    ("max_sync_workers_per_subscription", "4"),
    ("wal_retrieve_retry_interval", "100ms"),
];

/// What PostgreSQL logs and times so a run can tell its stalls' causes
/// (`borbaman bench` keeps the log in `OUT/logs/` and counts its events in
/// each stall window): checkpoints, every autovacuum, connections opened
/// and closed (a connection opened on a call's path costs a fork and an
/// authentication), lock waits past `deadlock_timeout`, statements over
/// 100 ms, and the time WAL writes and flushes take (`pg_stat_wal`). UTC
/// timestamps to the millisecond (PostgreSQL 15's default
/// `log_line_prefix`, `%m [%p] `), so the log lines up with the run.
/// The same settings are in `server/patroni/patroni.yml` and the compose
/// files.
pub const OBSERVE: &[(&str, &str)] = &[
    ("log_checkpoints", "on"),
    ("log_autovacuum_min_duration", "0"),
    ("log_connections", "on"),
    ("log_disconnections", "on"),
    ("log_lock_waits", "on"),
    ("log_min_duration_statement", "100"),
    ("log_timezone", "UTC"),
    ("track_wal_io_timing", "on"),
    ("track_io_timing", "on"),
];

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> PgError {
    let context = context.into();
    move |source| PgError::Io { context, source }
}

/// A running (or stopped) private PostgreSQL cluster.
#[derive(Debug)]
pub struct LocalPostgres {
    bin_dir: PathBuf,
    data_dir: PathBuf,
    log_file: PathBuf,
    port: u16,
    opts: PgOptions,
    /// `Some` when we are root: the uid/gid everything runs as.
    run_as: Option<(u32, u32)>,
    running: bool,
    /// Held for throwaway clusters; removing it deletes the cluster.
    temp: Option<tempfile::TempDir>,
    /// The postmaster (and so every backend) runs in this group, with its
    /// CPU quota; dropped after the server stopped.
    cpu_group: Option<Arc<CpuGroup>>,
}

impl LocalPostgres {
    /// Starts a throwaway cluster in a fresh directory, on a free port
    /// (unless `opts.port` is set): in memory under /dev/shm when fsync is
    /// off and it has room, else under /tmp. Dropping the handle stops it
    /// at once and deletes the directory.
    pub fn start_temp(opts: PgOptions) -> Result<LocalPostgres, PgError> {
        Self::start_temp_in(opts, None)
    }

    /// [`LocalPostgres::start_temp`], its postmaster started in
    /// `cpu_group` when given (see [`crate::cgroup`]).
    pub fn start_temp_in(
        opts: PgOptions,
        cpu_group: Option<Arc<CpuGroup>>,
    ) -> Result<LocalPostgres, PgError> {
        let temp = crate::scratch::throwaway_dir("borbaman-pg-", opts.fsync)
            .map_err(io_err("creating a temporary directory"))?;
        // The postgres user must be able to enter the directory.
        fs::set_permissions(temp.path(), fs::Permissions::from_mode(0o755))
            .map_err(io_err("chmod of the temporary directory"))?;
        let data_dir = temp.path().join("data");
        // Inside the data dir: the postgres user must be able to write it.
        let log_file = data_dir.join("postgres.log");
        let mut pg = Self::prepare(data_dir, log_file, opts, Init::FromTemplate)?;
        pg.temp = Some(temp);
        pg.cpu_group = cpu_group;
        pg.start()?;
        Ok(pg)
    }

    /// Starts a cluster whose data lives in `dir`: runs `initdb` when the
    /// directory is missing or empty, reuses the cluster otherwise. A server
    /// left running there by an earlier crash is stopped first.
    pub fn start_in(dir: &Path, opts: PgOptions) -> Result<LocalPostgres, PgError> {
        Self::start_in_group(dir, opts, None)
    }

    /// [`LocalPostgres::start_in`], its postmaster started in `cpu_group`
    /// when given (see [`crate::cgroup`]).
    pub fn start_in_group(
        dir: &Path,
        opts: PgOptions,
        cpu_group: Option<Arc<CpuGroup>>,
    ) -> Result<LocalPostgres, PgError> {
        let data_dir = absolute(dir)?;
        let log_file = data_dir.join("postgres.log");
        let mut pg = Self::prepare(data_dir, log_file, opts, Init::Initdb)?;
        pg.cpu_group = cpu_group;
        if pg
            .pg_ctl(&["status"])
            .map(|o| o.status.success())
            .unwrap_or(false)
        {
            pg.pg_ctl_ok(&["stop", "-m", "fast", "-w"], "stopping a stale PostgreSQL")?;
        }
        pg.start()?;
        pg.create_database()?;
        Ok(pg)
    }

    /// Finds the binaries, creates and initialises the data dir if needed.
    fn prepare(
        data_dir: PathBuf,
        log_file: PathBuf,
        opts: PgOptions,
        init: Init,
    ) -> Result<Self, PgError> {
        let bin_dir = find_bin_dir()?;
        let run_as = if unsafe { libc::geteuid() } == 0 {
            Some(postgres_user()?)
        } else {
            None
        };
        let port = match opts.port {
            Some(port) => port,
            None => free_port().map_err(io_err("finding a free port"))?,
        };
        let pg = LocalPostgres {
            bin_dir,
            data_dir,
            log_file,
            port,
            opts,
            run_as,
            running: false,
            temp: None,
            cpu_group: None,
        };
        pg.init_if_empty(init)?;
        Ok(pg)
    }

    fn init_if_empty(&self, init: Init) -> Result<(), PgError> {
        let dir = &self.data_dir;
        let empty = match fs::read_dir(dir) {
            Ok(mut entries) => entries.next().is_none(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
                true
            }
            Err(e) => return Err(io_err(format!("reading {}", dir.display()))(e)),
        };
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                .map_err(io_err(format!("chown of {}", dir.display())))?;
            if dir.parent().is_some_and(|p| !self.postgres_can_enter(p)) {
                return Err(PgError::Unreachable(dir.clone()));
            }
        }
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(io_err(format!("chmod of {}", dir.display())))?;
        if !empty {
            return Ok(());
        }
        match init {
            // A cluster that runs without fsync needs no flush of its files.
            Init::Initdb => self.initdb(dir, !self.opts.fsync),
            Init::FromTemplate => {
                let template = self.template()?;
                // -a keeps the postgres user's ownership when we are root.
                let out = Command::new("cp")
                    .arg("-a")
                    .arg("--reflink=auto")
                    .arg(template.join("."))
                    .arg(dir)
                    .stdin(std::process::Stdio::null())
                    .output()
                    .map_err(io_err("running cp"))?;
                check(out, "copying the template cluster")
            }
        }
    }

    fn initdb(&self, dir: &Path, no_sync: bool) -> Result<(), PgError> {
        let data = dir.to_string_lossy();
        let mut args = vec![
            "-D",
            &data,
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
        ];
        if no_sync {
            args.push("--no-sync");
        }
        let out = self.run("initdb", &args)?;
        check(out, "initdb")
    }

    /// The template cluster's data directory for throwaway ones, made on
    /// first use: an
    /// initdb'd data directory holding the `borbaman` database. Made under
    /// an exclusive lock, in a directory named for the binaries and the
    /// user, and marked complete last, so that concurrent test processes
    /// make it once and never copy half of one.
    fn template(&self) -> Result<PathBuf, PgError> {
        let postgres = self.bin_dir.join("postgres");
        let built = fs::metadata(&postgres)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let mut key = 0xcbf2_9ce4_8422_2325_u64;
        for byte in format!("{}@{built}", self.bin_dir.display()).bytes() {
            key = (key ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        let uid = unsafe { libc::geteuid() };
        let dir = PathBuf::from(format!(
            "/tmp/borbaman-pg-template-{uid}-{key:016x}-{TEMPLATE_FORMAT}"
        ));
        let lock_path = dir.with_extension("lock");
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err(format!("opening {}", lock_path.display())))?;
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor we own; released when `lock` closes.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io_err(format!("locking {}", lock_path.display()))(
                std::io::Error::last_os_error(),
            ));
        }
        let data = dir.join("data");
        let ready = dir.join(TEMPLATE_READY);
        if ready.exists() {
            return Ok(data);
        }
        // Left half made by a process that died: start again.
        if dir.exists() {
            fs::remove_dir_all(&dir).map_err(io_err(format!("removing {}", dir.display())))?;
        }
        fs::create_dir_all(&data).map_err(io_err(format!("creating {}", data.display())))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
            .map_err(io_err(format!("chmod of {}", dir.display())))?;
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(&data, Some(uid), Some(gid))
                .map_err(io_err(format!("chown of {}", data.display())))?;
        }
        fs::set_permissions(&data, fs::Permissions::from_mode(0o700))
            .map_err(io_err(format!("chmod of {}", data.display())))?;
        self.initdb(&data, true)?;
        // The database every cluster holds, made in single-user mode (no
        // port, no socket, no server to stop).
        let mut single = self.command("postgres");
        single
            .args(["--single", "-D"])
            .arg(&data)
            .args(["-c", "fsync=off", "postgres"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = single
            .spawn()
            .map_err(io_err("running postgres --single"))?;
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("piped stdin");
            writeln!(stdin, "CREATE DATABASE {DATABASE};")
                .map_err(io_err("writing to postgres --single"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(io_err("running postgres --single"))?;
        let created = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || created.contains("ERROR") {
            return Err(PgError::Command {
                what: format!("CREATE DATABASE {DATABASE} in the template"),
                detail: describe(&out),
            });
        }
        fs::write(&ready, b"").map_err(io_err(format!("writing {}", ready.display())))?;
        Ok(data)
    }

    /// Every ancestor of `dir` must be searchable by "others" for the
    /// postgres user to reach it (we are root, it is not).
    fn postgres_can_enter(&self, dir: &Path) -> bool {
        dir.ancestors().all(|a| {
            fs::metadata(a)
                .map(|m| m.permissions().mode() & 0o001 != 0)
                .unwrap_or(false)
        })
    }

    /// The connection URL of the `borbaman` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{DATABASE}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster's data directory.
    /// Where the server logs (`postgres.log` in the data directory).
    pub fn log_file(&self) -> &Path {
        &self.log_file
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Stops the server (`pg_ctl stop -m fast`): clients are disconnected,
    /// committed data is kept.
    pub fn stop(&mut self) -> Result<(), PgError> {
        if !self.running {
            return Ok(());
        }
        self.pg_ctl_ok(&["stop", "-m", "fast", "-w"], "pg_ctl stop")?;
        self.running = false;
        Ok(())
    }

    /// Starts the server again, on the same port, and waits until it
    /// accepts connections.
    pub fn start(&mut self) -> Result<(), PgError> {
        if self.running {
            return Ok(());
        }
        let mut options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c max_connections=200",
            self.port
        );
        let socket_dir = self.data_dir.to_string_lossy();
        if socket_dir.len() <= MAX_SOCKET_DIR_BYTES && !socket_dir.contains([' ', '\'', '"']) {
            options.push_str(&format!(" -c unix_socket_directories={socket_dir}"));
        } else {
            options.push_str(" -c unix_socket_directories=''");
        }
        if !self.opts.fsync {
            options.push_str(" -c fsync=off -c synchronous_commit=off -c full_page_writes=off");
        }
        for (name, value) in MOVES {
            options.push_str(&format!(" -c {name}={value}"));
        }
        for (name, value) in OBSERVE {
            options.push_str(&format!(" -c {name}={value}"));
        }
        let log = self.log_file.to_string_lossy().into_owned();
        let data = self.data_dir.to_string_lossy().into_owned();
        let mut pg_ctl = self.command("pg_ctl");
        pg_ctl
            .args([
                "-D", &data, "start", "-w", "-t", "30", "-l", &log, "-o", &options,
            ])
            .stdin(std::process::Stdio::null());
        // pg_ctl starts the postmaster as its child: in the group from the
        // first instruction, and every backend it forks with it.
        if let Some(group) = &self.cpu_group {
            group.confine(&mut pg_ctl);
        }
        let out = pg_ctl.output().map_err(io_err(format!(
            "running {}",
            self.bin_dir.join("pg_ctl").display()
        )))?;
        if !out.status.success() {
            let tail = fs::read_to_string(&self.log_file)
                .map(|s| last_lines(&s, 10))
                .unwrap_or_default();
            return Err(PgError::Command {
                what: "pg_ctl start".into(),
                detail: format!("{}\n{tail}", describe(&out)),
            });
        }
        self.running = true;
        Ok(())
    }

    fn create_database(&self) -> Result<(), PgError> {
        let port = self.port.to_string();
        let base = ["-h", "127.0.0.1", "-p", &port, "-U", "postgres"];
        let query = format!("SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'");
        let mut args = base.to_vec();
        args.extend(["-d", "postgres", "-tAc", &query]);
        let out = self.run("psql", &args)?;
        let out = check_output(out, "psql")?;
        if out.trim() == "1" {
            return Ok(());
        }
        let mut args = base.to_vec();
        args.push(DATABASE);
        let out = self.run("createdb", &args)?;
        check(out, "createdb")
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<Output, PgError> {
        let data = self.data_dir.to_string_lossy().into_owned();
        let mut all = vec!["-D", &data];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all)
    }

    fn pg_ctl_ok(&self, args: &[&str], what: &str) -> Result<(), PgError> {
        let out = self.pg_ctl(args)?;
        check(out, what)
    }

    /// Runs one of the cluster's binaries, as the postgres user when root.
    fn run(&self, binary: &str, args: &[&str]) -> Result<Output, PgError> {
        let mut cmd = self.command(binary);
        cmd.args(args).stdin(std::process::Stdio::null());
        cmd.output().map_err(io_err(format!(
            "running {}",
            self.bin_dir.join(binary).display()
        )))
    }

    /// One of the cluster's binaries, to run as the postgres user when root
    /// (tests drive `psql` sessions with it).
    pub(crate) fn command(&self, binary: &str) -> Command {
        let path = self.bin_dir.join(binary);
        let mut cmd = if self.run_as.is_some() {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "postgres", "--"]).arg(&path);
            cmd
        } else {
            Command::new(&path)
        };
        cmd.env("LC_ALL", "C").current_dir("/");
        cmd
    }
}

impl Drop for LocalPostgres {
    fn drop(&mut self) {
        if !self.running {
            return;
        }
        // A throwaway cluster holds nothing worth a clean shutdown.
        let mode = if self.temp.is_some() {
            "immediate"
        } else {
            "fast"
        };
        let _ = self.pg_ctl(&["stop", "-m", mode, "-w"]);
        self.running = false;
    }
}

/// The highest installed PostgreSQL version's `bin` directory.
pub(crate) fn find_bin_dir() -> Result<PathBuf, PgError> {
    let has_tools = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, dir)| has_tools(dir))
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Ok(dir);
    }
    let out = Command::new("pg_config").arg("--bindir").output();
    if let Some(out) = out.ok().filter(|o| o.status.success()) {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if has_tools(&dir) {
            return Ok(dir);
        }
    }
    Err(PgError::NotInstalled)
}

/// uid and gid of the `postgres` user.
pub(crate) fn postgres_user() -> Result<(u32, u32), PgError> {
    let name = c"postgres";
    // SAFETY: getpwnam returns null or a pointer to a static record that
    // stays valid until the next getpw* call; we copy the ids out at once.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(PgError::NoPostgresUser);
    }
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Ok((uid, gid))
}

fn absolute(dir: &Path) -> Result<PathBuf, PgError> {
    std::path::absolute(dir).map_err(io_err(format!("resolving {}", dir.display())))
}

fn describe(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    format!("{} {}{}", out.status, stderr.trim(), stdout.trim())
}

fn check(out: Output, what: &str) -> Result<(), PgError> {
    check_output(out, what).map(|_| ())
}

fn check_output(out: Output, what: &str) -> Result<String, PgError> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(PgError::Command {
            what: what.into(),
            detail: describe(&out),
        })
    }
}

pub(crate) fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};

    fn psql(pg: &LocalPostgres, sql: &str) -> String {
        let port = pg.port().to_string();
        let args = [
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "postgres",
            "-d",
            DATABASE,
        ];
        let mut all = args.to_vec();
        all.extend(["-tAc", sql]);
        check_output(pg.run("psql", &all).unwrap(), "psql")
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn temp_cluster_serves_stops_restarts_on_same_port_and_is_removed() {
        let mut pg = LocalPostgres::start_temp(PgOptions {
            fsync: false,
            port: None,
        })
        .unwrap();
        assert!(pg.url().ends_with(&format!(":{}/borbaman", pg.port())));
        assert_eq!(psql(&pg, "SHOW fsync"), "off");
        // Without fsync, in memory where /dev/shm has room.
        let root = crate::scratch::throwaway_root(false);
        assert!(
            pg.data_dir().starts_with(root),
            "{} is not under {root}",
            pg.data_dir().display()
        );
        psql(
            &pg,
            "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)",
        );
        let port = pg.port();
        pg.stop().unwrap();
        assert!(TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok());
        pg.start().unwrap();
        assert_eq!(pg.port(), port);
        assert_eq!(psql(&pg, "SELECT v FROM kept"), "42");
        let dir = pg.data_dir().to_path_buf();
        drop(pg);
        assert!(!dir.exists(), "temp dir must be removed");
        assert!(TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok());
    }

    #[test]
    fn persistent_cluster_is_reused() {
        let parent = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
        fs::set_permissions(parent.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let dir = parent.path().join("pg");
        let opts = PgOptions {
            fsync: false,
            port: None,
        };
        let pg = LocalPostgres::start_in(&dir, opts).unwrap();
        psql(
            &pg,
            "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)",
        );
        drop(pg);
        assert!(dir.join("PG_VERSION").exists(), "persistent dir is kept");
        let pg = LocalPostgres::start_in(&dir, opts).unwrap();
        assert_eq!(psql(&pg, "SELECT v FROM kept"), "7");
    }
}
