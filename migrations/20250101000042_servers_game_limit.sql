-- The limit on running games each server learned from its own refusals
-- (server/src/seating.rs), written with its heartbeat; NULL: none learned.
-- A join that would open a game takes the smallest among the live
-- servers', so a crowd that reaches a server which has not been found full
-- yet is held to what the others learned.
ALTER TABLE servers ADD COLUMN game_limit integer;
