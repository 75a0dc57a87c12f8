"""dbscheduler inside a FastAPI service: the lifespan starts and stops the scheduler.

Run it (``pip install dbscheduler fastapi uvicorn``)::

    uvicorn examples.fastapi_app:app
    curl localhost:8000/tasks
    curl -X POST localhost:8000/tasks/refresh-rates/trigger

Every uvicorn worker (and every replica of the service) is a node: they share the table and
each task still runs once at a time across all of them. ``DBSCHEDULER_URL`` chooses the
database (default: the embedded SQLite file ``./dbscheduler.sqlite3``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException

from dbscheduler import Cron, FixedRate, Scheduler, TaskContext, TaskNotFound, TaskRunning

# The application configures logging, the library never does. Without this, uvicorn/flask
# show their own lines only and the tasks' (and dbscheduler's) INFO lines go nowhere. A no-op
# when logging is configured already (e.g. uvicorn --log-config).
logging.basicConfig(level=logging.INFO,
                    format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
log = logging.getLogger("fastapi_app")

scheduler = Scheduler(os.environ.get("DBSCHEDULER_URL"))  # None: the embedded SQLite default
rates: dict[str, float] = {}


@scheduler.task("refresh-rates", schedule=FixedRate(60))
async def refresh_rates(ctx: TaskContext) -> None:
    """Coroutine tasks are awaited on the scheduler's own event loop, not the server's."""
    await asyncio.sleep(0.01)  # e.g. an httpx call
    rates["EUR/USD"] = 1.08
    log.info("rates refreshed (run #%d)", ctx.total_attempt)


@scheduler.task("purge-sessions", schedule=Cron("0 4 * * *", tz="Europe/Paris"))
def purge_sessions(ctx: TaskContext) -> None:
    """Plain functions run in the scheduler's worker threads."""
    log.info("sessions purged")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Start the scheduler with the app; on shutdown let running tasks finish (10 s)."""
    await asyncio.to_thread(scheduler.start)
    try:
        yield
    finally:
        await asyncio.to_thread(scheduler.shutdown, 10)


app = FastAPI(title="dbscheduler example", lifespan=lifespan)


# Plain `def` endpoints: the operations are short blocking database calls, which FastAPI runs
# in its thread pool.
@app.get("/tasks")
def list_tasks() -> list[dict[str, Any]]:
    """Every task of the table, as ``dbscheduler list --json`` prints them."""
    return [info.to_dict() for info in scheduler.tasks()]


@app.post("/tasks/{name}/trigger", status_code=202)
def trigger_task(name: str) -> dict[str, Any]:
    """Run a task now (on whichever node picks it first)."""
    try:
        scheduler.trigger(name)
    except TaskNotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    except TaskRunning as exc:
        raise HTTPException(409, str(exc)) from exc
    return scheduler.info(name).to_dict()


@app.get("/rates")
def get_rates() -> dict[str, float]:
    """What the scheduled task last stored in this process."""
    return rates
