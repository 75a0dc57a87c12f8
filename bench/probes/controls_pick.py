"""``python -m bench.probes.controls_pick URL``: what the execution controls cost the pick and poll.

A table of ``--rows`` rows of one handler, ``--due`` of them due, no groups and no tags in
use (the common case): the loop picks ``--batch`` rows and gives them back, ``--rounds``
times, and reports the minimum (the cost itself, least disturbed by a busy machine), the
median and the 90th percentile of the pick and of the poll. Run it with
``PYTHONPATH`` pointing at another checkout to compare two versions of the engine on the same
database (each creates and drops its own table)::

    .venv/bin/python -m bench.probes.controls_pick postgresql+psycopg://postgres@127.0.0.1/test
    PYTHONPATH=/path/to/other/checkout .venv/bin/python -m bench.probes.controls_pick …
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from datetime import timedelta

import sqlalchemy as sa

import dbscheduler
from dbscheduler._store import Store
from dbscheduler.dialects import prepare_engine
from dbscheduler.migrate import upgrade


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--due", type=int, default=2_000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--explain", action="store_true", help="PostgreSQL: print the poll's plan")
    args = p.parse_args()
    table = f"bench_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(args.url)
    prepare_engine(engine)
    upgrade(engine, table)
    store = Store(engine, table)
    t = store.table
    try:
        with engine.begin() as conn:
            now = store.now(conn)
            conn.execute(sa.insert(t), [{
                "queue_name": f"job-{i}", "handler": "h", "created_at": now,
                "next_process_at": now - timedelta(seconds=60) if i < args.due
                else now + timedelta(hours=1 + i),
                "attempt": 0, "reenqueue_attempt": 0, "total_attempt": 0, "paused": False,
                "stop_requested": False, "schedule": "fixed-rate 60s"}
                for i in range(args.rows)])
        if engine.dialect.name == "postgresql":  # statistics, as autovacuum keeps them
            with engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                    f"ANALYZE {table}")
        picks, polls = [], []
        for _ in range(args.rounds):
            began = time.perf_counter()
            picked = store.pick("bench", args.batch, timedelta(seconds=30), ["h"]).rows
            picks.append(time.perf_counter() - began)
            store.release("bench", {int(r["id"]): int(r["total_attempt"]) for r in picked})
            began = time.perf_counter()
            store.poll(["h"])
            polls.append(time.perf_counter() - began)
        if args.explain:
            _explain(store, engine)
        for what, values in (("pick", picks), ("poll", polls)):
            q = statistics.quantiles(values, n=10)
            print(f"{dbscheduler.__file__.rsplit('/', 2)[0]} {engine.dialect.name} {what}: "
                  f"min {min(values) * 1000:.2f} ms, "
                  f"median {statistics.median(values) * 1000:.2f} ms, "
                  f"p90 {q[8] * 1000:.2f} ms ({args.rounds} rounds, {args.batch} rows/pick)")
    finally:
        for name in (f"{table}_groups", f"{table}_version", table):
            sa.Table(name, sa.MetaData()).drop(engine, checkfirst=True)
        engine.dispose()


def _explain(store: Store, engine: sa.Engine) -> None:
    from dbscheduler._store.handlers import handler_params
    from dbscheduler._store.runtime import next_due_of

    query = sa.select(next_due_of(store).scalar_subquery()).params(
        handler_params(store, frozenset(["h"])))
    sql = str(query.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        for line in conn.exec_driver_sql("EXPLAIN ANALYZE " + sql):
            print(line[0])


if __name__ == "__main__":
    main()
