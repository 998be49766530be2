//! Reading a caller's game, and committing the end of a game the clock
//! alone finished.

use sqlx::Row;
use sqlx::postgres::PgConnection;

use super::*;
use crate::error::Error;
use crate::store::queries::*;
use crate::store::{Cas, CasLoop, Store};
use crate::token::TokenHash;
use borbaman_game::{Ending, Phase, TICK_MS, Tick};

/// Advances `snapshot` (as read) to the clock's `now_tick`. Returns the
/// phase it had if the clock alone changed it (the game just ended), which
/// is for [`commit_clock`] to record.
pub(in crate::store) fn advance_to(snapshot: &mut Snapshot, now_tick: Tick) -> Option<Phase> {
    let state = &mut snapshot.state;
    let before = state.phase();
    state.advance(state.tick().max(now_tick));
    (state.phase() != before).then_some(before)
}

/// Commits a game the clock alone moved on from phase `before` (see
/// [`advance_to`]), compare-and-set on the version read, so the rankings
/// are recorded once. `false`: another call wrote the game since the read;
/// nothing was written.
pub(super) async fn commit_clock(
    store: &Store,
    conn: &mut PgConnection,
    snapshot: &mut Snapshot,
    before: Phase,
) -> Result<bool, Error> {
    let state = &snapshot.state;
    let ending = finishing(before, state);
    let row = sqlx::query(store.outboxed(WRITE_ADVANCE))
        .bind(Packed(state))
        .bind(state.phase().code())
        .bind(to_db_id(snapshot.game_id)?)
        .bind(winner_code(ending))
        .bind(ending == Some(Ending::Draw))
        .bind(ending.is_some())
        .bind(to_db_id(snapshot.version)?)
        .fetch_optional(conn)
        .await?;
    let Some(row) = row else {
        return Ok(false);
    };
    snapshot.version = row.try_get::<i64, _>(0)? as u64;
    if ending.is_some() {
        store.game_finished();
    }
    Ok(true)
}

impl Store {
    /// The caller's game advanced to the current tick. A plain read; only
    /// when the clock alone finished the game is that committed (once,
    /// through the write path) so the rankings are recorded.
    /// On the cluster of the game's partition; where it is moving or moved,
    /// on the one the map names next (see [`moves`](crate::store::moves)).
    pub async fn state(&self, token_hash: &TokenHash, game_id: u64) -> Result<Snapshot, Error> {
        let deadline = tokio::time::Instant::now() + self.db_timeout;
        loop {
            let store = self.route(game_id)?;
            match store.state_here(token_hash, game_id).await {
                Err(Error::Moved(_)) => self.await_move(game_id, &store, deadline).await?,
                other => return other,
            }
        }
    }

    async fn state_here(&self, token_hash: &TokenHash, game_id: u64) -> Result<Snapshot, Error> {
        self.retrying(|| async {
            let mut lease = self.lease().await?;
            let result = async {
                let conn = lease.conn();
                let mut cas = CasLoop::new(None);
                loop {
                    let _: Option<()> = cas.start();
                    let read = self.state_once(conn, token_hash, game_id).await?;
                    if matches!(read, Cas::Missed(_)) && cas.missed() > 0 {
                        // Missed again: a fenced partition misses every time.
                        crate::store::moves::refuse_if_fenced(conn, game_id).await?;
                    }
                    if let Some(snapshot) = cas.after(self, read).await? {
                        break Ok(snapshot);
                    }
                }
            }
            .await;
            lease.settle(result)
        })
        .await
    }

    /// One read, and a compare-and-set write only when the clock alone
    /// finished the game. `Missed`: another call wrote the game first.
    pub(super) async fn state_once(
        &self,
        conn: &mut PgConnection,
        token_hash: &TokenHash,
        game_id: u64,
    ) -> Result<Cas<Snapshot, ()>, Error> {
        let row = sqlx::query(READ_STATE)
            .bind(&token_hash[..])
            .bind(i64::from(TICK_MS))
            .bind(to_db_id(game_id)?)
            .fetch_optional(&mut *conn)
            .await?;
        let Some(row) = row else {
            // Not here: moved away (this server's map is stale), or unknown.
            crate::store::moves::refuse_if_fenced(conn, game_id).await?;
            let not_yours = super::write::not_yours(conn, token_hash, game_id).await?;
            return Err(not_yours.unwrap_or_else(unknown_token));
        };
        let (now_tick, mut snapshot) = game_row(&row, 0)?;
        if row.try_get::<i16, _>(6)? < 0 {
            return Err(seat_freed(snapshot.game_id as i64));
        }
        if snapshot.game_id != game_id {
            return Err(Error::PermissionDenied(format!(
                "game {game_id} is not your game (yours is {})",
                snapshot.game_id
            )));
        }
        if let Some(before) = advance_to(&mut snapshot, now_tick)
            && !commit_clock(self, conn, &mut snapshot, before).await?
        {
            return Ok(Cas::Missed(None));
        }
        Ok(Cas::Done(snapshot))
    }
}
