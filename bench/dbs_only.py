"""Workloads of dbscheduler alone: wake-up (trigger → start) and failover (kill -9 → start on
another node)."""

from __future__ import annotations

import math
import random
import time
from typing import Any

from bench.infra import NodeError, log, nodes_cleanup
from bench.stats import Sample, percentile
from bench.workloads import TABLE, Context, Settings, System, create_dbs_table, start_nodes


# -- wake-up (dbscheduler only) -------------------------------------------------------------
def wakeup_session(ctx: Context, system: System, settings: Settings) -> list[dict[str, Any]]:
    """One node polling every ``wake_poll`` s; another process (this one, through a
    never-started Scheduler) triggers its task; latency = start on the node − trigger call.
    A run is a group of ``wake_triggers`` triggers."""
    from dbscheduler import Scheduler
    from dbscheduler.errors import TaskRunning

    triggers = (settings.wake_triggers if system.backend == "postgresql"
                else settings.wake_triggers_polling)
    backend = ctx.backend(system)
    assert backend is not None
    create_dbs_table(backend)
    operator = Scheduler(backend.url, table=TABLE)  # another process's handle, never started
    runs = []
    try:
        with nodes_cleanup() as nodes:
            (node,) = start_nodes(ctx, system, backend, 1, nodes, mode="wakeup", n=1,
                                  workers=8, lease=settings.lease, poll=settings.wake_poll)
            time.sleep(0.5)
            for run in range(settings.wake_runs):
                latencies = []
                for _ in range(triggers):
                    time.sleep(random.uniform(0.05, 0.15))
                    sent = time.time()
                    for _attempt in range(50):
                        sent = time.time()
                        try:
                            operator.trigger("w0")
                            break
                        except TaskRunning:
                            time.sleep(0.02)
                    deadline = sent + settings.wake_poll + 5
                    got: list[Sample] = []
                    while not got and time.time() < deadline:
                        time.sleep(0.01 if system.backend == "postgresql" else 0.1)
                        got = node.dump(ctx.tmp)
                    latencies.append((got[0][2] - sent) * 1000 if got else math.inf)
                lat = sorted(latencies)
                runs.append({"latencies_ms": lat, "p50_ms": percentile(lat, 0.5),
                             "p99_ms": percentile(lat, 0.99), "max_ms": lat[-1]})
                log(f"  {system.key} wake-up run {run + 1}: p50 {runs[-1]['p50_ms']:.1f} ms, "
                    f"p99 {runs[-1]['p99_ms']:.1f} ms over {len(lat)} triggers "
                    f"(poll every {settings.wake_poll} s)")
    finally:
        operator.engine.dispose()
    return runs


# -- failover (dbscheduler only) ------------------------------------------------------------
def failover_session(ctx: Context, system: System, settings: Settings) -> list[dict[str, Any]]:
    """Nodes share one long task; ``kill -9`` the node running it at a random moment of its
    heartbeat cycle; failover = start on another node − kill. Runs are chained: after each
    kill a fresh node joins the survivor, and the next run kills whichever holds the task."""
    lease = settings.failover_lease
    backend = ctx.backend(system)
    assert backend is not None
    create_dbs_table(backend)
    cfg = {"mode": "failover", "n": 1, "workers": 4, "lease": lease, "poll": settings.poll}
    runs = []
    with nodes_cleanup() as nodes:
        alive = [ctx.node(system, backend, name, **cfg) for name in ("A", "B")]
        nodes.extend(alive)
        for node in alive:
            node.wait_ready(120)
        deadline = time.time() + 15
        holder = None
        while holder is None:
            if time.time() > deadline:
                raise NodeError("failover: no node started the task")
            time.sleep(0.05)
            holder = next((n for n in alive if n.dump(ctx.tmp)), None)
        for run in range(settings.failover_runs):
            survivor = alive[1] if holder is alive[0] else alive[0]
            time.sleep(random.uniform(0.2, 0.2 + lease / 3))  # any phase of the heartbeat
            killed = holder.kill9()
            got: list[Sample] = []
            deadline = killed + lease + 10
            while not got and time.time() < deadline:
                time.sleep(0.02)
                got = survivor.dump(ctx.tmp)
            seconds = (got[0][2] - killed) if got else math.inf
            runs.append({"seconds": seconds, "lease": lease})
            log(f"  {system.key} failover run {run + 1}: {seconds:.2f} s (lease {lease} s)")
            if not got or run == settings.failover_runs - 1:
                break
            fresh = ctx.node(system, backend, f"N{run}", **cfg)
            nodes.append(fresh)
            fresh.wait_ready(120)
            alive, holder = [survivor, fresh], survivor
    return runs
