-- Acts and leaves are compare-and-set writes: a read, then one statement
-- that writes only if the game is still at the version read. A write that
-- lost to another call must read again before it retries; this function is
-- that read (the caller's session, its newest action-log row, its game and
-- the database clock: the columns of the store's LOAD statement, in its
-- order), so the losing write returns it in the same round trip.
--
-- VOLATILE, and PL/pgSQL: its query takes a snapshot of its own when it
-- runs, after the write statement's game update found the newer version,
-- so it sees the commit the write lost to (the write statement's own
-- snapshot, taken when it started, may not). Its plan is cached per
-- connection, like a prepared statement's.
CREATE FUNCTION game_call_read(token_hash BYTEA, tick_ms BIGINT)
RETURNS TABLE (
    session_id   BIGINT,
    seat         SMALLINT,
    in_game      BOOLEAN,
    last_seq     BIGINT,
    last_kind    SMALLINT,
    last_outcome SMALLINT,
    last_tick    INTEGER,
    game_id      BIGINT,
    state        BYTEA,
    version      BIGINT,
    now_tick     BIGINT,
    names        TEXT[],
    connected    BOOLEAN[],
    clock_us     BIGINT
)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT s.id, s.seat, s.in_game, coalesce(l.seq, 0), coalesce(l.action, 0::smallint),
           coalesce(l.outcome, 0::smallint), coalesce(l.tick, 0),
           g.id, g.state, g.version,
           floor(extract(epoch FROM clock_timestamp() - g.created_at) * 1000
                 / game_call_read.tick_ms)::bigint,
           g.names,
           ARRAY[coalesce(g.active_at[1] > now() - interval '3000 milliseconds', false),
                 coalesce(g.active_at[2] > now() - interval '3000 milliseconds', false),
                 coalesce(g.active_at[3] > now() - interval '3000 milliseconds', false),
                 coalesce(g.active_at[4] > now() - interval '3000 milliseconds', false)],
           (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
    FROM sessions s JOIN games g ON g.id = s.game_id
    LEFT JOIN LATERAL (SELECT a.seq, a.action, a.outcome, a.tick FROM actions a
                       WHERE a.session_id = s.id ORDER BY a.seq DESC LIMIT 1) l ON true
    WHERE s.token_hash = game_call_read.token_hash;
END
$$;
