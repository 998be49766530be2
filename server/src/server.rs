//! Assembles and runs one game server: database, registry, gRPC services,
//! health, and graceful shutdown.
//!
//! Start-up order matters to launchers: migrations are applied, the
//! database connections are opened (so the first calls, and clients failing
//! over from a dead server, do not wait for them), the listener is bound
//! (port 0 picks a free one), the server is registered, and only then is
//! [`start`] done; the caller announces readiness.
//! Shutdown is the reverse: health turns `NOT_SERVING`, the registry row is
//! deleted, the listener closes and in-flight calls drain.
//!
//! While running, the game service's health follows the database
//! ([`crate::health`]), and every call is counted and timed
//! ([`crate::metrics`]); `/metrics` is served on its own port when asked.
//!
//! `Status` answers only calls that carry the operator's token
//! ([`crate::status::OperatorToken`]); players need the game, health and
//! the server list, which stay open.
//!
//! Every service, health included, refuses requests larger than
//! [`MAX_REQUEST_BYTES`]; connections come through [`incoming::accept`],
//! which applies the connection limits. With a certificate the server
//! speaks TLS only; without one it speaks plaintext and warns when it
//! listens on an address other than loopback.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use borbaman_proto::{MAX_REQUEST_BYTES, pb};
use borbaman_shutdown::{Shutdown, Stopper};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tonic::transport::{Identity, ServerTlsConfig};
use tonic_health::ServingStatus;

use crate::admission::{Admission, AdmissionLimits, Priority};
use crate::health::{self, DatabaseHealth};
use crate::incoming::{self, ConnectionLimits};
use crate::limits::{CallLimiter, CallLimits};
use crate::metrics::calls::{self, Observed};
use crate::metrics::{self, Metrics};
use crate::registry::{self, Registration, RegistryService};
use crate::seating::{self, SeatingLimits, Seats};
use crate::service::GameService;
use crate::slow::SlowMode;
use crate::status::{self, CensusCache, OperatorToken, StatusService, Window};
use crate::store::partitions::ClusterSpec;
use crate::store::retention::RetentionOptions;
use crate::store::{Store, StoreOptions};
use crate::token::SessionKey;

/// Everything a server needs to run.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// Address clients should dial; `None`: the actual listen address.
    pub advertise: Option<String>,
    pub database_url: String,
    /// Server id in the registry; `None`: a random UUID.
    pub server_id: Option<String>,
    pub store: StoreOptions,
    /// Partition clusters besides home (`--db-cluster`), registered at home
    /// at start (see [`crate::store::partitions`]); empty: only those home
    /// already lists.
    pub db_clusters: Vec<ClusterSpec>,
    pub heartbeat: Duration,
    pub server_ttl: Duration,
    /// How long start-up waits for the database to accept migrations and
    /// the first heartbeat.
    pub startup_timeout: Duration,
    /// Slow mode (fault injection), switched by whoever holds it; off by
    /// default.
    pub slow: Arc<SlowMode>,
    pub call_limits: CallLimits,
    /// The bound on calls in flight to the database (see
    /// [`crate::admission`]).
    pub admission: AdmissionLimits,
    /// Which joins may open a new game (see [`crate::seating`]).
    pub seating: SeatingLimits,
    pub connection_limits: ConnectionLimits,
    /// Serve TLS with this certificate and key; `None`: plaintext.
    pub tls: Option<TlsFiles>,
    /// How long finished games are kept (see [`crate::store::retention`]).
    pub retention: RetentionOptions,
    /// Serve Prometheus' `/metrics` here; `None`: not at all.
    pub metrics_listen: Option<SocketAddr>,
    /// The token a `Status` call must carry; `None`: `Status` is refused
    /// to everyone (see [`crate::status`]).
    pub operator_token: Option<OperatorToken>,
}

/// Streams HTTP/2 resets on a connection for the client's errors (streams
/// past the stream limit among them) before it closes the connection with
/// GOAWAY: hyper's default, which tonic turns off.
const MAX_LOCAL_ERROR_RESETS: usize = 1024;

/// HTTP/2 receive windows: how much of a call's request, and of all the
/// connection's requests together, a client may send before the server has
/// read it. A request is at most [`MAX_REQUEST_BYTES`] (4 KiB), so 64 KiB
/// never slows a call; hyper's default, 1 MiB each, would let every
/// connection park a megabyte in the server.
pub const STREAM_WINDOW_BYTES: u32 = 64 * 1024;
pub const CONNECTION_WINDOW_BYTES: u32 = 256 * 1024;

/// PEM files of a server's certificate chain and private key.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    fn load(&self) -> anyhow::Result<ServerTlsConfig> {
        let read = |path: &PathBuf, what: &str| {
            std::fs::read(path)
                .with_context(|| format!("cannot read the TLS {what} {}", path.display()))
        };
        let identity =
            Identity::from_pem(read(&self.cert, "certificate")?, read(&self.key, "key")?);
        Ok(ServerTlsConfig::new().identity(identity))
    }
}

/// A server that is ready: migrated, listening and registered.
#[derive(Debug)]
pub struct RunningServer {
    pub addr: SocketAddr,
    /// Where `/metrics` is served, if anywhere.
    pub metrics_addr: Option<SocketAddr>,
    pub server_id: Arc<str>,
    /// The server's admission control, for its counts ([`Admission::stats`]).
    pub admission: Admission,
    stop: Stopper,
    task: JoinHandle<anyhow::Result<()>>,
}

impl RunningServer {
    /// Stops gracefully: not serving, deregistered, drained.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.stop.stop();
        self.task.await.context("server task panicked")?
    }
}

/// The gRPC transport as `config` sets it: TLS, HTTP/2's limits (tonic's
/// defaults, no stream limit and no limit on the streams HTTP/2 resets for
/// a client's errors, override hyper's own of 200 and 1024: both are set
/// here, and the receive windows, which bound what a client may send
/// before the server reads it; docs/security.md), and the call timeout.
fn transport(config: &ServerConfig) -> anyhow::Result<tonic::transport::Server> {
    let mut tls = config.tls.as_ref().map(TlsFiles::load).transpose()?;
    // A client must also finish its TLS handshake within the first-bytes
    // timeout, or a byte a minute would hold a connection forever.
    if let Some(timeout) = config.connection_limits.first_bytes_timeout {
        tls = tls.map(|tls| tls.timeout(timeout));
    }
    let limits = config.connection_limits;
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(limits.keepalive.map(|(every, _)| every))
        .http2_keepalive_timeout(limits.keepalive.map(|(_, wait)| wait))
        .max_concurrent_streams(limits.max_streams)
        .http2_max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES);
    if let Some(timeout) = limits.call_timeout {
        builder = builder.timeout(timeout);
    }
    match tls {
        Some(tls) => {
            builder = builder
                .tls_config(tls)
                .context("the TLS certificate or key cannot be used (PEM files expected)")?;
        }
        None if !config.listen.ip().is_loopback() => tracing::warn!(
            listen = %config.listen,
            "serving plaintext on a network address: session tokens travel in the clear; \
             give --tls-cert and --tls-key to serve TLS"
        ),
        None => {}
    }
    Ok(builder)
}

/// The store, migrated, its standing connections open, and the cluster's
/// session-token key; names rekeyed if the look-alike rule changed. Each
/// step is retried until `deadline`.
async fn open_store(
    config: &ServerConfig,
    metrics: &Metrics,
    deadline: tokio::time::Instant,
) -> anyhow::Result<(Store, SessionKey)> {
    let store = Store::connect(&config.database_url, &config.store)?.with_metrics(metrics.clone());
    retry_until(deadline, "applying migrations", || store.migrate()).await?;
    retry_until(deadline, "opening database connections", || store.warm_up()).await?;
    let session_key = retry_until(deadline, "reading the session-token key", || {
        store.session_key()
    })
    .await?;
    retry_until(deadline, "registering the database clusters", || {
        store.register_clusters(&config.db_clusters, true)
    })
    .await?;
    let store = loop {
        match store.clone().open_clusters(&config.store).await {
            Ok(store) => break store,
            Err(err) if tokio::time::Instant::now() < deadline => {
                tracing::info!(error = %err, "opening the database clusters; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(err) => return Err(err).context("opening the database clusters"),
        }
    };
    let (rekeyed, dropped) =
        retry_until(deadline, "recomputing name keys", || store.rekey_names()).await?;
    if rekeyed + dropped > 0 {
        tracing::info!(
            rekeyed,
            dropped,
            "names: keys recomputed by the new look-alike rule"
        );
    }

    Ok((store, session_key))
}

/// Serves `/metrics` on `listen`, if given; its address.
async fn serve_metrics(
    listen: Option<SocketAddr>,
    census: &Arc<CensusCache>,
    stopped: &Shutdown,
) -> anyhow::Result<Option<SocketAddr>> {
    Ok(match listen {
        Some(listen) => {
            let listener = TcpListener::bind(listen)
                .await
                .with_context(|| format!("cannot listen for /metrics on {listen}"))?;
            let addr = listener.local_addr()?;
            tokio::spawn(metrics::http::serve(
                listener,
                census.clone(),
                stopped.clone(),
            ));
            tracing::info!(%addr, "serving /metrics");
            Some(addr)
        }
        None => None,
    })
}

/// Once told to stop: says it is not serving, lets the heartbeat end and
/// leaves the registry; then the server drains its calls.
async fn leave_when_stopped<T>(
    mut stopping: Shutdown,
    health: tonic_health::server::HealthReporter,
    heartbeat: JoinHandle<T>,
    store: Store,
    me: Registration,
) {
    stopping.recv().await;
    tracing::info!("shutting down: not serving, deregistering, draining");
    health
        .set_not_serving::<pb::game_server::GameServer<GameService>>()
        .await;
    health
        .set_service_status("", ServingStatus::NotServing)
        .await;
    // The heartbeat must not re-insert the row after it is deleted.
    let _ = heartbeat.await;
    if let Err(err) = store.deregister(&me.server_id).await {
        tracing::warn!(error = %err, "could not remove this server from the registry");
    }
}

/// Starts a server and returns once it is ready to serve.
pub async fn start(config: ServerConfig) -> anyhow::Result<RunningServer> {
    let builder = transport(&config)?;
    let metrics = Metrics::new();
    let deadline = tokio::time::Instant::now() + config.startup_timeout;
    let (store, session_key) = open_store(&config, &metrics, deadline).await?;

    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let server_id: Arc<str> = config
        .server_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
        .into();
    let me = Registration {
        server_id: server_id.clone(),
        address: config.advertise.clone().unwrap_or_else(|| addr.to_string()),
    };
    // The first beat also tells the seating what the cluster learned, so
    // the first join is held to it.
    let seats = Seats::new(config.seating);
    let beat = retry_until(deadline, "registering", || {
        store.heartbeat(
            &me.server_id,
            &me.address,
            None,
            seating::LIVE_WITHIN,
            seating::SHARED_WITHIN,
        )
    })
    .await?;
    seats.with(|s| s.heard(beat.live, beat.shared));

    let (stop, stopped) = borbaman_shutdown::channel();
    let db_health = Arc::new(DatabaseHealth::new(metrics.clone()));
    let heartbeat = tokio::spawn(registry::heartbeat_task(
        store.clone(),
        me.clone(),
        seats.clone(),
        config.heartbeat,
        db_health.clone(),
        stopped.clone(),
    ));
    follow_database_member(&store, &config.database_url, stopped.clone());
    let census = Arc::new(CensusCache::new(store.clone()));
    let window = Arc::new(Window::default());
    tokio::spawn(status::window_task(
        metrics.clone(),
        window.clone(),
        stopped.clone(),
    ));
    let metrics_addr = serve_metrics(config.metrics_listen, &census, &stopped).await?;
    let (retention, retention_stop) = (config.retention.clone(), stopped.clone());
    store.each_cluster(move |cluster| {
        tokio::spawn(
            cluster
                .clone()
                .retention_task(retention.clone(), retention_stop.clone()),
        );
    });
    tokio::spawn(store.clone().follow_map(stopped.clone()));
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<pb::game_server::GameServer<GameService>>()
        .await;
    health.set_service_status("", ServingStatus::Serving).await;
    tokio::spawn(health::report_task(
        health.clone(),
        db_health.subscribe(),
        stopped.clone(),
    ));

    let admission = Admission::new(config.admission);
    let admission_stats = admission.clone();
    let line = admission.clone();
    store.each_cluster(move |cluster| {
        let line = line.clone();
        cluster.not_lingering_when(move || line.has_line());
    });
    let status = Observed::new(
        pb::status_server::StatusServer::new(StatusService::new(
            server_id.clone(),
            me.address.clone(),
            census,
            window,
            config.operator_token.clone(),
        ))
        .max_decoding_message_size(MAX_REQUEST_BYTES),
        metrics.clone(),
        calls::STATUS_METHODS,
    );
    let game = pb::game_server::GameServer::new(GameService::new(
        store.clone(),
        server_id.clone(),
        config.slow.clone(),
        Arc::new(CallLimiter::new(config.call_limits)),
        admission.clone(),
        seats,
        Arc::new(session_key),
    ))
    .max_decoding_message_size(MAX_REQUEST_BYTES);
    let health_service = health_service.max_decoding_message_size(MAX_REQUEST_BYTES);
    let registry = pb::registry_server::RegistryServer::new(RegistryService::new(
        store.clone(),
        config.server_ttl,
    ))
    .max_decoding_message_size(MAX_REQUEST_BYTES);
    let game = Observed::new(game, metrics.clone(), calls::GAME_METHODS);
    let health_service = Observed::new(health_service, metrics.clone(), calls::HEALTH_METHODS);
    let registry = Observed::new(registry, metrics.clone(), calls::REGISTRY_METHODS);
    let incoming =
        incoming::accept_counted(listener, config.connection_limits, Some(metrics.clone()));

    let on_shutdown = leave_when_stopped(stopped, health, heartbeat, store.clone(), me);
    let task = tokio::spawn(async move {
        builder
            .layer(incoming::TrackCallsLayer)
            .add_service(health_service)
            .add_service(game)
            .add_service(registry)
            .add_service(status)
            .serve_with_incoming_shutdown(incoming, on_shutdown)
            .await
            .context("gRPC server failed")?;
        store.close().await;
        let admitted = admission.stats();
        tracing::info!(
            cas_retries = store.cas_retries(),
            refused_play = admitted.refused(Priority::Play),
            refused_joins = admitted.refused(Priority::Join),
            refused_spectators = admitted.refused(Priority::Spectate),
            "stopped"
        );
        Ok(())
    });
    tracing::info!(%addr, id = %server_id, "ready");
    Ok(RunningServer {
        addr,
        metrics_addr,
        server_id,
        admission: admission_stats,
        stop,
        task,
    })
}

/// Keeps the metrics' database member current: the primary Patroni names
/// when following it, else the database URL's host and port.
fn follow_database_member(store: &Store, url: &str, mut stop: Shutdown) {
    let metrics = store.metrics().clone();
    let Some(mut primary) = store.watch_primary() else {
        if let Ok(opts) = url.parse::<sqlx::postgres::PgConnectOptions>() {
            metrics.database_member(&format!("{}:{}", opts.get_host(), opts.get_port()));
        }
        return;
    };
    tokio::spawn(async move {
        let mut last: Option<String> = None;
        loop {
            if let Some(p) = primary.borrow_and_update().clone() {
                let address = p.address.to_string();
                if last.as_ref().is_some_and(|l| *l != address) {
                    metrics.database_leader_learned(p.learned_from.as_str());
                }
                metrics.database_member(&address);
                last = Some(address);
            }
            tokio::select! {
                changed = primary.changed() => if changed.is_err() { return },
                _ = stop.recv() => return,
            }
        }
    });
}

/// Runs `op` until it succeeds or `deadline` passes (the database may still
/// be starting).
async fn retry_until<T, E, F, Fut>(
    deadline: tokio::time::Instant,
    what: &str,
    mut op: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let mut warned = false;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(err) if tokio::time::Instant::now() >= deadline => {
                anyhow::bail!("{what}: {err} (is the database running and DATABASE_URL right?)")
            }
            Err(err) => {
                if !warned {
                    tracing::warn!(error = %err, "{what} failed; retrying");
                    warned = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
