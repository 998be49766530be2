-- Several arenas, and a log complete enough to replay every game.
--
-- A game's arena is chosen when it is created and never changes; the state
-- holds it too (state format 3), the column lets a join that asks for an
-- arena find a waiting game of it. 0 classic, 1 open, 2 corridors.
ALTER TABLE games ADD COLUMN arena SMALLINT NOT NULL DEFAULT 0;

-- The lobby's changes to a game, which the action log does not hold: a
-- join seating a player, and the seats it freed first because their
-- players went silent. With the action log (acts and leaves) this is every
-- change a call makes to a game, each with the tick it took effect at; the
-- clock's own advances follow from the ticks. Rows of one commit share the
-- game's version after it, and apply freed seats (kind 1) before the seat
-- taken (kind 2). Written only by joins.
CREATE TABLE seat_log (
    game_id BIGINT   NOT NULL,
    version BIGINT   NOT NULL,
    kind    SMALLINT NOT NULL,
    seat    SMALLINT NOT NULL,
    tick    INTEGER  NOT NULL,
    PRIMARY KEY (game_id, version, kind, seat)
);
