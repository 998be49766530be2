-- One row that joiners lock (SELECT ... FOR UPDATE) before they look for a
-- waiting game, so players joining at the same moment fill one game instead
-- of each opening their own. A row lock, held only by joins that seat a
-- player; acts, leaves and reads never touch it.
CREATE TABLE lobby (
    id SMALLINT PRIMARY KEY CHECK (id = 1)
);

INSERT INTO lobby (id) VALUES (1);
