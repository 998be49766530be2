//! The Borbaman wire contract, generated from `proto/borbaman.proto`.
//!
//! `pb` holds the messages and the `game` / `registry` client and server
//! stubs. Both the server and the client crates speak only these types on
//! the wire. [`ready`] is the other contract between a server and its
//! launcher: the one line it prints once it serves.

pub mod pb {
    tonic::include_proto!("borbaman.v1");
}

pub use pb::*;

/// Largest request a server accepts, in bytes. Every legal request is far
/// smaller; anything bigger is refused before it is decoded.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024;

pub mod codec;
pub mod ready;
pub mod reason;
pub mod timing;
pub use reason::Reason;

/// Most inputs one `ActRequest` may carry (`inputs`); more is refused with
/// `INVALID_ARGUMENT`. A client with more unacknowledged inputs sends the
/// oldest this many and the rest once those are acknowledged.
pub const MAX_INPUTS_PER_ACT: usize = 32;
