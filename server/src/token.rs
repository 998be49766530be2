//! Session tokens: validation, generation and hashing.
//!
//! A client picks a random token (or lets the server draw one) and sends it
//! with every call. The database stores only its SHA-256, so a leaked
//! database does not let anyone play as someone else.
//!
//! A join also carries the player's identity (see [`identity_hash`]): a
//! long-lived secret of the same shape. Both must look random
//! ([`check_random`]): a token anyone can guess (all zeros, one repeated
//! byte, a counting pattern) is refused at the join, the only call that
//! creates a session, so the per-call path stays a length check and a
//! hash.

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

/// [`check`], and refuses a secret without entropy: fewer distinct byte
/// values than half its length, or bytes that step by one constant (all
/// equal, counting up or down). 16 random bytes fall under the first bound
/// with a probability below 10^-11. `what` names the field in the message.
pub fn check_random(secret: &[u8], what: &str) -> Result<TokenHash, Error> {
    let hash = check(secret).map_err(|e| Error::InvalidArgument(format!("{what}: {e}")))?;
    let mut seen = [false; 256];
    for &b in secret {
        seen[usize::from(b)] = true;
    }
    let distinct = seen.iter().filter(|&&s| s).count();
    let step = secret[1].wrapping_sub(secret[0]);
    let stepped = secret.windows(2).all(|w| w[1].wrapping_sub(w[0]) == step);
    if distinct * 2 < secret.len() || stepped {
        return Err(Error::InvalidArgument(format!(
            "{what} has no entropy ({distinct} distinct bytes in {}); use random bytes",
            secret.len()
        )));
    }
    Ok(hash)
}

/// The stored form of an identity secret: SHA-256 under a prefix of its
/// own, so an identity and a token with the same bytes hash apart.
pub fn identity_hash(identity: &[u8]) -> TokenHash {
    let mut hasher = Sha256::new();
    hasher.update(b"borbaman-identity\0");
    hasher.update(identity);
    hasher.finalize().into()
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

    #[test]
    fn secrets_without_entropy_are_refused() {
        for weak in [
            vec![0u8; 32],
            vec![7u8; 16],
            (0u8..16).collect::<Vec<_>>(),
            (0u8..32).rev().collect(),
            [1u8, 2].repeat(12),
        ] {
            let err = check_random(&weak, "token").unwrap_err();
            assert!(err.to_string().contains("no entropy"), "{weak:?}: {err}");
        }
        for _ in 0..1000 {
            let fresh = draw();
            assert_eq!(check_random(&fresh, "token").unwrap(), hash(&fresh));
        }
        assert!(
            check_random(&[1; 8], "identity")
                .unwrap_err()
                .to_string()
                .starts_with("identity: ")
        );
        assert_ne!(identity_hash(&[5; 32]), hash(&[5; 32]));
    }
}
