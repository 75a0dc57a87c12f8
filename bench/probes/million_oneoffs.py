"""A million pending one-off jobs on PostgreSQL: does the poll, the pick or an idle node slow
down? ``python -m bench.probes.million_oneoffs [--url URL] [--rows N]``.

Fills a fresh table with ``N`` one-off jobs of the handler ``mail`` due next year and ``N``
of a handler no node has (``foreign``) due in the past — the worst case for a filter that
reads past rows it may not run — then measures, on one node that has ``mail`` and ``report``:

* the poll (next due time of the node's handlers), median and p99 of 200;
* the pick of 10 due rows of ``mail`` among them, median and p99 of 50;
* an idle node's statements per second over 10 s (``poll_interval`` 1 s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from datetime import timedelta

import sqlalchemy as sa

from dbscheduler import Scheduler
from dbscheduler._store import Store
from dbscheduler.migrate import upgrade


def _ms(samples: list[float]) -> str:
    samples = sorted(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return f"median {statistics.median(samples) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    p.add_argument("--rows", type=int, default=1_000_000)
    args = p.parse_args(argv)
    table = f"bench_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(args.url)
    upgrade(engine, table)
    try:
        started = time.monotonic()
        with engine.begin() as conn:
            for handler, due in (("mail", "now() + interval '365 days'"),
                                 ("foreign", "now() - interval '1 day'")):
                conn.execute(sa.text(
                    f"INSERT INTO {table} (queue_name, handler, created_at, next_process_at, "
                    "schedule) SELECT :h || '-' || g, :h, now(), "
                    f"{due} + g * interval '1 microsecond', 'once 2027-01-01T00:00:00+00:00' "
                    "FROM generate_series(1, :n) AS g"), {"h": handler, "n": args.rows})
            conn.execute(sa.text(f"ANALYZE {table}"))
        print(f"{2 * args.rows:,} rows inserted in {time.monotonic() - started:.1f} s")

        store = Store(engine, table)
        handlers = ["mail", "report"]
        polls = []
        for _ in range(200):
            t0 = time.perf_counter()
            store.poll(handlers)
            polls.append(time.perf_counter() - t0)
        print(f"poll: {_ms(polls)}")

        picks = []
        for _ in range(50):
            with engine.begin() as conn:  # ten jobs of ``mail`` come due
                conn.execute(sa.text(
                    f"UPDATE {table} SET next_process_at = now() - interval '1 second', "
                    "locked_by = NULL WHERE id IN (SELECT id FROM "
                    f"{table} WHERE handler = 'mail' ORDER BY next_process_at DESC LIMIT 10)"))
            t0 = time.perf_counter()
            rows = store.pick("bench-node", 10, timedelta(seconds=30), handlers).rows
            picks.append(time.perf_counter() - t0)
            assert len(rows) == 10 and {r["handler"] for r in rows} == {"mail"}, rows
        print(f"pick of 10 due rows: {_ms(picks)}")

        count = [0]
        node = Scheduler(args.url, table=table, poll_interval=timedelta(seconds=1))
        node.handler("mail")(lambda ctx: None)
        node.handler("report")(lambda ctx: None)
        with engine.begin() as conn:  # nothing of the node's handlers is due
            conn.execute(sa.text(f"UPDATE {table} SET next_process_at = now() + "
                                 "interval '365 days' WHERE handler = 'mail'"))
        node.start()
        time.sleep(2)
        sa.event.listen(node.engine, "before_cursor_execute",
                        lambda *a, **k: count.__setitem__(0, count[0] + 1))
        time.sleep(10)
        node.shutdown()
        print(f"idle node: {count[0] / 10:.1f} statements/s")
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}_version"))
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
