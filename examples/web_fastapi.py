"""The dbscheduler dashboard mounted inside a FastAPI service, behind the service's own auth.

Run it (``pip install 'dbscheduler[web]'``)::

    DASHBOARD_TOKEN=secret uvicorn examples.web_fastapi:app
    open http://127.0.0.1:8000/scheduler/            # the dashboard (viewer without the cookie)
    curl -H 'Authorization: Bearer secret' -X POST \\
        http://127.0.0.1:8000/scheduler/api/tasks/refresh-rates/trigger

The dashboard lives at ``/scheduler`` and every link in it stays under that prefix. The
service's nodes run the tasks; the dashboard reads and changes the same table through a
``Client``, so it can also run in a process of its own.

Starlette works the same way (``Mount("/scheduler", app=create_app(...))``). Flask and Django
are WSGI: wrap the ASGI app with ``a2wsgi`` (``pip install a2wsgi``) and mount it at a prefix,
e.g. for Flask::

    from a2wsgi import ASGIMiddleware
    from werkzeug.middleware.dispatcher import DispatcherMiddleware
    flask_app.wsgi_app = DispatcherMiddleware(flask_app.wsgi_app, {
        "/scheduler": ASGIMiddleware(create_app(scheduler, auth=auth)),
    })

and for Django, route ``/scheduler`` to ``ASGIMiddleware(create_app(...))`` in your WSGI file
the same way (or serve both with an ASGI server and ``django.core.asgi``).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request

from dbscheduler import Cron, FixedRate, Scheduler, TaskContext
from dbscheduler.web import Role, create_app

log = logging.getLogger("web_fastapi")

scheduler = Scheduler(os.environ.get("DBSCHEDULER_URL"))  # None: the embedded SQLite default


@scheduler.task("refresh-rates", schedule=FixedRate(60))
def refresh_rates(ctx: TaskContext) -> None:
    log.info("rates refreshed (run #%d)", ctx.total_attempt)


@scheduler.task("nightly-report", schedule=Cron("0 3 * * *", tz="Europe/Berlin"))
def nightly_report(ctx: TaskContext) -> None:
    log.info("report sent")


def dashboard_auth(request: Request) -> Role | None:
    """Admins present the token (a bearer header, or a cookie set by your login page);
    everyone else who reaches the service may look but not touch."""
    token = os.environ.get("DASHBOARD_TOKEN", "")
    given = request.headers.get("authorization", "").removeprefix("Bearer ")
    given = given or request.cookies.get("dashboard_token", "")
    if token and hmac.compare_digest(given, token):
        return "admin"
    return "viewer"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Start the scheduler with the service; on shutdown let running tasks finish (10 s)."""
    await asyncio.to_thread(scheduler.start)
    try:
        yield
    finally:
        await asyncio.to_thread(scheduler.shutdown, 10)


app = FastAPI(title="a service with a scheduler dashboard", lifespan=lifespan)
app.mount("/scheduler", create_app(scheduler, auth=dashboard_auth))


@app.get("/")
def home() -> dict[str, str]:
    """The service's own routes go on as usual."""
    return {"dashboard": "/scheduler/"}
