"""``python -m bench.probes.backlog URL --jobs 20000 --pending 100000 --nodes 1 3``: nodes drain a
backlog of one handler's one-off jobs, all due at once, from a table whose statistics say
nothing yet, next to many pending jobs that are not due.

For each number of nodes: a fresh table (on PostgreSQL with autovacuum off, so it is never
analysed; ``--analyze`` analyses it once filled) gets ``--pending`` one-off jobs of the handler
``jobs`` due in a day and ``--jobs`` more due a minute ago; then that many node processes
(``max_workers`` 32, lease 10 s, no history; with ``--runs N`` history on, beside ``N`` run
rows a day old) start together and run them (a no-op that notes
the job's name). Printed: the seconds until the due jobs are gone (or the rows left at
``--timeout``), how many executions each node ran — nodes that share a backlog each do a
share of it — and the exactly-once check: every due job ran once, none twice, no pending one.

Measured (private PostgreSQL 15 and MariaDB 10.11 from tests/servers, a 2-core machine shared
with other work, load average 9-11; 3 nodes, 20,000 due, 100,000 pending, every job once and
each node about a third in every run), before and after finished one-off jobs were deleted a
batch per statement instead of one ``DELETE`` each:

==========================  ==========  ==========
table                       before      after
==========================  ==========  ==========
PostgreSQL, analysed        29.2 s      6.2 s
PostgreSQL, never analysed  39.3 s      25.7 s
MariaDB, analysed           46.2 s      30.3 s
MariaDB, never analysed     48.7, 42.0  17.7, 29.7
==========================  ==========  ==========

What is left is the pick: on a never-analysed PostgreSQL table its walks are planned as a
bitmap scan and a sort of every due row (19 ms with 20,000 due), and its next-due subquery as
one of every row of the handler (51 ms with 120,000), against 0.7 ms for the whole pick once
analysed; on MariaDB (analysed or not) its read of due ids is a range over every due row and a
filesort (48 ms with 20,000 due), so each pick costs in proportion to the backlog. Split into a
walk of the priority-0 rows in due order it takes 0.07 ms, but the rows of other priorities
have no index to walk there (PostgreSQL's partial pick index): that needs a schema change.

Revision 0011 adds ``rank_idx (priority, next_process_at)`` on MySQL/MariaDB and the pick reads
two walks there (priority 0 in due order, the others on that index), each stopping at its
limit: a read of 20 with 20,000 due went from 20,000 index reads to 19. Measured on MariaDB
10.11 (3 nodes, 20,000 due, 100,000 pending, 2 runs each; the machine far busier than above,
load average 13-18 on 2 cores, so only the ratio means anything):

==========================  ===============================  ==============
table                       before (one sorted read)         after (walks)
==========================  ===============================  ==============
MariaDB, never analysed     9,584 and 8,983 left after 90 s  88.7, 78.1 s
MariaDB, analysed           7,899 left after 90 s; 83.7 s    79.3, 58.6 s
==========================  ===============================  ==============

Every job ran once in every run that drained, each node about a third. The goal of 10 s
was not reached on that machine; the pick is no longer what grows with the backlog.

On a quiet machine (2026-11-27, load average under 1 at the start; 3 nodes, the private
servers of bench/private_servers.py, one run each): PostgreSQL 2.8 s never analysed (the nodes
gather statistics at start), 2.6 s analysed; MariaDB 7.4 s never analysed, 7.1 s analysed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
import uuid
from typing import Any

import sqlalchemy as sa

from bench.probes.history import seed_runs
from dbscheduler import Scheduler, TaskContext
from dbscheduler.migrate import upgrade


def _node(url: str, table: str, name: str, go: Any, stop: Any, results: Any,
          history: bool) -> None:
    ran: list[str] = []

    def job(ctx: TaskContext) -> None:
        ran.append(ctx.name)  # list.append is atomic: the workers share it

    scheduler = Scheduler(url, table=table, node_id=name, max_workers=32, lease=10,
                          poll_interval=1, overdue_check=None,
                          **({} if history else {"history": None}))
    scheduler.handler("jobs")(job)
    go.wait()
    scheduler.start()
    stop.wait()
    scheduler.shutdown(timeout=5)
    results.put((name, ran))


def _fill(engine: sa.Engine, table: str, jobs: int, pending: int, analyze: bool) -> None:
    _insert(engine, table, "later", pending, "1 day", analyze)
    _insert(engine, table, "job", jobs, "-1 minute", analyze)


def _insert(engine: sa.Engine, table: str, prefix: str, jobs: int, offset: str,
            analyze: bool) -> None:
    columns = ("queue_name, handler, created_at, next_process_at, attempt, reenqueue_attempt, "
               "total_attempt, paused, stop_requested, schedule, priority")
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            conn.exec_driver_sql(
                f"INSERT INTO {table} ({columns}) SELECT %(prefix)s || '-' || i, 'jobs', now(), "
                "now() + %(offset)s::interval, 0, 0, 0, false, false, "
                "'once 2026-01-01T00:00:00+00:00', 0 FROM generate_series(1, %(n)s) i",
                {"n": jobs, "prefix": prefix, "offset": offset})
            if analyze:
                conn.exec_driver_sql(f"ANALYZE {table}")
            return
        t = sa.table(table, *(sa.column(c.strip()) for c in columns.split(",")))
        amount, unit = offset.split()
        due = sa.text(f"UTC_TIMESTAMP(6) + INTERVAL {amount} {unit.upper()}"
                      if engine.dialect.name == "mysql"
                      else f"strftime('%Y-%m-%d %H:%M:%f', 'now', '{offset}') || '000'")
        with engine.connect() as now_conn:
            at = now_conn.execute(sa.select(due)).scalar_one()
        rows = [{"queue_name": f"{prefix}-{i}", "handler": "jobs", "created_at": at,
                 "next_process_at": at, "attempt": 0, "reenqueue_attempt": 0,
                 "total_attempt": 0, "paused": False, "stop_requested": False,
                 "schedule": "once 2026-01-01T00:00:00+00:00", "priority": 0}
                for i in range(1, jobs + 1)]
        for start in range(0, jobs, 2_000):
            conn.execute(sa.insert(t), rows[start:start + 2_000])
        if analyze and engine.dialect.name == "mysql":
            conn.exec_driver_sql(f"ANALYZE TABLE {table}")


def run(url: str, jobs: int, pending: int, nodes: int, timeout: float,
        analyze: bool = False, runs: int = 0) -> str:
    table = f"bench_backlog_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(url)
    upgrade(engine, table)
    ctx = mp.get_context("spawn")
    go, stop, results = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_node, args=(url, table, f"node-{k}", go, stop, results,
                                                     runs > 0))
             for k in range(nodes)]
    try:
        _fill(engine, table, jobs, pending, analyze)
        if runs:
            seed_runs(engine, table, runs, days_ago=1)
        for p in procs:
            p.start()
        time.sleep(3)  # the processes import and build their schedulers
        go.set()
        began = time.monotonic()
        left = jobs
        while time.monotonic() - began < timeout:
            with engine.connect() as conn:
                left = conn.execute(sa.text(
                    f"SELECT count(*) FROM {table} WHERE handler = 'jobs'")).scalar_one()
            left -= pending
            if left <= 0:
                break
            time.sleep(0.2)
        took = time.monotonic() - began
        stop.set()
        per_node = sorted(results.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(timeout=30)
        with engine.connect() as conn:
            # The jobs' rows only: with history on, the built-in prune task has one too.
            total = conn.execute(sa.text(
                f"SELECT count(*) FROM {table} WHERE handler = 'jobs'")).scalar_one()
        done = (f"drained in {took:.1f} s" if left <= 0
                else f"{left} of {jobs} left after {took:.0f} s")
        ran = [name for _, names in per_node for name in names]
        distinct = set(ran)
        wrong = [n for n in distinct if not n.startswith("job-")]
        check = ("every job once" if len(ran) == len(distinct) == jobs and not wrong
                 and total == pending
                 else f"NOT EXACTLY ONCE: {len(ran)} runs of {len(distinct)} jobs "
                      f"({len(wrong)} not due), {total} rows left (pending {pending})")
        with_runs = f", history on beside {runs:,} run rows" if runs else ""
        return (f"{engine.dialect.name:<11} {nodes} node(s), {jobs} jobs due at once, "
                f"{pending} pending{with_runs}: {done}; per node "
                f"{' / '.join(str(len(names)) for _, names in per_node)}; {check}")
    finally:
        stop.set()
        for p in procs:
            if p.is_alive():
                p.terminate()
        with engine.begin() as conn:
            for suffix in ("_runs", "_items", "_groups", "_nodes", "_version", ""):
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}{suffix}")
        engine.dispose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("urls", nargs="+")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--pending", type=int, default=100_000)
    p.add_argument("--nodes", type=int, nargs="+", default=[1, 3])
    p.add_argument("--analyze", action="store_true", help="analyse the table once filled")
    p.add_argument("--timeout", type=float, default=90.0)
    p.add_argument("--runs", type=int, default=0,
                   help="seed this many run-history rows (a day old) and run with history on")
    args = p.parse_args()
    for url in args.urls:
        for n in args.nodes:
            print(run(url, args.jobs, args.pending, n, args.timeout, args.analyze, args.runs),
                  flush=True)


if __name__ == "__main__":
    main()
