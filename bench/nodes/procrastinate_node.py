"""A Procrastinate 3.10 worker with periodic tasks (PsycopgConnector), run with its own venv.

Every worker runs the periodic deferrer; the database keeps two workers from deferring the
same periodic job for the same second (``procrastinate_periodic_defers``). Periodic tasks are
cron-based with one-second resolution, so ``activate`` aligns them on whole seconds (no
sub-second phases), and the deferrer sleeps 0.5 s past each due second by design
(``periodic.MARGIN``). The job is an ``async`` no-op whose ``timestamp`` argument is the
scheduled second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from datetime import datetime, timezone
from typing import Any

from bench.protocol import COUNTER, SAMPLES, load_config, serve, watchdog

EVERY_SECOND = "* * * * * *"


def main() -> None:
    cfg = load_config()
    watchdog(cfg["max_seconds"])
    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    COUNTER.install_psycopg()
    import procrastinate  # type: ignore[import-not-found]

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=cfg["dsn"]))

    @app.task(name="bench_noop")  # type: ignore[untyped-decorator]
    async def noop(timestamp: int, idx: int) -> None:
        started = time.time()
        if idx >= 0:
            SAMPLES.add(idx, float(timestamp), started)

    def register(idx: int, name: str, cron: str) -> None:
        app.periodic(cron=cron, periodic_id=name, task_kwargs={"idx": idx})(noop)

    began = time.perf_counter()
    if cfg["mode"] == "idle":
        month = (datetime.now(timezone.utc).month + 5) % 12 + 1  # about half a year away
        for idx in range(cfg["n"]):
            register(idx, f"i{idx}", f"0 0 1 {month} *")
    else:
        # Keeps the deferrer ticking every second so tasks activated later are seen.
        register(-1, "ticker", EVERY_SECOND)

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    failure: list[BaseException] = []
    worker: dict[str, asyncio.Task[None]] = {}

    async def run() -> None:
        async with app.open_async():
            if cfg.get("apply_schema"):
                await app.schema_manager.apply_schema_async()
            worker["task"] = asyncio.create_task(app.run_worker_async(
                concurrency=cfg["workers"], wait=True, install_signal_handlers=False,
                listen_notify=True,
            ))
            ready.set()
            with contextlib.suppress(asyncio.CancelledError):
                await worker["task"]

    def thread_main() -> None:
        try:
            loop.run_until_complete(run())
        except BaseException as exc:
            failure.append(exc)
            ready.set()

    thread = threading.Thread(target=thread_main, name="procrastinate", daemon=True)
    thread.start()
    ready.wait(60)
    if failure:
        raise failure[0]
    start_seconds = time.perf_counter() - began

    def activate(args: dict[str, Any]) -> dict[str, Any]:
        a, b = int(args["start"]), int(args["stop"])

        async def add() -> None:
            # A fresh dict: the deferrer may be iterating the old one across an await.
            registry = app.periodic_registry
            registry.periodic_tasks = dict(registry.periodic_tasks)
            for i in range(a, b):
                register(i, f"b{i}", EVERY_SECOND)

        asyncio.run_coroutine_threadsafe(add(), loop).result(30)
        return {"t0": float(math.ceil(time.time())), "spread": False, "period": 1.0}

    def burst(args: dict[str, Any]) -> dict[str, Any]:
        """``n`` periodic tasks whose cron names one whole second (``M H D Mo * S``, once a
        year): the deferrer defers them all at that second (+ its 0.5 s margin)."""
        n = int(args["n"])
        t0 = math.ceil(time.time() + float(args["lead"]))
        at = datetime.fromtimestamp(t0, timezone.utc)
        cron = f"{at.minute} {at.hour} {at.day} {at.month} * {at.second}"

        async def add() -> None:
            registry = app.periodic_registry
            # A fresh dict (see activate), without the previous burst's tasks: registering
            # the same periodic_id twice raises.
            registry.periodic_tasks = {k: v for k, v in registry.periodic_tasks.items()
                                       if not v.periodic_id.startswith("b")}
            for i in range(n):
                register(i, f"b{i}", cron)

        asyncio.run_coroutine_threadsafe(add(), loop).result(30)
        return {"t0": float(t0), "late": max(0.0, time.time() - t0)}

    def stop() -> None:
        task = worker.get("task")
        if task is not None:
            loop.call_soon_threadsafe(task.cancel)
        thread.join(15)

    serve({"activate": activate, "burst": burst}, stop, {"start_seconds": start_seconds})


if __name__ == "__main__":
    main()
