"""An APScheduler 4.0.0a6 node: SQLAlchemyDataStore (async psycopg engine) + PsycopgEventBroker,
role ``both`` (schedules and runs jobs), run with its own venv.

Schedules: ``IntervalTrigger(seconds=period, start_time=phase)`` with ``coalesce=latest``,
``misfire_grace_time=None``; the job is an ``async`` no-op on the ``async`` executor that reads
its ``scheduled_fire_time`` from ``current_job``. Several nodes share one data store.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from bench.protocol import COUNTER, aps4_noop, load_config, serve, spread_t0, watchdog

ADD_COST = 0.006
"""Seconds one ``add_schedule`` takes at run time, for the lead of an activation."""


def main() -> None:
    cfg = load_config()
    watchdog(cfg["max_seconds"])
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    COUNTER.install_psycopg()
    from apscheduler import CoalescePolicy, ConflictPolicy, Scheduler  # type: ignore[import-not-found]
    from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore  # type: ignore[import-not-found]
    from apscheduler.eventbrokers.psycopg import PsycopgEventBroker  # type: ignore[import-not-found]
    from apscheduler.triggers.date import DateTrigger  # type: ignore[import-not-found]
    from apscheduler.triggers.interval import IntervalTrigger  # type: ignore[import-not-found]
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(cfg["url"])
    scheduler = Scheduler(
        SQLAlchemyDataStore(engine),
        PsycopgEventBroker.from_async_sqla_engine(engine),
        identity=cfg["node_id"],
        max_concurrent_jobs=cfg["workers"],
        lease_duration=timedelta(seconds=cfg["lease"]),
    )

    def add_many(items: list[tuple[int, str, Any]]) -> None:
        """``add_schedule`` for each ``(idx, id, trigger)``, four at a time (one at a time
        through the sync wrapper costs ~20 ms each)."""
        import anyio  # type: ignore[import-not-found]

        inner = scheduler._async_scheduler

        async def add_all() -> None:
            limiter = anyio.CapacityLimiter(4)

            async def one(idx: int, name: str, trigger: Any) -> None:
                async with limiter:
                    await inner.add_schedule(
                        aps4_noop, trigger, id=name, kwargs={"idx": idx}, job_executor="async",
                        misfire_grace_time=None, coalesce=CoalescePolicy.latest,
                        conflict_policy=ConflictPolicy.replace)

            async with anyio.create_task_group() as group:
                for item in items:
                    group.start_soon(one, *item)

        scheduler._ensure_services_ready().call(add_all)

    began = time.perf_counter()
    if cfg["mode"] == "idle":
        far = datetime.now(timezone.utc) + timedelta(hours=1)
        add_many([(idx, f"i{idx}", IntervalTrigger(hours=1, start_time=far))
                  for idx in range(cfg["n"])])
    scheduler.start_in_background()
    start_seconds = time.perf_counter() - began

    def activate(args: dict[str, Any]) -> dict[str, Any]:
        a, b, p = int(args["start"]), int(args["stop"]), float(args["period"])
        t0 = spread_t0(float(args["lead"]) + ADD_COST * (b - a))
        step = p / (b - a)
        add_many([
            (i, f"b{i}", IntervalTrigger(
                seconds=p, start_time=datetime.fromtimestamp(t0 + (i - a) * step, timezone.utc)))
            for i in range(a, b)
        ])
        return {"t0": t0, "spread": True, "late": max(0.0, time.time() - t0)}

    def burst(args: dict[str, Any]) -> dict[str, Any]:
        """``n`` schedules whose one fire time is the same instant (``DateTrigger``; each
        burst replaces them)."""
        n = int(args["n"])
        t0 = spread_t0(float(args["lead"]) + ADD_COST * n)
        at = datetime.fromtimestamp(t0, timezone.utc)
        add_many([(i, f"b{i}", DateTrigger(at)) for i in range(n)])
        return {"t0": t0, "late": max(0.0, time.time() - t0)}

    def stop() -> None:
        scheduler.stop()
        scheduler.wait_until_stopped()

    serve({"activate": activate, "burst": burst}, stop, {"start_seconds": start_seconds})


if __name__ == "__main__":
    main()
