//! `borbaman-health`: asks a server's `grpc.health.v1` whether a service
//! is serving; exit status 0 if it is, 1 if not (or no answer). For
//! container health checks, where no other gRPC client is at hand.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

#[derive(Parser)]
#[command(
    name = "borbaman-health",
    version,
    about = "Exit 0 if a Borbaman server's service is SERVING, 1 if not"
)]
struct Cli {
    /// The server's gRPC address (host:port, plaintext).
    #[arg(default_value = "127.0.0.1:50051")]
    address: String,
    /// Service to ask about. The game service (the default) is
    /// NOT_SERVING while the server cannot write to its database; the
    /// empty name is the process itself.
    #[arg(long, default_value = "borbaman.v1.Game")]
    service: String,
    /// Speak TLS, trusting the CA in this PEM file (for servers run with
    /// --tls-cert); the certificate must name the address dialled.
    #[arg(long, value_name = "PEM")]
    tls_ca: Option<std::path::PathBuf>,
    /// How long to wait for the answer, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let timeout = Duration::from_millis(cli.timeout_ms);
    let answer = runtime.block_on(async {
        let scheme = if cli.tls_ca.is_some() {
            "https"
        } else {
            "http"
        };
        let mut endpoint =
            tonic::transport::Endpoint::from_shared(format!("{scheme}://{}", cli.address))
                .map_err(|e| format!("bad address {}: {e}", cli.address))?
                .connect_timeout(timeout)
                .timeout(timeout);
        if let Some(ca) = &cli.tls_ca {
            let pem = std::fs::read(ca)
                .map_err(|e| format!("cannot read the TLS CA {}: {e}", ca.display()))?;
            let tls = tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(pem));
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| format!("TLS for {}: {e}", cli.address))?;
        }
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", cli.address))?;
        let reply = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: cli.service.clone(),
            })
            .await
            .map_err(|e| format!("no health answer from {}: {}", cli.address, e.message()))?;
        Ok::<i32, String>(reply.into_inner().status)
    });
    match answer {
        Ok(status) if status == ServingStatus::Serving as i32 => ExitCode::SUCCESS,
        Ok(status) => {
            let name = ServingStatus::try_from(status)
                .map(|s| s.as_str_name())
                .unwrap_or("UNKNOWN");
            eprintln!("{} says {name} for {:?}", cli.address, cli.service);
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("{err}");
            ExitCode::FAILURE
        }
    }
}
