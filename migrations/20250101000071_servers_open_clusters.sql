-- The database clusters each live server has opened, by name (home
-- included), written with its heartbeat. A partition move cuts over to its
-- target only once every live server that reports has opened it: a server
-- that cannot reach the target would otherwise keep sending the moved
-- games to the fenced source, and their players would wait until it can.
-- NULL: a server from before this column, which reports nothing.
ALTER TABLE servers ADD COLUMN clusters text[];
