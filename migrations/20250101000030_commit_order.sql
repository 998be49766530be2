-- Group commit: one compare-and-set write may apply the inputs of several
-- sessions of a game (the calls queued behind the game's gate in one
-- server). Their action-log rows share the commit's version, so the order
-- they were applied in is recorded apart: `ord`, 1, 2, ... within the
-- commit. Rows logged before this column existed have 0 and were one
-- session's inputs per commit, ordered by their seq.
ALTER TABLE actions ADD COLUMN ord INTEGER NOT NULL DEFAULT 0;
