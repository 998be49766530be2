//! Audit queries for bench and chaos runs: what the database says was
//! applied, so a checker can compare it with what clients saw acknowledged;
//! whether game versions only grew; whether every game's stored state is
//! consistent. Also the bare-transaction floor those runs measure against:
//! `BEGIN`, `SELECT … FOR UPDATE`, `UPDATE`, `COMMIT` of a game-sized row on
//! a table of its own. That was the shape of a game call until calls became
//! a read and one compare-and-set write (two round trips to its four); the
//! floor keeps its shape so runs before and after compare.
//!
//! Read-only against the game tables; none of it is on the per-call path.

use std::collections::HashMap;

use sqlx::{PgPool, Row};

use crate::token::{self, TokenHash};
use borbaman_game::{GameState, Phase};

/// One row of the action log, with its session's token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedAction {
    pub token: Vec<u8>,
    pub seq: i64,
    pub game_id: i64,
    pub seat: i16,
    /// The proto Action number, or 7 for a Leave.
    pub action: i16,
    /// The game's version after this action's commit.
    pub version: i64,
}

/// Every applied action of the sessions of `tokens` (the database knows
/// only their hashes).
pub async fn applied_actions(
    db: &PgPool,
    tokens: &[Vec<u8>],
) -> Result<Vec<AppliedAction>, sqlx::Error> {
    let by_hash: HashMap<TokenHash, &Vec<u8>> =
        tokens.iter().map(|t| (token::hash(t), t)).collect();
    let hashes: Vec<Vec<u8>> = by_hash.keys().map(|h| h.to_vec()).collect();
    let rows: Vec<(Vec<u8>, i64, i64, i16, i16, i64)> = sqlx::query_as(
        "SELECT s.token_hash, a.seq, a.game_id, a.seat, a.action, a.version \
         FROM actions a JOIN sessions s ON s.id = a.session_id \
         WHERE s.token_hash = ANY($1) \
         ORDER BY a.session_id, a.seq",
    )
    .bind(&hashes)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(hash, seq, game_id, seat, action, version)| {
            let token = by_hash.get(hash.as_slice())?;
            Some(AppliedAction {
                token: token.to_vec(),
                seq,
                game_id,
                seat,
                action,
                version,
            })
        })
        .collect())
}

/// Ways the action log could show a game's version not growing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionAudit {
    /// Actions of one session applied before the session's previous
    /// action (the log is ordered by seq): at a lower version, or within
    /// one commit (one version) at a lower place (`ord`). An input applied
    /// before one sent earlier.
    pub out_of_order: i64,
    /// Places in one game's log claimed twice: a version and place (`ord`)
    /// logged by two commits that both started from the same state (a lost
    /// update). One commit may log several sessions' inputs, each at its
    /// own place.
    pub shared: i64,
    /// Actions whose version is above their game's stored version: the game
    /// went back after them.
    pub ahead_of_game: i64,
}

impl VersionAudit {
    pub fn is_clean(&self) -> bool {
        *self == VersionAudit::default()
    }
}

/// Checks the versions recorded in the action log of `game_ids`.
pub async fn version_audit(db: &PgPool, game_ids: &[i64]) -> Result<VersionAudit, sqlx::Error> {
    let out_of_order: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM ( \
           SELECT version, ord, \
                  lag(version) OVER (PARTITION BY session_id ORDER BY seq) AS previous, \
                  lag(ord) OVER (PARTITION BY session_id ORDER BY seq) AS previous_ord \
           FROM actions WHERE game_id = ANY($1) \
         ) t WHERE previous IS NOT NULL AND (version, ord) < (previous, previous_ord)",
    )
    .bind(game_ids)
    .fetch_one(db)
    .await?;
    // Every commit numbers its rows from 1 (`ord`), so two commits at one
    // version both have a row 1; rows logged before `ord` (0) were one
    // session's per commit.
    let shared: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM ( \
           SELECT game_id, version, ord FROM actions WHERE game_id = ANY($1) \
           GROUP BY game_id, version, ord \
           HAVING count(DISTINCT session_id) > 1 OR (ord > 0 AND count(*) > 1) \
         ) t",
    )
    .bind(game_ids)
    .fetch_one(db)
    .await?;
    let ahead_of_game: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM actions a JOIN games g ON g.id = a.game_id \
         WHERE a.game_id = ANY($1) AND a.version > g.version",
    )
    .bind(game_ids)
    .fetch_one(db)
    .await?;
    Ok(VersionAudit {
        out_of_order,
        shared,
        ahead_of_game,
    })
}

/// A stored game, as the audit sees it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct GameRow {
    pub id: i64,
    pub version: i64,
    pub phase: i16,
    pub state: Vec<u8>,
}

pub async fn games(db: &PgPool, game_ids: &[i64]) -> Result<Vec<GameRow>, sqlx::Error> {
    sqlx::query_as("SELECT id, version, phase, state FROM games WHERE id = ANY($1) ORDER BY id")
        .bind(game_ids)
        .fetch_all(db)
        .await
}

/// What is wrong with a stored game, if anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GameVerdict {
    /// Finished with a winner or a draw.
    Finished,
    /// Waiting or running, and its state decodes and agrees with its row.
    Consistent,
    Inconsistent(String),
}

/// Decodes a stored game and checks it against its row: a game is finished
/// with a winner or a draw, or it is still consistent.
pub fn check_game(row: &GameRow) -> GameVerdict {
    let state = match GameState::decode(&row.state) {
        Ok(state) => state,
        Err(e) => return GameVerdict::Inconsistent(format!("game {}: {e}", row.id)),
    };
    let phase = state.phase();
    let stored_phase = phase.code();
    if row.phase != stored_phase {
        return GameVerdict::Inconsistent(format!(
            "game {}: row says phase {}, state says {phase:?}",
            row.id, row.phase
        ));
    }
    match (phase, state.ending()) {
        (Phase::Finished, Some(_)) => GameVerdict::Finished,
        (Phase::Finished, None) => {
            GameVerdict::Inconsistent(format!("game {}: finished without winner or draw", row.id))
        }
        (_, Some(ending)) => GameVerdict::Inconsistent(format!(
            "game {}: {phase:?} but has an ending {ending:?}",
            row.id
        )),
        (_, None) => GameVerdict::Consistent,
    }
}

/// Creates (or refills) the floor table: `rows` rows of `state_bytes` bytes,
/// analyzed as rarely as the tables the game calls write (migration
/// `hot_tables_analyze_rarely`), so autovacuum treats both alike.
pub async fn create_txn_floor(
    db: &PgPool,
    rows: i64,
    state_bytes: usize,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS bench_floor ( \
           id BIGINT PRIMARY KEY, state BYTEA NOT NULL, \
           version BIGINT NOT NULL DEFAULT 1, updated_at TIMESTAMPTZ NOT NULL DEFAULT now()) \
         WITH (autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 10000000)",
    )
    .execute(db)
    .await?;
    sqlx::query(
        "INSERT INTO bench_floor (id, state) \
         SELECT i, $2 FROM generate_series(1, $1::BIGINT) i \
         ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state",
    )
    .bind(rows)
    .bind(vec![0u8; state_bytes])
    .execute(db)
    .await?;
    Ok(())
}

/// One bare transaction: lock the row, write a new state, commit.
pub async fn bare_transaction(db: &PgPool, id: i64, state: &[u8]) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    let (_old, _version): (Vec<u8>, i64) =
        sqlx::query_as("SELECT state, version FROM bench_floor WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
    sqlx::query(
        "UPDATE bench_floor SET state = $2, version = version + 1, updated_at = now() \
         WHERE id = $1",
    )
    .bind(id)
    .bind(state)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

pub async fn drop_txn_floor(db: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("DROP TABLE IF EXISTS bench_floor")
        .execute(db)
        .await?;
    Ok(())
}

/// What the database has done so far: WAL written and transaction ids
/// handed out (one per writing transaction, committed or not; read-only
/// statements take none). Two readings around a run give what each call
/// cost the database.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DatabaseActivity {
    pub wal_bytes: u64,
    pub writing_transactions: u64,
}

pub async fn database_activity(db: &PgPool) -> Result<DatabaseActivity, sqlx::Error> {
    let row = sqlx::query(
        "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, \
                txid_snapshot_xmax(txid_current_snapshot())",
    )
    .fetch_one(db)
    .await?;
    let wal: i64 = row.try_get(0)?;
    let xids: i64 = row.try_get(1)?;
    Ok(DatabaseActivity {
        wal_bytes: u64::try_from(wal).unwrap_or(0),
        writing_transactions: u64::try_from(xids).unwrap_or(0),
    })
}

/// PostgreSQL's own statistics views a run snapshots before and after
/// (`pg_stat_io` would join them from PostgreSQL 16 on).
pub const STAT_VIEWS: &[&str] = &[
    "pg_stat_wal",
    "pg_stat_bgwriter",
    "pg_stat_database",
    "pg_stat_user_tables",
];

/// Every row of each of [`STAT_VIEWS`] as JSON text (one array per view;
/// `pg_stat_database` and `pg_stat_user_tables` have a row per database
/// and per table), with the moment of reading as `now`.
pub async fn stat_snapshot(db: &PgPool) -> Result<Vec<(&'static str, String)>, sqlx::Error> {
    let mut views = Vec::with_capacity(STAT_VIEWS.len() + 1);
    let now: String = sqlx::query_scalar("SELECT to_json(now())::text")
        .fetch_one(db)
        .await?;
    views.push(("now", now));
    for view in STAT_VIEWS {
        // The view names are constants of this module.
        let json: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT json_agg(v)::text FROM {view} v"
        )))
        .fetch_one(db)
        .await?;
        views.push((*view, json.unwrap_or_else(|| "[]".into())));
    }
    Ok(views)
}

/// Tables whose row counts a long run reports, to show they stay bounded.
pub const TABLES: &[&str] = &[
    "games",
    "sessions",
    "seats",
    "actions",
    "seat_log",
    "rankings",
    "names",
    "purged_games",
    "servers",
];

/// The exact row count of each of [`TABLES`], in that order.
pub async fn table_rows(db: &PgPool) -> Result<Vec<(&'static str, i64)>, sqlx::Error> {
    let mut counts = Vec::with_capacity(TABLES.len());
    for &table in TABLES {
        // Table names come from the constant list above, never from input.
        let count: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
                .fetch_one(db)
                .await?;
        counts.push((table, count));
    }
    Ok(counts)
}
