//! SQL through `psql` on a member: queries, the commit probe that tells a
//! new primary commits, creating the database, and running a command with a
//! deadline.

use super::*;

impl LocalHa {
    /// Runs `sql` with `psql` on member `i`'s PostgreSQL, in `database`;
    /// returns its unaligned, tuples-only output, trimmed.
    pub fn psql(&self, i: usize, database: &str, sql: &str) -> Result<String, HaError> {
        let port = self.member(i)?.pg_port;
        self.psql_port(port, database, sql)
            .map_err(|detail| HaError::Command {
                what: format!("psql on {}", member_name(i)),
                detail,
            })
    }

    /// Commits a transaction on member `i` again and again (each given
    /// `attempt` to finish) until one succeeds or `timeout` passes; returns
    /// when it did. The transaction writes WAL (a transactional logical
    /// message), so its commit waits for the synchronous standby: in
    /// strict synchronous mode it succeeds only once the member is a
    /// writable primary with a synchronous standby attached, the moment
    /// the database can take a player's action again after a failover.
    /// (A transaction that only takes an xid, such as `SELECT
    /// txid_current()`, writes no WAL before its commit record, so
    /// PostgreSQL does not make it wait for the standby: it would report
    /// the member committing up to seconds early.)
    pub fn wait_until_committing(
        &self,
        i: usize,
        attempt: Duration,
        timeout: Duration,
    ) -> Option<Instant> {
        let port = self.member(i).ok()?.pg_port;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self
                .psql_port_within(port, "postgres", COMMIT_PROBE_SQL, attempt)
                .is_ok()
            {
                return Some(Instant::now());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    pub(super) fn create_database(&self, primary: usize) -> Result<(), HaError> {
        let exists = self.psql(
            primary,
            "postgres",
            &format!("SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'"),
        )?;
        if exists != "1" {
            self.psql(primary, "postgres", &format!("CREATE DATABASE {DATABASE}"))?;
        }
        Ok(())
    }

    pub(super) fn psql_port(&self, port: u16, database: &str, sql: &str) -> Result<String, String> {
        self.psql_port_within(port, database, sql, PSQL_TIMEOUT)
    }

    pub(super) fn psql_port_within(
        &self,
        port: u16,
        database: &str,
        sql: &str,
        timeout: Duration,
    ) -> Result<String, String> {
        let mut cmd = Command::new(self.bin_dir.join("psql"));
        cmd.args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
        ])
        .args([
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-d",
            database,
            "-c",
            sql,
        ])
        .env("PGCONNECT_TIMEOUT", "2")
        .env_remove("PGOPTIONS")
        .env_remove("PGSERVICE")
        .env("LC_ALL", "C");
        let out = output_within(cmd, timeout)?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

/// Runs `cmd` to completion, killing it after `timeout`.
pub(super) fn output_within(mut cmd: Command, timeout: Duration) -> Result<Output, String> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running {program}: {e}"))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{program} did not finish within {timeout:?}"));
            }
            Err(e) => return Err(format!("waiting for {program}: {e}")),
        }
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// A transaction whose commit waits for the synchronous standby (see
/// [`LocalHa::wait_until_committing`]).
pub(super) const COMMIT_PROBE_SQL: &str =
    "SELECT pg_logical_emit_message(true, 'borbaman', 'committing')";
