"""``python -m bench.probes.burst_picks``: how a node drains a burst, pick by pick.

One in-process node (32 workers) with ``--tasks`` no-op tasks, every one made due at one
instant, ``--rounds`` times; for each burst: the start lag, how many picks drained it and how
many rows each took (a listener's ``on_pick``), the wall and thread CPU time of each pick, and
the CPU each of the node's threads spent per execution (from ``/proc``, Linux), with the
machine's CPU reference (:func:`bench.run.cpu_reference`) before and after. Where
:mod:`bench.burst` says how long a burst takes, this says how the time was spent::

    python -m bench.probes.burst_picks [--url URL] [--tasks 1000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import threading
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from bench.infra import SHARED_PG_URL
from bench.run import cpu_reference
from bench.stats import percentile
from dbscheduler import FixedRate, Listener, Scheduler
from dbscheduler.migrate import upgrade, version_table_for
from dbscheduler.table import groups_table_name, items_table_name, make_table, runs_table_name

TABLE = "bench_burst_picks"


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's threads, summed by name with digits dropped
    (``dbscheduler-worker-N``); empty where ``/proc`` has no per-thread times."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: defaultdict[str, float] = defaultdict(float)
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        name = re.sub(r"\d+", "N", names.get(int(tid), "other"))
        out[name] += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.burst_picks",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=SHARED_PG_URL, help="database URL (a table "
                        f"{TABLE} is created there and dropped at the end)")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=32)
    args = parser.parse_args(argv)
    engine = sa.create_engine(args.url)
    upgrade(engine, TABLE)
    picks: list[tuple[float, int]] = []
    starts: list[float] = []
    timings: list[tuple[float, float]] = []

    class Picks(Listener):
        def on_pick(self, asked: int, got: int) -> None:
            picks.append((time.time(), got))

    node = Scheduler(args.url, table=TABLE, node_id="burst", max_workers=args.workers,
                     lease=timedelta(seconds=30))
    node.add_listener(Picks())
    for i in range(args.tasks):
        node.add(f"b{i}", lambda ctx: starts.append(time.time()), schedule=FixedRate(3600))
    node.start()
    store: Any = node._store
    pick = store.pick

    def timed_pick(*a: Any, **kw: Any) -> Any:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return pick(*a, **kw)
        finally:
            timings.append((time.perf_counter() - wall, time.thread_time() - cpu))

    store.pick = timed_pick
    table = make_table(TABLE)
    spent: defaultdict[str, float] = defaultdict(float)
    executions = 0
    reference = cpu_reference()
    try:
        time.sleep(1.0)
        for r in range(args.rounds):
            picks.clear()
            starts.clear()
            timings.clear()
            t0 = time.time() + 0.5
            with engine.begin() as conn:
                conn.execute(sa.update(table).where(table.c.locked_by.is_(None)).values(
                    next_process_at=datetime.fromtimestamp(t0, timezone.utc)))
            node._wakeup.set()
            time.sleep(max(0.0, t0 - 0.05 - time.time()))
            before, process = thread_cpu(), time.process_time()
            while len(starts) < args.tasks and time.time() < t0 + 30:
                time.sleep(0.05)
            time.sleep(0.3)
            if r > 0:  # the first burst warms up (statements prepared, caches filled)
                for name, seconds in thread_cpu().items():
                    spent[name] += seconds - before.get(name, 0.0)
                spent["(process)"] += time.process_time() - process
                executions += len(starts)
            lags = sorted((s - t0) * 1000 for s in starts)
            sizes = [got for at, got in picks if at >= t0 - 0.01]
            print(f"burst {r + 1}: {len(lags)}/{args.tasks} started, lag p50 "
                  f"{percentile(lags, 0.5):.0f} ms, p99 {percentile(lags, 0.99):.0f} ms; "
                  f"{len(sizes)} picks; pick wall p50 "
                  f"{statistics.median(w for w, _ in timings) * 1000:.1f} ms, thread CPU p50 "
                  f"{statistics.median(c for _, c in timings) * 1000:.1f} ms")
            print(f"  rows per pick: {' '.join(map(str, sizes))}")
            time.sleep(1.0)
        if executions:
            print(f"CPU per execution, bursts 2-{args.rounds} ({executions} executions; CPU "
                  f"reference {reference:.1f} ms before, {cpu_reference():.1f} ms after):")
            for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
                print(f"  {name:28} {seconds / executions * 1e6:6.0f} µs")
    finally:
        node.shutdown(timeout=5)
        for name in (runs_table_name(TABLE), groups_table_name(TABLE),
                     items_table_name(TABLE), TABLE, version_table_for(TABLE)):
            sa.Table(name, sa.MetaData()).drop(engine, checkfirst=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
