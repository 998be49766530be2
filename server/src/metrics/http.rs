//! `GET /metrics` in Prometheus' text exposition format, on the address of
//! `--metrics-listen`.
//!
//! A plain HTTP/1.1 listener of its own, apart from the gRPC port: a
//! scraper needs no gRPC, and the metrics port can stay on an internal
//! network while the game port faces players. Each scrape first refreshes
//! the database census (at most once a second, see
//! [`crate::status::Census`]); everything else is read from memory.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::status::CensusCache;

/// The content type of the text format, version 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `/metrics` on `listener` until `stop` turns true.
pub async fn serve(
    listener: TcpListener,
    census: Arc<CensusCache>,
    mut stop: borbaman_shutdown::Shutdown,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    tracing::debug!(error = %err, "metrics: accept failed");
                    continue;
                }
            },
            _ = stop.recv() => return,
        };
        let census = census.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| answer(req, census.clone()));
            if let Err(err) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %err, "metrics: connection failed");
            }
        });
    }
}

async fn answer(
    req: Request<Incoming>,
    census: Arc<CensusCache>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let response = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => {
            census.refresh().await;
            Response::builder()
                .header(hyper::header::CONTENT_TYPE, CONTENT_TYPE)
                .body(Full::new(Bytes::from(census.metrics().encode())))
        }
        _ => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Full::new(Bytes::from_static(b"metrics are at /metrics\n"))),
    };
    Ok(response.expect("a valid response"))
}
