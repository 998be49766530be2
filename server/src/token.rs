//! Session tokens: issuing, checking, hashing.
//!
//! The cluster issues every session token ([`SessionKey`]): a client joins
//! with a random nonce of its own, and the server answers with the token
//! `id ‖ tag`, where `id` is 16 bytes of SHA-256 of the nonce and `tag` the
//! first 16 bytes of HMAC-SHA256 of `id` under a key only the cluster holds
//! (drawn once in the database, read by each server at start). So:
//!
//! - whoever holds a seat holds 128 bits of MAC no client can compute, even
//!   one whose nonce was weak;
//! - a join retried with the same nonce, on any server, gets the same token
//!   and so the same seat (and a crashed client that saved its token
//!   rejoins with it);
//! - a forged or unknown token is refused by recomputing the MAC, without a
//!   database round trip, before any rate limit or store is asked.
//!
//! A nonce alone answers a join only for [`NONCE_WINDOW`] after its
//! session was created (see `service::join`): after that, rejoining takes
//! the token, so a nonce someone guesses late buys nothing. The database
//! stores only the SHA-256 of the token, so a leaked database does not let
//! anyone play as someone else.
//!
//! A join also carries the player's identity (see [`identity_hash`]): a
//! long-lived secret of the same shape. Both must look random
//! ([`check_random`]): a token anyone can guess (all zeros, one repeated
//! byte, a counting pattern) is refused at the join, the only call that
//! creates a session, so the per-call path stays a length check and a
//! hash.

use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::error::Error;

/// Shortest token accepted: 128 bits.
pub const MIN_TOKEN_BYTES: usize = 16;
/// Longest token accepted.
pub const MAX_TOKEN_BYTES: usize = 64;
/// Length of a server-drawn nonce.
pub const DRAWN_TOKEN_BYTES: usize = 32;
/// Length of an issued token: id and tag.
pub const ISSUED_TOKEN_BYTES: usize = 2 * HALF;
const HALF: usize = 16;

/// How long after its session was created a join's nonce still answers
/// the join (a retry, or a client that crashed before it saved the token):
/// well beyond any client's retries of one join.
pub const NONCE_WINDOW: Duration = Duration::from_secs(30);

/// What a join's `token` field came to: the session token, and whether
/// the client sent a nonce for it (then the nonce answers the join only
/// within [`NONCE_WINDOW`] of the session's creation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinToken {
    pub token: Vec<u8>,
    pub nonce: bool,
}

/// The cluster's key for session tokens, from the `cluster_keys` table.
#[derive(Clone)]
pub struct SessionKey {
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(..)")
    }
}

impl SessionKey {
    /// A key from its bytes (at least 16).
    pub fn new(key: &[u8]) -> Result<SessionKey, Error> {
        if key.len() < MIN_TOKEN_BYTES {
            return Err(Error::Internal(format!(
                "the session-token key is {} bytes; at least {MIN_TOKEN_BYTES} expected",
                key.len()
            )));
        }
        let mac = Hmac::<Sha256>::new_from_slice(key)
            .map_err(|e| Error::Internal(format!("session-token key: {e}")))?;
        Ok(SessionKey { mac })
    }

    fn tag(&self, id: &[u8]) -> Hmac<Sha256> {
        let mut mac = self.mac.clone();
        mac.update(b"borbaman-session\0");
        mac.update(id);
        mac
    }

    /// The token for a join's nonce: the same nonce, the same token.
    pub fn issue(&self, nonce: &[u8]) -> Vec<u8> {
        let mut id = Sha256::new();
        id.update(b"borbaman-nonce\0");
        id.update(nonce);
        let id = id.finalize();
        let tag = self.tag(&id[..HALF]).finalize().into_bytes();
        let mut token = Vec::with_capacity(ISSUED_TOKEN_BYTES);
        token.extend_from_slice(&id[..HALF]);
        token.extend_from_slice(&tag[..HALF]);
        token
    }

    /// The hash of `token` if this cluster issued it; `None` for anything
    /// else (a forged token, a nonce, a token of another cluster). Compares
    /// in constant time.
    pub fn verify(&self, token: &[u8]) -> Option<TokenHash> {
        if token.len() != ISSUED_TOKEN_BYTES {
            return None;
        }
        let (id, tag) = token.split_at(HALF);
        self.tag(id).verify_truncated_left(tag).ok()?;
        Some(hash(token))
    }

    /// The session token a join asks for with `sent`: a token this cluster
    /// issued is its own (a rejoin); anything else is the client's nonce,
    /// checked for entropy, and the token is made from it; nothing at all
    /// is a nonce the server draws.
    pub fn for_join(&self, sent: Vec<u8>) -> Result<JoinToken, Error> {
        if sent.is_empty() {
            return Ok(JoinToken {
                token: self.issue(&draw()),
                nonce: false,
            });
        }
        if self.verify(&sent).is_some() {
            return Ok(JoinToken {
                token: sent,
                nonce: false,
            });
        }
        check_random(&sent, "token")?;
        Ok(JoinToken {
            token: self.issue(&sent),
            nonce: true,
        })
    }

    /// [`SessionKey::verify`] as a call's check: a token of the wrong
    /// length is a malformed request, one this cluster did not issue an
    /// unknown session.
    pub fn check(&self, token: &[u8]) -> Result<TokenHash, Error> {
        check(token)?;
        self.verify(token).ok_or_else(|| {
            Error::Unauthenticated(
                "unknown session token (the servers did not issue it); join again".into(),
            )
        })
    }
}

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
    fn issued_tokens_verify_and_nothing_else_does() {
        let key = SessionKey::new(&[9; 32]).unwrap();
        let nonce = draw();
        let token = key.issue(&nonce);
        assert_eq!(token.len(), ISSUED_TOKEN_BYTES);
        assert_eq!(
            key.issue(&nonce),
            token,
            "a retried join gets the same token"
        );
        assert_eq!(key.verify(&token), Some(hash(&token)));
        assert_eq!(key.check(&token).unwrap(), hash(&token));
        assert_ne!(key.issue(&draw()), token);
        // A nonce, a forged tag, another cluster's token: refused.
        assert_eq!(key.verify(&nonce), None);
        let mut forged = token.clone();
        forged[31] ^= 1;
        assert_eq!(key.verify(&forged), None);
        let other = SessionKey::new(&[8; 32]).unwrap();
        assert_eq!(other.verify(&token), None);
        let err = key.check(b"0123456789abcdef0123456789abcdef").unwrap_err();
        assert!(matches!(err, Error::Unauthenticated(_)), "{err:?}");
        assert!(matches!(key.check(&[1; 8]), Err(Error::InvalidArgument(_))));
        assert!(SessionKey::new(&[1; 8]).is_err());
    }

    #[test]
    fn a_join_brings_a_nonce_or_an_issued_token() {
        let key = SessionKey::new(&[9; 32]).unwrap();
        let nonce = draw();
        let first = key.for_join(nonce.clone()).unwrap();
        assert!(first.nonce);
        assert_eq!(first.token, key.issue(&nonce));
        let rejoin = key.for_join(first.token.clone()).unwrap();
        assert_eq!((rejoin.token, rejoin.nonce), (first.token, false));
        let drawn = key.for_join(Vec::new()).unwrap();
        assert!(!drawn.nonce && key.verify(&drawn.token).is_some());
        let weak = key.for_join(vec![0; 32]).unwrap_err();
        assert!(weak.to_string().contains("no entropy"), "{weak}");
    }

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
