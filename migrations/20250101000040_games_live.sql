-- The running games (waiting or playing), counted by a join that would
-- open a new game: the server opens one only while they leave room for it
-- (server/src/seating.rs). The count runs under the lobby's lock, so it
-- must not scan the finished games kept for replays and rankings. `id` is
-- never updated and `phase` changes twice in a game's life, so the game
-- calls' writes stay heap-only (HOT) with this index as without it.
CREATE INDEX games_live ON games (id) WHERE phase IN (1, 2);
