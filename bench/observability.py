"""The cost of observability on one dbscheduler node at a fixed offered rate: nothing,
PrometheusMetrics, metrics + OpenTelemetryTracing (every span recorded), and metrics +
tracing sampling 10 % of the traces.

Two figures per mode: executions/s (at the offered rate a node on a small machine is near
its ceiling, so any extra work shows as lost executions) and the node's CPU time per
execution (process time over the window / executions started in it), which a busy shared
machine disturbs less. The modes take turns (off, metrics, tracing, sampled, off, …) so that
drift of the machine falls on every mode alike.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

from bench.infra import log, nodes_cleanup
from bench.stats import Grid, window_figures
from bench.workloads import Context, Settings, System, create_dbs_table, start_nodes

OFFERED = 2000
"""Executions/s offered (tasks × 1 / period)."""
ROUNDS = 3
MODES = ("off", "metrics", "tracing", "sampled")
WARM_UP = 1.0
"""Seconds after the tasks become due before the first window."""


def _session(ctx: Context, system: System, settings: Settings, mode: str,
             rate: int) -> list[dict[str, float]]:
    period = system.period
    n = max(1, round(rate * period))
    backend = ctx.backend(system)
    assert backend is not None
    create_dbs_table(backend, rows=n, period=period)
    with nodes_cleanup() as nodes:
        (node,) = start_nodes(ctx, system, backend, 1, nodes, mode="rate", n=n, period=period,
                              workers=settings.workers, lease=settings.lease,
                              poll=settings.poll, observe=mode)
        reply = node.call("activate", {"start": 0, "stop": n, "period": period, "lead": 0.5},
                          timeout=120)
        t0 = float(reply["t0"])
        grid = Grid(period, {i: t0 + i * period / n for i in range(n)})
        time.sleep(max(0.0, t0 + WARM_UP - time.time()))
        spans = []
        for _ in range(settings.windows):
            before = node.call("stats")
            time.sleep(settings.window)
            spans.append((before, node.call("stats")))
        time.sleep(0.4)  # later starts count as missed
        samples = node.dump(ctx.tmp)
    windows = []
    for before, after in spans:
        figures = window_figures(samples, grid, before["time"], after["time"])
        executions = figures["executions_per_s"] * (after["time"] - before["time"])
        figures["cpu_us_per_execution"] = (1e6 * (after["cpu"] - before["cpu"]) / executions
                                           if executions else math.nan)
        windows.append(figures)
    return windows


def listener_cost(executions: int = 20_000, runs: int = 3) -> dict[str, float]:
    """CPU µs one execution costs in the listeners alone (on_started in a fresh context, as
    the executor calls it, then on_finished), per mode, median of ``runs``: what the node
    figures above include, measured in this process without the database or the machine's
    other load in the way."""
    import contextvars
    from datetime import datetime, timedelta, timezone

    from prometheus_client import CollectorRegistry

    from bench.nodes.dbs import tracer_provider
    from dbscheduler import Outcome, TaskContext
    from dbscheduler.listeners import Listeners
    from dbscheduler.metrics import PrometheusMetrics
    from dbscheduler.tracing import OpenTelemetryTracing

    now = datetime.now(timezone.utc)
    contexts = [TaskContext(f"b{i % 200}", "node", 1, 0, i, now, now, now, None)
                for i in range(executions)]
    outcome = Outcome("success", timedelta(milliseconds=1), None, now)
    cost: dict[str, float] = {}
    for mode in MODES:
        listeners = Listeners()
        if mode != "off":
            listeners.add(PrometheusMetrics(CollectorRegistry()))
        if mode in ("tracing", "sampled"):
            listeners.add(OpenTelemetryTracing(tracer_provider(sampled=mode == "sampled")))
        times = []
        for _ in range(runs):
            began = time.process_time()
            for c in contexts:
                contextvars.copy_context().run(listeners.on_started, c)
                listeners.on_finished(c, outcome)
            times.append((time.process_time() - began) / executions * 1e6)
        cost[mode] = statistics.median(times)
    return cost


def observability_session(ctx: Context, system: System, settings: Settings,
                          rounds: int = ROUNDS, rate: int = OFFERED) -> dict[str, Any]:
    windows: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            got = _session(ctx, system, settings, mode, rate)
            windows[mode].extend(got)
            log(f"  {system.key} observability {mode} at {rate}/s offered: "
                f"{statistics.median(w['executions_per_s'] for w in got):,.0f} exec/s, "
                f"{statistics.median(w['cpu_us_per_execution'] for w in got):,.0f} µs CPU "
                f"per execution, lag p99 "
                f"{statistics.median(w['lag_p99_ms'] for w in got):,.1f} ms")
    out: dict[str, Any] = {"rate": rate, "windows": windows}
    out["listener_us"] = listener_cost()
    log(f"  {system.key} listener CPU per execution, in process: " + ", ".join(
        f"{mode} {us:.1f} µs" for mode, us in out["listener_us"].items()))
    off = statistics.median(w["executions_per_s"] for w in windows["off"])
    cpu_off = statistics.median(w["cpu_us_per_execution"] for w in windows["off"])
    for mode in MODES:
        per_s = statistics.median(w["executions_per_s"] for w in windows[mode])
        cpu = statistics.median(w["cpu_us_per_execution"] for w in windows[mode])
        out[f"{mode}_per_s"] = per_s
        out[f"{mode}_loss_percent"] = 100 * (off - per_s) / off if off else math.nan
        out[f"{mode}_cpu_us"] = cpu
        out[f"{mode}_cpu_extra_percent"] = 100 * (cpu - cpu_off) / cpu_off if cpu_off else math.nan
    log(f"  {system.key} observability at {rate}/s offered: " + ", ".join(
        f"{mode} {out[f'{mode}_per_s']:,.0f} exec/s ({-out[f'{mode}_loss_percent']:+.1f} %), "
        f"{out[f'{mode}_cpu_us']:,.0f} µs CPU ({out[f'{mode}_cpu_extra_percent']:+.1f} %)"
        for mode in MODES))
    return out
