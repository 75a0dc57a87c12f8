"""The JSON API under ``/api``: the same shapes as the command line's ``--json``.

Every route is a plain ``def``: the operations are short blocking database calls, which the
framework runs in its thread pool. Errors are raised as library exceptions and turned into
``{"error": code, "message": text}`` by the app's handlers (see :mod:`dbscheduler.web.app`).
A new route goes here, with its response model, so that the OpenAPI document stays complete.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime, BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..bulk import ScheduleItem
from ..client import Client
from ..errors import SchedulerError, TaskNotFound, TaskRunning
from ..schedules import parse
from .models import (
    ApiError,
    BulkBody,
    BulkResult,
    Cancelled,
    Deleted,
    GroupList,
    Health,
    NodeList,
    RescheduleBody,
    RunList,
    ScheduleBody,
    ScheduledTask,
    SchedulePreview,
    Task,
    TaskList,
    UpcomingTimes,
)
from .views import (
    COUNT_CAP,
    OVERDUE_AFTER,
    STATES,
    describe_schedule,
    preview,
    upcoming,
)

__all__ = ["ERROR_RESPONSES", "ApiError", "router"]

logger = logging.getLogger("dbscheduler.web")


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ApiError, "description": text}
    for code, text in (
        (401, "not authenticated"),
        (403, "read-only, or a cross-site request"),
        (422, "invalid input"),
        (500, "unexpected error (logged on the server)"),
        (503, "the database or its table is unavailable"),
    )
}
_TASK_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    404: {"model": ApiError, "description": "no such task"},
    405: {"model": ApiError, "description": "the path names a task, not an action on one"},
}
_RUNNING_ERRORS: dict[int | str, dict[str, Any]] = {
    **_TASK_ERRORS,
    409: {"model": ApiError, "description": "the task is running"},
}

router = APIRouter(prefix="/api", tags=["tasks"], responses=ERROR_RESPONSES)

RunStatus = Literal["success", "error", "lost", "cancelled", "timeout", "skipped"]
RunStatusParam = Annotated[
    list[RunStatus] | None, Query(description="only runs that ended so (repeatable)")]
SinceParam = Annotated[
    AwareDatetime | None, Query(description="finished at or after (ISO 8601 with offset)")]
UntilParam = Annotated[
    AwareDatetime | None, Query(description="finished before (ISO 8601 with offset)")]
RunLimitParam = Annotated[int, Query(ge=1, le=1000)]

StateParam = Annotated[
    Literal["running", "paused", "failing", "overdue", "idle"] | None,
    Query(description=f"one of {', '.join(STATES)}"),
]


def client_of(request: Request) -> Client:
    """The dashboard's :class:`Client` (set by ``create_app``)."""
    client: Client = request.app.state.dashboard.client
    return client


def _suffix_was_encoded(request: Request, suffix: str) -> bool:
    """True when the path ends with a name's percent-encoded ``%2F<suffix>``, not with the
    route's own ``/<suffix>``: the task ``a/upcoming`` sent as ``a%2Fupcoming``."""
    raw = request.scope.get("raw_path")
    if not isinstance(raw, bytes):
        return False
    return not raw.split(b"?", 1)[0].endswith(b"/" + suffix.encode())


def _action_path(request: Request, action: str) -> None:
    """A POST to ``a%2Fpause`` names the task ``a/pause`` with no action: no such route."""
    if _suffix_was_encoded(request, action):
        raise StarletteHTTPException(405, "a task has no POST route; add the action after it")


def _task(client: Client, name: str) -> dict[str, Any]:
    return client.info(name).to_dict()


@router.get("/tasks", response_model=TaskList, summary="List tasks")
def list_tasks(
    request: Request,
    state: StateParam = None,
    q: Annotated[str | None, Query(description="part of the name, handler or schedule",
                                   max_length=255)] = None,
    handler: Annotated[str | None, Query(description="only the tasks this handler runs",
                                         min_length=1, max_length=255)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
    kind: Annotated[Literal["tasks", "all"], Query(
        description="tasks: leave batch keys out (they are listed by /api/batches); all: "
                    "every row")] = "tasks",
    exact: Annotated[bool, Query(
        description="count every matching row (a cost that grows with the table) instead "
                    "of at most 10,000")] = False,
) -> JSONResponse:
    """Tasks ordered by name, filtered by state, handler and search text, one page at a
    time; batch keys only with ``kind=all``. Filtered, paged and counted by the database: a
    page costs the same in a table of any size. The counts stop at 10,000 rows unless
    ``exact=true``: past it ``exact`` is false, ``total`` and ``counts`` are lower bounds and
    ``estimate`` is the database's estimate of the table's rows."""
    client = client_of(request)
    listing = {**listing_filters(client, state, q, kind), "handler": handler}
    totals = client.task_totals(**listing, cap=None if exact else COUNT_CAP)
    infos = client.tasks(**listing, limit=limit, offset=offset)
    return JSONResponse({
        "tasks": [info.to_dict() for info in infos],
        "total": totals.matching,
        "limit": limit,
        "offset": offset,
        "counts": totals.states,
        "db_now": totals.db_now.isoformat(),
        "batch_keys": totals.batch_keys,
        "exact": totals.exact,
        "estimate": totals.estimate,
    })


def listing_filters(client: Client, state: str | None, q: str | None, kind: str | None
                    ) -> dict[str, Any]:
    """The keyword arguments of ``Client.tasks()`` and ``task_totals()`` for the listing's
    state, search text and kind: batch keys left out unless ``kind`` is ``all``; overdue as
    :func:`~dbscheduler.web.views.states_of` says (late by :data:`OVERDUE_AFTER`, or by the
    client's own ``overdue_after`` if shorter)."""
    # A search box cannot hold more than a name's length of useful text.
    return {"state": state if state in STATES else None,
            "match": (q or "").strip()[:255] or None,
            "batch_keys": kind == "all",
            "overdue_after": min(client.overdue_after, OVERDUE_AFTER)}


def _bulk(request: Request, body: BulkBody, action: str) -> JSONResponse:
    client = client_of(request)
    if body.names is not None:
        names = list(dict.fromkeys(body.names))
    else:
        # What the tasks listing shows: batch keys are dropped on the batches page.
        names = [i.name for i in client.iter_tasks(
            **listing_filters(client, body.state, body.q, "tasks"))]
    done: list[str] = []
    failed: list[dict[str, str]] = []
    for name in names:
        try:
            getattr(client, action)(name)
        except TaskNotFound as exc:
            failed.append({"name": name, "error": "not_found", "message": str(exc)})
        except TaskRunning as exc:
            failed.append({"name": name, "error": "running", "message": str(exc)})
        except (SchedulerError, ValueError) as exc:
            failed.append({"name": name, "error": "invalid", "message": str(exc)})
        else:
            done.append(name)
    logger.info("bulk %s: %d done, %d failed", action, len(done), len(failed))
    return JSONResponse({"done": done, "failed": failed})


@router.post("/tasks/pause", response_model=BulkResult, summary="Pause several tasks")
def bulk_pause(request: Request, body: BulkBody) -> JSONResponse:
    """Pause the tasks named, or those matching the filter (running ones go on)."""
    return _bulk(request, body, "pause")


@router.post("/tasks/resume", response_model=BulkResult, summary="Resume several tasks")
def bulk_resume(request: Request, body: BulkBody) -> JSONResponse:
    """Resume the tasks named, or those matching the filter."""
    return _bulk(request, body, "resume")


@router.post("/tasks/trigger", response_model=BulkResult, summary="Trigger several tasks")
def bulk_trigger(request: Request, body: BulkBody) -> JSONResponse:
    """Make the tasks named, or those matching the filter, due now (running ones fail)."""
    return _bulk(request, body, "trigger")


# Routes on one task: `{name:path}` takes names with slashes (sent percent-encoded); the
# routes with a suffix come first so that `a/b/upcoming` is not read as a task named so.


NodeParam = Annotated[str | None, Query(description="only runs of this node id",
                                        min_length=1, max_length=255)]
CursorParam = Annotated[str | None, Query(
    description="next_cursor of the previous page: the runs older than its last one",
    max_length=200)]


def _runs(client: Client, name: str | None, status: list[RunStatus] | None,
          since: datetime | None, until: datetime | None, limit: int,
          node: str | None = None, cursor: str | None = None) -> JSONResponse:
    found = client.runs(name, status=status, since=since, until=until, limit=limit, node=node,
                        cursor=cursor)
    more = found[-1].cursor if len(found) == limit else None
    return JSONResponse({"runs": [run.to_dict() for run in found], "limit": limit,
                         "next_cursor": more})


@router.get("/runs", response_model=RunList, summary="Runs of all tasks")
def list_runs(
    request: Request,
    task: Annotated[str | None, Query(description="only runs of this task",
                                      min_length=1, max_length=255)] = None,
    node: NodeParam = None,
    status: RunStatusParam = None,
    since: SinceParam = None,
    until: UntilParam = None,
    cursor: CursorParam = None,
    limit: RunLimitParam = 100,
) -> JSONResponse:
    """Finished executions, newest first, filtered by task, node, status and time; a page
    that is full gives ``next_cursor`` for the next, older one."""
    return _runs(client_of(request), task, status, since, until, limit, node, cursor)


@router.get("/tasks/{name:path}/runs", response_model=RunList, responses=_TASK_ERRORS,
            summary="A task's runs")
def task_runs(
    request: Request,
    name: str,
    status: RunStatusParam = None,
    since: SinceParam = None,
    until: UntilParam = None,
    node: NodeParam = None,
    cursor: CursorParam = None,
    limit: RunLimitParam = 100,
) -> JSONResponse:
    """The task's finished executions, newest first (a deleted task's runs too, until they
    are pruned; a name without runs gives an empty list)."""
    client = client_of(request)
    if _suffix_was_encoded(request, "runs"):
        return JSONResponse(_task(client, f"{name}/runs"))
    return _runs(client, name, status, since, until, limit, node, cursor)


@router.get("/tasks/{name:path}/upcoming", response_model=UpcomingTimes,
            responses=_TASK_ERRORS, summary="Next fire times")
def task_upcoming(
    request: Request, name: str, n: Annotated[int, Query(ge=1, le=100)] = 10
) -> JSONResponse:
    """The next ``n`` due times: the stored one, then the schedule's."""
    client = client_of(request)
    if _suffix_was_encoded(request, "upcoming"):
        return JSONResponse(_task(client, f"{name}/upcoming"))
    info = client.info(name)
    coming = upcoming(info, client.db_now(), n)
    return JSONResponse({
        "name": info.name,
        "schedule": info.schedule,
        "times": [t.isoformat() for t in coming.times],
        "note": coming.note,
    })


@router.post("/tasks/{name:path}/trigger", response_model=Task, responses=_RUNNING_ERRORS,
             summary="Trigger a task")
def trigger(request: Request, name: str) -> JSONResponse:
    """Make the task due now (409 while it runs)."""
    _action_path(request, "trigger")
    client = client_of(request)
    client.trigger(name)
    return JSONResponse(_task(client, name))


@router.post("/tasks/{name:path}/pause", response_model=Task, responses=_TASK_ERRORS,
             summary="Pause a task")
def pause(request: Request, name: str) -> JSONResponse:
    """Never pick the task again, on any node, until resumed (a running execution goes on)."""
    _action_path(request, "pause")
    client = client_of(request)
    client.pause(name)
    return JSONResponse(_task(client, name))


@router.post("/tasks/{name:path}/resume", response_model=Task, responses=_TASK_ERRORS,
             summary="Resume a task")
def resume(request: Request, name: str) -> JSONResponse:
    """Undo pause: the task runs at its stored next time (at once if that passed)."""
    _action_path(request, "resume")
    client = client_of(request)
    client.resume(name)
    return JSONResponse(_task(client, name))


@router.post("/tasks/{name:path}/cancel", response_model=Cancelled, responses=_TASK_ERRORS,
             summary="Cancel the running execution")
def cancel(request: Request, name: str) -> JSONResponse:
    """Ask the running execution to stop; ``cancelled`` is false if it was not running."""
    _action_path(request, "cancel")
    client = client_of(request)
    done = client.cancel(name)
    return JSONResponse({"cancelled": done, "task": _task(client, name)})


@router.post("/tasks/{name:path}/reschedule", response_model=Task, responses=_RUNNING_ERRORS,
             summary="Set the next due time")
def reschedule(
    request: Request, name: str, body: Annotated[RescheduleBody, Body()]
) -> JSONResponse:
    """Set when the task is next due (409 while it runs)."""
    _action_path(request, "reschedule")
    client = client_of(request)
    client.reschedule(name, body.at)
    return JSONResponse(_task(client, name))


class NamedSchedule(ScheduleBody):
    """A runtime task with its name, one item of a bulk create."""

    name: str = Field(description="the task's name", examples=["report-42"])


class Written(BaseModel):
    """How many items a bulk create wrote."""

    written: int


@router.put("/tasks", response_model=Written, responses=ERROR_RESPONSES,
            summary="Create or update many runtime tasks")
def put_tasks(request: Request,
              body: Annotated[list[NamedSchedule], Body(max_length=100_000)]) -> JSONResponse:
    """``Client.schedule_many()``: each item as ``PUT /api/tasks/{name}`` takes it, plus its
    ``name`` (a ``once <ISO 8601>`` schedule makes a one-off job), written in batches with
    one statement each. Every item is checked first: 422 names the first bad one
    (``item 3 ('r-3'): …``) and nothing is written then."""
    client = client_of(request)
    items = []
    for index, item in enumerate(body):
        try:
            schedule = parse(item.schedule)
        except ValueError as exc:
            raise ValueError(f"item {index} ({item.name!r}): schedule: {exc}") from None
        items.append(ScheduleItem(item.name, item.handler, schedule, item.data, **item.options))
    written = client.schedule_many(items)
    logger.info("%d tasks scheduled in bulk", written)
    return JSONResponse({"written": written})


@router.put("/tasks/{name:path}", response_model=ScheduledTask, responses=ERROR_RESPONSES,
            summary="Create or update a runtime task")
def put_task(request: Request, name: str, body: Annotated[ScheduleBody, Body()]) -> JSONResponse:
    """``Client.schedule()``: create the runtime task, or give an existing row the new
    handler, schedule, data and options (its counters kept; next time recomputed unless it
    runs). 422 names the field that is wrong; nothing is written then. ``warning`` says
    when no live or recent node has the handler, suggesting the closest that exists."""
    client = client_of(request)
    try:
        schedule = parse(body.schedule)
    except ValueError as exc:
        raise ValueError(f"schedule: {exc}") from None
    client.schedule(name, body.handler, schedule, data=body.data, **body.options)
    logger.info("task %r scheduled: handler %r, %s", name, body.handler, body.schedule)
    return JSONResponse({**_task(client, name), "warning": client.handler_warning(body.handler)})


@router.get("/tasks/{name:path}", response_model=Task, responses=_TASK_ERRORS,
            summary="One task")
def get_task(request: Request, name: str) -> JSONResponse:
    """Every field of the task."""
    return JSONResponse(_task(client_of(request), name))


@router.delete("/tasks/{name:path}", response_model=Deleted, responses=_RUNNING_ERRORS,
               summary="Delete a task")
def delete(request: Request, name: str, force: bool = False) -> JSONResponse:
    """Delete the task's row; refused while it runs unless ``force=true``. A node that still
    declares the task inserts it again when it starts."""
    client_of(request).delete(name, force=force)
    return JSONResponse({"deleted": name})


@router.get("/schedules/preview", response_model=SchedulePreview, summary="Preview a schedule")
def schedule_preview(
    request: Request,
    schedule: Annotated[str, Query(description="schedule text, as PUT /api/tasks takes it",
                                   min_length=1, max_length=500,
                                   examples=["cron 0 8 * * 1-5 Europe/Berlin"])],
    n: Annotated[int, Query(ge=1, le=50)] = 5,
) -> JSONResponse:
    """The schedule in words and the first ``n`` due times of a task created with it now
    (database clock); 422 says what is wrong with the text."""
    try:
        coming = preview(schedule, client_of(request).db_now(), n)
    except ValueError as exc:
        raise ValueError(f"schedule: {exc}") from None
    return JSONResponse({"schedule": schedule, "words": describe_schedule(schedule),
                         "times": [t.isoformat() for t in coming.times], "note": coming.note})


@router.get("/nodes", response_model=NodeList, tags=["cluster"], summary="Nodes")
def list_nodes(request: Request) -> JSONResponse:
    """Every node of the registry, the most recently seen first: alive or gone, its last
    contact on the database clock, and the tasks it holds now."""
    client = client_of(request)
    return JSONResponse({"nodes": [n.to_dict() for n in client.nodes()],
                         "db_now": client.db_now().isoformat()})


@router.get("/groups", response_model=GroupList, tags=["cluster"], summary="Concurrency groups")
def list_groups(request: Request) -> JSONResponse:
    """Every group that has a limit or tasks: its limit and its executions running now."""
    return JSONResponse({"groups": [
        {"group": g.name, "limit": g.limit, "running": g.running, "tasks": g.tasks}
        for g in client_of(request).groups()]})


@router.get("/health", response_model=Health, summary="Health",
            responses={503: {"model": Health, "description": "the database is unavailable"}})
def health(request: Request) -> JSONResponse:
    """200 when the database answers and the table exists, else 503 with the reason;
    ``tasks`` counts up to 10,001 rows (``tasks_exact`` is false beyond 10,000)."""
    client = client_of(request)
    try:
        now = client.db_now()
        # One COUNT(*) of COUNT_CAP + 1 rows at most: the same cost whatever the table's size.
        count = client.count_tasks(cap=COUNT_CAP)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        logger.warning("health check failed: %s", reason)
        return JSONResponse(
            {"ok": False, "db_now": None, "tasks": None, "tasks_exact": None,
             "reason": reason}, status_code=503
        )
    exact = count <= COUNT_CAP
    return JSONResponse({"ok": True, "db_now": now.isoformat(),
                         "tasks": count, "tasks_exact": exact,
                         "reason": None})
