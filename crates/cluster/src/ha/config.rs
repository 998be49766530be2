//! Writing each member's Patroni configuration (the cluster-wide settings
//! come from server/patroni/patroni.yml), member names, and finding
//! Patroni and checking its version.

use super::*;

impl LocalHa {
    pub(super) fn write_patroni_config(&self, i: usize) -> Result<(), HaError> {
        let m = &self.members[i];
        let etcd_hosts = self.etcd_hosts.join(",");
        let scope = &self.opts.scope;
        let fsync = if self.opts.fsync { "on" } else { "off" };
        let log_level = patroni_log_level();
        // PostgreSQL's socket in the member's directory if the path fits in
        // a socket address (and has no separator PostgreSQL would split on);
        // else TCP only.
        let socket_dir = m.dir.to_string_lossy();
        let socket_dir = if socket_dir.len() <= MAX_SOCKET_DIR_BYTES && !socket_dir.contains(',') {
            yaml_quote(&socket_dir)
        } else {
            "''".to_string()
        };
        let dcs = dcs_settings();
        // Without fsync, initdb need not flush its files either (a second
        // of a start on a busy disk).
        let initdb_no_sync = if self.opts.fsync {
            ""
        } else {
            "    - no-sync\n"
        };
        let yaml = format!(
            r#"# Patroni member {name} of a LocalHa (crates/cluster/src/ha.rs explains the settings).
scope: {scope}
namespace: /{NAMESPACE}/
name: {name}

log:
  level: {log_level}
  format: '%(asctime)s.%(msecs)03d %(levelname)s: %(message)s'
  dateformat: '%H:%M:%S'

restapi:
  listen: 127.0.0.1:{rest}
  connect_address: 127.0.0.1:{rest}

etcd3:
  hosts: {etcd_hosts}

bootstrap:
{dcs}  initdb:
    - encoding: UTF8
    - locale: C
    - data-checksums
    - auth: trust
{initdb_no_sync}  pg_hba:
    - local all all trust
    - host replication replicator 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust

postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {data}
  bin_dir: {bin}
  pgpass: {pgpass}
  basebackup:
    - checkpoint: fast
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
  authentication:
    superuser: {{username: postgres, password: postgres}}
    replication: {{username: replicator, password: replicator}}
    rewind: {{username: rewinder, password: rewinder}}
  parameters:
    unix_socket_directories: {socket_dir}
    fsync: '{fsync}'

watchdog:
  mode: 'off'

tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
  nosync: false
"#,
            name = m.name,
            log_level = log_level,
            initdb_no_sync = initdb_no_sync,
            rest = m.rest_port,
            pg = m.pg_port,
            data = yaml_quote(&m.data_dir.to_string_lossy()),
            bin = yaml_quote(&self.bin_dir.to_string_lossy()),
            pgpass = yaml_quote(&m.dir.join("pgpass").to_string_lossy()),
        );
        self.write_private(&m.config, &yaml)?;
        self.write_private(&m.dir.join(LAUNCHER), LAUNCHER_PY)
    }

    /// Writes `text` to `path`, readable only by the user the daemons run
    /// as.
    fn write_private(&self, path: &Path, text: &str) -> Result<(), HaError> {
        fs::write(path, text).map_err(io_err(format!("writing {}", path.display())))?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o600))
            .map_err(io_err(format!("chmod of {}", path.display())))?;
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .map_err(io_err(format!("chown of {}", path.display())))?;
        }
        Ok(())
    }
}

/// The file each member's Patroni is started through (in its directory):
/// Patroni with its stop-polling interval at 50 ms, so a switchover's
/// demoted primary lets go of the leader key as soon as it is down
/// instead of a second later. The same file starts the compose files'
/// members.
pub(super) const LAUNCHER: &str = "launch.py";
pub(super) const LAUNCHER_PY: &str = include_str!("../../../../server/patroni/launch.py");

/// The Python that runs `patroni` (its `#!` line), to start it through
/// [`LAUNCHER`]; `None` if it is not a Python script (then it runs as it
/// is).
pub(super) fn patroni_python(patroni: &Path) -> Option<PathBuf> {
    let text = fs::read(patroni).ok()?;
    let first = text.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(first).ok()?.strip_prefix("#!")?.trim();
    let mut words = line.split_whitespace();
    let program = words.next()?;
    let python = if program.ends_with("/env") {
        which(words.next()?)?
    } else {
        PathBuf::from(program)
    };
    python
        .file_name()?
        .to_str()?
        .starts_with("python")
        .then_some(python)
}

/// `text` as a single-quoted YAML scalar.
pub(super) fn yaml_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

pub(super) fn member_name(i: usize) -> String {
    format!("pg{i}")
}

pub(super) fn member_index(name: &str) -> Option<usize> {
    name.strip_prefix("pg")?
        .parse()
        .ok()
        .filter(|&i| i < MEMBERS)
}

/// `name` on `PATH`, else in /usr/bin.
pub(super) fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|candidate| {
            fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// `patroni --version` ("patroni 3.0.2"); refuses 3.1 and later.
pub(super) fn patroni_version(patroni: &Path) -> Result<String, HaError> {
    let out = Command::new(patroni)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("running {} --version", patroni.display())))?;
    let text = String::from_utf8_lossy(&out.stdout);
    check_patroni_version(&text).map_err(|e| match e {
        HaError::Command { what, detail } => HaError::Command {
            what,
            detail: format!("{detail} {}", String::from_utf8_lossy(&out.stderr).trim()),
        },
        e => e,
    })
}

/// The version in `patroni --version` output, if older than 3.1.
pub(super) fn check_patroni_version(output: &str) -> Result<String, HaError> {
    let text = output.trim();
    let version = text.rsplit(' ').next().unwrap_or_default().to_string();
    let mut parts = version.split('.').map(|p| p.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) if (major, minor) >= (3, 1) => {
            Err(HaError::PatroniVersion { found: version })
        }
        (Some(Ok(_)), Some(Ok(_))) => Ok(version),
        _ => Err(HaError::Command {
            what: "patroni --version".into(),
            detail: format!("no version in {text:?}"),
        }),
    }
}

/// Whether every ancestor of `dir` (itself included) is searchable by
/// others, so the postgres user can reach it.
pub(super) fn others_can_enter(dir: &Path) -> bool {
    dir.ancestors().all(|a| {
        fs::metadata(a)
            .map(|m| m.permissions().mode() & 0o001 != 0)
            .unwrap_or(false)
    })
}

/// The Patroni configuration of the containers (docker-compose.ha.yml),
/// whose `bootstrap.dcs` block is the one source of the cluster-wide
/// settings: the local members use it as it is.
pub(super) const CONTAINER_CONFIG: &str = include_str!("../../../../server/patroni/patroni.yml");

/// The `  dcs:` block of [`CONTAINER_CONFIG`] (two-space indented, under
/// `bootstrap:`), up to the next key at its level.
pub(super) fn dcs_settings() -> String {
    let mut block = String::new();
    let mut inside = false;
    for line in CONTAINER_CONFIG.lines() {
        if line == "  dcs:" {
            inside = true;
        } else if inside && !line.starts_with("   ") && !line.trim().is_empty() {
            break;
        }
        if inside {
            block.push_str(line);
            block.push('\n');
        }
    }
    block
}

/// Patroni's log level: `BORBAMAN_PATRONI_LOG_LEVEL` (e.g. `DEBUG`, to read
/// a failover step by step in `pgN.log`), else `INFO`.
pub(super) fn patroni_log_level() -> &'static str {
    match std::env::var("BORBAMAN_PATRONI_LOG_LEVEL")
        .unwrap_or_default()
        .to_ascii_uppercase()
        .as_str()
    {
        "DEBUG" => "DEBUG",
        "WARNING" => "WARNING",
        "ERROR" => "ERROR",
        _ => "INFO",
    }
}
