"""Bulk creation throughput from one process: ``python -m bench.probes.bulk_create [--rows N]
[--url URL ...]``.

Without ``--url``, on private PostgreSQL and MariaDB servers of its own (bench/private_servers.py,
started and removed here; ``--backends`` chooses) and a SQLite file; never the machine's own.

On a fresh table per URL, one :class:`~dbscheduler.Client` writes ``--rows`` one-off jobs with
``schedule_once_many`` (each with its own data), then the same items again (every row exists:
the update path), then ``--rows`` runtime tasks with ``schedule_many`` and ``--rows`` pushes to
``--rows / 4`` keys with ``push_many``; for comparison, ``--single`` jobs one by one with
``schedule_once``. Printed per URL and step: rows/s (wall clock), the client's CPU seconds per
10,000 rows (the process's own CPU, so a loaded machine's share shows), and the write
statements sent.

The goal: >= 20,000 rows/s from one process on PostgreSQL.

Measured with ``--rows 100000 --single 0`` on the private servers of tests/servers, a 2-core
machine shared with other work (load average 8.5-10): PostgreSQL 13,600 rows/s for new one-off
jobs (7.3 s; 38 ms of server time per 1,000-row upsert, 0.22 s of client CPU per 10,000 rows,
most of it checking and encoding the items before any write). MariaDB, after its upsert read
its rows from one JSON_TABLE parameter instead of a multi-row VALUES that PyMySQL escapes value
by value: client CPU 0.42 -> 0.28 s per 10,000 rows; new jobs 8,200 -> 8,400 rows/s, the same
again 6,600 -> 9,100, runtime tasks 5,800 -> 11,900, pushes 4,500 -> 7,000 (the server's
time dominates; 4,000-row batches were within the noise of 1,000-row ones).

Then (load average 13-18: absolute figures far below an idle machine's, compare the ratios),
before and after one change set, alternating runs on one private server: items checked with
a third of the CPU (a regex for control characters, one JSON encoder, a one-off job's options
checked once per distinct set) and two batches written at once on two connections, the
client encoding one while the server writes the other. PostgreSQL, 100,000 new one-off jobs:
1,990 / 2,660 -> 4,230 / 5,520 rows/s; the same again 2,110 / 2,680 -> 3,930 / 4,120; runtime
tasks 3,470 / 4,140 -> 5,410 / 5,280; push_many (unchanged, in order) ~2,600 both. MariaDB,
30,000 rows: new jobs 1,340 -> 3,060, again 1,450 -> 2,370, runtime tasks 2,930 -> 4,740.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from dbscheduler import Client, FixedRate
from dbscheduler.migrate import upgrade

SQLITE_URL = "sqlite:////tmp/dbscheduler-bench-bulk.sqlite3"
BACKENDS = ("postgresql", "mysql", "sqlite")


def _drop(url: str, table: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for name in (f"{table}_items", f"{table}_runs", f"{table}_groups", f"{table}_nodes",
                         table, f"{table}_version"):
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}"))
    finally:
        engine.dispose()


def _timed(engine: sa.Engine, step: Callable[[], int]) -> tuple[int, float, float, int]:
    writes = [0]

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        words = statement.upper().split()
        if "INSERT" in words or words[0] in ("UPDATE", "MERGE"):
            writes[0] += 1

    sa.event.listen(engine, "before_cursor_execute", count)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        rows = step()
        return rows, time.perf_counter() - wall, time.process_time() - cpu, writes[0]
    finally:
        sa.event.remove(engine, "before_cursor_execute", count)


def run(url: str, rows: int, single: int) -> None:
    table = f"bench_bulk_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(url)
    upgrade(engine, table)
    at = datetime.now(timezone.utc) + timedelta(hours=1)
    jobs = [(f"job-{i}", "send-mail", at + timedelta(seconds=i % 3600), {"user": i})
            for i in range(rows)]
    tasks = [(f"task-{i}", "report", FixedRate(3600), {"n": i}) for i in range(rows)]
    pushes = [(f"user-{i % max(rows // 4, 1)}", {"event": i}, "digest") for i in range(rows)]
    print(f"{url.split('://')[0]}: {rows:,} rows per step, table {table}")
    try:
        with Client(engine=engine, table=table) as client:
            steps: list[tuple[str, Callable[[], int]]] = [
                ("schedule_once_many (new rows)", lambda: client.schedule_once_many(jobs)),
                ("schedule_once_many (same again)", lambda: client.schedule_once_many(jobs)),
                ("schedule_many (runtime tasks)", lambda: client.schedule_many(tasks)),
                ("push_many", lambda: client.push_many(pushes)),
            ]
            if single:
                def one_by_one() -> int:
                    for name, handler, when, data in jobs[:single]:
                        client.schedule_once(f"single-{name}", handler, when, data=data)
                    return single
                steps.append((f"schedule_once one by one ({single})", one_by_one))
            for label, step in steps:
                n, wall, cpu, writes = _timed(engine, step)
                print(f"  {label:36} {n / wall:9,.0f} rows/s  {wall:6.2f} s  "
                      f"client CPU {cpu / n * 10_000:5.2f} s/10k rows  {writes} writes")
    finally:
        engine.dispose()
        _drop(url, table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", action="append",
                        help="a database of your own (repeatable) instead of the private "
                             "servers of bench/private_servers.py")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help="without --url: which private servers to start")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--single", type=int, default=1000,
                        help="also this many one by one (0: skip)")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    if args.url:
        for url in args.url:
            run(url, args.rows, args.single)
        return
    from bench.private_servers import PrivateMariaDB, PrivatePostgres

    for backend in args.backends.split(","):
        if backend == "sqlite":
            run(SQLITE_URL, args.rows, args.single)
            continue
        server = PrivatePostgres() if backend == "postgresql" else PrivateMariaDB()
        try:
            run(server.start(), args.rows, args.single)
        finally:
            server.remove()


if __name__ == "__main__":
    main()
