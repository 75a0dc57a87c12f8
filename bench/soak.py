"""The soak: one node under a sustained offered rate for minutes, its RSS sampled throughout.

A scheduler that leaks a little per execution (a listener keeping references, a growing
cache of statements, a list of finished futures) passes every short workload and fails in
production after a week; minutes at 2,000 executions/s is a few hundred thousand executions,
enough for a leak of a few hundred bytes each to show as a slope. Run on dbscheduler ·
PostgreSQL only (what the project ships first); the peers and other backends are skipped.
"""

from __future__ import annotations

import math
import time
from array import array
from typing import Any

from bench.infra import log, nodes_cleanup
from bench.memory import growth, rss_mb
from bench.stats import Grid, Sample, percentile
from bench.workloads import Context, Settings, System, create_dbs_table, start_nodes


class Tally:
    """Executions, duplicates and lags of the samples of ``[w0, w1)``, counted as dumps come
    in (a soak is about a million samples: keeping them all would cost the orchestrator more
    memory than the node it measures)."""

    def __init__(self, grid: Grid, w0: float, w1: float) -> None:
        self.grid, self.w0, self.w1 = grid, w0, w1
        self.executions = 0
        self.duplicates = 0
        self.ran = 0  # distinct fire times due in the window that ran
        self.lags = array("d")
        self._last: dict[int, int] = {}

    def add(self, samples: list[Sample]) -> None:
        for idx, scheduled, started in samples:
            key = self.grid.key(idx, scheduled)
            if key is None:
                continue
            # One task's executions never overlap, so its fire times arrive in order: one
            # not after the last seen is a second run of it.
            last = self._last.get(idx)
            if last is not None and key <= last:
                self.duplicates += 1
                continue
            self._last[idx] = key
            if self.w0 <= started < self.w1:
                self.executions += 1
            if self.w0 <= scheduled < self.w1:
                self.ran += 1
                self.lags.append((started - scheduled) * 1000)

    def figures(self) -> dict[str, float]:
        due = sum(1 for _ in self.grid.expected(self.w0, self.w1))
        lags = sorted(self.lags)
        return {"executions": self.executions, "duplicates": self.duplicates,
                "due": due, "missed": max(0, due - self.ran),
                "executions_per_s": self.executions / (self.w1 - self.w0),
                "lag_p50_ms": percentile(lags, 0.5), "lag_p99_ms": percentile(lags, 0.99)}


def soak_session(ctx: Context, system: System, settings: Settings) -> dict[str, Any]:
    """``settings.soak_rate`` executions/s offered on one node (tasks every ``system.period``
    s, spread evenly); after ``soak_warmup`` s the node's RSS is sampled every
    ``soak_sample`` s for ``soak_seconds`` s. Samples are dumped at every RSS sample so the
    node's own record of them does not grow."""
    period = system.period
    n = max(1, round(settings.soak_rate * period))
    backend = ctx.backend(system)
    assert backend is not None
    create_dbs_table(backend, rows=n, period=period)
    with nodes_cleanup() as nodes:
        (node,) = start_nodes(
            ctx, system, backend, 1, nodes, mode="rate", n=n, period=period,
            workers=settings.workers, lease=settings.lease, poll=settings.poll,
            max_seconds=settings.soak_warmup + settings.soak_seconds + 180)
        reply = node.call("activate", {"start": 0, "stop": n, "period": period, "lead": 0.5},
                          timeout=120)
        t0 = float(reply["t0"])
        w0 = t0 + settings.soak_warmup
        w1 = w0 + settings.soak_seconds
        tally = Tally(Grid(period, {i: t0 + i * period / n for i in range(n)}), w0, w1)
        points: list[tuple[float, float]] = []
        at = w0
        while True:
            time.sleep(max(0.0, at - time.time()))
            points.append((time.time() - w0, rss_mb(node.proc.pid)))
            tally.add(node.dump(ctx.tmp))
            if at >= w1:
                break
            if len(points) % 12 == 1:
                log(f"  {system.key} soak {points[-1][0]:.0f} s: RSS {points[-1][1]:.1f} MB")
            at = min(w1, at + settings.soak_sample)
        time.sleep(0.5)  # fire times of the last moments: later starts count as missed
        tally.add(node.dump(ctx.tmp))
    result: dict[str, Any] = {"rate": settings.soak_rate, "seconds": settings.soak_seconds,
                              "warmup": settings.soak_warmup, "points": points,
                              **growth([p for p in points if not math.isnan(p[1])]),
                              **tally.figures()}
    log(f"  {system.key} soak {settings.soak_seconds:.0f} s at {settings.soak_rate}/s: RSS "
        f"{result['start_mb']:.1f} → {result['end_mb']:.1f} MB "
        f"({result['growth_mb']:+.1f} MB, {result['slope_mb_per_min']:+.2f} MB/min), "
        f"{result['executions']:,} executions ({result['executions_per_s']:,.0f}/s), "
        f"dup {result['duplicates']}, missed {result['missed']}")
    return result
