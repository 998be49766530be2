//! SQL of the game calls; [`super::play`] holds the logic around it.
//!
//! Parameters are cast explicitly so every statement prepares with fixed
//! types. A game's columns are always selected in the same order (see
//! `game_cols!`) so one parser reads them.
//!
//! Acts, leaves and the commits of a clock-ended game are compare-and-set
//! writes: one autocommitted statement whose game update matches only the
//! version the caller read (`cas_game!`), and whose every other part reads
//! that update's row (`FROM g` or `EXISTS (SELECT 1 FROM g)`), so a write
//! that lost the race changes nothing at all and returns no new version
//! (a commit of Acts and Leaves returns the callers' read done again
//! instead, see `read_again!`). Acts and Leaves share one statement,
//! [`WRITE_CALLS`], whether it commits one call or several; a commit of
//! Acts alone that does not finish the game (nearly every commit) takes
//! [`WRITE_ACTS`], the same write without a leave's parts and the rankings.

use borbaman_game::Phase;
use borbaman_game::codes::CONNECTED_WINDOW_MS;

// SQL text is built from literals (`concat!`), and the partial index
// `games_waiting` is declared on `phase = 1`, so the codes appear as
// literals here; these assertions tie each literal to the core's code.

/// `Phase::Waiting`'s code as an SQL literal.
macro_rules! waiting {
    () => {
        "1"
    };
}
/// `Phase::Finished`'s code as an SQL literal.
macro_rules! finished {
    () => {
        "3"
    };
}
/// [`CONNECTED_WINDOW_MS`] as an SQL literal.
macro_rules! connected_window_ms {
    () => {
        "3000"
    };
}

const _: () = {
    assert!(Phase::WAITING_CODE == 1);
    assert!(Phase::FINISHED_CODE == 3);
    assert!(CONNECTED_WINDOW_MS == 3000);
};

/// The game's clock now, in ticks since the game row was created
/// (`$tick_ms`: the tick length).
macro_rules! now_tick {
    ($tick_ms:literal) => {
        concat!(
            "floor(extract(epoch FROM clock_timestamp() - g.created_at) * 1000 / ",
            $tick_ms,
            "::bigint)::bigint"
        )
    };
}

/// "Acted within the connected window" for seat index `$i` (1-based).
macro_rules! active {
    ($i:literal) => {
        concat!(
            "coalesce(g.active_at[",
            $i,
            "] > now() - interval '",
            connected_window_ms!(),
            " milliseconds', false)"
        )
    };
}

/// `id, state, version, now_tick, names, connected` of game `g`.
macro_rules! game_cols {
    ($tick_ms:literal) => {
        concat!(
            "g.id, g.state, g.version, ",
            now_tick!($tick_ms),
            ", g.names, ARRAY[",
            active!(1),
            ", ",
            active!(2),
            ", ",
            active!(3),
            ", ",
            active!(4),
            "]"
        )
    };
}

/// The partition of the game row in scope is writable on this cluster (see
/// the `partition_fence` table): a partition moving away, or moved, takes
/// no write here.
macro_rules! writable {
    () => {
        "EXISTS (SELECT 1 FROM partition_fence pf WHERE pf.partition = games.partition \
         AND pf.writable)"
    };
}

/// Partition `$part` is writable on this cluster, for a read that answers
/// a call: a partition moving away, or moved, is read on the cluster that
/// takes its writes, never from a copy left behind (the call waits for the
/// map, see [`moves`](super::moves)).
macro_rules! readable {
    ($($part:literal),+) => {
        concat!(
            "EXISTS (SELECT 1 FROM partition_fence pf WHERE pf.partition = ",
            $($part,)+
            " AND pf.writable)"
        )
    };
}

/// Game update shared by every write: new state, version + 1, phase, plus
/// `$extra` assignments, where `$cond` holds and the game's partition is
/// writable here (`writable!`).
macro_rules! update_game {
    ($state:literal, $phase:literal, $game:literal, $extra:literal, $($cond:tt)+) => {
        concat!(
            "g AS (UPDATE games SET state = ",
            $state,
            "::bytea, version = version + 1, phase = ",
            $phase,
            "::smallint, updated_at = now(), finished_at = CASE WHEN ",
            $phase,
            "::smallint = ",
            finished!(),
            " THEN coalesce(finished_at, now()) END",
            $extra,
            " WHERE id = ",
            $game,
            "::bigint",
            $($cond)+,
            " AND ",
            writable!(),
            " RETURNING id, version, created_at)"
        )
    };
}

/// The database clock, in microseconds since the epoch.
macro_rules! clock_us {
    () => {
        "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
    };
}

/// The compare-and-set game update of a commit of Acts and Leaves: it
/// matches only while the game is still at the version the caller read
/// (`$version`), every session the commit writes for is still seated in it
/// (`sl` holds as many rows as `$sessions` has), the write is not older
/// than `$lag_us` by the database clock since the read at `$read_us`, and
/// the game's clock has reached the tick the caller took for now
/// (`$now_tick`, with `$tick_ms` the tick length). The lag bound keeps a
/// server that stalled between its read and its write (a stopped process,
/// a CPU stall) from committing, much later, actions computed at a tick
/// long gone, in a game nobody else touched meanwhile: the calls read
/// again and apply at the current tick. The tick guard keeps a server that
/// wrote on what it knew of the game after its last commit, without a
/// read (see `play::Known`), from applying at a tick the database's clock
/// has not reached (its estimate of that clock was wrong, or the clock
/// stepped back): the calls read again.
macro_rules! cas_game {
    ($state:literal, $phase:literal, $game:literal, $extra:literal,
     $version:literal, $read_us:literal, $lag_us:literal, $sessions:literal,
     $now_tick:literal, $tick_ms:literal) => {
        update_game!(
            $state,
            $phase,
            $game,
            $extra,
            concat!(
                " AND version = ",
                $version,
                "::bigint AND (SELECT count(*) FROM sl) = cardinality(",
                $sessions,
                "::bigint[]) AND ",
                clock_us!(),
                " <= ",
                $read_us,
                "::bigint + ",
                $lag_us,
                "::bigint AND floor(extract(epoch FROM clock_timestamp() - created_at) * 1000 / ",
                $tick_ms,
                "::bigint)::bigint >= ",
                $now_tick,
                "::bigint"
            )
        )
    };
}

/// The sessions a commit writes for (`$11`, each at its seat in `$12`:
/// matched by array position, the sessions being distinct) still seated
/// there in `$game` and in it (found by `= ANY`, so through the primary
/// key's index whatever a generic plan guesses of the arrays' length),
/// where `$cond` holds: locked for the statement only,
/// in id order (two commits sharing sessions lock them in one order), so a
/// join moving a session elsewhere (it locks the session across its
/// transaction) either finished before, and this finds fewer rows, or
/// waits for this write. Locked as for an update, since a leave updates
/// its session: an Act and a Leave of one session never both hold it
/// shared while each waits for the other's game update. No lock outlives
/// the statement.
macro_rules! sessions_guard {
    ($game:literal, $cond:literal) => {
        concat!(
            "sl AS MATERIALIZED (SELECT s.id FROM sessions s WHERE s.id = ANY($11::bigint[]) \
               AND s.seat = ($12::smallint[])[array_position($11::bigint[], s.id)] \
               AND s.game_id = ",
            $game,
            "::bigint AND s.in_game AND ",
            $cond,
            " ORDER BY s.id FOR NO KEY UPDATE)"
        )
    };
}

/// The action-log rows of a commit (`a`): one per input applied, at the
/// game's new version (`g`, so none if the compare-and-set missed), at tick
/// `$7`, numbered in the order they were applied (`ord`). `$15`–`$19`:
/// session, seq, seat, action, outcome.
macro_rules! log_actions {
    () => {
        "a AS (INSERT INTO actions \
               (session_id, seq, game_id, seat, tick, action, outcome, version, ord) \
             SELECT i.session, i.seq, g.id, i.seat, $7::integer, i.action, i.outcome, \
                    g.version, i.ord::integer \
             FROM g, unnest($15::bigint[], $16::bigint[], $17::smallint[], $18::smallint[], \
                            $19::smallint[]) WITH ORDINALITY \
                     AS i(session, seq, seat, action, outcome, ord))"
    };
}

/// A finished game's result per identity, from its seats: `identity_hash,
/// name, games, wins, draws` rows, counted only for the commit that
/// finishes the game (`$when`, and only if the game update `g` matched: a
/// compare-and-set that lost counts nothing, so a game is counted once),
/// under the name each played this game with. A game with a seat of a
/// player without a long-lived identity counts for no one.
macro_rules! game_results {
    ($game:literal, $winner:literal, $draw:literal, $when:literal) => {
        concat!(
            "identity_hash, min(name), count(*), count(*) FILTER (WHERE seat = ",
            $winner,
            "::smallint), CASE WHEN ",
            $draw,
            "::boolean THEN count(*) ELSE 0 END FROM seats WHERE ",
            $when,
            " AND EXISTS (SELECT 1 FROM g) AND game_id = ",
            $game,
            "::bigint AND NOT EXISTS (SELECT 1 FROM seats anon WHERE anon.game_id = ",
            $game,
            "::bigint AND NOT anon.identified) GROUP BY identity_hash"
        )
    };
}

/// Rankings upsert of [`game_results!`], ordered by identity so two games
/// finishing at once lock rankings rows in the same order.
macro_rules! rankings {
    ($game:literal, $winner:literal, $draw:literal, $when:literal) => {
        concat!(
            "rk AS (INSERT INTO rankings AS rk (identity_hash, name, games, wins, draws) SELECT ",
            game_results!($game, $winner, $draw, $when),
            " ORDER BY identity_hash \
             ON CONFLICT (identity_hash) DO UPDATE SET name = excluded.name, \
               games = rk.games + excluded.games, \
               wins = rk.wins + excluded.wins, draws = rk.draws + excluded.draws)"
        )
    };
}

/// [`game_results!`] for a game on a cluster other than home: the same
/// rows, into the cluster's `results` outbox, which a fold moves into
/// home's rankings exactly once (see `store::partitions`).
macro_rules! results {
    ($game:literal, $winner:literal, $draw:literal, $when:literal) => {
        concat!(
            "rk AS (INSERT INTO results (game_id, identity_hash, name, games, wins, draws) SELECT ",
            $game,
            "::bigint, ",
            game_results!($game, $winner, $draw, $when),
            " ON CONFLICT DO NOTHING)"
        )
    };
}

/// The callers' sessions (`$1`, token hashes), each with its newest
/// action-log row (its last applied sequence number and reply), its game
/// and the database clock in microseconds, as one snapshot; locks nothing.
/// One row per known token: the token hash, then the columns of the
/// function `game_call_read` (migration `cas_reads`), which a write that
/// lost its race reads again with (`read_again!`). `$2` tick length, `$3`
/// the game (a token's session in its partition: a token has one per
/// partition).
pub const LOAD_CALLERS: &str = concat!(
    "SELECT s.token_hash, s.id, s.seat, s.in_game, coalesce(l.seq, 0), \
            coalesce(l.action, 0::smallint), coalesce(l.outcome, 0::smallint), \
            coalesce(l.tick, 0), ",
    game_cols!("$2"),
    ", ",
    clock_us!(),
    " FROM sessions s JOIN games g ON g.id = s.game_id \
     LEFT JOIN LATERAL (SELECT a.seq, a.action, a.outcome, a.tick FROM actions a \
                        WHERE a.session_id = s.id ORDER BY a.seq DESC LIMIT 1) l ON true \
     WHERE s.token_hash = ANY($1::bytea[]) AND s.partition = ($3::bigint % 64)::smallint \
       AND ",
    readable!("($3::bigint % 64)::smallint")
);

/// The game of token hash `$1`'s session in the newest game, for a call
/// that named a game in another partition (no row: the token has no
/// session here).
pub const SESSION_ELSEWHERE: &str = "SELECT s.game_id FROM sessions s WHERE s.token_hash = $1::bytea \
     ORDER BY s.in_game DESC, s.game_id DESC LIMIT 1";

/// The caller's game, without locking anything, then the caller's seat
/// (-1 once freed). `$1` token hash, `$2` tick length, `$3` the game (its
/// partition's session of the token).
pub const READ_STATE: &str = concat!(
    "SELECT ",
    game_cols!("$2"),
    ", s.seat FROM sessions s JOIN games g ON g.id = s.game_id WHERE s.token_hash = $1::bytea \
     AND s.partition = ($3::bigint % 64)::smallint AND ",
    readable!("($3::bigint % 64)::smallint")
);

/// One game, read inside a join's transaction (whose writes check the
/// partition's fence). `$1` game, `$2` tick length.
pub const READ_GAME: &str = concat!(
    "SELECT ",
    game_cols!("$2"),
    " FROM games g WHERE g.id = $1::bigint"
);

/// One game for a spectator, `$1` game, `$2` tick length: only where its
/// partition is writable, so a server whose map is stale never shows the
/// copy a move left behind (its state older than the target's).
pub const WATCH_GAME: &str = concat!(
    "SELECT ",
    game_cols!("$2"),
    " FROM games g WHERE g.id = $1::bigint AND ",
    readable!("($1::bigint % 64)::smallint")
);

/// Serialises joins that seat a player, so simultaneous joiners fill one
/// game instead of each opening a new one.
pub const LOCK_LOBBY: &str = "SELECT id FROM lobby WHERE id = 1 FOR UPDATE";

/// "Not heard from within `$ttl_ms`" for seat index `$i` (1-based): no
/// activity recorded, or the last is at least that old.
macro_rules! silent {
    ($i:literal, $ttl_ms:literal) => {
        concat!(
            "coalesce(g.active_at[",
            $i,
            "] <= now() - ",
            $ttl_ms,
            "::bigint * interval '1 millisecond', true)"
        )
    };
}

/// The oldest waiting game (of arena `$3`, or of any when it is NULL) in
/// which identity `$4` has no seat, locked, then per seat whether its
/// player has been silent for the lobby seat TTL. `$1` tick length, `$2`
/// TTL in ms.
pub const LOAD_WAITING_LOCKED: &str = concat!(
    "SELECT ",
    game_cols!("$1"),
    ", ARRAY[",
    silent!(1, "$2"),
    ", ",
    silent!(2, "$2"),
    ", ",
    silent!(3, "$2"),
    ", ",
    silent!(4, "$2"),
    "] FROM games g WHERE g.phase = ",
    waiting!(),
    " AND ($3::smallint IS NULL OR g.arena = $3::smallint) \
     AND EXISTS (SELECT 1 FROM partition_fence pf WHERE pf.partition = g.partition \
                 AND pf.writable) \
     AND NOT EXISTS (SELECT 1 FROM seats st \
                     WHERE st.game_id = g.id AND st.identity_hash = $4::bytea) \
     ORDER BY g.id LIMIT 1 FOR UPDATE"
);

/// Frees the seats `$2` of waiting game `$1` (locked by the caller) whose
/// players went silent: their sessions leave the game and lose their seat
/// (seat -1 marks a freed session), their `seats` rows go, and the game
/// row forgets their names and activity. A session locked by a call in
/// progress (an Act or Leave locks its session for its writing statement)
/// is being heard from right now: it is skipped, not waited for (waiting
/// could deadlock with that statement, which holds the session and waits
/// for the game). Returns the seats freed.
pub const FREE_SILENT_SEATS: &str = "WITH f AS (SELECT id, seat FROM sessions \
                WHERE game_id = $1::bigint AND seat = ANY($2::smallint[]) AND in_game \
                FOR UPDATE SKIP LOCKED), \
     s AS (UPDATE sessions SET in_game = false, seat = -1, freed_at = now() \
             WHERE id IN (SELECT id FROM f)), \
     d AS (DELETE FROM seats WHERE game_id = $1::bigint AND seat IN (SELECT seat FROM f)), \
     g AS (UPDATE games SET \
             names = ARRAY(SELECT CASE WHEN i - 1 IN (SELECT seat FROM f) THEN '' \
                                  ELSE names[i] END FROM generate_series(1, 4) i ORDER BY i), \
             active_at = ARRAY(SELECT CASE WHEN i - 1 IN (SELECT seat FROM f) THEN NULL \
                                      ELSE active_at[i] END FROM generate_series(1, 4) i ORDER BY i) \
           WHERE id = $1::bigint AND EXISTS (SELECT 1 FROM f)) \
     SELECT seat FROM f ORDER BY seat";

/// Of a token's sessions (one per partition), the one in a game that has
/// not finished first.
macro_rules! running_first {
    () => {
        " ORDER BY (s.in_game AND g.phase <> 3) DESC, s.id DESC LIMIT 1"
    };
}

/// A joining token's session: seat, in its game, last sequence number,
/// then its game; locks nothing (a rejoin only reads). `$1` token hash,
/// `$2` tick length.
pub const READ_JOINER: &str = concat!(
    "SELECT s.seat, s.in_game, \
            coalesce((SELECT max(a.seq) FROM actions a WHERE a.session_id = s.id), 0), ",
    game_cols!("$2"),
    " FROM sessions s JOIN games g ON g.id = s.game_id WHERE s.token_hash = $1::bytea",
    running_first!()
);

/// A joining token's session (locked), its game's phase and its last
/// sequence number. `$1` token hash. Read under the lobby's lock, so no
/// other join of the token on this cluster seats it meanwhile.
pub const LOAD_SESSION_LOCKED: &str = concat!(
    "SELECT s.id, s.game_id, s.seat, s.in_game, g.phase, \
            coalesce((SELECT max(a.seq) FROM actions a WHERE a.session_id = s.id), 0) \
     FROM sessions s JOIN games g ON g.id = s.game_id \
     WHERE s.token_hash = $1::bytea",
    running_first!(),
    " FOR UPDATE OF s"
);

/// A compare-and-set write's row when it matched: its new version in the
/// first column, the game's creation and the database clock (both µs
/// since the epoch) in the third and last, the rest NULL (the columns of
/// a read again, see `read_again!`).
macro_rules! written_row {
    () => {
        concat!(
            " SELECT version, NULL::bytea, \
                     (extract(epoch FROM created_at) * 1000000)::bigint, NULL::smallint, \
                     NULL::boolean, NULL::bigint, NULL::smallint, NULL::smallint, NULL::integer, \
                     NULL::bigint, NULL::bytea, NULL::bigint, NULL::bigint, NULL::text[], \
                     NULL::boolean[], ",
            clock_us!(),
            " FROM g"
        )
    };
}

/// The end of a compare-and-set write: its row if it matched
/// (`written_row!`); or, if it wrote nothing, NULL then the callers'
/// read done again ([`LOAD_CALLERS`]'s columns, one row per token, from
/// `game_call_read`, which sees the commit the write lost to). `$tokens`
/// token hashes (each one's session in game `$game`'s partition), `$tick`
/// tick length.
macro_rules! read_again {
    ($tokens:literal, $game:literal, $tick:literal) => {
        concat!(
            written_row!(),
            " UNION ALL \
              SELECT NULL::bigint, t.h, r.* FROM unnest(",
            $tokens,
            "::bytea[]) t(h), game_call_read(t.h, (",
            $game,
            "::bigint % 64)::smallint, ",
            $tick,
            "::bigint) r WHERE NOT EXISTS (SELECT 1 FROM g) AND ",
            readable!("(", $game, "::bigint % 64)::smallint")
        )
    };
}

/// Writes one commit of the Acts and Leaves queued behind a game's gate
/// (one call, or several, of one session or several), compare-and-set (see
/// `cas_game!`): the game row, one action-log row per input applied (`ord`
/// numbers them in the order they were applied), and for each session that
/// left its session, its seat and (if the game was waiting) its name; the
/// rankings if this commit finishes the game. Or nothing at all. The
/// session's last sequence number is its newest log row, so the log rows
/// are an Act's session update; the log's primary key (session, seq)
/// refuses a sequence number twice even if everything else let it through
/// (the whole statement fails). Returns the new version, or, if the game or
/// a session changed since the read, the read again (see `read_again!`).
///
/// `$1` state, `$2` phase, `$3` game, `$4` version read, `$5` clock read
/// (µs), `$6` longest read-to-write lag (µs), `$7` the tick the inputs
/// were applied at, `$8` winner seat or -1, `$9` draw, `$10` this commit
/// finishes the game. Per session written for (arrays of equal length):
/// `$11` session, `$12` seat, `$13` it left, `$14` it left a waiting game
/// (its seat is freed). Per log row, in the order applied: `$15` session,
/// `$16` seq, `$17` seat, `$18` action, `$19` outcome. `$20` the callers'
/// token hashes and `$21` the tick length, for the read again. `$22` the
/// game's tick the caller took for now (the tick guard of `cas_game!`).
macro_rules! write_calls {
    ($count:ident) => {
        concat!(
            "WITH w AS (SELECT * FROM unnest($11::bigint[], $12::smallint[], $13::boolean[], \
                                     $14::boolean[]) AS w(session, seat, leaving, freed)), ",
            sessions_guard!("$3", "true"),
            ", ",
            cas_game!(
                "$1",
                "$2",
                "$3",
                ", active_at = ARRAY(SELECT CASE \
             WHEN EXISTS (SELECT 1 FROM w WHERE w.seat = i - 1 AND w.leaving) THEN NULL \
             WHEN EXISTS (SELECT 1 FROM w WHERE w.seat = i - 1) THEN now() \
             ELSE active_at[i] END FROM generate_series(1, 4) i ORDER BY i), \
           names = ARRAY(SELECT CASE \
             WHEN EXISTS (SELECT 1 FROM w WHERE w.seat = i - 1 AND w.freed) THEN '' \
             ELSE names[i] END FROM generate_series(1, 4) i ORDER BY i)",
                "$4",
                "$5",
                "$6",
                "$11",
                "$22",
                "$21"
            ),
            ", ",
            log_actions!(),
            ", s AS (UPDATE sessions SET in_game = false WHERE id = ANY($11::bigint[]) \
             AND id IN (SELECT session FROM w WHERE leaving) AND EXISTS (SELECT 1 FROM g)), \
       d AS (DELETE FROM seats WHERE game_id = $3::bigint \
             AND seat IN (SELECT seat FROM w WHERE freed) AND EXISTS (SELECT 1 FROM g)), \
       l AS (UPDATE seats SET left_at = now() WHERE game_id = $3::bigint \
             AND seat IN (SELECT seat FROM w WHERE leaving AND NOT freed) \
             AND EXISTS (SELECT 1 FROM g)), ",
            $count!("$3", "$8", "$9", "$10::boolean"),
            read_again!("$20", "$3", "$21")
        )
    };
}

pub const WRITE_CALLS: &str = write_calls!(rankings);

/// [`WRITE_CALLS`] on a cluster other than home: the results of a game it
/// finishes go to the cluster's outbox (`results!`).
pub const WRITE_CALLS_OUTBOX: &str = write_calls!(results);

/// [`WRITE_CALLS`] for the hot path: a commit of Acts only that does not
/// finish the game. The same compare-and-set (`cas_game!`'s conditions,
/// the same sessions locked), the same game update (the writers' seats
/// marked active) and action-log rows; none of a leave's parts (sessions,
/// seats, names) nor the rankings, which for such a commit would write
/// nothing anyway. Parameters as [`WRITE_CALLS`], bound the same way (see
/// `play::write_statement`). It checks that it was given such a commit:
/// with a session leaving, a winner, a draw or a finishing commit, the
/// sessions guard finds no session and nothing is written, so a leave or a
/// game's end can never be committed without its parts.
///
/// Its shape is what the database runs on every commit of a game in play,
/// so it holds as few plan nodes as the write allows: PostgreSQL builds
/// every node of a statement's plan each time it runs it (cached plan or
/// not), and for [`WRITE_CALLS`]'s shape that set-up took about as long as
/// running it. So its sessions guard (`sessions_guard!`, matching the
/// writers' seats by array position) takes the acts-only checks as its
/// condition instead of a table of the writers, their seats are marked
/// active by an `ARRAY[…]` of four expressions instead of a subquery per
/// seat, and a write that missed
/// returns no row at all instead of the callers' read again (`read_again!`):
/// the caller reads again itself, one round trip more on the rare commit
/// that lost a race. `$20` (the callers' tokens, for that read again in
/// [`WRITE_CALLS`]) is only typed here. Returns the new version, the game's
/// creation and the database clock at columns 0, 2 and 15, as
/// [`WRITE_CALLS`] does.
pub const WRITE_ACTS: &str = concat!(
    "WITH ",
    sessions_guard!(
        "$3",
        "NOT (true = ANY($13::boolean[] || $14::boolean[])) \
         AND $8::smallint < 0 AND NOT $9::boolean AND NOT $10::boolean"
    ),
    ", ",
    cas_game!(
        "$1",
        "$2",
        "$3",
        ", active_at = ARRAY[\
             CASE WHEN 0::smallint = ANY($12::smallint[]) THEN now() ELSE active_at[1] END, \
             CASE WHEN 1::smallint = ANY($12::smallint[]) THEN now() ELSE active_at[2] END, \
             CASE WHEN 2::smallint = ANY($12::smallint[]) THEN now() ELSE active_at[3] END, \
             CASE WHEN 3::smallint = ANY($12::smallint[]) THEN now() ELSE active_at[4] END]",
        "$4",
        "$5",
        "$6",
        "$11",
        "$22",
        "$21"
    ),
    ", ",
    log_actions!(),
    written_row!(),
    " WHERE $20::bytea[] IS NOT NULL"
);

/// Writes a state advanced by the clock alone (a game that just ended),
/// compare-and-set on the version read: of several calls that saw the game
/// end, one commits it (and its rankings); the others find no row and read
/// again. Any stalled writer computes the same state (the clock alone moved
/// it), so no lag bound is needed. `$1` state, `$2` phase, `$3` game, `$4`
/// winner or -1, `$5` draw, `$6` finishing, `$7` version read.
macro_rules! write_advance {
    ($count:ident) => {
        concat!(
            "WITH ",
            update_game!("$1", "$2", "$3", "", " AND version = $7::bigint"),
            ", ",
            $count!("$3", "$4", "$5", "$6::boolean"),
            " SELECT version FROM g"
        )
    };
}

pub const WRITE_ADVANCE: &str = write_advance!(rankings);

/// [`WRITE_ADVANCE`] on a cluster other than home (see
/// [`WRITE_CALLS_OUTBOX`]).
pub const WRITE_ADVANCE_OUTBOX: &str = write_advance!(results);

/// Seats the token's session in game `g`'s partition (new, or the one it
/// has there: a token has one session per partition) of identity `$7`
/// (`$8`: a long-lived one) at `$3` of game `g`. Joins of one token on a
/// cluster take turns at the lobby's lock, so none seats it meanwhile.
/// Returns the game, its version and the session's last sequence number.
macro_rules! seat_session {
    () => {
        ", s AS (INSERT INTO sessions (token_hash, name, game_id, seat) \
                 SELECT $1::bytea, $2::text, id, $3::smallint FROM g \
                 ON CONFLICT (token_hash, partition) DO UPDATE SET name = excluded.name, \
                   game_id = excluded.game_id, seat = excluded.seat, in_game = true \
                 RETURNING id), \
           st AS (INSERT INTO seats (game_id, seat, session_id, name, identity_hash, identified) \
                  SELECT g.id, $3::smallint, s.id, $2::text, $7::bytea, $8::boolean FROM g, s) \
         SELECT g.id, g.version, \
                coalesce((SELECT max(a.seq) FROM actions a WHERE a.session_id = s.id), 0) \
         FROM g, s"
    };
}

/// Seats a session in an existing waiting game (locked by the join's
/// transaction, so no compare-and-set). `$1` token hash, `$2` name, `$3`
/// seat, `$4` state, `$5` phase, `$6` game.
pub const WRITE_JOIN_WAITING: &str = concat!(
    "WITH ",
    update_game!(
        "$4",
        "$5",
        "$6",
        ", names[$3::smallint + 1] = $2::text, active_at[$3::smallint + 1] = now()",
        ""
    ),
    seat_session!()
);

/// One seat's initial name (`$2` at seat `$3`, else empty).
macro_rules! initial_name {
    ($seat:literal) => {
        concat!(
            "CASE WHEN $3::smallint = ",
            $seat,
            " THEN $2::text ELSE '' END"
        )
    };
}

/// One seat's initial activity (now at seat `$3`, else none).
macro_rules! initial_active {
    ($seat:literal) => {
        concat!("CASE WHEN $3::smallint = ", $seat, " THEN now() END")
    };
}

/// Seats a session in a new game. Parameters as [`WRITE_JOIN_WAITING`],
/// but `$6` is the new game's arena, and `$9` the partitions this cluster
/// holds: the game goes to one of them writable here (at random), its id
/// the id sequence's next value times 64 plus the partition. No row: none
/// is writable (all moving away).
pub const WRITE_JOIN_NEW: &str = concat!(
    "WITH p AS (SELECT pf.partition FROM partition_fence pf \
                WHERE pf.partition = ANY($9::smallint[]) AND pf.writable \
                ORDER BY random() LIMIT 1), \
          g AS (INSERT INTO games (id, state, phase, arena, names, active_at) \
     SELECT nextval(pg_get_serial_sequence('games', 'id')) * 64 + p.partition, \
             $4::bytea, $5::smallint, $6::smallint, ARRAY[",
    initial_name!(0),
    ", ",
    initial_name!(1),
    ", ",
    initial_name!(2),
    ", ",
    initial_name!(3),
    "], ARRAY[",
    initial_active!(0),
    ", ",
    initial_active!(1),
    ", ",
    initial_active!(2),
    ", ",
    initial_active!(3),
    "] FROM p RETURNING id, version)",
    seat_session!()
);

/// Logs a join's changes to game `$1` at version `$2` (after the join's
/// commit), tick `$3`: the seats `$4` it freed, then the seat `$5` it
/// filled (see the `seat_log` table).
pub const LOG_SEATS: &str = "INSERT INTO seat_log (game_id, version, kind, seat, tick) \
     SELECT $1::bigint, $2::bigint, 1, freed, $3::integer FROM unnest($4::smallint[]) freed \
     UNION ALL SELECT $1::bigint, $2::bigint, 2, $5::smallint, $3::integer";

/// The best players. `$1` limit.
pub const RANKINGS: &str = "SELECT name, games, wins, draws FROM rankings \
     ORDER BY wins DESC, draws DESC, games ASC, name LIMIT $1::bigint";

/// Games waiting for players or running, newest first, for spectators.
/// `$1` limit, `$2` tick length.
pub const LIVE_GAMES: &str = concat!(
    "SELECT ",
    game_cols!("$2"),
    " FROM games g WHERE g.phase IN (1, 2) ORDER BY g.id DESC LIMIT $1::bigint"
);

/// The statements of the game calls (an act's read and its write, a state
/// read, a game the clock ended), planned on each of a server's standing
/// connections before it takes calls ([`super::Store::warm_up`]): the first
/// plan of these on a new connection costs milliseconds of catalog reads,
/// which would otherwise fall on the first calls of the games that fail
/// over to this server, with their players queued behind them.
pub const HOT: &[&str] = &[
    LOAD_CALLERS,
    WRITE_ACTS,
    WRITE_CALLS,
    READ_STATE,
    WRITE_ADVANCE,
];

/// The statements of a join (the rejoin check, the lobby's lock and what
/// runs under it), planned at warm-up beside [`HOT`]: the four players of
/// a finished game join again at once and take turns at the lobby's lock,
/// so the first plans of a join on a connection that had not run one yet
/// fall on the lock's holder and on every join queued behind it.
pub const JOIN: &[&str] = &[
    READ_JOINER,
    LOAD_SESSION_LOCKED,
    READ_GAME,
    LOCK_LOBBY,
    LOAD_WAITING_LOCKED,
    FREE_SILENT_SEATS,
    COUNT_LIVE_GAMES,
    WRITE_JOIN_WAITING,
    WRITE_JOIN_NEW,
    LOG_SEATS,
];

/// The running games: waiting or playing, and written within `$1` ms (a
/// game whose players are all gone stops counting; the clock ends it when
/// someone looks); and the smallest limit on them that a server with a
/// heartbeat within `$2` ms learned (NULL: none). Read under the lobby's
/// lock by a join that would open a new game (see `crate::seating`).
pub const COUNT_LIVE_GAMES: &str = "SELECT (SELECT count(*) FROM games \
     WHERE phase IN (1, 2) AND updated_at > now() - $1::bigint * interval '1 millisecond'), \
     (SELECT min(game_limit) FROM servers \
     WHERE heartbeat_at > now() - $2::bigint * interval '1 millisecond')";

/// Every statement, for the schema test.
#[cfg(test)]
pub const ALL: &[&str] = &[
    LOAD_CALLERS,
    SESSION_ELSEWHERE,
    READ_STATE,
    READ_GAME,
    WATCH_GAME,
    READ_JOINER,
    LOCK_LOBBY,
    LOAD_WAITING_LOCKED,
    FREE_SILENT_SEATS,
    LOAD_SESSION_LOCKED,
    WRITE_CALLS,
    WRITE_ACTS,
    WRITE_ADVANCE,
    WRITE_CALLS_OUTBOX,
    WRITE_ADVANCE_OUTBOX,
    WRITE_JOIN_WAITING,
    WRITE_JOIN_NEW,
    LOG_SEATS,
    RANKINGS,
    LIVE_GAMES,
    COUNT_LIVE_GAMES,
];
