//! Raw HTTP/2 from a test or a bench: frames written by hand, so a client
//! can do what no well-behaved client library does (open more streams than
//! the server allows, never read), and the server's resident memory.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::H2_PREFACE;

/// An HTTP/2 frame.
pub fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut frame = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// The HPACK block of a gRPC call of `Game/Ping` (literals, no indexing).
pub fn ping_headers() -> Vec<u8> {
    call_headers("/borbaman.v1.Game/Ping")
}

/// The HPACK block of a gRPC call of `path` (literals, no indexing; a
/// path under 127 bytes).
pub fn call_headers(path: &str) -> Vec<u8> {
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    for (prefix, value) in [
        (&[0x04][..], path),                     // :path
        (&[0x01][..], "localhost"),              // :authority
        (&[0x0f, 0x10][..], "application/grpc"), // content-type
    ] {
        block.extend_from_slice(prefix);
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    block.extend_from_slice(b"\x00\x02te\x08trailers");
    block
}

/// A gRPC message as a request body carries it: uncompressed, its length,
/// the bytes.
pub fn grpc_message(encoded: &[u8]) -> Vec<u8> {
    let mut body = vec![0];
    body.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    body.extend_from_slice(encoded);
    body
}

/// One HTTP/2 frame as read: type, flags, stream id, payload.
pub async fn read_frame<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
) -> io::Result<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    stream.read_exact(&mut head).await?;
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await?;
    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    Ok((head[3], head[4], id, payload))
}

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const RST_STREAM: u8 = 0x3;
pub const GOAWAY: u8 = 0x7;
pub const ACK: u8 = 0x1;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const CANCEL: u32 = 0x8;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const REFUSED_STREAM: u32 = 0x7;

/// The server's resident memory, from /proc.
pub fn rss_bytes(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib * 1024
}

/// A raw HTTP/2 connection from `source` that opens `streams` calls at
/// once, none of which ends its request, then sends a PING. Once the
/// PING's answer came (so every HEADERS before it was read): the
/// connection (its calls held open), the server's SETTINGS, and the
/// streams the server refused.
pub async fn open_streams(
    server: SocketAddr,
    source: IpAddr,
    streams: u32,
) -> (TcpStream, Vec<u8>, Vec<u32>) {
    open_calls(server, source, streams, &ping_headers()).await
}

/// As [`open_streams`], each call's HEADERS being `headers`.
pub async fn open_calls(
    server: SocketAddr,
    source: IpAddr,
    streams: u32,
    headers: &[u8],
) -> (TcpStream, Vec<u8>, Vec<u32>) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source, 0)).unwrap();
    let mut stream = socket.connect(server).await.unwrap();
    let mut flood = H2_PREFACE.to_vec();
    flood.extend(h2_frame(SETTINGS, 0, 0, &[]));
    for n in 0..streams {
        flood.extend(h2_frame(HEADERS, END_HEADERS, 2 * n + 1, headers));
    }
    flood.extend(h2_frame(PING, 0, 0, b"flooded!"));
    stream.write_all(&flood).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (mut settings, mut refused) = (None, Vec::new());
    loop {
        let (kind, flags, id, payload) = tokio::time::timeout_at(deadline, read_frame(&mut stream))
            .await
            .expect("the PING after the streams was never answered")
            .expect("the server closed the connection");
        assert_ne!(kind, GOAWAY, "GOAWAY: {payload:?}");
        match kind {
            SETTINGS if flags & ACK == 0 => {
                settings = Some(payload);
                stream
                    .write_all(&h2_frame(SETTINGS, ACK, 0, &[]))
                    .await
                    .unwrap();
            }
            RST_STREAM if payload[..4] == REFUSED_STREAM.to_be_bytes() => refused.push(id),
            PING if flags & ACK != 0 => break,
            _ => {}
        }
    }
    (stream, settings.expect("the server's SETTINGS"), refused)
}
