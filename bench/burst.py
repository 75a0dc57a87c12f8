"""The burst workload: N tasks all due at one instant, on one node.

Schedules cluster in practice (every job "on the hour", a deploy that registers a thousand tasks
at once), and a scheduler tuned for an even flow can still take seconds to drain a pile of work
that is due together. Each system gets its natural equivalent (see the ``burst`` command of
``bench/nodes/*``): dbscheduler's rows are seeded far in the future and one ``UPDATE`` makes
them all due at the same instant, then the node is woken (NOTIFY on PostgreSQL); APScheduler
gets one-off jobs whose run time is that instant; Procrastinate gets periodic tasks whose cron
names that whole second. The lag of a task is its start − the common due instant.

Part of ``python -m bench`` (workload ``burst``); also on its own, against any server::

    python -m bench.burst [--system dbs-pg] [--pg-url URL] [--tasks 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.infra import SHARED_PG_URL, Databases, Node, kill_all, log, nodes_cleanup
from bench.stats import percentile
from bench.workloads import (
    SYSTEMS,
    Context,
    Settings,
    System,
    create_dbs_table,
    start_nodes,
)

BURST_PERIOD = 3600.0
"""dbscheduler's burst tasks are ``FixedRate(3600)``: after running they are out of the way."""


def burst_session(ctx: Context, system: System, settings: Settings) -> dict[str, Any]:
    """Every size of ``settings.burst_sizes`` on a fresh node and table, ``burst_rounds``
    bursts each; returns ``{str(size): [one dict per burst]}``."""
    out: dict[str, Any] = {}
    failed = None
    for size, rounds in zip(settings.burst_sizes, settings.burst_rounds, strict=True):
        if failed is not None:
            # As the throughput ramp stops at its first failed step: a system that cannot
            # start a smaller burst within the limit misses more of a larger one, and would
            # only spend minutes adding jobs and draining the backlog to show it.
            out[str(size)] = {"skipped": f"{failed:,} not all started"}
            continue
        runs = burst_size(ctx, system, settings, size, rounds)
        out[str(size)] = runs
        missed = sorted(r["missed"] for r in runs)
        if missed and missed[len(missed) // 2] > 0:
            failed = size
    return out


def burst_size(ctx: Context, system: System, settings: Settings, size: int,
               rounds: int) -> list[dict[str, Any]]:
    """One node with ``size`` tasks; ``rounds`` bursts one after the other (each waits until
    every task of the previous one started, or counted as missed)."""
    backend = ctx.backend(system)
    assert backend is not None
    if system.is_dbs:
        create_dbs_table(backend, rows=size, period=BURST_PERIOD)
    runs = []
    with nodes_cleanup() as nodes:
        (node,) = start_nodes(ctx, system, backend, 1, nodes, mode="burst", n=size,
                              workers=settings.workers, lease=settings.lease,
                              poll=settings.poll)
        backend.analyze()
        for r in range(rounds):
            reply = node.call("burst", {"n": size, "lead": settings.burst_lead}, timeout=300)
            run = collect(ctx, node, size, float(reply["t0"]), settings.burst_missed_after)
            # Set-up that overran the lead (peers adding jobs one by one): in the lag already,
            # recorded to tell the two apart.
            run["setup_late_ms"] = 1000 * float(reply.get("late", 0.0))
            runs.append(run)
            log(f"  {system.key} burst of {size:,} #{r + 1}: lag p50 {_ms(run['p50_ms'])}, "
                f"p99 {_ms(run['p99_ms'])}, max {_ms(run['max_started_ms'])} (started), "
                f"missed {run['missed']:,}, dup {run['duplicates']}, set-up late "
                f"{run['setup_late_ms']:,.0f} ms")
            if r + 1 < rounds:  # the last burst's stragglers go with the node
                run["drain_seconds"] = drain(ctx, node, settings.burst_missed_after)
    return runs


def _ms(value: float) -> str:
    return "missed" if math.isinf(value) else f"{value:,.0f} ms"


def drain(ctx: Context, node: Node, cap: float) -> float:
    """Wait until the node has started nothing for a second (at most ``cap`` s): the next
    burst should not queue behind the stragglers of this one. Returns the seconds waited."""
    began = time.time()
    quiet_since = began
    while time.time() - began < cap:
        time.sleep(0.2)
        if node.dump(ctx.tmp):
            quiet_since = time.time()
        elif time.time() - quiet_since >= 1.0:
            break
    return time.time() - began


def collect(ctx: Context, node: Node, size: int, t0: float, missed_after: float
            ) -> dict[str, Any]:
    """Poll the node's samples of the burst due at ``t0`` until all ``size`` tasks started or
    ``missed_after`` s passed; a start after that counts as missed, a second start of a task
    as a duplicate."""
    first: dict[int, float] = {}
    duplicates = 0

    def take() -> None:
        nonlocal duplicates
        for idx, scheduled, started in node.dump(ctx.tmp):
            # Another fire time (an earlier burst's straggler, Procrastinate's ticker): not ours.
            if idx < 0 or abs(scheduled - t0) > 0.5:
                continue
            if idx in first:
                duplicates += 1
            else:
                first[idx] = started

    deadline = t0 + missed_after
    while len(first) < size and time.time() < deadline:
        time.sleep(0.1)
        take()
    time.sleep(0.3)  # a second start of a task right after the last first one
    take()
    lags = sorted((s - t0) * 1000 for s in first.values() if s - t0 <= missed_after)
    missed = size - len(lags)
    # A missed task's lag is "more than missed_after": infinite for the percentiles, so a
    # burst that drops 2 % shows p99 > 10 s rather than the p99 of those that made it.
    every = lags + [math.inf] * missed
    return {"tasks": size, "t0": t0, "started": len(lags), "missed": missed,
            "duplicates": duplicates, "missed_after_s": missed_after,
            "p50_ms": percentile(every, 0.5), "p99_ms": percentile(every, 0.99),
            "max_ms": every[-1] if every else math.nan,  # all started within
            "max_started_ms": lags[-1] if lags else math.nan}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.burst",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--system", default="dbs-pg", choices=list(SYSTEMS))
    parser.add_argument("--pg-url", default=SHARED_PG_URL,
                        help="admin URL of a PostgreSQL server (a database dbsbench_* is "
                             "created and dropped there)")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lead", type=float, default=1.0)
    args = parser.parse_args(argv)
    settings = Settings(workers=args.workers, burst_sizes=(args.tasks,),
                        burst_rounds=(args.rounds,), burst_lead=args.lead)
    dbs = Databases(args.pg_url)
    scratch = Path(tempfile.mkdtemp(prefix="dbsbench-burst-"))
    try:
        ctx = Context(dbs, scratch)
        runs = burst_size(ctx, SYSTEMS[args.system], settings, args.tasks, args.rounds)
    finally:
        kill_all()
        dbs.drop_all()
        shutil.rmtree(scratch, ignore_errors=True)
    for n, r in enumerate(runs):
        print(f"burst {n + 1}: {r['started']}/{args.tasks} started, lag p50 {r['p50_ms']:.0f} ms, "
              f"p99 {r['p99_ms']:.0f} ms, max {r['max_started_ms']:.0f} ms, missed {r['missed']}, "
              f"duplicates {r['duplicates']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
