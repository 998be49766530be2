# Starts Patroni (3.0.x) with its stop-polling interval at 50 ms instead of
# 1 s: `python3 launch.py patroni.yml`, as `patroni patroni.yml`.
#
# When Patroni demotes a primary (a switchover), it stops PostgreSQL and
# then looks every STOP_POLLING_INTERVAL, by `pg_controldata`, whether the
# shutdown finished; its first look comes right after the signal, before
# the shutdown checkpoint, so it lets go of the leader key about a second
# after PostgreSQL stopped, and every commit waits that second for the new
# primary. The interval is a module constant, not a setting, in every
# Patroni up to 3.0.2 (docs/replicated-database.md, "Where a switchover's
# seconds go"). A Patroni without it starts unchanged.
import sys

import patroni.postgresql

if hasattr(patroni.postgresql, "STOP_POLLING_INTERVAL"):
    patroni.postgresql.STOP_POLLING_INTERVAL = 0.05

# Patroni starts helper processes with multiprocessing's "spawn", which runs
# this file again in each of them under another name: only the first starts
# Patroni.
if __name__ == "__main__":
    from patroni.__main__ import main

    sys.exit(main())
