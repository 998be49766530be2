-- Partitions moved between clusters while their games play
-- (docs/scaling.md, `server/src/store/moves.rs`).
--
-- PostgreSQL's logical replication copies a partition's rows: a
-- publication on the source with a row filter on the partition, a
-- subscription on the target. A filter on a table whose updates and
-- deletes are published may name only the columns of its replica
-- identity: `games` (id), `seats`, `seat_log` and `results` (game_id) have
-- the partition's column in their primary key; `sessions` and `actions`
-- do not, so they log their whole old row.
ALTER TABLE sessions REPLICA IDENTITY FULL;
ALTER TABLE actions REPLICA IDENTITY FULL;

-- A token has one session per partition on a cluster, not one per
-- cluster: a partition moving to a cluster where the token already has a
-- session (in another partition) brings its own along without a clash.
CREATE UNIQUE INDEX sessions_token_partition ON sessions (token_hash, partition);
ALTER TABLE sessions DROP CONSTRAINT sessions_token_hash_key;

-- The fence: which partitions this cluster may write. Every statement
-- that writes a game checks it, so a partition made read-only here takes
-- no write after that commit; the mover takes this table's lock to make
-- it read-only, so no write that read it before is still in flight when
-- it commits. Every partition starts writable here (an existing
-- database holds them all); a cluster is given the fence of the
-- partitions the map gives it when it joins (`partition_fence_set`), and
-- after that only a move changes it: the partitions a cluster may write
-- are the ones the map gives it, but for the moment of a move's
-- cut-over, when none may write the moving one.
CREATE TABLE partition_fence (
    partition SMALLINT PRIMARY KEY CHECK (partition >= 0 AND partition < 64),
    writable  BOOLEAN  NOT NULL
);
INSERT INTO partition_fence (partition, writable)
    SELECT p, true FROM generate_series(0, 63) p;

-- The fence was set from the map once (a row here): a cluster registered
-- after others holds only what the map gives it (see
-- `server/src/store/partitions.rs`); home, and a database from before
-- partitions, hold every partition until then.
CREATE TABLE partition_fence_set (
    id     SMALLINT    PRIMARY KEY CHECK (id = 1),
    set_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- A move's mark: written on the source in the transaction that fences the
-- partition, published with its rows; once the target sees the mark,
-- it has applied every write the source took for the partition.
CREATE TABLE move_marks (
    partition SMALLINT PRIMARY KEY,
    move_id   BIGINT   NOT NULL
);

-- Home: each partition's move, its step, and how long the partition was
-- read-only. Kept after it is done (the last move of each partition).
CREATE TABLE partition_moves (
    partition   SMALLINT    PRIMARY KEY CHECK (partition >= 0 AND partition < 64),
    id          BIGINT      NOT NULL,
    source      TEXT        NOT NULL,
    target      TEXT        NOT NULL,
    step        TEXT        NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    fenced_at   TIMESTAMPTZ,
    flipped_at  TIMESTAMPTZ,
    done_at     TIMESTAMPTZ
);
CREATE SEQUENCE partition_move_ids;

-- The read again of a missed write, by partition: a token's session in
-- the game's partition.
DROP FUNCTION game_call_read(BYTEA, BIGINT);
CREATE FUNCTION game_call_read(token_hash BYTEA, part SMALLINT, tick_ms BIGINT)
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
    WHERE s.token_hash = game_call_read.token_hash AND s.partition = game_call_read.part;
END
$$;
