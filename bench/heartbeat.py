"""``python -m bench --heartbeat``: heartbeat spacing on a node whose tasks burn CPU.

One node (SQLite file by default, or ``--heartbeat-url``) runs one long task, so that the
heartbeat has a lease to extend every ``lease / 3``, while N other threads of the same
process spin in pure Python (CPU-bound tasks run in threads, the worst case). Each beat's
start is recorded on the monotonic clock; the spacing between beats is printed as p50 / p99 /
max against the nominal interval, for each N in ``--heartbeat-threads``.

A beat needs the GIL after every wake-up and around each database round trip; with N busy
threads each hand-over can take up to ``sys.getswitchinterval()`` (5 ms by default) times
the number of threads in line. Absolute deadlines keep that latency from adding up across
beats: the spacing's mean stays at the interval even when single beats are late.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import threading
import time
from pathlib import Path

import sqlalchemy as sa

from bench.stats import percentile
from dbscheduler import FixedDelay, Scheduler, TaskContext
from dbscheduler._engine.heartbeat import Heartbeat
from dbscheduler.migrate import upgrade


def _spin(stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        for i in range(10_000):  # pure Python: holds the GIL between switch intervals
            n += i * i
    del n


def measure(
    url: str, lease: float, threads: int, seconds: float
) -> tuple[list[float], list[float], int]:
    """Beat start times (monotonic) and beat durations over ``seconds`` with ``threads`` busy
    threads, and how many leases the node counted as lost meanwhile."""
    starts: list[float] = []
    durations: list[float] = []
    lost: list[str] = []
    beat = Heartbeat.beat

    def recording_beat(self: Heartbeat) -> None:
        start = time.monotonic()
        starts.append(start)
        beat(self)
        durations.append(time.monotonic() - start)

    Heartbeat.beat = recording_beat  # type: ignore[method-assign]
    stop = threading.Event()
    running = threading.Event()

    def long_task(ctx: TaskContext) -> None:
        running.set()
        ctx.stop_requested.wait(seconds + 60)

    table = f"bench_hb_{threads}_{int(time.time())}"
    engine = sa.create_engine(url)
    upgrade(engine, table)
    scheduler = Scheduler(url, table=table, lease=lease, poll_interval=1, max_workers=2)
    scheduler.add("long", long_task, schedule=FixedDelay(3600))

    class Lost:
        def on_lease_lost(self, ctx: TaskContext) -> None:
            lost.append(ctx.name)

    scheduler.add_listener(Lost())
    busy = [threading.Thread(target=_spin, args=(stop,), daemon=True) for _ in range(threads)]
    try:
        scheduler.start()
        scheduler.trigger("long")
        if not running.wait(30):
            raise RuntimeError("the long task never started")
        for t in busy:
            t.start()
        starts.clear()
        durations.clear()
        time.sleep(seconds)
        measured = list(starts), list(durations), len(lost)
    finally:
        stop.set()
        for t in busy:
            t.join()
        Heartbeat.beat = beat  # type: ignore[method-assign]
        scheduler.shutdown(5)
        for name in (table, f"{table}_version"):
            sa.Table(name, sa.MetaData()).drop(engine, checkfirst=True)
        engine.dispose()
    return measured


def heartbeat(args: argparse.Namespace) -> int:
    """Print the spacing table; ``args`` from ``python -m bench --heartbeat``."""
    lease = args.heartbeat_lease
    interval = lease / 3
    with tempfile.TemporaryDirectory() as tmp:
        url = args.heartbeat_url or f"sqlite:///{Path(tmp) / 'heartbeat.sqlite3'}"
        print(f"### heartbeat spacing: lease {lease:g} s, nominal interval {interval:.3f} s, "
              f"{args.heartbeat_seconds:g} s per row, switch interval "
              f"{sys.getswitchinterval() * 1000:g} ms, {url.split(':')[0]}\n")
        print("| busy threads | beats | spacing mean s | p50 s | p99 s | max s "
              "| beat p50 ms | beat max ms | leases lost |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for threads in (int(n) for n in args.heartbeat_threads.split(",")):
            starts, durations, lost = measure(url, lease, threads, args.heartbeat_seconds)
            spacing = sorted(b - a for a, b in itertools.pairwise(starts))
            durations.sort()
            if not spacing or not durations:
                print(f"| {threads} | {len(starts)} | – | – | – | – | – | – | {lost} |")
                continue
            mean = sum(spacing) / len(spacing)
            print(f"| {threads} | {len(starts)} | {mean:.3f} | {percentile(spacing, 0.5):.3f} "
                  f"| {percentile(spacing, 0.99):.3f} | {spacing[-1]:.3f} "
                  f"| {percentile(durations, 0.5) * 1000:.0f} | {durations[-1] * 1000:.0f} "
                  f"| {lost} |", flush=True)
    return 0
