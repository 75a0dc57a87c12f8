"""A node's start with many tasks: ``python -m bench.probes.startup URL [URL …] [--tasks N]``.

For each URL, ``--rounds`` times: a fresh table, then a first start of a node declaring
``--tasks`` tasks (``FixedRate(3600)``, never due while measured: every row is new and
inserted by this start), then ``--restarts`` starts of a new node over the rows that start
left (every row exists). Printed per start: the wall-clock seconds of ``Scheduler.start()`` and
the CPU seconds of this process within it (the client's share; the rest is the server and the
round trips). The table ``bench_startup`` (and its companion tables) is dropped and created
again; on the machine's own servers, point it at a database you may write to.

The goal: a start with 10,000 tasks within 1 s on every real dialect::

    python -m bench.probes.startup postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        mysql+pymysql://root@127.0.0.1:3306/test sqlite:///startup.sqlite3 --tasks 10000
"""

from __future__ import annotations

import argparse
import statistics
import time

import sqlalchemy as sa

from bench.probes.saturate import fresh_table
from dbscheduler import FixedRate, Scheduler

TABLE = "bench_startup"


def one_start(url: str, tasks: int, node: str) -> tuple[float, float]:
    """Seconds and this process's CPU seconds of one ``start()`` with ``tasks`` tasks."""
    scheduler = Scheduler(url, table=TABLE, node_id=node, max_workers=4)
    for i in range(tasks):
        scheduler.add(f"t{i}", lambda: None, schedule=FixedRate(3600))
    cpu, began = time.process_time(), time.perf_counter()
    scheduler.start()
    took, cpu = time.perf_counter() - began, time.process_time() - cpu
    scheduler.shutdown(timeout=5)
    return took, cpu


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.probes.startup", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("urls", nargs="+", metavar="URL")
    p.add_argument("--tasks", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--restarts", type=int, default=1)
    args = p.parse_args(argv)
    for url in args.urls:
        name = sa.make_url(url).drivername
        first: list[tuple[float, float]] = []
        again: list[tuple[float, float]] = []
        for _ in range(args.rounds):
            fresh_table(url, table=TABLE)
            first.append(one_start(url, args.tasks, "first"))
            again += [one_start(url, args.tasks, f"again-{i}") for i in range(args.restarts)]
        for label, runs in (("first start", first), ("start again", again)):
            if runs:
                print(f"{name:22} {label}, {args.tasks:,} tasks: "
                      f"{', '.join(f'{s:.2f}' for s, _ in runs)} s "
                      f"(median {statistics.median(s for s, _ in runs):.2f}); client CPU "
                      f"{', '.join(f'{c:.2f}' for _, c in runs)} s", flush=True)


if __name__ == "__main__":
    main()
