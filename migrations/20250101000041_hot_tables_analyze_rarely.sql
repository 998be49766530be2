-- The tables every game call writes are analyzed after ten million changes,
-- not after fifty and a tenth of their rows.
--
-- With the default thresholds autovacuum analyzes `actions`, `games` and
-- `servers` at its first round, about 30 s after the database starts, and
-- `games` and `servers` at every round after it (each game call updates a
-- game, each heartbeat a server, so fifty changes take a second). In
-- `borbaman chaos` runs that first round was a stall window of its own:
-- 40-60 ms calls, the window held by the cpu, on a quiet machine without
-- a fault. A `perf record -a` of a 16-kill run put the autovacuum worker
-- at 29 ms of CPU in that quarter second, most of it sorting the rows
-- `ANALYZE actions` sampled (`qsort_interruptible`), while the backends
-- serving the game calls spent what they spend in any other quarter
-- second.
--
-- Every statement on these tables finds its rows by primary key or by an
-- index on the game: the plans do not depend on statistics. Vacuum is
-- left as it was (dead row versions still go), and a busy cluster still
-- analyzes them every few hours.
ALTER TABLE actions SET (autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 10000000);
ALTER TABLE games SET (autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 10000000);
ALTER TABLE servers SET (autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 10000000);
