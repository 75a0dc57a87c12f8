"""An APScheduler 3.11 node (BackgroundScheduler + SQLAlchemyJobStore), run with its own venv.

APScheduler 3 is a single-process scheduler: two processes sharing one SQLAlchemyJobStore
both run every job (it has no locking), so the benchmark never starts more than one.

Jobs: ``IntervalTrigger(seconds=period, start_date=phase)``, ``coalesce=True``,
``max_instances=1``, ``misfire_grace_time=None`` (a late run still runs). The start is taken
when the executor's worker enters ``run_job``, which also receives the scheduled run times.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from bench.protocol import COUNTER, SAMPLES, load_config, serve, spread_t0, watchdog

ADD_COST = 0.0015
"""Seconds one ``add_job`` takes at run time (an INSERT in its own transaction), for the lead."""


def main() -> None:
    cfg = load_config()
    watchdog(cfg["max_seconds"])
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    COUNTER.install_psycopg()
    import apscheduler.executors.pool as pool  # type: ignore[import-not-found]
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore  # type: ignore[import-not-found]
    from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-not-found]
    from apscheduler.triggers.date import DateTrigger  # type: ignore[import-not-found]
    from apscheduler.triggers.interval import IntervalTrigger  # type: ignore[import-not-found]

    original = pool.run_job

    def run_job(job: Any, alias: str, run_times: list[datetime], logger_name: str) -> Any:
        started = time.time()
        idx = int(job.kwargs.get("idx", -1))
        for run_time in run_times:
            SAMPLES.add(idx, run_time.timestamp(), started)
        return original(job, alias, run_times, logger_name)

    pool.run_job = run_job
    scheduler = BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=cfg["url"])},
        executors={"default": ThreadPoolExecutor(cfg["workers"])},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        timezone=timezone.utc,
    )
    began = time.perf_counter()
    if cfg["mode"] == "idle":
        far = datetime.now(timezone.utc) + timedelta(hours=1)
        for idx in range(cfg["n"]):
            scheduler.add_job("bench.protocol:aps3_noop",
                              IntervalTrigger(hours=1, start_date=far, timezone=timezone.utc),
                              id=f"i{idx}", kwargs={"idx": idx})
    scheduler.start()
    start_seconds = time.perf_counter() - began

    def activate(args: dict[str, Any]) -> dict[str, Any]:
        a, b, p = int(args["start"]), int(args["stop"]), float(args["period"])
        t0 = spread_t0(float(args["lead"]) + ADD_COST * (b - a))
        step = p / (b - a)
        scheduler.pause()  # adding to a running scheduler costs a wake-up and a scan per job
        for i in range(a, b):
            start = datetime.fromtimestamp(t0 + (i - a) * step, timezone.utc)
            scheduler.add_job("bench.protocol:aps3_noop",
                              IntervalTrigger(seconds=p, start_date=start, timezone=timezone.utc),
                              id=f"b{i}", kwargs={"idx": i}, replace_existing=True)
        scheduler.resume()
        return {"t0": t0, "spread": True, "late": max(0.0, time.time() - t0)}

    def burst(args: dict[str, Any]) -> dict[str, Any]:
        """``n`` one-off jobs whose next run time is the same instant (added paused, as
        ``activate`` does; a ``DateTrigger`` job is removed once run, so each burst adds
        them again)."""
        n = int(args["n"])
        t0 = spread_t0(float(args["lead"]) + ADD_COST * n)
        at = datetime.fromtimestamp(t0, timezone.utc)
        scheduler.pause()
        for i in range(n):
            scheduler.add_job("bench.protocol:aps3_noop", DateTrigger(run_date=at),
                              id=f"b{i}", kwargs={"idx": i}, replace_existing=True)
        scheduler.resume()
        return {"t0": t0, "late": max(0.0, time.time() - t0)}

    serve({"activate": activate, "burst": burst}, lambda: scheduler.shutdown(wait=True),
          {"start_seconds": start_seconds})


if __name__ == "__main__":
    main()
