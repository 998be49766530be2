-- Player identities and owned names; what retention needs.
--
-- A join may carry an identity: a long-lived client secret, stored only as
-- a SHA-256 hash (under a prefix of its own). A join without one counts as
-- the identity of its token alone.

-- A name belongs to the identity that first claimed it. The key is the
-- name's look-alike key (NFKC, case, confusable skeleton: names a person
-- could mistake for each other share it); `name` is how its owner last
-- spelled it.
CREATE TABLE names (
    owner_key     TEXT        PRIMARY KEY,
    identity_hash BYTEA       NOT NULL,
    name          TEXT        NOT NULL,
    claimed_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Who sat in a seat, so one identity takes one seat of a game and the
-- rankings count identities. Seats from before identities count as the
-- identity of their name.
ALTER TABLE seats ADD COLUMN identity_hash BYTEA;
UPDATE seats SET identity_hash = sha256(convert_to('name:' || name, 'UTF8'));
ALTER TABLE seats ALTER COLUMN identity_hash SET NOT NULL;

-- Rankings per identity, shown under the name it last played with.
ALTER TABLE rankings ADD COLUMN identity_hash BYTEA;
UPDATE rankings SET identity_hash = sha256(convert_to('name:' || name, 'UTF8'));
ALTER TABLE rankings
    DROP CONSTRAINT rankings_pkey,
    ALTER COLUMN identity_hash SET NOT NULL,
    ADD PRIMARY KEY (identity_hash);

-- Retention deletes a finished game with its seats and the sessions whose
-- last game it was; a session may still have a seat row in an older game
-- (one it left while it ran), which must not stop that.
ALTER TABLE seats DROP CONSTRAINT seats_session_id_fkey;

-- Retention finds old finished games by when they finished.
CREATE INDEX games_finished ON games (finished_at) WHERE phase = 3;

-- Retention deletes a game's action log by game. A BRIN index: the log is
-- appended in about game order, and a BRIN entry is only touched once per
-- range of pages, so an Act's insert stays as cheap as without it.
CREATE INDEX actions_game_brin ON actions USING brin (game_id) WITH (autosummarize = on);

-- Games deleted whose logs are still being deleted, in small batches; a
-- server that stops half-way leaves the rest here for the next pass.
CREATE TABLE purged_games (
    game_id BIGINT PRIMARY KEY
);
