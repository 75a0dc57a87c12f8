"""``python -m bench.burst``: a burst — ``--tasks`` tasks due at one instant — on one node.

The tasks (``FixedRate(3600)``, no-ops) are registered, then every row is set due at the same
moment, ``--lead`` seconds ahead; the start lag of each (its start − that moment) is measured
in the task. Repeated ``--rounds`` times. Not part of ``python -m bench`` (yet): it runs on an
existing server, by default the local PostgreSQL.

Usage::

    python -m bench.burst [--url URL] [--tasks 1000] [--workers 32] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from dbscheduler import FixedRate, Scheduler, TaskContext
from dbscheduler.migrate import upgrade
from dbscheduler.table import make_table


def burst(url: str, tasks: int, workers: int, rounds: int, lead: float) -> list[dict[str, Any]]:
    table = "burst_" + uuid.uuid4().hex[:8]
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    upgrade(engine, table)
    engine.dispose()
    lags: list[float] = []
    lock = threading.Lock()

    def noop(ctx: TaskContext) -> None:
        started = time.time()
        with lock:
            lags.append(started - ctx.scheduled_at.timestamp())

    scheduler = Scheduler(url, table=table, max_workers=workers, lease=30, poll_interval=1)
    for i in range(tasks):
        scheduler.add(f"b{i}", noop, schedule=FixedRate(3600))
    t = make_table(table)
    with scheduler.engine.begin() as conn:  # nothing due before the first burst
        conn.execute(sa.update(t).values(next_process_at=datetime(2099, 1, 1, tzinfo=timezone.utc)))
    scheduler.start()
    out = []
    try:
        for _ in range(rounds):
            with lock:
                lags.clear()
            at = datetime.fromtimestamp(time.time() + lead, timezone.utc)
            with scheduler.engine.begin() as conn:
                conn.execute(sa.update(t).where(t.c.queue_name.like("b%"),
                                                t.c.locked_by.is_(None))
                             .values(next_process_at=at))
            scheduler._wakeup.set()  # as the bench's activation does
            deadline = time.time() + lead + 30
            while time.time() < deadline:
                with lock:
                    if len(lags) >= tasks:
                        break
                time.sleep(0.05)
            with lock:
                got = sorted(lags)
            q = statistics.quantiles(got, n=100) if len(got) > 1 else [0.0] * 99
            out.append({"started": len(got), "p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000,
                        "max_ms": got[-1] * 1000 if got else float("nan")})
            time.sleep(1.0)
    finally:
        scheduler.shutdown(timeout=10)
        with scheduler.engine.begin() as conn:
            for suffix in ("_runs", "_items", "_groups", "_version", ""):
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}{suffix}"))
        scheduler.engine.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lead", type=float, default=1.0)
    args = parser.parse_args()
    for n, r in enumerate(burst(args.url, args.tasks, args.workers, args.rounds, args.lead)):
        print(f"burst {n + 1}: {r['started']}/{args.tasks} started, lag p50 {r['p50_ms']:.0f} ms, "
              f"p99 {r['p99_ms']:.0f} ms, max {r['max_ms']:.0f} ms")


if __name__ == "__main__":
    main()
