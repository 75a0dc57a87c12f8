"""One dbscheduler node offered more than it can run: executions/s, CPU per execution.

The main benchmark measures from outside, with every system's node process and their start
lag. This measures one node from inside, in this process, for before/after comparisons of
the engine: the executions done per second while ``--tasks`` no-op tasks are due every
``--period`` s, the node's CPU per execution (``time.process_time()``, every thread) and the
database server's (the CPU time of the local ``postgres``/``mariadbd`` processes, from
``/proc``; 0 for SQLite, which runs in the node). With ``--statements``, the time and rows of
each kind of statement (SQLAlchemy's cursor events, a little overhead of their own)::

    python -m bench.probes.saturate --url postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        --tasks 700 --period 0.1 --seconds 10 [--spread] [--analyze] [--no-history] \\
        [--statements]

The tasks are due in phase (every pick and finish then carries many rows), unless
``--spread``: then their phases are spread evenly over the period after the first runs, as a
service's many tasks are and as the comparison's throughput workload does.

The table ``bench_saturate`` (and its companion tables) is dropped and created again.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from bench.cpu import server_cpu
from dbscheduler import FixedRate, Scheduler
from dbscheduler.migrate import upgrade

TABLE = "bench_saturate"


def fresh_table(url: str, ddl: list[str] = [],  # noqa: B006 - never changed
                table: str = TABLE) -> None:
    """Drop and create ``table`` (and its companion tables); then run each ``ddl``
    statement (``{table}`` is its name): an index lever tried before it becomes a migration."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for suffix in ("", "_runs", "_groups", "_items", "_version", "_nodes"):
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}{suffix}"))
    upgrade(engine, table)
    with engine.begin() as conn:
        for statement in ddl:
            conn.execute(sa.text(statement.format(table=table)))
    engine.dispose()


def time_statements(engine: sa.Engine) -> dict[str, list[float]]:
    """Per statement kind (its first 60 characters): calls, seconds, rows."""
    seen: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0])

    @sa.event.listens_for(engine, "before_cursor_execute")
    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        conn.info["bench_t0"] = time.perf_counter()

    @sa.event.listens_for(engine, "after_cursor_execute")
    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        entry = seen[" ".join(statement.split())[:60]]
        entry[0] += 1
        entry[1] += time.perf_counter() - conn.info["bench_t0"]
        entry[2] += max(cursor.rowcount, 0)

    return seen


def spread(scheduler: Scheduler, tasks: int, period: float) -> None:
    """Give the tasks ``t0`` … evenly spread due times over one ``period``, from half a second
    on (the rows running at that moment keep theirs, and fall into place within a few
    periods)."""
    table = sa.Table(TABLE, sa.MetaData(), autoload_with=scheduler.engine)
    start = datetime.now(timezone.utc) + timedelta(seconds=0.5)
    with scheduler.engine.begin() as conn:
        conn.execute(
            sa.update(table)
            .where(table.c.queue_name == sa.bindparam("n"), table.c.locked_by.is_(None))
            .values(next_process_at=sa.bindparam("at")),
            [{"n": f"t{i}", "at": start + timedelta(seconds=period * i / tasks)}
             for i in range(tasks)])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.probes.saturate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    p.add_argument("--tasks", type=int, default=700)
    p.add_argument("--period", type=float, default=0.1)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--workers", type=int, default=32)
    p.add_argument("--analyze", action="store_true",
                   help="ANALYZE the tables after the warm-up (PostgreSQL statistics)")
    p.add_argument("--no-history", action="store_true", help="Scheduler(history=None)")
    p.add_argument("--statements", action="store_true", help="time each kind of statement")
    p.add_argument("--spread", action="store_true",
                   help="spread the tasks' phases evenly over the period (default: in phase)")
    p.add_argument("--ddl", action="append", default=[], metavar="SQL",
                   help="run after creating the table ({table} is its name), e.g. "
                        "'DROP INDEX {table}_claim_idx'; repeatable")
    args = p.parse_args(argv)

    fresh_table(args.url, args.ddl)
    done = itertools.count()

    def noop() -> None:
        next(done)

    options: dict[str, Any] = {"history": None} if args.no_history else {}
    scheduler = Scheduler(args.url, table=TABLE, max_workers=args.workers, **options)
    timing = time_statements(scheduler.engine) if args.statements else {}
    for i in range(args.tasks):
        scheduler.add(f"t{i}", noop, schedule=FixedRate(args.period))
    scheduler.start()
    try:
        if args.spread:
            spread(scheduler, args.tasks, args.period)
        time.sleep(args.warmup)
        if args.analyze and scheduler.engine.dialect.name == "postgresql":
            with scheduler.engine.begin() as conn:
                conn.execute(sa.text(f"ANALYZE {TABLE}"))
                conn.execute(sa.text(f"ANALYZE {TABLE}_runs"))
            time.sleep(1.0)
        c0, cpu0, db0, t0 = next(done), time.process_time(), server_cpu(), time.monotonic()
        time.sleep(args.seconds)
        c1, cpu1, db1, t1 = next(done), time.process_time(), server_cpu(), time.monotonic()
    finally:
        scheduler.shutdown(timeout=10)
    runs = c1 - c0 - 1
    wall = t1 - t0
    print(f"{runs / wall:,.0f} executions/s (offered {args.tasks / args.period:,.0f}/s); "
          f"node CPU {1e6 * (cpu1 - cpu0) / runs:.0f} µs per execution "
          f"({(cpu1 - cpu0) / wall:.2f} cores); "
          f"server CPU {1e6 * (db1 - db0) / runs:.0f} µs ({(db1 - db0) / wall:.2f} cores)")
    for text, (calls, seconds, rows) in sorted(timing.items(), key=lambda kv: -kv[1][1])[:8]:
        print(f"{int(calls):8,d} × {1000 * seconds / calls:6.2f} ms, {rows / calls:6.1f} rows  "
              f"{text}")


if __name__ == "__main__":
    main()
