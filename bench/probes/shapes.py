"""``python -m bench.probes.shapes URL …``: does one node keep every task's cadence whatever the
number of tasks (handlers) it has?

One node, ``N`` ordinary named tasks (each its own handler), ``FixedDelay`` of ``--every``
seconds, lease ``--lease`` seconds, ``max_workers`` of ``--workers``; the node runs for
``--seconds`` and each task's runs are counted. A task's *share* is its runs divided by the
ideal number (``seconds / every``); the line printed per ``N`` gives the slowest task's share
(the figure the "any number of tasks" goal reads: at least 60 %), the median share and the
total executions. Each ``N`` gets a table of its own, dropped at the end::

    .venv/bin/python -m bench.probes.shapes postgresql+psycopg://postgres@127.0.0.1/test \\
        mysql+pymysql://root@127.0.0.1/test --tasks 16 40 100
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from collections import Counter

import sqlalchemy as sa

from dbscheduler import FixedDelay, Scheduler
from dbscheduler.migrate import upgrade


def run_one(url: str, tasks: int, seconds: float, every: float, lease: float,
            workers: int) -> dict[str, object]:
    """One node with ``tasks`` tasks for ``seconds``: the share of each task's cadence kept."""
    table = f"bench_shapes_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(url)
    upgrade(engine, table)
    runs: Counter[str] = Counter()
    lock = threading.Lock()
    scheduler = Scheduler(url, table=table, node_id="shapes", lease=lease,
                          poll_interval=1.0, max_workers=workers, history=None,
                          overdue_check=None)
    names = [f"task-{i:05d}" for i in range(tasks)]
    for name in names:
        def task(name: str = name) -> None:
            with lock:
                runs[name] += 1
        scheduler.add(name, task, schedule=FixedDelay(every))
    try:
        scheduler.start()
        # The cadence is read from the first run on: registration and start-up are not
        # what this measures.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                if runs:
                    break
            time.sleep(0.01)
        with lock:
            start = dict(runs)
        time.sleep(seconds)
        with lock:
            end = dict(runs)
    finally:
        scheduler.shutdown(timeout=5)
        with engine.begin() as conn:
            for suffix in ("_runs", "_items", "_groups", "_nodes", "_version", ""):
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}{suffix}")
        engine.dispose()
    ideal = seconds / every
    shares = sorted((end.get(n, 0) - start.get(n, 0)) / ideal for n in names)
    return {
        "dialect": sa.make_url(url).get_backend_name(), "tasks": tasks,
        "slowest_share": round(shares[0], 3), "median_share": round(statistics.median(shares), 3),
        "executions": sum(end.values()) - sum(start.values()), "seconds": seconds,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("urls", nargs="+")
    p.add_argument("--tasks", type=int, nargs="+", default=[16, 40, 100])
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--every", type=float, default=0.2)
    p.add_argument("--lease", type=float, default=3.0)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    args = p.parse_args()
    for url in args.urls:
        for n in args.tasks:
            result = run_one(url, n, args.seconds, args.every, args.lease, args.workers)
            if args.json:
                print(json.dumps(result), flush=True)
            else:
                print(f"{result['dialect']:<11} {n:>6} tasks: slowest task kept "
                      f"{result['slowest_share']:.0%} of its cadence, median "
                      f"{result['median_share']:.0%}, {result['executions']} executions "
                      f"in {args.seconds:g} s", flush=True)


if __name__ == "__main__":
    main()
