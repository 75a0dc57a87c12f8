"""The dashboard's HTML pages, rendered on the server.

Each page has a ``/partials/...`` twin that renders only its live region: the page's script
fetches it every few seconds and swaps it in, so the page refreshes without a reload and keeps
its scroll position, search box and selection. A new page is a route here, a template, and a
link in ``base.html``'s navigation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates

from .._store.listing import group_waiting
from ..context import RunInfo, TaskInfo
from ..table import RUN_STATUSES
from .views import (
    COUNT_CAP,
    STATES,
    Page,
    State,
    describe_schedule,
    states_of,
    upcoming,
)

__all__ = ["PAGE_SIZE", "RUNS_SHOWN", "Bar", "TaskRow", "chrome", "duration_chart", "router"]

PAGE_SIZE = 50
WAITING_SHOWN = 10
"""Tasks waiting for room named per group on the groups page (then "and N more")."""
"""Tasks per page of the tasks page: the database reads about as many rows."""
RUNS_SHOWN = 25
"""Runs in a task page's table; its chart shows up to :data:`CHART_RUNS`."""

CHART_RUNS = 60
REFRESH_MS = 4000


def approximate(n: int) -> str:
    """``n`` rounded for a reader: 950, 12k, 1.2M."""
    if n < 1_000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1_000:.0f}k" if n >= 10_000 else f"{n / 1_000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


@dataclass(frozen=True)
class TaskRow:
    """A task as the templates show it."""

    info: TaskInfo
    states: set[State]
    schedule_words: str
    duration: timedelta | None
    url: str

    @property
    def overdue(self) -> bool:
        return "overdue" in self.states

    @property
    def failing(self) -> bool:
        return "failing" in self.states


def _duration(info: TaskInfo) -> timedelta | None:
    started, finished = info.last_started_at, info.last_finished_at
    if info.running or started is None or finished is None or finished < started:
        return None
    return finished - started


def fmt_duration(value: timedelta | None) -> str:
    """``"340 ms"``, ``"12.4 s"``, ``"3 min 5 s"``, ``"2 h 10 min"``."""
    if value is None:
        return ""
    seconds = value.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


@dataclass(frozen=True)
class Bar:
    """One run in a duration chart: where its bar stands, in the SVG's units."""

    run: RunInfo
    x: float
    y: float
    width: float
    height: float


CHART_W, CHART_H = 600.0, 120.0


def duration_chart(runs: list[RunInfo]) -> list[Bar]:
    """Bars for ``runs`` (newest first, as ``runs()`` returns them): the newest at the right
    edge, one slot of :data:`CHART_RUNS` each, heights proportional to the longest."""
    shown = list(reversed(runs))
    if not shown:
        return []
    longest = max(r.duration.total_seconds() for r in shown) or 1.0
    step = CHART_W / max(len(shown), CHART_RUNS)
    width = max(1.0, step * 0.7)
    first = CHART_W - len(shown) * step
    bars = []
    for i, run in enumerate(shown):
        height = max(2.0, (CHART_H - 4) * run.duration.total_seconds() / longest)
        bars.append(Bar(run, first + i * step + (step - width) / 2, CHART_H - height, width,
                        height))
    return bars


def root_of(request: Request) -> str:
    """The app's own path (ends with ``/``), whatever it is mounted under."""
    return request.url_for("tasks_page").path


def task_url(request: Request, name: str) -> str:
    """The task page's path; every character of the name that means something in a URL
    (``/``, ``?``, ``#``, ``%``, spaces) is percent-encoded."""
    return f"{root_of(request)}tasks/{quote(name, safe='')}"


def chrome(request: Request) -> dict[str, Any]:
    """What ``base.html`` needs on every page."""
    dashboard = request.app.state.dashboard
    return {
        "root": root_of(request),
        "table": dashboard.client.table,
        "read_only": bool(getattr(request.state, "read_only", True)),
        "refresh_ms": REFRESH_MS,
    }


def _row(request: Request, info: TaskInfo, now: datetime) -> TaskRow:
    return TaskRow(info, states_of(info, now), describe_schedule(info.schedule),
                   _duration(info), task_url(request, info.name))


def _tasks_context(request: Request, state: str | None, q: str | None, page: int,
                   kind: str | None = None) -> dict[str, Any]:
    from .api import listing_filters  # the API's own rule, so both always agree

    client = request.app.state.dashboard.client
    kind = "all" if kind == "all" else None
    state = state if state in STATES else None
    # The database filters, pages and counts: two statements, whatever the table's size.
    listing = listing_filters(client, state, q, kind or "tasks")
    totals = client.task_totals(**listing, cap=COUNT_CAP)
    offset = (page - 1) * PAGE_SIZE
    items = client.tasks(**listing, limit=PAGE_SIZE, offset=offset)
    now = totals.db_now
    listing_page = Page(items, totals.matching, PAGE_SIZE, offset)
    # Beyond the cap the total is a lower bound: a full page says there may be a next one.
    more = (listing_page.offset + PAGE_SIZE < listing_page.total if totals.exact
            else len(items) == PAGE_SIZE)

    def fmt_count(n: int, whole: bool = False) -> str:
        """A count as the page shows it: exact, or, past the cap, "10,000+" (a lower
        bound) or, for the whole table, the database's estimate ("≈ 100k")."""
        if totals.exact:
            return f"{n:,}"
        if whole and totals.estimate is not None and totals.estimate > n:
            return f"≈ {approximate(totals.estimate)}"
        return f"{n:,}+"

    def page_url(number: int) -> str:
        params = {k: v for k, v in (("state", state), ("q", q), ("kind", kind),
                                    ("page", number)) if v}
        return root_of(request) + ("?" + urlencode(params) if params else "")

    def state_url(value: str | None) -> str:
        params = {k: v for k, v in (("state", value), ("q", q), ("kind", kind)) if v}
        return root_of(request) + ("?" + urlencode(params) if params else "")

    return {
        **chrome(request),
        "now": now,
        "rows": [_row(request, info, now) for info in listing_page.items],
        "counts": totals.states,
        "states": STATES,
        "state": state,
        "q": q or "",
        "total": listing_page.total,
        "page": page,
        "first": listing_page.offset + 1,
        "last": listing_page.offset + len(listing_page.items),
        "prev_url": page_url(page - 1) if page > 1 else None,
        "next_url": page_url(page + 1) if more else None,
        "exact": totals.exact,
        "fmt_count": fmt_count,
        "fmt_duration": fmt_duration,
        "kind": kind,
        "batch_keys": totals.batch_keys,
        "state_url": state_url,
        "with_keys_url": root_of(request) + "?" + urlencode(
            {k: v for k, v in (("state", state), ("q", q), ("kind", "all")) if v}),
        "tasks_only_url": root_of(request) + "?" + urlencode(
            {k: v for k, v in (("state", state), ("q", q)) if v}),
        "batches_url": request.url_for("batches_page").path,
    }


def render(request: Request, template: str, context: dict[str, Any]) -> Response:
    """``template`` rendered with ``context``."""
    templates: Jinja2Templates = request.app.state.dashboard.templates
    return templates.TemplateResponse(request, template, context)


PageParam = Annotated[int, Query(ge=1)]


@dataclass(frozen=True)
class MinuteBars:
    """One minute of the throughput chart: its succeeded and failed runs as stacked bars."""

    minute: datetime
    ok: int
    failed: int
    x: float
    width: float
    ok_y: float
    ok_height: float
    failed_y: float
    failed_height: float


THROUGHPUT_W, THROUGHPUT_H = 600.0, 70.0


def throughput_chart(minutes: list[tuple[datetime, int, int]]) -> list[MinuteBars]:
    """Stacked bars (failures on top) for runs per minute, oldest on the left; none when no
    run finished in the window."""
    highest = max((ok + failed for _, ok, failed in minutes), default=0)
    if highest == 0:
        return []
    step = THROUGHPUT_W / len(minutes)
    width = max(1.0, step * 0.75)
    scale = (THROUGHPUT_H - 2) / highest
    bars = []
    for i, (minute, ok, failed) in enumerate(minutes):
        ok_h, failed_h = ok * scale, failed * scale
        bars.append(MinuteBars(minute, ok, failed, i * step + (step - width) / 2, width,
                               THROUGHPUT_H - ok_h, ok_h, THROUGHPUT_H - ok_h - failed_h,
                               failed_h))
    return bars


@router.get("/", name="tasks_page")
def tasks_page(request: Request, state: str | None = None, q: str | None = None,
               page: PageParam = 1, kind: str | None = None) -> Response:
    """Every task, counts by state, filter and search, bulk actions (batch keys only with
    ``kind=all``: they have the batches page), and the last hour's runs per minute."""
    client = request.app.state.dashboard.client
    try:
        hour = client.throughput(60)
    except Exception:  # a table without history: no chart, the page as before
        hour = []
    context = _tasks_context(request, state, q, page, kind)
    context.update(throughput=throughput_chart(hour), throughput_box=(THROUGHPUT_W, THROUGHPUT_H),
                   hour_ok=sum(ok for _, ok, _ in hour),
                   hour_failed=sum(failed for _, _, failed in hour))
    return render(request, "tasks.html", context)


@router.get("/partials/tasks", name="tasks_partial")
def tasks_partial(request: Request, state: str | None = None, q: str | None = None,
                  page: PageParam = 1, kind: str | None = None) -> Response:
    """The live region of the tasks page."""
    return render(request, "_tasks_live.html", _tasks_context(request, state, q, page, kind))


def _task_context(request: Request, name: str) -> dict[str, Any]:
    client = request.app.state.dashboard.client
    info = client.info(name)
    now = client.db_now()
    coming = upcoming(info, now, 10)
    state_json = None
    if info.state is not None:
        state_json = json.dumps(info.state, indent=2, ensure_ascii=False, sort_keys=True)
    runs = client.runs(info.name, limit=CHART_RUNS)
    group = _group_of(client, info, now)
    return {
        **chrome(request),
        "now": now,
        "row": _row(request, info, now),
        "info": info,
        "runs": runs[:RUNS_SHOWN],
        "bars": duration_chart(runs),
        "chart": (CHART_W, CHART_H),
        "longest": max((r.duration for r in runs), default=None),
        "upcoming": coming,
        "state_json": state_json,
        "info_json": json.dumps(info.to_dict(), indent=2, ensure_ascii=False),
        "partial_url": f"{root_of(request)}partials/task/{quote(info.name, safe='')}",
        "fmt_duration": fmt_duration,
        "group": group,
        "groups_url": request.url_for("groups_page").path,
        "edit_url": request.url_for("edit_page").path + "?" + urlencode({"name": info.name}),
    }


@dataclass(frozen=True)
class GroupView:
    """A task's concurrency group as its page shows it, and whether the task waits for it."""

    name: str
    limit: int | None
    running: int
    waiting: bool
    """Due, unpaused and idle while the group runs as many as its limit allows."""

    @property
    def full(self) -> bool:
        return self.limit is not None and self.running >= self.limit


def _group_of(client: Any, info: TaskInfo, now: datetime) -> GroupView | None:
    name = info.options.get("group")
    if not name:
        return None
    found = next((g for g in client.groups() if g.name == name), None)
    limit = found.limit if found else None
    running = found.running if found else 0
    full = limit is not None and running >= limit
    waiting = full and not info.running and not info.paused and info.next_process_at <= now
    return GroupView(str(name), limit, running, waiting)



@router.get("/tasks/{name:path}", name="task_page")
def task_page(request: Request, name: str) -> Response:
    """One task: every field, its state, the next fire times and the actions."""
    return render(request, "task.html", _task_context(request, name))


@router.get("/partials/task/{name:path}", name="task_partial")
def task_partial(request: Request, name: str) -> Response:
    """The live region of a task page."""
    return render(request, "_task_live.html", _task_context(request, name))


RUNS_PAGE = 50
"""Runs per page of the runs page (older ones a click away, by cursor)."""


@dataclass(frozen=True)
class RunFilters:
    """The runs page's filters, as given in its URL; an unreadable one is ignored and said."""

    task: str | None = None
    node: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    cursor: str | None = None

    def query(self, **changes: Any) -> str:
        """The page's query string with ``changes`` (None removes a filter)."""
        values = {"task": self.task, "node": self.node, "status": self.status,
                  "since": self.since.isoformat() if self.since else None,
                  "until": self.until.isoformat() if self.until else None,
                  "cursor": self.cursor, **changes}
        kept = {k: v for k, v in values.items() if v}
        return "?" + urlencode(kept) if kept else ""

    @property
    def any(self) -> bool:
        return any((self.task, self.node, self.status, self.since, self.until))


def _when(text: str | None, label: str, problems: list[str]) -> datetime | None:
    """An ISO 8601 time from the URL; without an offset it is UTC (a form sent without the
    page's script)."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        problems.append(f"{label} {text!r} is not a date and time; it was ignored")
        return None
    return value if value.utcoffset() is not None else value.replace(tzinfo=timezone.utc)


def _runs_context(request: Request, task: str | None, node: str | None, status: str | None,
                  since: str | None, until: str | None, cursor: str | None) -> dict[str, Any]:
    client = request.app.state.dashboard.client
    problems: list[str] = []
    filters = RunFilters(
        (task or "").strip() or None, (node or "").strip() or None,
        status if status in RUN_STATUSES else None,
        _when(since, "From", problems), _when(until, "To", problems), cursor or None)
    try:
        runs = client.runs(filters.task, status=filters.status, since=filters.since,
                           until=filters.until, node=filters.node, cursor=filters.cursor,
                           limit=RUNS_PAGE)
    except ValueError as exc:
        problems.append(str(exc))
        runs = []
    base = request.url_for("runs_page").path
    try:
        nodes = [n.node_id for n in client.nodes()]
    except Exception:  # a table older than the node registry: no list to offer
        nodes = []
    return {
        **chrome(request),
        "now": client.db_now(),
        "runs": runs,
        "statuses": RUN_STATUSES,
        "status": filters.status,
        "filters": filters,
        "problems": problems,
        "node_ids": nodes,
        "runs_url": base,
        "status_url": lambda s: base + filters.query(status=s, cursor=None),
        "older_url": (base + filters.query(cursor=runs[-1].cursor)
                      if len(runs) == RUNS_PAGE else None),
        "newest_url": base + filters.query(cursor=None) if filters.cursor else None,
        "page_size": RUNS_PAGE,
        "task_url": lambda name: task_url(request, name),
        "fmt_duration": fmt_duration,
    }


@router.get("/runs", name="runs_page")
def runs_page(request: Request, task: str | None = None, node: str | None = None,
              status: str | None = None, since: str | None = None, until: str | None = None,
              cursor: str | None = None) -> Response:
    """Runs of all tasks, filtered by task, node, status and time, a page at a time."""
    return render(request, "runs.html",
                  _runs_context(request, task, node, status, since, until, cursor))


@router.get("/partials/runs", name="runs_partial")
def runs_partial(request: Request, task: str | None = None, node: str | None = None,
                 status: str | None = None, since: str | None = None,
                 until: str | None = None, cursor: str | None = None) -> Response:
    """The live region of the runs page."""
    return render(request, "_runs_live.html",
                  _runs_context(request, task, node, status, since, until, cursor))


def _known_handlers(client: Any) -> list[str]:
    """Handlers of the nodes seen in the last day (the registry), for the edit form."""
    try:
        nodes = client.nodes()
    except Exception:  # a table older than the registry: the field takes any name
        return []
    return sorted({h for n in nodes for h in n.handlers})


@router.get("/edit", name="edit_page")
def edit_page(request: Request, name: str | None = None) -> Response:
    """Create a runtime task, or change one (``?name=``): handler, schedule text checked as
    typed with its next due times, data as JSON. Admins only: a read-only view says so."""
    client = request.app.state.dashboard.client
    info = client.info(name) if name else None
    declared = info is not None and (info.builtin or not info.handler
                                     or info.handler == info.name)
    data_json = ""
    if info is not None and info.data is not None:
        data_json = json.dumps(info.data, indent=2, ensure_ascii=False)
    return render(request, "edit.html", {
        **chrome(request),
        "info": info,
        "declared": declared,
        "handlers": _known_handlers(client),
        "data_json": data_json,
        "task_url": task_url(request, info.name) if info is not None else None,
    })


def _nodes_context(request: Request) -> dict[str, Any]:
    client = request.app.state.dashboard.client
    nodes = client.nodes()
    return {
        **chrome(request),
        "now": client.db_now(),
        "nodes": nodes,
        "alive": sum(1 for n in nodes if n.alive),
        "task_url": lambda name: task_url(request, name),
    }


@router.get("/nodes", name="nodes_page")
def nodes_page(request: Request) -> Response:
    """The nodes of the registry: alive or gone, last contact, what each runs now."""
    return render(request, "nodes.html", _nodes_context(request))


@router.get("/partials/nodes", name="nodes_partial")
def nodes_partial(request: Request) -> Response:
    """The live region of the nodes page."""
    return render(request, "_nodes_live.html", _nodes_context(request))


def _groups_context(request: Request) -> dict[str, Any]:
    client = request.app.state.dashboard.client
    groups = client.groups()
    now = client.db_now()
    # Only a full group has tasks waiting for room: its first names and their number, by
    # the database (two short statements per full group, not a read of every task).
    waiting = {g.name: group_waiting(client._store, g.name, WAITING_SHOWN)
               for g in groups if g.limit is not None and g.running >= g.limit}
    return {
        **chrome(request),
        "now": now,
        "groups": groups,
        "waiting": waiting,
        "task_url": lambda name: task_url(request, name),
    }


@router.get("/groups", name="groups_page")
def groups_page(request: Request) -> Response:
    """Concurrency groups: limit, executions running, tasks waiting for room."""
    return render(request, "groups.html", _groups_context(request))


@router.get("/partials/groups", name="groups_partial")
def groups_partial(request: Request) -> Response:
    """The live region of the groups page."""
    return render(request, "_groups_live.html", _groups_context(request))


def _batches_context(request: Request, handler: str | None) -> dict[str, Any]:
    client = request.app.state.dashboard.client
    every = client.batches()
    now = client.db_now()
    per_handler: dict[str, int] = {}
    for b in every:
        per_handler[b.handler] = per_handler.get(b.handler, 0) + 1
    handler = handler if handler in per_handler else None
    rows = [b for b in every if handler is None or b.handler == handler]
    return {
        **chrome(request),
        "now": now,
        "rows": rows,
        "handler": handler,
        "handlers": sorted(per_handler.items()),
        "total_keys": len(every),
        "item_total": sum(b.items for b in rows),
        "batches_url": request.url_for("batches_page").path,
        "task_url": lambda name: task_url(request, name),
    }


@router.get("/batches", name="batches_page")
def batches_page(request: Request, handler: str | None = None) -> Response:
    """The keys with pending items: counts, next delivery, last failure; drop a key."""
    return render(request, "batches.html", _batches_context(request, handler))


@router.get("/partials/batches", name="batches_partial")
def batches_partial(request: Request, handler: str | None = None) -> Response:
    """The live region of the batches page."""
    return render(request, "_batches_live.html", _batches_context(request, handler))
