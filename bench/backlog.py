"""``python -m bench.backlog URL --jobs 20000 --nodes 1 3``: nodes draining a backlog of one
handler's one-off jobs, all due at once, from a table whose statistics say nothing yet.

For each number of nodes: a fresh table (on PostgreSQL with autovacuum off, so it is never
analysed) gets ``--jobs`` one-off jobs of the handler ``jobs`` due a minute ago; then that many
node processes (``max_workers`` 32, lease 10 s, no history) start together and run them (a
no-op). Printed: the seconds until the table is empty (or the rows left at ``--timeout``), and
how many executions each node ran — nodes that share a backlog each do a share of it.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
import uuid
from typing import Any

import sqlalchemy as sa

from dbscheduler import Scheduler
from dbscheduler.migrate import upgrade


def _node(url: str, table: str, name: str, go: Any, stop: Any, results: Any) -> None:
    ran = 0

    def job() -> None:
        nonlocal ran
        ran += 1

    scheduler = Scheduler(url, table=table, node_id=name, max_workers=32, lease=10,
                          poll_interval=1, history=None, overdue_check=None)
    scheduler.handler("jobs")(job)
    go.wait()
    scheduler.start()
    stop.wait()
    scheduler.shutdown(timeout=5)
    results.put((name, ran))


def _fill(engine: sa.Engine, table: str, jobs: int) -> None:
    columns = ("queue_name, handler, created_at, next_process_at, attempt, reenqueue_attempt, "
               "total_attempt, paused, stop_requested, schedule, priority")
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            conn.exec_driver_sql(
                f"INSERT INTO {table} ({columns}) SELECT 'job-' || i, 'jobs', now(), "
                "now() - interval '1 minute', 0, 0, 0, false, false, "
                "'once 2026-01-01T00:00:00+00:00', 0 FROM generate_series(1, %(n)s) i",
                {"n": jobs})
            return
        t = sa.table(table, *(sa.column(c.strip()) for c in columns.split(",")))
        due = sa.text("UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE" if engine.dialect.name == "mysql"
                      else "strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 minute') || '000'")
        with engine.connect() as now_conn:
            at = now_conn.execute(sa.select(due)).scalar_one()
        rows = [{"queue_name": f"job-{i}", "handler": "jobs", "created_at": at,
                 "next_process_at": at, "attempt": 0, "reenqueue_attempt": 0,
                 "total_attempt": 0, "paused": False, "stop_requested": False,
                 "schedule": "once 2026-01-01T00:00:00+00:00", "priority": 0}
                for i in range(jobs)]
        for start in range(0, jobs, 2_000):
            conn.execute(sa.insert(t), rows[start:start + 2_000])


def run(url: str, jobs: int, nodes: int, timeout: float) -> str:
    table = f"bench_backlog_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(url)
    upgrade(engine, table)
    ctx = mp.get_context("spawn")
    go, stop, results = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_node, args=(url, table, f"node-{k}", go, stop, results))
             for k in range(nodes)]
    try:
        _fill(engine, table, jobs)
        for p in procs:
            p.start()
        time.sleep(3)  # the processes import and build their schedulers
        go.set()
        began = time.monotonic()
        left = jobs
        while time.monotonic() - began < timeout:
            with engine.connect() as conn:
                left = conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()
            if left == 0:
                break
            time.sleep(0.2)
        took = time.monotonic() - began
        stop.set()
        per_node = sorted(results.get(timeout=30) for _ in procs)
        for p in procs:
            p.join(timeout=30)
        done = (f"drained in {took:.1f} s" if left == 0
                else f"{left} of {jobs} left after {took:.0f} s")
        return (f"{engine.dialect.name:<11} {nodes} node(s), {jobs} jobs due at once: {done}; "
                f"per node {' / '.join(str(n) for _, n in per_node)}")
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
    p.add_argument("--nodes", type=int, nargs="+", default=[1, 3])
    p.add_argument("--timeout", type=float, default=90.0)
    args = p.parse_args()
    for url in args.urls:
        for n in args.nodes:
            print(run(url, args.jobs, n, args.timeout), flush=True)


if __name__ == "__main__":
    main()
