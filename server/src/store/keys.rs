//! The cluster's keys, and what the session tokens they make need from the
//! database (see [`crate::token`]).

use super::Store;
use crate::error::Error;
use crate::token::{SessionKey, TokenHash};
use std::time::Duration;

/// The key that MACs session tokens (created by the migration
/// `tokens_names_ranked`).
const SESSION_KEY: &str = "SELECT key FROM cluster_keys WHERE name = 'session-token'";

/// Whether the first session of token hash `$1` (it has one per
/// partition) was created more than `$2` ms ago (NULL: there is no such
/// session).
const SESSION_OLDER_THAN: &str = "SELECT min(created_at) < now() - $2::bigint * interval '1 millisecond' \
     FROM sessions WHERE token_hash = $1::bytea";

/// Every statement, for the schema test.
#[cfg(test)]
pub const ALL: &[&str] = &[SESSION_KEY, SESSION_OLDER_THAN];

impl Store {
    /// The cluster's session-token key. Start-up only.
    pub async fn session_key(&self) -> Result<SessionKey, Error> {
        let key: Vec<u8> = self
            .retrying(|| async {
                let mut lease = self.lease().await?;
                let key = sqlx::query_scalar(SESSION_KEY)
                    .fetch_one(lease.conn())
                    .await;
                lease.settle(key.map_err(Error::from))
            })
            .await?;
        SessionKey::new(&key)
    }

    /// Whether the token's session exists and was created more than
    /// `window` ago: a join that brings only its nonce is then refused.
    pub async fn session_older_than(
        &self,
        token_hash: &TokenHash,
        window: Duration,
    ) -> Result<bool, Error> {
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        if let Some(super::partitions::Routed::Other(store)) = self.placed(token_hash).await? {
            return Box::pin(store.session_older_than(token_hash, window)).await;
        }
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let old: Result<Option<bool>, _> = sqlx::query_scalar(SESSION_OLDER_THAN)
                .bind(&token_hash[..])
                .bind(window_ms)
                .fetch_one(lease.conn())
                .await;
            Ok(lease.settle(old.map_err(Error::from))?.unwrap_or(false))
        })
        .await
    }
}
