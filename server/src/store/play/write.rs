//! The compare-and-set write of a commit of Acts and Leaves: the read, the
//! one statement that writes them all, and what to do when another call
//! wrote first.

use sqlx::Row;
use sqlx::postgres::{PgConnection, PgRow};
use tokio::time::Instant;

use super::*;
use crate::error::Error;
use crate::store::queries::*;
use crate::store::{Cas, CasLoop, Store};
use borbaman_game::{Ending, Phase, TICK_MS};

/// What a compare-and-set write of Acts and Leaves returned: the callers'
/// read done again comes back boxed (it holds a whole game state, and
/// misses are the rare case).
pub(super) type Written<T> = Cas<T, Box<Reads>>;

/// A commit written: each call's answer, and what is then known of the
/// game (see [`Known`]), with the version the commit had read.
pub(super) struct Committed {
    pub(super) answers: Vec<Result<Reply, Error>>,
    pub(super) known: Option<(Known, i64)>,
}

/// Reads the callers' sessions (`tokens`) and their games in one
/// statement, without a lock; an unknown token (none in game `game_id`'s
/// partition) has no read.
pub(super) async fn load_callers(
    conn: &mut PgConnection,
    tokens: &[&[u8]],
    game_id: u64,
) -> Result<Reads, Error> {
    let rows = sqlx::query(LOAD_CALLERS)
        .bind(tokens)
        .bind(i64::from(TICK_MS))
        .bind(to_db_id(game_id)?)
        .fetch_all(&mut *conn)
        .await?;
    rows.iter().map(|row| caller_row(row, 0)).collect()
}

/// A token without a session in game `game_id`'s partition but with one
/// in another (a token has one per partition): the game is not its game.
///
/// A session in this very game means the read found the partition fenced
/// and the fence lifted before [`refuse_if_fenced`] looked (a move fences
/// its source for the moment of its copy's snapshot, then makes it
/// writable again): [`Error::Moved`], so the call waits and runs again.
///
/// [`refuse_if_fenced`]: crate::store::moves::refuse_if_fenced
pub(super) async fn not_yours(
    conn: &mut PgConnection,
    token_hash: &crate::token::TokenHash,
    game_id: u64,
) -> Result<Option<Error>, Error> {
    let elsewhere: Option<i64> = sqlx::query_scalar(SESSION_ELSEWHERE)
        .bind(&token_hash[..])
        .fetch_optional(&mut *conn)
        .await?;
    Ok(elsewhere.map(|theirs| {
        if i64::try_from(game_id).ok() == Some(theirs) {
            return crate::store::moves::fence_lifted(game_id);
        }
        Error::PermissionDenied(format!(
            "game {game_id} is not your game (yours is {theirs})"
        ))
    }))
}

/// A compare-and-set write of Acts and Leaves that matched.
pub(super) struct WriteDone {
    /// The game's new version.
    pub(super) version: i64,
    /// `games.created_at`, µs since the epoch.
    pub(super) created_us: i64,
    /// The database clock at the write, µs since the epoch.
    pub(super) clock_us: i64,
}

/// What a compare-and-set write of Acts and Leaves returned (see
/// `read_again!` in the queries): the new version (with the game's
/// creation and the database clock), or nothing written and the callers'
/// read done again after the commit it lost to.
pub(super) fn written(rows: Vec<PgRow>) -> Result<Written<WriteDone>, Error> {
    let Some(first) = rows.first() else {
        return Ok(Cas::Missed(None));
    };
    if let Some(version) = first.try_get::<Option<i64>, _>(0)? {
        return Ok(Cas::Done(WriteDone {
            version,
            created_us: first.try_get(2)?,
            clock_us: first.try_get(15)?,
        }));
    }
    let again = rows
        .iter()
        .map(|row| caller_row(row, 1))
        .collect::<Result<Reads, Error>>()?;
    Ok(Cas::Missed(Some(Box::new(again))))
}

/// The statement that writes `commit` (`ending`: it finishes the game):
/// [`WRITE_ACTS`] for Acts only that do not finish the game, the hot path;
/// [`WRITE_CALLS`], with a leave's parts and the rankings, for any other.
/// Both take the same parameters, and on a commit of the first kind they
/// write the same rows.
pub(super) fn write_statement(commit: &Commit, ending: Option<Ending>) -> &'static str {
    let leaves = commit.writers.iter().any(|w| w.leaving || w.freed);
    if leaves || ending.is_some() {
        WRITE_CALLS
    } else {
        WRITE_ACTS
    }
}

impl Store {
    /// One attempt at `calls` (on game `game_id`, oldest first): one read of
    /// the callers' sessions and their game, then one compare-and-set write
    /// of all of them, read and applied again for as long as another
    /// server's call writes first (see [`Store::lost`]).
    pub(super) async fn commit_calls(
        &self,
        game_id: u64,
        calls: &[Call],
    ) -> Result<Vec<Result<Reply, Error>>, Error> {
        let mut tokens: Vec<&[u8]> = Vec::with_capacity(calls.len());
        for call in calls {
            let token = &call.token_hash()[..];
            if !tokens.contains(&token) {
                tokens.push(token);
            }
        }
        // Taken: a commit that fails or is dropped leaves nothing known.
        let before = self.known.take(game_id);
        // A leased connection: if the deadline cuts this attempt (a commit
        // waiting for a synchronous standby that is gone), the connection
        // is dropped, never pooled, pinged or cancelled.
        let mut lease = self.lease().await?;
        let result = async {
            let conn = lease.conn();
            let known = before
                .as_ref()
                .and_then(|known| known.read_for(&tokens, Instant::now()));
            let mut cas = CasLoop::new(known);
            let committed = loop {
                let read = match cas.start() {
                    Some(read) => read,
                    // One statement reads one snapshot.
                    None => split_reads(load_callers(conn, &tokens, game_id).await?, game_id)
                        .ok_or_else(|| Error::Internal("one read saw two versions".into()))?,
                };
                let written = self
                    .write_calls(conn, game_id, calls, &tokens, read)
                    .await?;
                if matches!(written, Cas::Missed(_)) && cas.missed() > 0 {
                    // Missed again: a fenced partition misses every time.
                    crate::store::moves::refuse_if_fenced(conn, game_id).await?;
                }
                if let Some(committed) = cas.after(self, written).await? {
                    break committed;
                }
            };
            if let Some((known, read_version)) = committed.known {
                let known = Known::after(known, game_id, read_version, before);
                self.known.put(game_id, known);
            }
            Ok(committed.answers)
        }
        .await;
        lease.settle_commit(self, result)
    }

    /// Applies `calls` on `read` (see [`apply_calls`]) and writes what they
    /// applied in one compare-and-set write; when none applied anything,
    /// only a game the clock ended is written. `Missed`: another call
    /// changed the game or a session since `read`, and nothing was written;
    /// with the callers' read done again, if the write returned it in one
    /// snapshot (a read again reads each caller apart).
    pub(super) async fn write_calls(
        &self,
        conn: &mut PgConnection,
        game_id: u64,
        calls: &[Call],
        tokens: &[&[u8]],
        read: CallersRead,
    ) -> Result<Cas<Committed, CallersRead>, Error> {
        let CallersRead {
            mut game,
            mut sessions,
            roster_read_at,
            known: unconfirmed,
        } = read;
        let Some(game) = game.as_mut() else {
            // Nobody's session is in the game here: the game moved away
            // (this server's map is stale), or every call is refused.
            crate::store::moves::refuse_if_fenced(conn, game_id).await?;
            let mut answers = Vec::with_capacity(calls.len());
            for call in calls {
                let refusal = refusal_without_game(call, &sessions);
                answers.push(Err(match refusal {
                    Error::Unauthenticated(_) => not_yours(conn, call.token_hash(), game_id)
                        .await?
                        .unwrap_or(refusal),
                    other => other,
                }));
            }
            return Ok(Cas::Done(Committed {
                answers,
                known: None,
            }));
        };
        let before = game.state.phase();
        let applied = apply_calls(calls, &mut sessions, &mut game.state, game.now_tick);
        let mut snapshot = Snapshot {
            game_id,
            version: game.version as u64,
            state: game.state.clone(),
            roster: game.roster.clone(),
        };
        let mut known = None;
        if applied.commit.rows.is_empty() {
            if unconfirmed {
                // Refusals and repeats decided on what this server knew,
                // which nothing confirms without a write: the game may
                // have moved on through another server.
                return Ok(Cas::ReadFirst);
            }
            if let Some(before) = advance_to(&mut snapshot, game.now_tick)
                && !commit_clock(self, conn, &mut snapshot, before).await?
            {
                return Ok(Cas::Missed(None));
            }
        } else {
            let commit = &applied.commit;
            let ending = finishing(before, &snapshot.state);
            let rows = sqlx::query(self.outboxed(write_statement(commit, ending)))
                .bind(Packed(&snapshot.state))
                .bind(snapshot.state.phase().code())
                .bind(to_db_id(game_id)?)
                .bind(game.version)
                .bind(game.read_us)
                .bind(self.max_write_lag_us)
                .bind(applied.tick as i32)
                .bind(winner_code(ending))
                .bind(ending == Some(Ending::Draw))
                .bind(ending.is_some())
                .bind(
                    commit
                        .writers
                        .iter()
                        .map(|w| w.session_id)
                        .collect::<Vec<_>>(),
                )
                .bind(commit.writers.iter().map(|w| w.seat).collect::<Vec<_>>())
                .bind(commit.writers.iter().map(|w| w.leaving).collect::<Vec<_>>())
                .bind(commit.writers.iter().map(|w| w.freed).collect::<Vec<_>>())
                .bind(commit.rows.iter().map(|r| r.session_id).collect::<Vec<_>>())
                .bind(commit.rows.iter().map(|r| r.seq).collect::<Vec<_>>())
                .bind(commit.rows.iter().map(|r| r.seat).collect::<Vec<_>>())
                .bind(commit.rows.iter().map(|r| r.action).collect::<Vec<_>>())
                .bind(commit.rows.iter().map(|r| r.outcome).collect::<Vec<_>>())
                .bind(tokens)
                .bind(i64::from(TICK_MS))
                .bind(i64::from(game.now_tick))
                .fetch_all(&mut *conn)
                .await?;
            let clock_at = Instant::now();
            let done = match written(rows)? {
                Cas::Done(done) => done,
                Cas::Missed(again) => {
                    return Ok(Cas::Missed(again.and_then(|r| split_reads(*r, game_id))));
                }
                Cas::ReadFirst => return Ok(Cas::ReadFirst),
            };
            snapshot.version = done.version as u64;
            if ending.is_some() {
                self.game_finished();
            }
            for writer in &commit.writers {
                let seat = seat_index(writer.seat)?;
                snapshot.roster.connected[seat] = !writer.leaving;
                if writer.freed {
                    snapshot.roster.names[seat].clear();
                }
            }
            if snapshot.state.phase() != Phase::Finished {
                known = Some((
                    Known {
                        version: done.version,
                        state: snapshot.state.clone(),
                        roster: snapshot.roster.clone(),
                        sessions,
                        created_us: done.created_us,
                        clock_us: done.clock_us,
                        clock_at,
                        roster_read_at,
                    },
                    game.version,
                ));
            }
        }
        let answers = applied
            .answers
            .into_iter()
            .map(|answer| answer.map(|a| a.into_reply(&snapshot)))
            .collect();
        Ok(Cas::Done(Committed { answers, known }))
    }
}
