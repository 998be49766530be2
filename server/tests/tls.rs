//! A server given a certificate speaks TLS only: a client that trusts its
//! CA plays, one without the CA, or without TLS, is refused.

mod common;

use borbaman_proto::pb;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

async fn channel(url: String, tls: Option<ClientTlsConfig>) -> Result<Channel, String> {
    let mut endpoint = Endpoint::from_shared(url).unwrap();
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls).map_err(|e| e.to_string())?;
    }
    endpoint.connect().await.map_err(|e| format!("{e:?}"))
}

async fn ping(channel: Channel) -> Result<(), String> {
    pb::game_client::GameClient::new(channel)
        .ping(pb::PingRequest { payload: vec![1] })
        .await
        .map(|_| ())
        .map_err(|e| format!("{e:?}"))
}

#[tokio::test]
async fn only_a_client_that_trusts_the_ca_is_served() {
    let (certificates, _pg, server) = tls_server(&[]);
    let https = format!("https://{}", server.addr);

    // Without TLS: the server speaks only TLS.
    let plain = match channel(server.url(), None).await {
        Ok(channel) => ping(channel).await,
        Err(e) => Err(e),
    };
    assert!(plain.is_err(), "a plaintext client was served");

    // TLS without the CA: the certificate is not trusted.
    let untrusted = match channel(https.clone(), Some(ClientTlsConfig::new())).await {
        Ok(channel) => ping(channel).await,
        Err(e) => Err(e),
    };
    assert!(untrusted.is_err(), "a client without the CA was served");

    // With the CA: served, and a player joins.
    let ca = Certificate::from_pem(certificates.ca_pem());
    let trusted = channel(https, Some(ClientTlsConfig::new().ca_certificate(ca)))
        .await
        .expect("connect with the CA");
    ping(trusted.clone()).await.expect("ping over TLS");
    let mut game = pb::game_client::GameClient::new(trusted);
    let (player, reply) = join(&mut game, "tls").await;
    assert!(player.game_id > 0 && reply.state.is_some());
}

#[tokio::test]
async fn a_handshake_left_unfinished_is_closed() {
    let (_certificates, _pg, server) = tls_server(&["--first-bytes-timeout-ms", "300"]);
    // The first byte of a TLS record (a handshake), then nothing.
    let mut stalled = TcpStream::connect(&server.addr).await.unwrap();
    stalled.write_all(&[0x16]).await.unwrap();
    let mut buf = Vec::new();
    let _closed = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        stalled.read_to_end(&mut buf),
    )
    .await
    .expect("a stalled handshake is still open after 20 s");
}

/// A client that finishes its TLS handshake and then says nothing holds no
/// slot for long: with no call open it is closed at the idle timeout.
#[tokio::test]
async fn a_tls_connection_silent_after_its_handshake_is_closed() {
    let (certificates, _pg, server) = tls_server(&["--idle-connection-timeout-ms", "1000"]);
    let tcp = TcpStream::connect(&server.addr).await.unwrap();
    let mut tls = tls_handshake(&certificates, tcp).await;
    // Silent from here: the server closes it (end of stream or an error).
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, tls.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(_)) => {}
            Err(_) => panic!("a silent TLS connection is still open after 10 s"),
        }
    }
}
