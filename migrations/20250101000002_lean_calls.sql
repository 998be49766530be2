-- Leaner per-call writes. An Act now writes exactly two rows: the new game
-- row and its action-log row.
--
-- * The names and the last activity of each seat move onto the game row
--   (index = seat + 1), which every call reads and writes anyway, so no call
--   joins the seats and sessions of its game to answer.
-- * A session's last applied sequence number and reply are its newest row
--   in the action log (primary key (session_id, seq)), so the session row is
--   written only by joins and leaves.
-- * The action log is append-only and written only with ids taken from the
--   rows the same transaction locked, so it carries no foreign keys or
--   secondary index to maintain on every call.

ALTER TABLE games
    ADD COLUMN names     TEXT[]        NOT NULL DEFAULT '{"","","",""}',
    ADD COLUMN active_at TIMESTAMPTZ[] NOT NULL DEFAULT '{NULL,NULL,NULL,NULL}';

UPDATE games g SET names = ARRAY(
    SELECT coalesce((SELECT st.name FROM seats st
                     WHERE st.game_id = g.id AND st.seat = i), '')
    FROM generate_series(0, 3) AS i ORDER BY i);

-- Room on each page for the next version of a game row, so its update stays
-- on the page (a HOT update: no index entries to write).
ALTER TABLE games SET (fillfactor = 50);

ALTER TABLE sessions
    DROP COLUMN last_seq,
    DROP COLUMN last_kind,
    DROP COLUMN last_outcome,
    DROP COLUMN last_tick,
    DROP COLUMN last_active_at;

ALTER TABLE actions
    DROP CONSTRAINT actions_session_id_fkey,
    DROP CONSTRAINT actions_game_id_fkey;

DROP INDEX actions_game;
