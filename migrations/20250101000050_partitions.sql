-- Games partitioned over database clusters (docs/scaling.md).
--
-- A game's partition is its id modulo 64, so the id alone tells any server
-- where the game lives. Every per-game table carries the partition (a
-- generated column: no statement writes it, none can get it wrong), so a
-- partition's rows can be selected, counted and copied by it.
--
-- Every cluster has this whole schema. The home cluster (the one servers
-- are given with --database-url) also keeps what is global: identities and
-- names, rankings, the server registry, the cluster key, the clusters
-- (`db_clusters`) and which cluster holds which partition
-- (`partition_map`). A game's own rows (`games`, `sessions`, `seats`,
-- `seat_log`, `actions`, `results`) live on its partition's cluster only.

ALTER TABLE games ADD COLUMN partition SMALLINT
    GENERATED ALWAYS AS ((id % 64)::smallint) STORED;
ALTER TABLE sessions ADD COLUMN partition SMALLINT
    GENERATED ALWAYS AS ((game_id % 64)::smallint) STORED;
ALTER TABLE seats ADD COLUMN partition SMALLINT
    GENERATED ALWAYS AS ((game_id % 64)::smallint) STORED;
ALTER TABLE seat_log ADD COLUMN partition SMALLINT
    GENERATED ALWAYS AS ((game_id % 64)::smallint) STORED;
ALTER TABLE actions ADD COLUMN partition SMALLINT
    GENERATED ALWAYS AS ((game_id % 64)::smallint) STORED;

-- New games take the id `nextval * 64 + partition`. Ids made before this
-- migration were the sequence's values themselves, all below 64 times the
-- sequence's next value, so no id is made twice. Each cluster but home
-- moves its sequences to a range of its own when it is registered (see
-- `server/src/store/partitions.rs`), so ids are unique across clusters.

-- The clusters. Home is `home`, number 0; its URL is the one every server
-- was given. `patroni`: the Patroni members' REST APIs of a replicated
-- cluster (its etcd scope is its name).
CREATE TABLE db_clusters (
    name     TEXT        PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_-]{0,31}$'),
    number   INTEGER     NOT NULL UNIQUE CHECK (number >= 0),
    url      TEXT,
    patroni  TEXT[]      NOT NULL DEFAULT '{}',
    added_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((number = 0) = (url IS NULL))
);
INSERT INTO db_clusters (name, number) VALUES ('home', 0);

-- Which cluster holds each partition; `version` is bumped on every change
-- so servers reload the map when it moves.
CREATE TABLE partition_map (
    partition SMALLINT PRIMARY KEY CHECK (partition >= 0 AND partition < 64),
    cluster   TEXT     NOT NULL REFERENCES db_clusters (name)
);
INSERT INTO partition_map (partition, cluster)
    SELECT p, 'home' FROM generate_series(0, 63) p;
CREATE TABLE partition_map_version (
    id      SMALLINT PRIMARY KEY CHECK (id = 1),
    version BIGINT   NOT NULL
);
INSERT INTO partition_map_version (id, version) VALUES (1, 1);

-- Joins with several clusters: which cluster a token was last seated on
-- (a join retried soon after goes back there), and the turn that spreads
-- new games over the clusters, a game's worth of joiners at a time.
CREATE TABLE placements (
    token_hash BYTEA       PRIMARY KEY,
    cluster    TEXT        NOT NULL,
    placed_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- A sequence, not a row: every join takes a turn, and a row updated by
-- every join would be one lock all joins queue on and a chain of dead
-- versions each update walks.
CREATE SEQUENCE join_turns;

-- The outbox of rankings: a game finished on a cluster other than home
-- records its players' results here in its finishing statement; a
-- background fold moves them into home's `rankings` exactly once (keyed
-- by the game in `folded_games`), then deletes them here.
CREATE TABLE results (
    game_id       BIGINT   NOT NULL,
    identity_hash BYTEA    NOT NULL,
    name          TEXT     NOT NULL,
    games         INTEGER  NOT NULL,
    wins          INTEGER  NOT NULL,
    draws         INTEGER  NOT NULL,
    partition     SMALLINT GENERATED ALWAYS AS ((game_id % 64)::smallint) STORED,
    PRIMARY KEY (game_id, identity_hash)
);
CREATE TABLE folded_games (
    game_id   BIGINT      PRIMARY KEY,
    folded_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
