//! Session tokens: validation, generation and hashing.
//!
//! A client picks a random token (or lets the server draw one) and sends it
//! with every call. The database stores only its SHA-256, so a leaked
//! database does not let anyone play as someone else.

use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::error::Error;

/// Shortest token accepted: 128 bits.
pub const MIN_TOKEN_BYTES: usize = 16;
/// Longest token accepted.
pub const MAX_TOKEN_BYTES: usize = 64;
/// Length of a server-drawn token.
pub const DRAWN_TOKEN_BYTES: usize = 32;

/// SHA-256 of a session token: the only form in which tokens are stored.
pub type TokenHash = [u8; 32];

/// Checks a token's length and returns its hash.
pub fn check(token: &[u8]) -> Result<TokenHash, Error> {
    if token.len() < MIN_TOKEN_BYTES || token.len() > MAX_TOKEN_BYTES {
        return Err(Error::InvalidArgument(format!(
            "token must be {MIN_TOKEN_BYTES}-{MAX_TOKEN_BYTES} bytes, got {}",
            token.len()
        )));
    }
    Ok(hash(token))
}

/// The stored form of a token.
pub fn hash(token: &[u8]) -> TokenHash {
    Sha256::digest(token).into()
}

/// A fresh random token for a client that did not send one.
pub fn draw() -> Vec<u8> {
    let mut token = vec![0u8; DRAWN_TOKEN_BYTES];
    rand::rng().fill_bytes(&mut token);
    token
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_limits_are_enforced() {
        assert!(check(&[1; 15]).is_err());
        assert!(check(&[1; 16]).is_ok());
        assert!(check(&[1; 64]).is_ok());
        let err = check(&[1; 65]).unwrap_err();
        assert!(err.to_string().contains("16-64 bytes, got 65"));
    }

    #[test]
    fn drawn_tokens_are_distinct_and_hash_stably() {
        let (a, b) = (draw(), draw());
        assert_eq!(a.len(), DRAWN_TOKEN_BYTES);
        assert_ne!(a, b);
        assert_eq!(hash(&a), check(&a).unwrap());
        assert_ne!(hash(&a), hash(&b));
    }
}
