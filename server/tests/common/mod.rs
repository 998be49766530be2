//! Shared harness for the end-to-end tests: a throwaway PostgreSQL, real
//! `borbaman-server` processes (killed by PID when dropped), gRPC clients
//! and direct SQL for checking what was committed.

#![allow(dead_code)]

pub mod raw_h2;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use borbaman_cluster::{
    LocalPostgres, PgOptions, ReadyLine, no_warm_up_pace_unless_set, unlimited_unless_set,
};
use borbaman_proto::pb;
use borbaman_proto::pb::game_client::GameClient;
use borbaman_proto::pb::registry_client::RegistryClient;
use borbaman_test_support::Certificates;
use rand::RngCore;
use sqlx::PgPool;
use tonic::transport::Channel;

/// A throwaway PostgreSQL for one test (fsync off).
pub fn start_db() -> LocalPostgres {
    LocalPostgres::start_temp(PgOptions {
        fsync: false,
        port: None,
    })
    .expect("start a throwaway PostgreSQL")
}

/// A `borbaman-server` child process; SIGKILLed and reaped when dropped.
pub struct ServerProcess {
    child: Child,
    _stdout: BufReader<ChildStdout>,
    pub addr: String,
    pub id: String,
    /// `host:port` of its `/metrics`, when started with `--metrics-listen`.
    pub metrics: Option<String>,
}

impl ServerProcess {
    /// Starts a server on a free port and waits for its readiness line.
    pub fn start(database_url: &str) -> ServerProcess {
        Self::start_with(database_url, &[])
    }

    pub fn start_with(database_url: &str, extra: &[&str]) -> ServerProcess {
        Self::start_with_env(database_url, extra, &[])
    }

    /// As [`ServerProcess::start_with`], with environment variables `env`.
    pub fn start_with_env(
        database_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> ServerProcess {
        let stderr = if std::env::var_os("BORBAMAN_TEST_LOGS").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        };
        Self::spawn_env("127.0.0.1:0", database_url, extra, stderr, None, env)
    }

    /// As [`ServerProcess::start_with`], its log (without colours) written
    /// to the file `log`.
    pub fn start_logged(database_url: &str, extra: &[&str], log: &Path) -> ServerProcess {
        let file = std::fs::File::create(log).expect("create the server's log file");
        Self::spawn("127.0.0.1:0", database_url, extra, Stdio::from(file), None)
    }

    /// As [`ServerProcess::start_logged`], listening on `listen`, and with
    /// its hard limit on open files lowered to `open_files` if given.
    pub fn start_logged_on(
        listen: &str,
        database_url: &str,
        extra: &[&str],
        log: &Path,
        open_files: Option<u64>,
    ) -> ServerProcess {
        let file = std::fs::File::create(log).expect("create the server's log file");
        Self::spawn(listen, database_url, extra, Stdio::from(file), open_files)
    }

    fn spawn(
        listen: &str,
        database_url: &str,
        extra: &[&str],
        stderr: Stdio,
        open_files: Option<u64>,
    ) -> ServerProcess {
        Self::spawn_env(listen, database_url, extra, stderr, open_files, &[])
    }

    fn spawn_env(
        listen: &str,
        database_url: &str,
        extra: &[&str],
        stderr: Stdio,
        open_files: Option<u64>,
        env: &[(&str, &str)],
    ) -> ServerProcess {
        let mut command = Command::new(env!("CARGO_BIN_EXE_borbaman-server"));
        command.envs(env.iter().copied());
        if let Some(limit) = open_files {
            use std::os::unix::process::CommandExt;
            let limit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            // SAFETY: setrlimit is async-signal-safe; it only reads `limit`.
            unsafe {
                command.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let extra_args: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
        let mut child = command
            .args(["--listen", listen, "--database-url", database_url])
            .args(extra)
            .args(unlimited_unless_set(&extra_args))
            .args(no_warm_up_pace_unless_set(&extra_args))
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn borbaman-server");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send((line, reader));
        });
        let Ok((line, reader)) = rx.recv_timeout(Duration::from_secs(30)) else {
            let _ = child.kill();
            panic!("borbaman-server did not become ready within 30 s");
        };
        let ready =
            ReadyLine::parse(&line).unwrap_or_else(|| panic!("unexpected readiness line {line:?}"));
        ServerProcess {
            child,
            _stdout: reader,
            addr: ready.address,
            id: ready.id,
            metrics: ready.metrics,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// SIGKILL, then reap.
    /// Its exit status, if it has exited (reaped then).
    pub fn try_exit(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then its exit status (within 5 s).
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        borbaman_cluster::wait::until_blocking(
            "the server to exit after SIGTERM",
            Duration::from_secs(5),
            || self.child.try_wait().ok().flatten(),
        )
    }

    pub async fn game(&self) -> GameClient<Channel> {
        GameClient::connect(self.url()).await.expect("connect")
    }

    pub async fn registry(&self) -> RegistryClient<Channel> {
        RegistryClient::connect(self.url()).await.expect("connect")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A fresh random session token.
pub fn token() -> Vec<u8> {
    let mut t = vec![0u8; 24];
    rand::rng().fill_bytes(&mut t);
    t
}

/// A player as a test drives it.
#[derive(Clone, Debug)]
pub struct Player {
    pub token: Vec<u8>,
    pub game_id: u64,
    pub seat: u32,
    pub next_seq: u64,
}

impl Player {
    pub fn act_request(&mut self, action: pb::Action) -> pb::ActRequest {
        let seq = self.next_seq;
        self.next_seq += 1;
        pb::ActRequest {
            token: self.token.clone(),
            game_id: self.game_id,
            seat: self.seat,
            seq,
            action: action as i32,
            inputs: Vec::new(),
        }
    }

    /// Its Leave, after the inputs it sent.
    pub fn leave_request(&self) -> pb::LeaveRequest {
        pb::LeaveRequest {
            token: self.token.clone(),
            game_id: self.game_id,
            seat: self.seat,
            seq: self.next_seq,
        }
    }
}

/// The actions a player sends, by sequence number (1-based): a walk that
/// mostly stays put, so nobody dies before the test is done.
pub fn action(seq: u64) -> pb::Action {
    [
        pb::Action::Right,
        pb::Action::Left,
        pb::Action::Down,
        pb::Action::Up,
        pb::Action::Idle,
    ][(seq as usize - 1) % 5]
}

/// An Act carrying inputs `seqs` (oldest first) of `player`, each the
/// [`action`] of its sequence number.
pub fn batch(player: &Player, seqs: impl IntoIterator<Item = u64>) -> pb::ActRequest {
    let inputs: Vec<pb::Input> = seqs
        .into_iter()
        .map(|seq| pb::Input {
            seq,
            action: action(seq) as i32,
        })
        .collect();
    let newest = *inputs.last().expect("a batch has an input");
    pb::ActRequest {
        token: player.token.clone(),
        game_id: player.game_id,
        seat: player.seat,
        seq: newest.seq,
        action: newest.action,
        inputs,
    }
}

/// Joins with a fresh token.
pub async fn join(client: &mut GameClient<Channel>, name: &str) -> (Player, pb::JoinReply) {
    join_with_identity(client, name, Vec::new()).await
}

/// Joins with a fresh token as a fresh long-lived identity (only games
/// between such players are ranked).
pub async fn join_identified(
    client: &mut GameClient<Channel>,
    name: &str,
) -> (Player, pb::JoinReply) {
    join_with_identity(client, name, token()).await
}

async fn join_with_identity(
    client: &mut GameClient<Channel>,
    name: &str,
    identity: Vec<u8>,
) -> (Player, pb::JoinReply) {
    join_as(client, &identity, name, token())
        .await
        .expect("join")
}

/// Joins as `identity` (empty: none) with the nonce `nonce`: the player
/// and the reply, or the refusal.
pub async fn join_as(
    client: &mut GameClient<Channel>,
    identity: &[u8],
    name: &str,
    nonce: Vec<u8>,
) -> Result<(Player, pb::JoinReply), tonic::Status> {
    let reply = client
        .join(pb::JoinRequest {
            name: name.into(),
            token: nonce,
            identity: identity.to_vec(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let player = Player {
        token: reply.token.clone(),
        game_id: reply.game_id,
        seat: reply.seat,
        next_seq: reply.last_seq + 1,
    };
    Ok((player, reply))
}

/// The client preface of HTTP/2: a server that takes the connection
/// answers it with its settings.
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Opens a connection from `source` to `server` and sends the HTTP/2
/// preface: `Some` (kept open, silent) if the server answers, `None` if it
/// closes the connection instead.
pub async fn h2_connection(
    server: std::net::SocketAddr,
    source: std::net::IpAddr,
) -> Option<tokio::net::TcpStream> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::new(source, 0)).unwrap();
    let mut stream = socket.connect(server).await.ok()?;
    stream.write_all(H2_PREFACE).await.ok()?;
    let mut buf = [0u8; 64];
    match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => Some(stream),
        Ok(_) => None,
        Err(_) => panic!("the server neither answered nor closed a connection"),
    }
}

/// A server speaking TLS only, with `extra` flags, on a database of its
/// own; the certificates it serves (their CA for the clients) returned.
pub fn tls_server(extra: &[&str]) -> (Certificates, LocalPostgres, ServerProcess) {
    let certificates = Certificates::new();
    let tls = certificates.server_flags();
    let mut args: Vec<&str> = tls.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    let (pg, server) = one_server(&args);
    (certificates, pg, server)
}

/// A TLS connection (ALPN h2) over `tcp` to a server of [`tls_server`],
/// trusting only `certificates`' CA, its handshake done.
pub async fn tls_handshake(
    certificates: &Certificates,
    tcp: tokio::net::TcpStream,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use std::sync::Arc;
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
    use tokio_rustls::rustls::{ClientConfig, RootCertStore, crypto};

    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&certificates.ca_pem()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config =
        ClientConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("the TLS handshake")
}

/// Four players in one running game.
pub async fn full_game(client: &mut GameClient<Channel>) -> Vec<Player> {
    let mut players = Vec::new();
    for i in 0..4 {
        let (p, _) = join(client, &format!("p{i}")).await;
        players.push(p);
    }
    assert!(players.iter().all(|p| p.game_id == players[0].game_id));
    players
}

/// Four identified players in one running game: its result is ranked.
pub async fn full_ranked_game(client: &mut GameClient<Channel>) -> Vec<Player> {
    let mut players = Vec::new();
    for i in 0..4 {
        let (p, _) = join_identified(client, &format!("r{i}")).await;
        players.push(p);
    }
    assert!(players.iter().all(|p| p.game_id == players[0].game_id));
    players
}

/// A direct connection for checking committed rows.
pub async fn sql(url: &str) -> PgPool {
    PgPool::connect(url)
        .await
        .expect("connect to the test database")
}

/// Rows in the action log for a game.
pub async fn logged_actions(pool: &PgPool, game_id: u64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM actions WHERE game_id = $1")
        .bind(game_id as i64)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Waits until the action log holds at least `n` rows for a game (calls
/// are flowing), for at most 10 s.
pub async fn until_logged_actions(pool: &PgPool, game_id: u64, n: i64) {
    let what = format!("{n} logged actions in game {game_id}");
    borbaman_cluster::wait::until(&what, Duration::from_secs(10), || async {
        (logged_actions(pool, game_id).await >= n).then_some(())
    })
    .await
}

/// A game's stored version and state bytes.
pub async fn stored_game(pool: &PgPool, game_id: u64) -> (i64, Vec<u8>) {
    sqlx::query_as("SELECT version, state FROM games WHERE id = $1")
        .bind(game_id as i64)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// How many commits logged actions in a game: one version each (calls
/// queued together behind the game's gate share one).
pub async fn commits(pool: &PgPool, game_id: u64) -> i64 {
    sqlx::query_scalar("SELECT count(DISTINCT version) FROM actions WHERE game_id = $1")
        .bind(game_id as i64)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The phase of a reply's state.
pub fn phase(state: &Option<pb::GameState>) -> pb::Phase {
    pb::Phase::try_from(state.as_ref().expect("state").phase).unwrap()
}

/// A path for a log file of this test run, in the temporary directory.
pub fn log_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "borbaman-test-{}-{name}-{}.log",
        std::process::id(),
        hex_token()
    ))
}

fn hex_token() -> String {
    token()[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// The compare-and-set retries a server logged when it stopped (after a
/// SIGTERM), if it did.
pub fn logged_cas_retries(log: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(log).ok()?;
    let at = text.rfind("cas_retries=")? + "cas_retries=".len();
    let digits: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// The text of a server's `/metrics` (a plain HTTP/1.0 GET).
pub fn scrape(server: &ServerProcess) -> String {
    use std::io::{Read, Write};
    let addr = server
        .metrics
        .as_deref()
        .expect("started with --metrics-listen");
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to /metrics");
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    body.to_string()
}

/// The value of the sample `series` (name and labels, as written) in
/// `metrics`, if present.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// How most tests open: a throwaway database and one server on it, with
/// `extra` flags. Keep the database as long as the server (bind it to
/// `_pg` if unused).
pub fn one_server(extra: &[&str]) -> (LocalPostgres, ServerProcess) {
    let pg = start_db();
    let server = ServerProcess::start_with(&pg.url(), extra);
    (pg, server)
}

/// [`one_server`] and a client connected to it.
pub async fn one_server_and_client(
    extra: &[&str],
) -> (LocalPostgres, ServerProcess, GameClient<Channel>) {
    let (pg, server) = one_server(extra);
    let client = server.game().await;
    (pg, server, client)
}
