//! Player names: who holds which, and for how long.
//!
//! A long-lived identity holds one name at a time, under the name's
//! look-alike key ([`borbaman_game::names::owner_key`]). Joining with
//! another name releases the one it held; a released name stays its
//! owner's for the hold period ([`StoreOptions::name_hold`]), so a player
//! who renamed by mistake can take it back and no one can take it the
//! moment it is let go (and pass for its owner in the rankings), then
//! anyone may take it. Retention releases names no one joined with for
//! long (see [`super::retention`]). A session-only identity (a join
//! without one) holds no name, and may only use a name no one holds.
//!
//! Keys made by an older look-alike rule are recomputed at start-up
//! ([`Store::rekey_names`]).
//!
//! [`StoreOptions::name_hold`]: super::StoreOptions::name_hold

use borbaman_game::names;
use sqlx::Connection;
use sqlx::postgres::PgConnection;

use super::Store;
use super::play::Identity;
use crate::error::Error;

/// The look-alike rule the keys are made with now (see the migration
/// `tokens_names_ranked`).
pub const KEY_VERSION: i16 = 2;

/// The advisory lock taken while keys are recomputed, so servers starting
/// together do it once.
const REKEY_LOCK: i64 = 0x6e61_6d65_6b65_7932; // "namekey2"

/// "Held": not released, or released less than `$hold` ms ago.
macro_rules! held {
    ($row:literal, $hold:literal) => {
        concat!(
            "(",
            $row,
            ".released_at IS NULL OR ",
            $row,
            ".released_at > now() - ",
            $hold,
            "::bigint * interval '1 millisecond')"
        )
    };
}

/// Identity `$2` takes key `$1`, spelled `$3`, with key version `$4`
/// (`$5` the hold, ms), in one statement: if no other identity holds the
/// key, the name it held is released, then the key is its own (inserted,
/// kept, or taken over once free). Returns whether it holds the key now.
/// The insert reads the release's result, so the release is done before
/// the insert meets the one-held-name-per-identity index. If another
/// identity inserts the key at the same moment, the insert finds it held
/// and takes nothing (the name this one held stays its own for the hold).
const CLAIM_NAME: &str = concat!(
    "WITH cur AS (SELECT n.identity_hash = $2::bytea OR NOT ",
    held!("n", "$5"),
    " AS free FROM names n WHERE n.owner_key = $1::text), \
     ok AS (SELECT coalesce((SELECT free FROM cur), true) AS free), \
     rel AS (UPDATE names SET released_at = now() \
             WHERE identity_hash = $2::bytea AND released_at IS NULL AND owner_key <> $1::text \
               AND (SELECT free FROM ok) RETURNING 1), \
     c AS (INSERT INTO names AS n \
             (owner_key, identity_hash, name, key_version, used_at, released_at) \
           SELECT $1::text, $2::bytea, $3::text, $4::smallint, now(), NULL FROM ok \
           WHERE free AND (SELECT count(*) FROM rel) >= 0 \
           ON CONFLICT (owner_key) DO UPDATE SET identity_hash = excluded.identity_hash, \
             name = excluded.name, used_at = now(), released_at = NULL, \
             claimed_at = CASE WHEN n.identity_hash = excluded.identity_hash \
                               THEN n.claimed_at ELSE now() END \
           WHERE n.identity_hash = excluded.identity_hash OR NOT ",
    held!("n", "$5"),
    " RETURNING 1) \
     SELECT EXISTS (SELECT 1 FROM c)"
);

/// Whether anyone holds key `$1` (`$2` the hold, ms).
const NAME_HELD: &str = "SELECT EXISTS (SELECT 1 FROM names WHERE owner_key = $1::text \
       AND (released_at IS NULL \
            OR released_at > now() - $2::bigint * interval '1 millisecond'))";

/// Names whose keys an older rule made, oldest claim first.
const OLD_KEYS: &str = "SELECT identity_hash, name, \
            claimed_at::text, used_at::text, released_at::text \
     FROM names WHERE key_version < $1::smallint ORDER BY claimed_at, owner_key FOR UPDATE";

/// One name under its new key; nothing if an older claim has that key, or
/// its identity holds another name already.
const REKEYED: &str = "INSERT INTO names \
       (owner_key, identity_hash, name, claimed_at, used_at, released_at, key_version) \
     VALUES ($1::text, $2::bytea, $3::text, $4::timestamptz, $5::timestamptz, $6::timestamptz, \
             $7::smallint) \
     ON CONFLICT DO NOTHING";

/// Every statement, for the schema test.
#[cfg(test)]
pub const ALL: &[&str] = &[CLAIM_NAME, NAME_HELD, OLD_KEYS, REKEYED];

/// A name under an old key: identity, name, and its times as text
/// (passed back unchanged, so no date type is needed).
type OldName = (Vec<u8>, String, String, String, Option<String>);

impl Store {
    /// A long-lived identity takes `name` (or finds it already its own),
    /// releasing the name it held; a session-only one may only use a name
    /// no one holds. Either way a name another identity holds, or one that
    /// looks like it, is refused.
    pub(super) async fn check_name(&self, identity: &Identity, name: &str) -> Result<(), Error> {
        let key = names::owner_key(name);
        let hold_ms = self.name_hold_ms;
        let mut lease = self.lease().await?;
        let conn = lease.conn();
        let free = if identity.claims_names {
            sqlx::query_scalar::<_, bool>(CLAIM_NAME)
                .bind(&key)
                .bind(&identity.hash[..])
                .bind(name)
                .bind(KEY_VERSION)
                .bind(hold_ms)
                .fetch_one(conn)
                .await
        } else {
            sqlx::query_scalar::<_, bool>(NAME_HELD)
                .bind(&key)
                .bind(hold_ms)
                .fetch_one(conn)
                .await
                .map(|held| !held)
        };
        let free = lease.settle(free.map_err(Error::from))?;
        if free {
            Ok(())
        } else {
            Err(Error::NameTaken(format!(
                "the name {name:?} (or one that looks like it) belongs to another player; \
                 pick another name"
            )))
        }
    }

    /// Recomputes the keys an older look-alike rule made, once, under an
    /// advisory lock (servers starting together wait for the first). Where
    /// two old names now share a key, the older claim keeps it and the
    /// other is dropped (its identity may claim another name). Returns the
    /// names rekeyed and dropped.
    pub async fn rekey_names(&self) -> Result<(u64, u64), Error> {
        let mut lease = self.lease().await?;
        let rekeyed = rekey(lease.conn()).await;
        lease.settle(rekeyed)
    }
}

/// [`Store::rekey_names`], in one transaction on `conn`.
async fn rekey(conn: &mut PgConnection) -> Result<(u64, u64), Error> {
    let mut tx = conn.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(REKEY_LOCK)
        .execute(&mut *tx)
        .await?;
    let old: Vec<OldName> = sqlx::query_as(OLD_KEYS)
        .bind(KEY_VERSION)
        .fetch_all(&mut *tx)
        .await?;
    if old.is_empty() {
        return Ok((0, 0));
    }
    sqlx::query("DELETE FROM names WHERE key_version < $1::smallint")
        .bind(KEY_VERSION)
        .execute(&mut *tx)
        .await?;
    let (mut kept, mut dropped) = (0, 0);
    for (identity, name, claimed, used, released) in old {
        let inserted = sqlx::query(REKEYED)
            .bind(names::owner_key(&name))
            .bind(identity)
            .bind(&name)
            .bind(claimed)
            .bind(used)
            .bind(released)
            .bind(KEY_VERSION)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if inserted == 1 {
            kept += 1;
        } else {
            dropped += 1;
        }
    }
    tx.commit().await?;
    Ok((kept, dropped))
}

#[cfg(test)]
mod sql_tests {
    use super::*;

    /// Names stored under the old rule's keys: after `rekey_names` each is
    /// under its new key, the older of two that now share a key keeps it,
    /// and a second run finds nothing to do.
    #[tokio::test]
    async fn old_keys_are_recomputed_and_the_older_claim_keeps_a_shared_key() {
        let (_pg, store) = crate::store::temp_store().await;
        let pool = store.pool();
        // The old rule's keys: `Alice` and `ALICE` were two names.
        for (key, identity, name, age_s) in [
            ("alice", 1u8, "Alice", 20),
            ("allce", 2, "ALICE", 10),
            ("bob", 3, "Bob", 5),
        ] {
            sqlx::query(
                "INSERT INTO names (owner_key, identity_hash, name, claimed_at, key_version) \
                 VALUES ($1, $2, $3, now() - $4 * interval '1 second', 1)",
            )
            .bind(key)
            .bind(vec![identity; 32])
            .bind(name)
            .bind(f64::from(age_s))
            .execute(pool)
            .await
            .unwrap();
        }
        assert_eq!(store.rekey_names().await.unwrap(), (2, 1));
        let rows: Vec<(String, Vec<u8>, i16)> =
            sqlx::query_as("SELECT owner_key, identity_hash, key_version FROM names ORDER BY 1")
                .fetch_all(pool)
                .await
                .unwrap();
        assert_eq!(
            rows,
            [
                (names::owner_key("Alice"), vec![1; 32], KEY_VERSION),
                (names::owner_key("Bob"), vec![3; 32], KEY_VERSION),
            ]
        );
        assert_eq!(store.rekey_names().await.unwrap(), (0, 0));
        store.close().await;
    }
}
