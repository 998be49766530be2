//! A cluster serving TLS: bots that trust its CA play a whole game; a
//! client without the CA gets nowhere.

mod common;

use std::time::Duration;

use borbaman_client::pool::{PoolConfig, ServerPool};
use borbaman_client::session::{GameSession, new_token};
use borbaman_test_support::Certificates;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

/// Opens a TLS connection to `address` with `tls`; the error and its
/// sources in one line if it fails.
async fn tls_connect(address: &str, tls: ClientTlsConfig) -> Result<(), String> {
    let endpoint = Endpoint::from_shared(format!("https://{address}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect_timeout(Duration::from_secs(5));
    match endpoint.connect().await {
        Ok(_) => Ok(()),
        Err(err) => {
            let mut chain = err.to_string();
            let mut source = std::error::Error::source(&err);
            while let Some(cause) = source {
                chain.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            Err(chain)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_that_trust_the_ca_play_a_game_over_tls() {
    let certificates = Certificates::new();
    let tls = certificates.server_flags();
    let mut flags = vec!["--round-ms=1000"];
    flags.extend(tls.iter().map(String::as_str));
    let cluster = common::cluster_with(2, &flags);

    // Without the CA: no server can be reached.
    let untrusted = PoolConfig {
        tls: Some(ClientTlsConfig::new()),
        give_up_after: Duration::from_secs(2),
        ..PoolConfig::default()
    };
    let plaintext = PoolConfig {
        give_up_after: Duration::from_secs(2),
        ..PoolConfig::default()
    };
    for config in [untrusted, plaintext] {
        let joined = match ServerPool::connect(&cluster.addresses(), config).await {
            Ok(pool) => GameSession::join(&pool, "intruder", new_token())
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        assert!(joined.is_err(), "a client without the CA joined");
    }

    // Refused for the certificate: a TLS client without the CA fails its
    // handshake on the server's certificate, and the same client with the
    // CA connects.
    let ca = Certificate::from_pem(certificates.ca_pem());
    let address = &cluster.addresses()[0];
    let refused = tls_connect(address, ClientTlsConfig::new())
        .await
        .expect_err("a TLS client without the CA connected");
    assert!(
        refused.contains("certificate") && refused.contains("UnknownIssuer"),
        "refused, but not for the server's certificate: {refused}"
    );
    tls_connect(address, ClientTlsConfig::new().ca_certificate(ca.clone()))
        .await
        .expect("a TLS client with the CA connects");

    // With it: a whole game.
    let trusted = PoolConfig {
        tls: Some(ClientTlsConfig::new().ca_certificate(ca)),
        ..PoolConfig::default()
    };
    let finished = common::bot_game(
        &cluster.addresses(),
        trusted,
        "",
        Duration::from_secs(90),
        "the game over TLS",
    )
    .await;
    let first = &finished[0];
    assert!(first.draw || first.winner.is_some(), "{first:?}");
}
