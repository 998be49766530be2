//! The game calls' statements against a real PostgreSQL.

use sqlx::postgres::PgRow;
use sqlx::{Postgres, Row};

use super::apply::*;
use super::calls::*;
use super::decode::*;
use super::reads::*;
use super::snapshot::*;
use super::write::*;
use super::*;
use crate::error::Error;
use crate::store::queries::*;
use borbaman_game::{Action, Arena, GameState, Outcome, Phase, SEATS, TICK_MS};

use crate::store::StoreOptions;
use borbaman_cluster::{LocalPostgres, PgOptions};
use sqlx::Executor;
use sqlx::postgres::PgArguments;

/// What [`one_write`] writes.
struct OneWrite<'a> {
    state: &'a GameState,
    phase: Phase,
    game: i64,
    session: i64,
    seat: i16,
    /// The log row: seq, action, outcome.
    row: (i64, i16, i16),
    leaving: bool,
    version: i64,
    read_us: i64,
    lag_us: i64,
    token: &'a [u8],
    /// Winner or -1, draw, finishing.
    ending: (i16, bool, bool),
    /// The game's tick the write takes for now.
    now_tick: i64,
}

/// `sql` ([`WRITE_CALLS`] or [`WRITE_ACTS`]) of one call of one session.
fn one_write<'a>(
    sql: &'static str,
    w: &OneWrite<'a>,
) -> sqlx::query::Query<'a, Postgres, PgArguments> {
    sqlx::query(sql)
        .bind(Packed(w.state))
        .bind(w.phase.code())
        .bind(w.game)
        .bind(w.version)
        .bind(w.read_us)
        .bind(w.lag_us)
        .bind(0i32)
        .bind(w.ending.0)
        .bind(w.ending.1)
        .bind(w.ending.2)
        .bind(vec![w.session])
        .bind(vec![w.seat])
        .bind(vec![w.leaving])
        .bind(vec![false])
        .bind(vec![w.session])
        .bind(vec![w.row.0])
        .bind(vec![w.seat])
        .bind(vec![w.row.1])
        .bind(vec![w.row.2])
        .bind(vec![w.token])
        .bind(i64::from(TICK_MS))
        .bind(w.now_tick)
}

/// Calls queued behind a game's gate while another call holds it go
/// to the database as one commit: the game's version advances by one,
/// the log holds each applied input once, numbered in arrival order,
/// and each call gets its own answer, the invalid one its own error.
#[tokio::test]
async fn calls_queued_behind_the_gate_commit_once_and_each_gets_its_own_answer() {
    use std::time::Duration;
    let (_pg, store) = crate::store::temp_store().await;
    let mut tokens = Vec::new();
    let mut game_id = 0;
    for i in 0..SEATS {
        let token = crate::token::hash(&crate::token::draw());
        let joined = store
            .join(
                &token,
                &Identity::session_only(&token),
                &format!("p{i}"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(usize::from(joined.seat), i);
        game_id = joined.game_id;
        tokens.push(token);
    }
    let act = |seat: usize, seqs: &[u64]| ActCall {
        token_hash: tokens[seat],
        game_id,
        seat: seat as u8,
        inputs: seqs
            .iter()
            .map(|&seq| Input {
                seq,
                action: Action::Idle,
            })
            .collect(),
        batch: true,
    };
    let version: i64 = sqlx::query_scalar("SELECT version FROM games WHERE id = $1")
        .bind(game_id as i64)
        .fetch_one(store.pool())
        .await
        .unwrap();

    // Hold the game's gate, as a call writing it would.
    let Turn::Lead(held) = store
        .gates
        .turn(game_id, 0, Call::Act(act(0, &[99])), MAX_BATCH)
        .await
    else {
        panic!("nobody else holds the gate");
    };
    let calls = vec![
        Call::Act(act(0, &[1, 2])),
        // Seat 1's token naming seat 2: refused, alone.
        Call::Act(ActCall {
            seat: 2,
            ..act(1, &[1])
        }),
        Call::Act(act(2, &[1])),
        Call::Leave(LeaveCall {
            token_hash: tokens[3],
            game_id,
            seat: 3,
            seq: 1,
        }),
        // Player 0's next call, its unacknowledged inputs again.
        Call::Act(act(0, &[1, 2, 3])),
    ];
    let mut tasks = Vec::new();
    for (i, call) in calls.into_iter().enumerate() {
        let caller = store.clone();
        tasks.push(tokio::spawn(async move {
            match call {
                Call::Act(call) => caller.act(&call).await.map(|a| Reply::Acted(Box::new(a))),
                Call::Leave(call) => caller.leave(&call).await.map(Reply::Left),
            }
        }));
        // One at a time, so they queue in this order.
        let what = format!("call {i} queued behind the gate");
        borbaman_cluster::wait::until(&what, Duration::from_secs(10), || async {
            (store.gates.queued(game_id) == i + 1).then_some(())
        })
        .await;
    }
    let _ = held.answer([Err(Error::Internal("held for the test".into()))]);

    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let acked = |answer: &Result<Reply, Error>| match answer {
        Ok(Reply::Acted(acted)) => (acted.ack, acted.applied, acted.snapshot.version),
        other => panic!("not an Act's reply: {other:?}"),
    };
    let next = (version + 1) as u64;
    assert_eq!(acked(&answers[0]), (2, 2, next));
    assert!(
        matches!(answers[1], Err(Error::PermissionDenied(_))),
        "{:?}",
        answers[1]
    );
    assert_eq!(acked(&answers[2]), (1, 1, next));
    assert!(matches!(answers[3], Ok(Reply::Left(Left { seq: 1 }))));
    assert_eq!(acked(&answers[4]), (3, 1, next));

    // One game write, and the log in arrival order.
    let log: Vec<(i16, i64, i16, i64, i32)> = sqlx::query_as(
        "SELECT seat, seq, action, version, ord FROM actions WHERE game_id = $1 ORDER BY ord",
    )
    .bind(game_id as i64)
    .fetch_all(store.pool())
    .await
    .unwrap();
    let (idle, leave) = (Action::Idle.code(), KIND_LEAVE);
    let v = version + 1;
    assert_eq!(
        log,
        vec![
            (0, 1, idle, v, 1),
            (0, 2, idle, v, 2),
            (2, 1, idle, v, 3),
            (3, 1, leave, v, 4),
            (0, 3, idle, v, 5)
        ]
    );
    let stored: i64 = sqlx::query_scalar("SELECT version FROM games WHERE id = $1")
        .bind(game_id as i64)
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(stored, v, "one write for the five calls");
    let audit = crate::store::audit::version_audit(store.pool(), &[game_id as i64])
        .await
        .unwrap();
    assert!(audit.is_clean(), "{audit:?}");
    store.close().await;
}

/// Every statement parses, type-checks and plans against the migrated
/// schema (PREPARE), without needing the game core.
#[tokio::test]
async fn every_statement_prepares_against_the_schema() {
    let (_pg, store) = crate::store::temp_store().await;
    // Running the migrations again is a no-op.
    store.migrate().await.unwrap();
    let mut conn = store.pool().acquire().await.unwrap();
    for sql in super::super::queries::ALL
        .iter()
        .chain(super::super::retention::ALL)
        .chain(super::super::names::ALL)
        .chain(super::super::keys::ALL)
        .chain(super::super::partitions::ALL)
    {
        if let Err(e) = conn.prepare(sqlx::SqlSafeStr::into_sql_str(*sql)).await {
            panic!("{e}\n{sql}");
        }
    }
    assert!(store.rankings(10).await.unwrap().is_empty());

    // A state bound with `Packed` reaches the database as its encoding.
    let mut state = GameState::new(42, 0);
    for _ in 0..SEATS {
        state.seat_player(0);
    }
    state.apply(0, Action::Bomb, 3);
    let echoed: Vec<u8> = sqlx::query_scalar("SELECT $1::bytea")
        .bind(Packed(&state))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(echoed, state.encode());
    assert_eq!(GameState::decode(&echoed).unwrap(), state);
}

/// A join asking for an arena takes a seat only in a waiting game on
/// it, or opens one; a join asking for none takes the oldest waiting
/// game, whatever its arena. The game's arena is in its row and state.
#[tokio::test]
async fn a_join_asking_for_an_arena_waits_in_a_game_on_it() {
    let (_pg, store) = crate::store::temp_store().await;
    let join = |name: &'static str, arena: Option<Arena>| {
        let store = store.clone();
        async move {
            let token = crate::token::hash(&crate::token::draw());
            store
                .join(&token, &Identity::session_only(&token), name, arena)
                .await
                .unwrap()
        }
    };
    let open = join("a", Some(Arena::Open)).await;
    let corridors = join("b", Some(Arena::Corridors)).await;
    assert_ne!(open.game_id, corridors.game_id);
    assert_eq!(corridors.snapshot.state.arena(), Arena::Corridors);
    assert_eq!(join("c", None).await.game_id, open.game_id);
    assert_eq!(
        join("d", Some(Arena::Corridors)).await.game_id,
        corridors.game_id
    );
    let classic = join("e", Some(Arena::Classic)).await;
    assert_ne!(classic.game_id, open.game_id);
    assert_ne!(classic.game_id, corridors.game_id);
    let arenas: Vec<(i64, i16)> = sqlx::query_as("SELECT id, arena FROM games ORDER BY id")
        .fetch_all(store.pool())
        .await
        .unwrap();
    let ids = [open.game_id, corridors.game_id, classic.game_id].map(|id| id as i64);
    assert_eq!(arenas, vec![(ids[0], 1), (ids[1], 2), (ids[2], 0)]);
}

/// Everything a game call may write, as text.
async fn dump(pool: &sqlx::PgPool, game: i64) -> String {
    sqlx::query_scalar(
        "SELECT concat_ws(' | ', \
           (SELECT row(g.*)::text FROM games g WHERE g.id = $1), \
           (SELECT string_agg(row(s.*)::text, ',' ORDER BY s.id) FROM sessions s), \
           (SELECT string_agg(row(st.*)::text, ',' ORDER BY st.seat) FROM seats st), \
           (SELECT count(*) FROM actions)::text, \
           (SELECT count(*) FROM rankings)::text)",
    )
    .bind(game)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A compare-and-set write that misses (the game moved on, the
/// session is not seated there, the read is too old) writes nothing at
/// all: no game, session, seat, log or rankings change. It returns the
/// caller's read again instead, as [`LOAD`] reads it.
#[tokio::test]
async fn a_write_that_misses_writes_nothing() {
    let (_pg, store) = crate::store::temp_store().await;
    let mut game_id = 0;
    let mut tokens = Vec::new();
    for i in 0..SEATS {
        let token = crate::token::hash(&crate::token::draw());
        // Identified players: only their games are ranked.
        let identity = Identity {
            hash: crate::token::identity_hash(&token),
            claims_names: true,
        };
        game_id = store
            .join(&token, &identity, &format!("p{i}"), None)
            .await
            .unwrap()
            .game_id;
        tokens.push(token);
    }
    // The first joiner took seat 0.
    let token = &tokens[0][..];
    let tick_ms = i64::from(TICK_MS);
    let game = game_id as i64;
    let pool = store.pool();
    let (session, version, state, clock): (i64, i64, Vec<u8>, i64) = sqlx::query_as(
        "SELECT s.id, g.version, g.state, \
                (extract(epoch FROM clock_timestamp()) * 1000000)::bigint \
         FROM sessions s JOIN games g ON g.id = s.game_id \
         WHERE s.game_id = $1 AND s.seat = 0",
    )
    .bind(game)
    .fetch_one(pool)
    .await
    .unwrap();
    let state = GameState::decode(&state).unwrap();
    let before = dump(pool, game).await;
    let lag_us = 10_000_000i64;
    let finishing_act = |version: i64, seat: i16, read_us: i64, lag_us: i64| OneWrite {
        state: &state,
        phase: Phase::Finished,
        game,
        session,
        seat,
        row: (1, Action::Bomb.code(), Outcome::NoEffect.code()),
        leaving: false,
        version,
        read_us,
        lag_us,
        token,
        ending: (0, false, true),
        now_tick: 0,
    };
    // A missed write's rows: no version, then the read again.
    let read_again = |rows: Vec<PgRow>| {
        assert_eq!(rows.len(), 1, "one caller, one read again");
        assert_eq!(rows[0].get::<Option<i64>, _>(0), None);
        let (hash, read) = caller_row(&rows[0], 1).unwrap();
        assert_eq!(&hash[..], token);
        (
            read.session.session_id,
            read.session.game_id,
            read.version,
            read.session.last_seq,
        )
    };
    // An Act that does not finish the game, as the hot path writes it.
    let plain_act = |version: i64, seat: i16, read_us: i64, lag_us: i64| OneWrite {
        phase: state.phase(),
        ending: (-1, false, false),
        ..finishing_act(version, seat, read_us, lag_us)
    };
    let missed = [
        (
            "an older version",
            WRITE_CALLS,
            finishing_act(version - 1, 0, clock, lag_us),
        ),
        (
            "another seat",
            WRITE_CALLS,
            finishing_act(version, 1, clock, lag_us),
        ),
        (
            "a read too old",
            WRITE_CALLS,
            finishing_act(version, 0, clock - 2 * lag_us, lag_us),
        ),
        (
            "a leave at an older version",
            WRITE_CALLS,
            OneWrite {
                row: (1, KIND_LEAVE, Outcome::APPLIED_CODE),
                leaving: true,
                ending: (1, false, true),
                ..finishing_act(version - 1, 0, clock, lag_us)
            },
        ),
        (
            "a tick the game's clock has not reached",
            WRITE_CALLS,
            OneWrite {
                now_tick: 1_000_000,
                ..finishing_act(version, 0, clock, lag_us)
            },
        ),
        (
            "acts only, a tick the game's clock has not reached",
            WRITE_ACTS,
            OneWrite {
                now_tick: 1_000_000,
                ..plain_act(version, 0, clock, lag_us)
            },
        ),
        (
            "acts only, an older version",
            WRITE_ACTS,
            plain_act(version - 1, 0, clock, lag_us),
        ),
        (
            "acts only, another seat",
            WRITE_ACTS,
            plain_act(version, 1, clock, lag_us),
        ),
        (
            "acts only, a read too old",
            WRITE_ACTS,
            plain_act(version, 0, clock - 2 * lag_us, lag_us),
        ),
        (
            "a leave given to the act statement",
            WRITE_ACTS,
            OneWrite {
                leaving: true,
                ..plain_act(version, 0, clock, lag_us)
            },
        ),
        (
            "a game's end given to the act statement",
            WRITE_ACTS,
            finishing_act(version, 0, clock, lag_us),
        ),
    ];
    for (why, sql, write) in missed {
        let rows = one_write(sql, &write).fetch_all(pool).await.unwrap();
        if sql == WRITE_ACTS {
            // The hot path's miss returns nothing: the caller reads again.
            assert!(rows.is_empty(), "{why}: {} rows", rows.len());
            assert!(matches!(written(rows), Ok(Written::Missed(None))), "{why}");
        } else {
            assert_eq!(read_again(rows), (session, game, version, 0), "{why}");
        }
        assert_eq!(dump(pool, game).await, before, "{why}");
    }
    let advance = sqlx::query(WRITE_ADVANCE)
        .bind(Packed(&state))
        .bind(Phase::Finished.code())
        .bind(game)
        .bind(0i16)
        .bind(false)
        .bind(true)
        .bind(version - 1)
        .fetch_optional(pool)
        .await
        .unwrap();
    assert!(advance.is_none());
    assert_eq!(dump(pool, game).await, before, "advance");

    // Acts only, current: the game (a new version, the seat active) and
    // its log row; no session, seat or ranking changes.
    let sessions_and_seats = |dump: &str| {
        let mut parts = dump.split(" | ");
        let _game = parts.next();
        parts.take(2).collect::<Vec<_>>().join(" | ")
    };
    let seat_0_active = || async {
        sqlx::query_scalar::<_, f64>(
            "SELECT extract(epoch FROM active_at[1])::float8 FROM games WHERE id = $1",
        )
        .bind(game)
        .fetch_one(pool)
        .await
        .unwrap()
    };
    let active_before = seat_0_active().await;
    let row = one_write(WRITE_ACTS, &plain_act(version, 0, clock, lag_us))
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(row.get::<i64, _>(0), version + 1);
    let after_act = dump(pool, game).await;
    assert_eq!(
        sessions_and_seats(&after_act),
        sessions_and_seats(&before),
        "an act leaves sessions and seats alone"
    );
    let act_row: (i64, i64, i32) = sqlx::query_as("SELECT seq, version, ord FROM actions")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(act_row, (1, version + 1, 1));
    assert!(
        seat_0_active().await > active_before,
        "the act marks its seat active"
    );

    // A finishing write, current: the game, its log and the rankings.
    let row = one_write(
        WRITE_CALLS,
        &OneWrite {
            row: (2, Action::Bomb.code(), Outcome::NoEffect.code()),
            ..finishing_act(version + 1, 0, clock, lag_us)
        },
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(row.get::<i64, _>(0), version + 2);
    let counts: (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM actions), (SELECT count(*) FROM rankings)")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(counts, (2, SEATS as i64));

    // The function a missed write reads again with is LOAD_CALLERS,
    // column for column (but for the clock, read a moment later).
    let load = sqlx::query(LOAD_CALLERS)
        .bind(vec![token])
        .bind(tick_ms)
        .bind(game)
        .fetch_one(pool)
        .await
        .unwrap();
    let function = sqlx::query("SELECT * FROM game_call_read($1, ($2 % 64)::smallint, $3)")
        .bind(token)
        .bind(game)
        .bind(tick_ms)
        .fetch_one(pool)
        .await
        .unwrap();
    let (load, function) = (
        caller_row(&load, 0).unwrap().1,
        read_row(&function, 0).unwrap(),
    );
    assert_eq!(function.session.last_seq, 2);
    let columns = |r: &Read| (r.session, r.version, (r.state.encode(), r.roster.clone()));
    assert_eq!(columns(&load), columns(&function));
    assert!(function.read_us >= load.read_us && function.now_tick >= load.now_tick);
    store.close().await;
}

/// A server writes on what it knows of a game after its own commit
/// (no read); when another server wrote the game since, that write
/// loses its compare-and-set, reads again in the same round trip and
/// applies on the newer version: each input once, in sequence order,
/// a copy of an input the other server applied answered as a repeat.
#[tokio::test]
async fn a_write_on_a_stale_known_version_loses_and_applies_nothing_twice() {
    let (pg, a) = crate::store::temp_store().await;
    let b = Store::connect(&pg.url(), &StoreOptions::default()).unwrap();
    let token = crate::token::hash(&crate::token::draw());
    let joined = a
        .join(&token, &Identity::session_only(&token), "p0", None)
        .await
        .unwrap();
    let act = |seq: u64| ActCall {
        token_hash: token,
        game_id: joined.game_id,
        seat: joined.seat,
        inputs: vec![Input {
            seq,
            action: Action::Idle,
        }],
        batch: true,
    };
    let applied = |acted: &Acted| (acted.seq, acted.applied, acted.replayed);
    assert_eq!(applied(&a.act(&act(1)).await.unwrap()), (1, 1, false));
    assert!(
        a.known.contains_key(&joined.game_id),
        "server a knows the game after its commit"
    );
    // Server b writes seq 2: what a knows is now one version behind.
    assert_eq!(applied(&b.act(&act(2)).await.unwrap()), (2, 1, false));
    let lost = a.cas_retries.load(std::sync::atomic::Ordering::Relaxed);
    // A copy of seq 2 through a: by what a knows, seq 2 is new.
    assert_eq!(
        applied(&a.act(&act(2)).await.unwrap()),
        (2, 0, true),
        "a repeat, not applied again"
    );
    assert_eq!(
        a.cas_retries.load(std::sync::atomic::Ordering::Relaxed),
        lost + 1,
        "a wrote on the version it knew, lost, and read again"
    );
    assert_eq!(applied(&a.act(&act(3)).await.unwrap()), (3, 1, false));
    // Server b writes seq 4 and 5; a knows 3 as the last applied.
    assert_eq!(applied(&b.act(&act(4)).await.unwrap()), (4, 1, false));
    assert_eq!(applied(&b.act(&act(5)).await.unwrap()), (5, 1, false));
    // By what a knows, a call starting at 6 skips 4 and 5, which a
    // refusal would say; a reads first, and applies it.
    assert_eq!(
        applied(&a.act(&act(6)).await.expect("not refused on what a knew")),
        (6, 1, false)
    );
    let log: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT a.seq, a.version FROM actions a JOIN sessions s ON s.id = a.session_id \
         WHERE s.token_hash = $1 ORDER BY a.seq",
    )
    .bind(&token[..])
    .fetch_all(a.pool())
    .await
    .unwrap();
    let seqs: Vec<i64> = log.iter().map(|&(seq, _)| seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6], "each input once");
    assert!(
        log.windows(2).all(|w| w[0].1 < w[1].1),
        "in sequence order, one version each: {log:?}"
    );
    a.close().await;
    b.close().await;
}

/// A game row set back to an older version (the way a second database
/// taking the game's writes, or a stale copy replayed over it, would look)
/// must not let a second commit claim a version already claimed: the write
/// fails, and the log keeps one claim per version.
#[tokio::test]
async fn a_second_commit_at_a_claimed_version_fails_instead_of_landing() {
    let (pg, a) = crate::store::temp_store().await;
    let tokens = [
        crate::token::hash(&crate::token::draw()),
        crate::token::hash(&crate::token::draw()),
    ];
    let mut joined = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let name = format!("p{i}");
        joined.push(
            a.join(token, &Identity::session_only(token), &name, None)
                .await
                .unwrap(),
        );
    }
    assert_eq!(joined[0].game_id, joined[1].game_id, "one game");
    let act = |who: usize| ActCall {
        token_hash: tokens[who],
        game_id: joined[who].game_id,
        seat: joined[who].seat,
        inputs: vec![Input {
            seq: 1,
            action: Action::Idle,
        }],
        batch: true,
    };
    assert_eq!(a.act(&act(0)).await.unwrap().applied, 1);
    let claimed: i64 = sqlx::query_scalar("SELECT version FROM games WHERE id = $1")
        .bind(joined[0].game_id as i64)
        .fetch_one(a.pool())
        .await
        .unwrap();
    sqlx::query("UPDATE games SET version = version - 1 WHERE id = $1")
        .bind(joined[0].game_id as i64)
        .execute(a.pool())
        .await
        .unwrap();
    // A server that never saw the game reads the set-back row and writes.
    let b = Store::connect(&pg.url(), &StoreOptions::default()).unwrap();
    let second = b.act(&act(1)).await;
    assert!(
        matches!(second, Err(Error::Corrupt(_))),
        "a second commit at version {claimed} must fail as corrupt, not be retried or land: {:?}",
        second.map(|acted| acted.snapshot.version)
    );
    let claims: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT session_id) FROM actions WHERE game_id = $1 AND version = $2",
    )
    .bind(joined[0].game_id as i64)
    .bind(claimed)
    .fetch_one(a.pool())
    .await
    .unwrap();
    assert_eq!(claims, 1, "version {claimed} claimed by one commit");
    a.close().await;
    b.close().await;
}

/// A write that lost to a commit made while it ran (it waited for the
/// winner's row lock, its own snapshot older than that commit) reads
/// again after that commit: the winner's version and log row.
#[tokio::test]
async fn a_missed_write_reads_again_after_the_commit_it_lost_to() {
    use std::time::Duration;
    let pg = LocalPostgres::start_temp(PgOptions {
        fsync: false,
        port: None,
    })
    .unwrap();
    let store = Store::connect(
        &pg.url(),
        &StoreOptions {
            // The winner's transaction idles while the loser waits.
            idle_txn_timeout: Duration::from_secs(60),
            db_timeout: Duration::from_secs(20),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    store.migrate().await.unwrap();
    let token = crate::token::hash(&crate::token::draw());
    let joined = store
        .join(&token, &Identity::session_only(&token), "p0", None)
        .await
        .unwrap();
    let (game, version) = (joined.game_id as i64, joined.snapshot.version as i64);
    let pool = store.pool().clone();
    let (session, clock): (i64, i64) = sqlx::query_as(
        "SELECT id, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint \
         FROM sessions WHERE token_hash = $1",
    )
    .bind(&token[..])
    .fetch_one(&pool)
    .await
    .unwrap();

    // The winner: the game's next version and the session's seq 1,
    // not committed yet.
    let mut winner = pool.begin().await.unwrap();
    sqlx::query("UPDATE games SET version = version + 1 WHERE id = $1")
        .bind(game)
        .execute(&mut *winner)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO actions (session_id, seq, game_id, seat, tick, action, outcome, version) \
         VALUES ($1, 1, $2, 0, 0, 6, 1, $3)",
    )
    .bind(session)
    .bind(game)
    .bind(version + 1)
    .execute(&mut *winner)
    .await
    .unwrap();

    let state = joined.snapshot.state.clone();
    let loser = tokio::spawn(async move {
        one_write(
            WRITE_CALLS,
            &OneWrite {
                state: &state,
                phase: state.phase(),
                game,
                session,
                seat: 0,
                row: (1, Action::Idle.code(), Outcome::NoEffect.code()),
                leaving: false,
                version,
                read_us: clock,
                lag_us: 60_000_000,
                token: &token[..],
                ending: (-1, false, false),
                now_tick: 0,
            },
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    });
    // The loser starts, and waits for the winner's lock on the game.
    let waiting = async {
        loop {
            let waits: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
            )
            .fetch_one(store.pool())
            .await
            .unwrap();
            if waits > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the write waits for the winner's row lock");
    winner.commit().await.unwrap();

    let rows = loser.await.unwrap();
    assert_eq!(rows[0].get::<Option<i64>, _>(0), None, "nothing written");
    let again = caller_row(&rows[0], 1).unwrap().1;
    assert_eq!((again.version, again.session.last_seq), (version + 1, 1));
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM actions")
            .fetch_one(store.pool())
            .await
            .unwrap(),
        1
    );
    store.close().await;
}

/// A join dropped at any point (its client went away) leaves no
/// transaction open on a pooled connection: a later autocommitted
/// write on the pool is committed, not swallowed by a transaction the
/// join began. Sweeps the point of cancellation over every await of
/// the join, the database answering between polls.
#[tokio::test]
async fn a_join_dropped_anywhere_leaves_no_transaction_open() {
    use std::future::Future;
    use std::task::Poll;
    use std::time::Duration;

    let pg = LocalPostgres::start_temp(PgOptions {
        fsync: false,
        port: None,
    })
    .unwrap();
    let store = Store::connect(
        &pg.url(),
        &StoreOptions {
            // One connection, reused by every call; a transaction left
            // open on it would stay open for the whole test.
            max_connections: 1,
            min_connections: 0,
            idle_txn_timeout: Duration::from_secs(60),
            db_timeout: Duration::from_secs(10),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    store.migrate().await.unwrap();
    let check = sqlx::PgPool::connect(&pg.url()).await.unwrap();
    let mut completed = 0;
    for polls in 1..=40 {
        let token = crate::token::hash(&crate::token::draw());
        let identity = Identity::session_only(&token);
        let mut join = Box::pin(store.join(&token, &identity, "dropped", None));
        for _ in 0..polls {
            let ready =
                std::future::poll_fn(|cx| Poll::Ready(join.as_mut().poll(cx).is_ready())).await;
            if ready {
                completed += 1;
                break;
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        drop(join);
        let name = format!("probe-{polls}");
        sqlx::query("INSERT INTO rankings (name, identity_hash) VALUES ($1, $2)")
            .bind(&name)
            .bind(&crate::token::draw()[..])
            .execute(store.pool())
            .await
            .unwrap();
        let committed: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM rankings WHERE name = $1)")
                .bind(&name)
                .fetch_one(&check)
                .await
                .unwrap();
        assert!(
            committed,
            "dropped after {polls} polls: a write was swallowed"
        );
    }
    assert!(completed > 0, "the sweep never reached the end of a join");
    store.close().await;
}
