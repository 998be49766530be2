-- Session tokens the cluster issues, names held one at a time, and
-- rankings that count only games between identified players.

-- Keys only the cluster holds. `session-token` MACs the session tokens the
-- servers issue (HMAC-SHA256): a server checks a token by recomputing its
-- MAC, without a database round trip, and no client can make one up.
-- Drawn here once, from PostgreSQL's strong random source (a version 4
-- UUID holds 122 random bits; two of them, 244), and read by every server
-- at start-up.
CREATE TABLE cluster_keys (
    name       TEXT        PRIMARY KEY,
    key        BYTEA       NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO cluster_keys (name, key)
VALUES ('session-token', uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()));

-- Names: an identity holds one name at a time. Taking another releases the
-- one it held (`released_at`); a released name stays its owner's for a
-- hold period, then anyone may take it. `used_at` is the last join with
-- the name; retention releases names unused for long. `key_version` says
-- which look-alike rule made `owner_key`: keys of version 1 (before case
-- was folded ahead of the confusable skeleton, and before blanks were
-- dropped) are recomputed by the servers at start-up, the oldest claim
-- keeping a key two old keys now share.
ALTER TABLE names
    ADD COLUMN key_version SMALLINT    NOT NULL DEFAULT 1,
    ADD COLUMN used_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    ADD COLUMN released_at TIMESTAMPTZ;
-- An identity that owned several names keeps its newest claim.
UPDATE names n SET released_at = now()
WHERE EXISTS (SELECT 1 FROM names m
              WHERE m.identity_hash = n.identity_hash
                AND (m.claimed_at, m.owner_key) > (n.claimed_at, n.owner_key));
CREATE UNIQUE INDEX names_held ON names (identity_hash) WHERE released_at IS NULL;
CREATE INDEX names_old_version ON names (claimed_at) WHERE key_version < 2;

-- Whether a seat's player came with a long-lived identity. A game counts
-- in the rankings only if every seat's did: a win over throwaway players
-- is no win. Seats from before stay unranked.
ALTER TABLE seats ADD COLUMN identified BOOLEAN NOT NULL DEFAULT false;
