"""The :class:`Client`: every operation on the tasks table, for any process.

A web app, a deploy script or the command line operates tasks without running any: it needs a
URL (or an engine) and the table's name, not a :class:`~dbscheduler.Scheduler`. Each operation
is one autocommit write on the database's clock (a read follows only to explain a refusal).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from . import batches as _batches
from ._engine import faultpoints as _faultpoints
from ._engine import trace_links as _trace_links
from ._engine.durations import duration
from ._engine.nodes import handler_warning, list_nodes
from ._engine.options import options_from
from ._engine.runtime import once_at, runtime_row
from ._engine.taskinfo import task_info
from ._store import (
    StoreBase,
    select_runs,
    validate_name,
    write_runtime,
)
from ._store.alerts import dead_where, overdue_where
from ._store.bulk import push_many, write_runtime_many
from ._store.controls import group_infos
from ._store.controls import set_group_limit as write_group_limit
from ._store.listing import STATES, Listing, count_listing, count_matching, select_listing
from ._store.throughput import finished_since
from .batches import BatchInfo
from .bulk import PushItem, ScheduleItem, push_rows, runtime_rows
from .context import GroupInfo, RunInfo, TaskInfo, parse_run_cursor
from .dialects import create_engine, db_now, prepare_engine
from .errors import TaskNotFound, TaskRunning
from .logfields import engine_log
from .nodes import NodeInfo
from .schedules import Schedule
from .table import DEFAULT_TABLE, RUN_STATUSES

__all__ = ["Client", "GroupInfo", "NodeInfo", "TaskCounts", "TaskTotals", "task_info"]

log = engine_log("dbscheduler.client")
_warnings = logging.getLogger("dbscheduler.client")
"""Warnings about what a caller asked (not about a node's work): no node fields."""

_HANDLER_CHECK_EVERY = 60.0
"""Seconds a client trusts its last look at the registry for a handler."""

_CLIENT_LEASE = timedelta(seconds=30)
"""Connection timeouts of a client's own engine are sized as for a node with this lease."""


@dataclass(frozen=True)
class TaskCounts:
    """How many tasks of the table are in each state, from :meth:`Client.counts`.

    ``running + paused + overdue + idle == total``: a paused task that still runs counts as
    running; an overdue one is unpaused, not running, and late by more than ``overdue_after``
    or without a success for longer than its ``alert_after``.
    """

    total: int
    running: int
    paused: int
    overdue: int
    idle: int


@dataclass(frozen=True)
class TaskTotals:
    """The numbers of a filtered listing, from :meth:`Client.task_totals` (one aggregate).

    ``matching``: the rows the same filters give :meth:`Client.tasks` (over all pages);
    ``states``: ``{"all": n, "running": n, "paused": n, "failing": n, "overdue": n,
    "idle": n}`` under the handler filter and without batch keys, but whatever the state
    and the search (what each of the dashboard's state filters would show; a task may be in
    several: a paused task that fails is both; ``idle`` is none of the others);
    ``batch_keys``: the rows left out as batch keys (0 unless ``batch_keys=False``);
    ``db_now``: the database clock they were counted on.

    With ``task_totals(cap=n)`` only ``n + 1`` rows at most are counted (a cost that does
    not grow with the table): ``exact`` is False when there were more, and then every
    number is that of the rows counted, a lower bound ("10,000+"), and ``estimate`` is the
    database's estimate of the whole table's rows, from its statistics (None where it has
    none; PostgreSQL's ``pg_class``, MySQL's ``information_schema.TABLES``).

    >>> client.task_totals(state="failing").matching          # doctest: +SKIP
    3
    >>> big = client.task_totals(cap=10_000)                  # doctest: +SKIP
    >>> big.exact, big.matching, big.estimate                 # doctest: +SKIP
    (False, 10001, 100342)
    """

    db_now: datetime
    matching: int
    states: dict[str, int]
    batch_keys: int
    exact: bool = True
    estimate: int | None = None


class Client:
    """Operations on the tasks of one table: trigger, reschedule, pause, resume, cancel,
    delete, info, tasks, runs.

    ::

        from dbscheduler import Client

        with Client("postgresql+psycopg://app@db/app") as client:
            client.trigger("nightly-report")
            for info in client.tasks():
                print(info.name, info.next_process_at, info.last_status)

    Args:
        url: SQLAlchemy URL of the database; the embedded SQLite default when neither ``url``
            nor ``engine`` is given.
        engine: an existing SQLAlchemy engine instead of a URL (not disposed by :meth:`close`).
        table: the table's name, a plain identifier with an optional ``schema.`` prefix.
        overdue_after: how late (past its due time, not picked) a task must be for
            :attr:`TaskInfo.overdue` and :meth:`counts`.

    Unknown names raise :class:`~dbscheduler.TaskNotFound`; a missing table raises
    :class:`~dbscheduler.SchemaMissing`. The client never creates the table.
    """

    def __init__(
        self, url: str | None = None, *, engine: Engine | None = None,
        table: str = DEFAULT_TABLE, overdue_after: timedelta | float = timedelta(seconds=60),
    ) -> None:
        self.overdue_after = duration(overdue_after, "overdue_after", allow_zero=True)
        if url is not None and engine is not None:
            raise ValueError("pass either url or engine, not both")
        if engine is not None and not isinstance(engine, Engine):
            raise ValueError(f"engine must be a SQLAlchemy Engine, got {type(engine).__name__}")
        self._owns_engine = engine is None
        if engine is None:
            engine = create_engine(url, lease=_CLIENT_LEASE)
        else:
            prepare_engine(engine)
        self.engine = engine
        self.table = table
        self._store = StoreBase(engine, table)
        self._handlers_checked: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"<Client {self._store.safe_url()} table={self.table}>"

    def close(self) -> None:
        """Dispose of the engine the client created (a given engine is left alone)."""
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- reads ---------------------------------------------------------------------------
    def db_now(self) -> datetime:
        """The database's current time, aware UTC (the clock every node schedules by)."""
        return self._store.db_now()

    def info(self, name: str) -> TaskInfo:
        """The :class:`TaskInfo` of ``name``.

        >>> client.info("nightly-report").next_process_at     # doctest: +SKIP
        datetime.datetime(2026, 11, 24, 2, 0, tzinfo=datetime.timezone.utc)
        """
        with self._store.read() as conn:
            row = self._row(conn, name)
        return task_info(row, now=row["db_now_"], overdue_after=self.overdue_after)

    def tasks(
        self, *, state: str | None = None, handler: str | None = None,
        match: str | None = None, limit: int | None = None, offset: int = 0,
        after: str | None = None, batch_keys: bool = True,
        overdue_after: timedelta | None = None,
    ) -> list[TaskInfo]:
        """A :class:`TaskInfo` for every row in the table, ordered by name (dbscheduler's own
        tasks, such as ``dbscheduler.prune-runs``, included: :attr:`TaskInfo.builtin`).

        The filters are applied by the database, which reads about the rows of the page when
        no filter is narrow (a page of a large table costs what a page of a small one does):

        * ``state``: one of ``running``, ``paused``, ``failing`` (the last run ended in error,
          was lost or timed out), ``overdue`` (:attr:`TaskInfo.overdue`) or ``idle`` (none of
          these);
        * ``handler``: only the rows this handler runs;
        * ``match``: text the name, handler or schedule contains (case-insensitive);
        * ``batch_keys=False``: leave out the rows of batch keys (``<handler>/<key>``);
        * ``limit`` rows at most (all when None), after skipping ``offset``, or, for pages
          that stay put while rows come and go, those named after ``after`` (the last name
          of the previous page);
        * ``overdue_after``: the lateness the ``overdue`` state uses (the client's when None).

        :meth:`task_totals` counts what the same filters give; :meth:`iter_tasks` streams a
        large listing a chunk at a time.

        >>> [i.name for i in client.tasks(state="failing", match="report", limit=2)]
        ... # doctest: +SKIP
        ['report-eu', 'report-us']
        """
        listing = self._listing(state, handler, match, batch_keys, overdue_after)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or not 1 <= limit <= 1_000_000):
            raise ValueError(f"limit must be an integer from 1 to 1000000 or None, got "
                             f"{limit!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
        if after is not None and not isinstance(after, str):
            raise ValueError(f"after must be a task name, got {after!r}")
        rows = select_listing(self._store, listing, limit, offset, after)
        return [task_info(r, now=r["db_now_"], overdue_after=listing.overdue_after)
                for r in rows]

    def iter_tasks(
        self, *, state: str | None = None, handler: str | None = None,
        match: str | None = None, limit: int | None = None, offset: int = 0,
        batch_keys: bool = True, overdue_after: timedelta | None = None, chunk: int = 500,
    ) -> Iterator[TaskInfo]:
        """The tasks :meth:`tasks` lists with the same filters, read ``chunk`` rows per
        statement (each page after the last name of the one before): memory stays flat
        however many rows there are, and no statement stays open between chunks.

        >>> for info in client.iter_tasks(handler="send-mail"):   # doctest: +SKIP
        ...     print(info.name)
        """
        if isinstance(chunk, bool) or not isinstance(chunk, int) or not 1 <= chunk <= 100_000:
            raise ValueError(f"chunk must be an integer from 1 to 100000, got {chunk!r}")
        left = limit
        after: str | None = None
        while left is None or left > 0:
            size = chunk if left is None else min(chunk, left)
            page = self.tasks(state=state, handler=handler, match=match, limit=size,
                              offset=offset if after is None else 0, after=after,
                              batch_keys=batch_keys, overdue_after=overdue_after)
            yield from page
            if len(page) < size:
                return
            after = page[-1].name
            if left is not None:
                left -= len(page)

    def task_totals(
        self, *, state: str | None = None, handler: str | None = None,
        match: str | None = None, batch_keys: bool = True,
        overdue_after: timedelta | None = None, cap: int | None = None,
    ) -> TaskTotals:
        """How many rows :meth:`tasks` gives with these filters, and how many of them are in
        each state, counted by one aggregate query (one row comes back, whatever the size
        of the table): see :class:`TaskTotals`.

        ``cap``: count ``cap + 1`` rows at most, so that the count costs the same in a table
        of any size; beyond it the numbers are lower bounds (``exact`` is False) and
        ``estimate`` the database's estimate of the table's rows. None counts every row.

        >>> totals = client.task_totals(batch_keys=False)           # doctest: +SKIP
        >>> totals.matching, totals.states["overdue"]              # doctest: +SKIP
        (10512, 3)
        >>> client.task_totals(cap=10_000).exact                   # doctest: +SKIP
        False
        """
        listing = self._listing(state, handler, match, batch_keys, overdue_after)
        found = count_listing(self._store, listing, _checked_cap(cap))
        return TaskTotals(found.db_now, found.matching, found.states, found.batch_keys,
                          found.exact, found.estimate)

    def count_tasks(
        self, *, state: str | None = None, handler: str | None = None,
        match: str | None = None, batch_keys: bool = True,
        overdue_after: timedelta | None = None, cap: int | None = None,
    ) -> int:
        """How many rows :meth:`tasks` gives with these filters, by one ``COUNT(*)``: cheaper
        than :meth:`task_totals` when the numbers by state are not needed (a health check,
        the "N more" of a page).

        ``cap``: count ``cap + 1`` rows at most, so that the count costs the same in a table
        of any size; a result above ``cap`` means "more than ``cap``". None counts every row.

        >>> client.count_tasks(handler="send-mail")   # doctest: +SKIP
        1200
        >>> client.count_tasks(cap=10_000)             # a table of 250,000 rows  # doctest: +SKIP
        10001
        """
        listing = self._listing(state, handler, match, batch_keys, overdue_after)
        return count_matching(self._store, listing, _checked_cap(cap))

    def _listing(self, state: str | None, handler: str | None, match: str | None,
                 batch_keys: bool, overdue_after: timedelta | None) -> Listing:
        """The filters of :meth:`tasks`, checked: ``ValueError`` naming the bad one."""
        if state is not None and state not in STATES:
            raise ValueError(f"unknown state {state!r}; use one of {', '.join(STATES)}")
        if handler is not None and (not isinstance(handler, str) or not handler):
            raise ValueError(f"handler must be a handler's name, got {handler!r}")
        if match is not None and not isinstance(match, str):
            raise ValueError(f"match must be text, got {match!r}")
        if match is not None and len(match) > 255:
            raise ValueError(f"match is {len(match)} characters long; the limit is 255")
        if not isinstance(batch_keys, bool):
            raise ValueError(f"batch_keys must be True or False, got {batch_keys!r}")
        if overdue_after is None:
            overdue_after = self.overdue_after
        if not isinstance(overdue_after, timedelta) or overdue_after < timedelta(0):
            raise ValueError(f"overdue_after must be a timedelta >= 0, got {overdue_after!r}")
        return Listing(state, handler, match if match and match.strip() else None, batch_keys,
                       overdue_after)

    def runs(
        self,
        name: str | None = None,
        *,
        status: str | Collection[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        node: str | None = None,
        cursor: str | None = None,
    ) -> list[RunInfo]:
        """Finished executions from the run history, newest first: of the task ``name`` (all
        tasks when None), with ``status`` (one or several of ``success``, ``error``,
        ``lost``, ``cancelled``, ``timeout``, ``skipped``), finished at or after ``since``
        and before ``until`` (aware datetimes), run by ``node``, at most ``limit``.
        ``cursor``: the :attr:`RunInfo.cursor` of the last run of a previous page, for the
        runs older than it (pages stay put while new runs arrive).

        A task that no longer exists keeps its runs until they are pruned; a name without
        runs gives an empty list.

        >>> [r.status for r in client.runs("nightly-report", limit=3)]   # doctest: +SKIP
        ['success', 'error', 'success']
        """
        if name is not None:
            validate_name(name)
        statuses = [status] if isinstance(status, str) else sorted(status or ())
        unknown = [s for s in statuses if s not in RUN_STATUSES]
        if unknown:
            raise ValueError(f"unknown run status {unknown[0]!r}; use one of "
                             f"{', '.join(RUN_STATUSES)}")
        for label, value in (("since", since), ("until", until)):
            if value is not None and (not isinstance(value, datetime) or value.utcoffset() is None):
                raise ValueError(f"{label} must be an aware datetime (e.g. with "
                                 f"tzinfo=timezone.utc), got {value!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000:
            raise ValueError(f"limit must be an integer from 1 to 100000, got {limit!r}")
        if node is not None and (not isinstance(node, str) or not node):
            raise ValueError(f"node must be a node id, got {node!r}")
        before = parse_run_cursor(cursor) if cursor is not None else None
        return select_runs(self._store, name, statuses, since, until, limit, node, before)

    def throughput(self, minutes: int = 60) -> list[tuple[datetime, int, int]]:
        """Runs per minute over the last ``minutes`` (database clock), oldest first:
        ``(minute, succeeded or skipped, failed: error, lost or timeout)``; cancelled runs
        count in neither. Read from the run history's newest 20,000 rows at most.

        >>> client.throughput(5)[-1]   # doctest: +SKIP
        (datetime.datetime(2026, 11, 26, 14, 5, tzinfo=datetime.timezone.utc), 118, 2)
        """
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 1440:
            raise ValueError(f"minutes must be an integer from 1 to 1440, got {minutes!r}")
        now, rows = finished_since(self._store, timedelta(minutes=minutes))
        first = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)
        ok, failed = [0] * minutes, [0] * minutes
        for at, status in rows:
            index = int((at - first).total_seconds() // 60)
            if 0 <= index < minutes:
                if status in ("success", "skipped"):
                    ok[index] += 1
                elif status in ("error", "lost", "timeout"):
                    failed[index] += 1
        return [(first + timedelta(minutes=i), ok[i], failed[i]) for i in range(minutes)]

    def counts(self, overdue_after: timedelta | None = None) -> TaskCounts:
        """Tasks by state, in one aggregate query on the database clock (cheap with 10,000
        rows: nothing but five numbers comes back); ``overdue_after`` defaults to the
        client's.

        >>> client.counts().overdue                               # doctest: +SKIP
        0
        """
        if overdue_after is None:
            overdue_after = self.overdue_after
        if not isinstance(overdue_after, timedelta) or overdue_after < timedelta(0):
            raise ValueError(f"overdue_after must be a timedelta >= 0, got {overdue_after!r}")
        t = self._store.table
        running = t.c.locked_by.is_not(None)
        idle = t.c.locked_by.is_(None)
        # Flags are compared with bound 0/1, never a boolean literal (SQL Server, old Oracle).
        paused = t.c.paused == sa.bindparam("paused_yes", True, type_=sa.Boolean())
        unpaused = t.c.paused == sa.bindparam("paused_no", False, type_=sa.Boolean())
        late = sa.or_(overdue_where(t, overdue_after), dead_where(t))

        # Constants in the text, not parameters: SQL Server types a CASE of parameters badly.
        one: sa.ColumnElement[int] = sa.literal_column("1", sa.Integer())
        zero: sa.ColumnElement[int] = sa.literal_column("0", sa.Integer())

        def count(*where: sa.ColumnElement[bool]) -> sa.ColumnElement[Any]:
            return sa.func.coalesce(sa.func.sum(sa.case((sa.and_(*where), one), else_=zero)), zero)

        stmt = sa.select(
            sa.func.count(), count(running), count(idle, paused), count(idle, unpaused, late)
        ).select_from(t)
        with self._store.read() as conn:
            row = conn.execute(stmt).one()
        total, run, pause, overdue = (int(v) for v in row)
        return TaskCounts(total, run, pause, overdue, total - run - pause - overdue)

    # -- writes --------------------------------------------------------------------------
    def trigger(self, name: str) -> None:
        """Make ``name`` due now; nodes listening on PostgreSQL wake at once.

        Called inside a traced span (with :func:`dbscheduler.tracing.link_triggers` on, or an
        :class:`~dbscheduler.tracing.OpenTelemetryTracing` in this process), the execution it
        makes due links its span to that one.

        Raises :class:`~dbscheduler.TaskRunning` while it runs (its next time is then its
        lease; ``cancel`` first if needed).
        """
        t = self._store.table
        parent = _trace_links.current()
        # The link is for the next pick only, which takes the token total_attempt + 1.
        link = None if parent is None else (
            sa.literal(f"{parent} ") + sa.cast(t.c.total_attempt + 1, sa.String(20)))
        self._update_idle(name, "trigger it", next_process_at=db_now(), attempt=0,
                          trigger_link=link)

    def reschedule(self, name: str, at: datetime) -> None:
        """Set the next due time of ``name`` to the aware datetime ``at``.

        >>> client.reschedule("report", datetime(2030, 1, 1, tzinfo=timezone.utc))  # doctest: +SKIP
        """
        if not isinstance(at, datetime):
            raise ValueError(f"reschedule {name!r}: at must be a datetime, got {at!r}")
        if at.tzinfo is None or at.utcoffset() is None:
            raise ValueError(
                f"reschedule {name!r}: at={at.isoformat()} is naive; pass an aware datetime "
                "(e.g. with tzinfo=timezone.utc)"
            )
        self._update_idle(name, "reschedule it", next_process_at=at, attempt=0,
                          trigger_link=None)

    def pause(self, name: str) -> None:
        """Never pick ``name`` again, on any node, until :meth:`resume`. A running execution
        goes on."""
        self._set_paused(name, True)

    def resume(self, name: str) -> None:
        """Undo :meth:`pause`; the task runs at its stored next time (at once if past)."""
        self._set_paused(name, False)

    def cancel(self, name: str) -> bool:
        """Ask the running execution of ``name`` to stop (``ctx.stop_requested``, seen within
        one heartbeat on its node). Returns False, changing nothing, if it is not running."""
        self._known_shape(name)
        t = self._store.table
        with self._store.autocommit() as conn:
            done = conn.execute(
                sa.update(t)
                .where(t.c.queue_name == name, t.c.locked_by.is_not(None))
                .values(stop_requested=True)
            ).rowcount
            _faultpoints.reached("operation")
            if not done:
                self._row(conn, name)  # raises TaskNotFound
        return bool(done)

    def delete(self, name: str, force: bool = False) -> None:
        """Delete the row of ``name``; refused while it runs unless ``force=True``.

        A task still declared in a node's code is inserted again when that node starts.
        """
        self._known_shape(name)
        t = self._store.table
        with self._store.autocommit() as conn:
            where = [t.c.queue_name == name]
            if not force:
                where.append(t.c.locked_by.is_(None))
            deleted = conn.execute(sa.delete(t).where(*where)).rowcount
            _faultpoints.reached("operation")
            if not deleted:
                row = self._row(conn, name)
                raise TaskRunning(
                    name, row["locked_by"],
                    "refusing to delete it; pass force=True to delete anyway",
                )

    # -- runtime tasks -------------------------------------------------------------------
    def schedule(self, name: str, handler: str, schedule: Schedule, *, data: Any = None,
                 **options: Any) -> None:
        """Create or update the runtime task ``name``, run by any node that has ``handler``.

        An existing row keeps its counters; its handler, schedule, data and options are
        replaced and its next time recomputed unless it runs. ``data`` (JSON) reaches the
        handler as ``ctx.data``. A ``Dynamic`` schedule, a bad name, data that is not JSON:
        ``ValueError`` naming the field, nothing written. A handler that no node has yet is
        allowed (``dbscheduler list`` marks it); one that no live or recent node has is
        logged as a warning (:meth:`handler_warning`).

        >>> client.schedule("r-42", "mail", Cron("0 8 * * *"), data={"n": 4})  # doctest: +SKIP
        """
        write_runtime(self._store, runtime_row(name, handler, schedule, data, options))
        self._check_handler(handler)

    def schedule_once(self, name: str, handler: str, at: datetime, *, data: Any = None,
                      **options: Any) -> None:
        """A one-off job: ``handler`` runs once at the aware datetime ``at`` (at once if
        past), retried by the handler's failure settings; the row is deleted when it
        succeeds or gives up."""
        self.schedule(name, handler, once_at(name, at), data=data, **options)

    def schedule_many(self, items: Iterable[ScheduleItem | tuple[Any, ...] | Mapping[str, Any]]
                      ) -> int:
        """Create or update many runtime tasks at once: the same rows as :meth:`schedule` for
        each item, written with one statement per batch of up to a thousand (two on SQL Server
        and Oracle), waking listening nodes once per batch. Returns how many items were
        written.

        An item is a :class:`~dbscheduler.bulk.ScheduleItem`, a tuple ``(name, handler,
        schedule)`` or ``(name, handler, schedule, data)``, or a mapping with ``name``,
        ``handler``, ``schedule`` (a Schedule or its text, e.g. ``"FixedRate(60)"``),
        optionally ``data`` and options (``priority``, ``group`` …). Every item is checked
        before anything is written; the first bad one raises ``ValueError`` naming its
        position; a name may appear once per call. Running it again changes nothing but
        the next times of idle rows (as :meth:`schedule` again would).

        >>> client.schedule_many(
        ...     [(f"r-{i}", "report", FixedRate(3600)) for i in range(500)])  # doctest: +SKIP
        500
        """
        rows = runtime_rows(items, once=False)
        write_runtime_many(self._store, rows)
        return len(rows)

    def schedule_once_many(
        self, items: Iterable[ScheduleItem | tuple[Any, ...] | Mapping[str, Any]]
    ) -> int:
        """Many one-off jobs at once (:meth:`schedule_once` for each item, in batches as
        :meth:`schedule_many`): items of ``(name, handler, at)`` or ``(name, handler, at,
        data)``, :class:`~dbscheduler.bulk.ScheduleItem` or mappings with ``at`` (an aware
        datetime or ISO 8601 text with its offset). Returns how many were written.

        >>> client.schedule_once_many(
        ...     (f"mail-{u}", "send-mail", at, {"user": u}) for u in users)  # doctest: +SKIP
        """
        rows = runtime_rows(items, once=True)
        write_runtime_many(self._store, rows)
        return len(rows)

    def push_many(self, items: Iterable[PushItem | tuple[Any, ...] | Mapping[str, Any]]
                  ) -> int:
        """Many pushes at once, in order: the same items and keys as :meth:`push` for each,
        written with one insert of the items and one upsert of the keys per batch. Several
        pushes to one key in one call act on it as they would one after another.

        An item is a :class:`~dbscheduler.bulk.PushItem`, a tuple ``(key, item, handler)``
        or a mapping with ``key``, ``item``, ``handler`` and optionally ``ontime``,
        ``update``, ``data``. Every push is checked before anything is written. Returns how
        many items were queued.

        >>> client.push_many(
        ...     (user, {"event": "comment"}, "digest") for user in users)  # doctest: +SKIP
        """
        pushes = push_rows(items)
        push_many(self._store, pushes)
        return len(pushes)

    def unschedule(self, name: str) -> bool:
        """Delete the row ``name`` (a running execution finishes; its fenced finish then
        changes nothing). Returns False when there was no such row."""
        try:
            self.delete(name, force=True)
        except TaskNotFound:
            return False
        return True

    # -- concurrency groups --------------------------------------------------------------
    def set_group_limit(self, group: str, limit: int | None) -> None:
        """At most ``limit`` executions of the tasks with ``group=group`` at once, across the
        cluster (``None`` removes the limit; 0 holds the group). Applies at every node's next
        pick; executions already running are not stopped.

        >>> client.set_group_limit("reports", 2)   # doctest: +SKIP
        """
        options_from({"group": group}, "set_group_limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or not 0 <= limit < 2**31):
            raise ValueError(f"set_group_limit: limit must be an integer >= 0 or None, got "
                             f"{limit!r}")
        write_group_limit(self._store, group, limit)

    def groups(self) -> list[GroupInfo]:
        """Every group that has a limit or tasks: its limit and its executions running now.

        >>> [(g.name, g.running, g.limit) for g in client.groups()]   # doctest: +SKIP
        [('reports', 2, 2)]
        """
        return group_infos(self._store)

    # -- keyed delayed batches ------------------------------------------------------------
    def push(self, key: str, item: Any, *, handler: str, ontime: datetime | float | None = None,
             update: str = "always", data: Any = None) -> None:
        """Queue ``item`` (JSON) under ``key``; the batch handler ``handler`` gets every
        pending item of the key in one call when the key is due.

        ``ontime``: when the key should be due, an aware datetime or Unix seconds (default:
        now, on the database's clock). ``update="always"`` makes the key due at this
        ``ontime``; ``"once"`` only when the key has no pending items yet (after a failed
        delivery, the next push sets the time whatever ``update`` says). A key starting with
        ``-`` is never merged: each push is delivered alone. ``data`` (JSON) is stored with the
        key by the push that creates it and reaches every delivery of it as ``ctx.data``
        (pushes to a pending key keep the data it has). Bad input raises ``ValueError`` naming
        the field; nothing is written then.

        >>> client.push("ann@example.com", {"event": "comment"}, handler="digest",
        ...             ontime=time.time() + 600, update="once")   # doctest: +SKIP
        """
        _batches.push(self._store, key, item, handler=handler, ontime=ontime, update=update,
                      data=data)
        self._check_handler(handler)

    def drop(self, key: str, *, handler: str) -> int:
        """Remove the pending items of ``key`` (every pending push of a ``-`` key); returns
        how many. A delivery already running ends as usual.

        >>> client.drop("ann@example.com", handler="digest")   # doctest: +SKIP
        3
        """
        return _batches.drop(self._store, key, handler=handler)

    def batches(self, handler: str | None = None) -> list[BatchInfo]:
        """Every key with pending items (of ``handler``), soonest due first, as
        :class:`~dbscheduler.batches.BatchInfo`.

        >>> [(b.key, b.items) for b in client.batches("digest")]   # doctest: +SKIP
        [('ann@example.com', 3)]
        """
        return _batches.list_batches(self._store, handler)

    # -- the node registry ---------------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        """Every node of the registry (``<table>_nodes``), the most recently seen first: its
        host, pid, version, tags, handlers, start, last contact on the database clock,
        whether it is alive and the tasks it runs now.

        >>> [(n.node_id, n.alive, n.tasks) for n in client.nodes()]   # doctest: +SKIP
        [('worker-1', True, ['nightly-report'])]
        """
        return list_nodes(self._store)

    def handler_warning(self, handler: str) -> str | None:
        """Why rows for ``handler`` may never run, or None: no node seen in the last day has
        it (a name close to one that exists is suggested). None too while no node has
        registered yet.

        >>> client.handler_warning("mial")   # doctest: +SKIP
        "no live or recent node has the handler 'mial' (did you mean 'mail'?)"
        """
        return handler_warning(self._store, handler)

    def _check_handler(self, handler: str) -> None:
        """Log :meth:`handler_warning`, asking the registry about a handler at most once a
        minute: pushes come by the thousand."""
        now = time.monotonic()
        checked = self._handlers_checked.get(handler)
        if checked is not None and now - checked < _HANDLER_CHECK_EVERY:
            return
        if len(self._handlers_checked) > 1000:
            self._handlers_checked.clear()
        self._handlers_checked[handler] = now
        warning = self.handler_warning(handler)
        if warning is not None:
            _warnings.warning("%s: rows for it wait until a node that has it starts", warning)

    # -- helpers -------------------------------------------------------------------------
    def _row(self, conn: Connection, name: str) -> Mapping[str, Any]:
        self._known_shape(name)
        t = self._store.table
        row = conn.execute(
            sa.select(t, db_now().label("db_now_")).where(t.c.queue_name == name)).first()
        if row is None:
            raise TaskNotFound(name, self.table)
        return dict(row._mapping)

    def _known_shape(self, name: str) -> None:
        """A name that no task can have is not found (MySQL would match "a " to "a")."""
        try:
            validate_name(name)
        except ValueError:
            raise TaskNotFound(str(name), self.table) from None

    def _update_idle(self, name: str, what: str, **values: Any) -> None:
        """Update a task that must not be running (its next time is its lease while it runs)."""
        self._known_shape(name)
        t = self._store.table
        with self._store.autocommit() as conn:
            done = conn.execute(
                sa.update(t)
                .where(t.c.queue_name == name, t.c.locked_by.is_(None))
                .values(**values)
            ).rowcount
            _faultpoints.reached("operation")
            if not done:
                row = self._row(conn, name)
                raise TaskRunning(
                    name, row["locked_by"], f"cannot {what} while it runs; try after it finishes"
                )
            self._store.notify(conn, name)

    def _set_paused(self, name: str, paused: bool) -> None:
        self._known_shape(name)
        t = self._store.table
        with self._store.autocommit() as conn:
            changed = conn.execute(
                sa.update(t).where(t.c.queue_name == name).values(paused=paused)
            ).rowcount
            _faultpoints.reached("operation")
            if not changed:
                raise TaskNotFound(name, self.table)
            if not paused:
                self._store.notify(conn, name)


def _checked_cap(cap: int | None) -> int | None:
    """A count's ``cap``, checked: ``ValueError`` unless None or an integer from 1."""
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int)
                            or not 1 <= cap <= 100_000_000):
        raise ValueError(f"cap must be an integer from 1 to 100000000 or None, got {cap!r}")
    return cap
