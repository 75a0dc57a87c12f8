"""``create_app``: the dashboard and the JSON API as one ASGI app, mountable under any path.

Three things sit in front of every route: the ``auth`` callback (who is asking), the read-only
switch (viewers and ``read_only=True`` change nothing), and a cross-site check on
state-changing requests (a browser tricked into posting from another site carries that site's
``Origin``). Errors become ``{"error": code, "message": text}`` under ``/api`` and a small HTML
page elsewhere; no stack trace ever reaches a response.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import sqlalchemy as sa
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..client import Client
from ..errors import SchemaMismatch, SchemaMissing, TaskNotFound, TaskRunning
from ..http_delivery import AllowList, TargetRefused
from ..scheduler import Scheduler
from . import api, pages, queue

__all__ = ["Auth", "Dashboard", "Role", "create_app"]

logger = logging.getLogger("dbscheduler.web")

Role = Literal["admin", "viewer"]
Auth = Callable[[Request], Role | Awaitable[Role | None] | None]
"""``auth(request)`` returns ``"admin"``, ``"viewer"`` (read-only) or None (401); it may be
a coroutine function."""

HERE = Path(__file__).parent
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Dashboard:
    """What every route of one app shares (``app.state.dashboard``)."""

    client: Client
    read_only: bool
    auth: Auth | None
    templates: Jinja2Templates
    allow: AllowList = field(default_factory=lambda: AllowList([]))
    """The hosts ``/v3/queue`` pushes may target."""


def _client_for(target: Scheduler | Client | str, table: str | None) -> Client:
    if isinstance(target, Scheduler | Client):
        if table is not None and table != target.table:
            raise ValueError(
                f"table={table!r} differs from the table of the {type(target).__name__} "
                f"({target.table!r}); pass table= only with a URL"
            )
        return target.client if isinstance(target, Scheduler) else target
    if isinstance(target, str):
        return Client(target) if table is None else Client(target, table=table)
    raise ValueError(
        f"create_app takes a Scheduler, a Client or a database URL, got {type(target).__name__}"
    )


def create_app(
    scheduler_or_url: Scheduler | Client | str,
    *,
    table: str | None = None,
    read_only: bool = False,
    auth: Auth | None = None,
    http_delivery_hosts: Sequence[str] | None = None,
) -> FastAPI:
    """The dashboard (HTML pages) and the REST API (``/api``) for one table.

    ::

        from fastapi import FastAPI
        from dbscheduler.web import create_app

        app = FastAPI()
        app.mount("/scheduler", create_app(scheduler, auth=my_auth))

    Args:
        scheduler_or_url: a :class:`~dbscheduler.Scheduler` (its client is used; it need not
            be started), a :class:`~dbscheduler.Client`, or a database URL.
        table: the table's name, only with a URL (default ``scheduled_tasks``).
        read_only: hide every control and answer 403 to state-changing requests.
        auth: ``auth(request) -> "admin" | "viewer" | None``; None answers 401 and a viewer
            gets the read-only app. Without it, anyone who reaches the app is an admin: keep
            it on 127.0.0.1 or behind your own authentication.
        http_delivery_hosts: the hosts ``/v3/queue`` pushes may target (403 for others);
            default: the scheduler's ``http_delivery_hosts``, none with a URL or client.

    State-changing requests whose ``Origin`` (or, without one, ``Referer``) is another site
    are refused with 403; API clients that send neither are accepted. The app's own origin is
    the scheme and host it is reached by: behind a TLS-terminating proxy, let the server trust
    the proxy's ``X-Forwarded-Proto`` (uvicorn ``--forwarded-allow-ips``), or every change
    made from the browser is refused as cross-site.
    """
    client = _client_for(scheduler_or_url, table)
    if http_delivery_hosts is None and isinstance(scheduler_or_url, Scheduler):
        http_delivery_hosts = scheduler_or_url.http_delivery_hosts
    allow = AllowList(http_delivery_hosts or ())
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.globals["version"] = __version__
    app = FastAPI(
        title="dbscheduler",
        version=__version__,
        description=(
            "Operate the periodic tasks of one dbscheduler table. Task names go into paths "
            "percent-encoded (`reports/daily` → `reports%2Fdaily`). Errors are "
            '`{"error": code, "message": text}`.'
        ),
        openapi_url="/api/openapi.json",
        docs_url=None,  # FastAPI's loads Swagger UI from a CDN: /api/docs serves it locally
        redoc_url=None,
    )
    app.state.dashboard = Dashboard(client, read_only, auth, templates, allow)
    app.include_router(api.router)
    app.include_router(queue.api_router)
    app.include_router(queue.queue_router)
    app.include_router(pages.router)
    app.add_api_route("/metrics", _metrics, include_in_schema=False)
    app.add_api_route("/api/docs", _docs, include_in_schema=False, name="api_docs")
    assets = _swagger_assets()
    if assets is not None:
        app.mount(DOCS_ASSETS, StaticFiles(directory=assets), name="docs_assets")
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    _add_errors(app)
    app.middleware("http")(_guard)
    return app


DOCS_ASSETS = "/api/docs/assets"
"""Where Swagger UI's files (from the ``swagger-ui-bundle`` package) are served."""


def _swagger_assets() -> str | None:
    try:
        from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]
    except ImportError:
        return None
    return str(swagger_ui_path)


def _docs(request: Request) -> Response:
    """Interactive API docs (Swagger UI) on the app's OpenAPI document, from the installed
    ``swagger-ui-bundle`` package: nothing is loaded from another site."""
    if _swagger_assets() is None:
        return error_response(request, 404, "not_found", "/api/docs needs swagger-ui-bundle: "
                              "install dbscheduler[web]; the document is /api/openapi.json")
    dashboard: Dashboard = request.app.state.dashboard
    root = pages.root_of(request)
    return dashboard.templates.TemplateResponse(request, "docs.html", {
        "root": root, "table": dashboard.client.table,
        "assets": root + DOCS_ASSETS.lstrip("/"),
        "openapi_url": root + "api/openapi.json",
    })


def _metrics(request: Request) -> Response:
    """The process's Prometheus registry (what a :class:`~dbscheduler.metrics.PrometheusMetrics`
    listener on the served scheduler counts) and, unless that listener already reports them,
    the cluster-wide gauges of the dashboard's table (extra ``dbscheduler[prometheus]``)."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        from ..metrics import cluster_registry, reports_cluster
    except ImportError:
        return error_response(request, 404, "not_found",
                              "/metrics needs prometheus_client: install dbscheduler[prometheus]")
    body = generate_latest()
    if not reports_cluster():
        state = request.app.state
        if getattr(state, "cluster_registry", None) is None:
            state.cluster_registry = cluster_registry(state.dashboard.client)
        body += generate_latest(state.cluster_registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


# -- who may do what -----------------------------------------------------------------------


def _route_path(request: Request) -> str:
    """The path inside the app: under a mount, the path still starts with the mount's
    prefix (kept in root_path)."""
    path: str = request.scope["path"]
    root: str = request.scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):]
    return path


def _is_api(request: Request) -> bool:
    return _route_path(request).startswith(("/api/", "/v3/"))


def error_response(request: Request, status: int, code: str, message: str) -> Response:
    """JSON under ``/api``, a small HTML page for the dashboard."""
    if _is_api(request):
        return JSONResponse({"error": code, "message": message}, status_code=status)
    dashboard: Dashboard = request.app.state.dashboard
    return dashboard.templates.TemplateResponse(
        request,
        "error.html",
        {"status": status, "code": code, "message": message, **pages.chrome(request)},
        status_code=status,
    )


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def _cross_site(request: Request) -> str | None:
    """Why a state-changing request looks cross-site, or None when it is the app's own (or a
    plain API client's, which sends neither Origin nor Referer)."""
    own = _origin_of(str(request.base_url))
    origin = request.headers.get("origin")
    if origin is not None:
        if _origin_of(origin) != own:
            return f"Origin {origin!r} is not this app's ({own})"
        return None
    referer = request.headers.get("referer")
    if referer is not None and _origin_of(referer) != own:
        return f"Referer {referer!r} is not this app's ({own})"
    return None


async def _role(request: Request, auth: Auth | None) -> Role | None:
    if auth is None:
        return "admin"
    if inspect.iscoroutinefunction(auth):
        answer = await auth(request)
    else:
        # A plain function may look a session up in a database: keep it off the event loop.
        answer = await run_in_threadpool(auth, request)
        if inspect.isawaitable(answer):
            answer = await answer
    return answer if answer in ("admin", "viewer") else None


SECURITY_HEADERS = {
    # Only the app's own script and styles run: a name that slipped past escaping could not
    # execute, and no other site may frame the pages to trick a click on a confirmation.
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'self'; "
        "base-uri 'none'; form-action 'self'"
    ),
    "X-Frame-Options": "SAMEORIGIN",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


async def _guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    # Read before routing: a mount (the static files) rewrites the scope's root_path.
    static = _route_path(request).startswith(("/static/", DOCS_ASSETS + "/"))
    response = await _checked(request, call_next)
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if not static:
        # Task lists and states change every second: never serve them from a cache.
        response.headers.setdefault("Cache-Control", "no-store")
    return response


async def _checked(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    dashboard: Dashboard = request.app.state.dashboard
    try:
        role = await _role(request, dashboard.auth)
    except Exception:
        logger.exception("the auth callback raised; answering 401")
        role = None
    if role is None:
        return error_response(request, 401, "unauthorized", "authentication required")
    read_only = dashboard.read_only or role == "viewer"
    request.state.read_only = read_only
    if request.method in UNSAFE_METHODS:
        reason = _cross_site(request)
        if reason is not None:
            logger.warning("refused a cross-site %s %s: %s", request.method, request.url.path,
                           reason)
            return error_response(request, 403, "cross_site", f"refused: {reason}")
        if read_only:
            why = ("this dashboard is read-only" if dashboard.read_only
                   else "viewers cannot change tasks")
            return error_response(request, 403, "read_only", why)
    return await call_next(request)


# -- errors ---------------------------------------------------------------------------------


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "request"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid input"


def _add_errors(app: FastAPI) -> None:
    def handler(status: int, code: str) -> Callable[[Request, Exception], Response]:
        def handle(request: Request, exc: Exception) -> Response:
            return error_response(request, status, code, str(exc))

        return handle

    app.add_exception_handler(TaskNotFound, handler(404, "not_found"))
    app.add_exception_handler(TargetRefused, handler(403, "host_not_allowed"))
    app.add_exception_handler(TaskRunning, handler(409, "running"))
    app.add_exception_handler(SchemaMissing, handler(503, "schema_missing"))
    app.add_exception_handler(SchemaMismatch, handler(503, "schema_mismatch"))
    app.add_exception_handler(ValueError, handler(422, "invalid"))

    def database(request: Request, exc: Exception) -> Response:
        orig = getattr(exc, "orig", None) or exc
        logger.warning("database error on %s %s: %s", request.method, request.url.path, orig)
        return error_response(
            request, 503, "database",
            f"the database did not answer as expected ({type(orig).__name__}); the server log "
            "has the details. A database that is restarting or unreachable answers again by "
            "itself.")

    def validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return error_response(request, 422, "invalid", _validation_message(exc))

    def http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 400:
            # FastAPI's answer to a body it cannot decode (not UTF-8): bad input like any
            # other, with the status the API documents for it.
            return error_response(request, 422, "invalid",
                                  f"the request body is not UTF-8 JSON ({exc.detail})")
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http")
        message = "no such page" if exc.status_code == 404 else str(exc.detail)
        return error_response(request, exc.status_code, code, message)

    def unexpected(request: Request, exc: Exception) -> Response:
        # Handlers run outside the except block: pass the exception to log its traceback.
        logger.error("unexpected error on %s %s", request.method, request.url.path,
                     exc_info=exc)
        return error_response(request, 500, "internal",
                              "unexpected error; the server log has the details")

    app.add_exception_handler(sa.exc.SQLAlchemyError, database)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http)
    app.add_exception_handler(Exception, unexpected)
