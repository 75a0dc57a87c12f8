"""What a task sees while it runs (:class:`TaskContext`), what it may return (:class:`Result`),
what operations report about a row (:class:`TaskInfo`), about a finished execution
(:class:`RunInfo`) and about a concurrency group (:class:`GroupInfo`)."""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

    from ._engine.fencing import Fence

from .errors import LifecycleError
from .table import RESERVED_PREFIX

__all__ = ["UNSET", "GroupInfo", "Result", "RunInfo", "Status", "TaskContext", "TaskInfo"]

Status = Literal["success", "error", "lost", "cancelled", "timeout", "skipped"]
"""The values of the ``last_status`` column: ``timeout`` is a run stopped by its ``timeout``
(a failure: the failure settings apply); ``skipped`` a ``misfire="skip"`` run picked too
late, which did not run."""


class _Unset:
    """Marker for "the task did not say": keeps the stored state as it is."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Final = _Unset()


@dataclass(frozen=True)
class TaskContext:
    """Everything a running execution knows about itself.

    The scheduler passes one to the task function::

        @scheduler.task("sync", schedule=FixedRate(60))
        def sync(ctx: TaskContext) -> None:
            for page in pages(since=ctx.state):
                if ctx.stop_requested.is_set():   # cancel, lost lease or shutdown
                    return
                handle(page)

    Timestamps are aware UTC datetimes taken from the database clock.
    """

    name: str
    """The task's name (the ``queue_name`` column)."""
    node_id: str
    """The node running this execution."""
    attempt: int
    """Attempts of the current occurrence, this one included (1 on the first try)."""
    reenqueue_attempt: int
    """Successful executions before this one."""
    total_attempt: int
    """Picks ever, this one included; also this execution's fencing token."""
    scheduled_at: datetime
    """The due time that made this execution run."""
    started_at: datetime
    """When this execution was picked."""
    created_at: datetime
    """When the task's row was first inserted."""
    state: Any
    """The task's persisted state (decoded JSON), or ``None``."""
    stop_requested: threading.Event = field(default_factory=threading.Event, compare=False)
    """Set when the execution should stop: ``cancel``, a lost lease, or shutdown."""
    data: Any = None
    """The row's data (decoded JSON) given by ``schedule``/``schedule_once``, or ``None``;
    separate from :attr:`state`, which the task itself persists."""
    fence: Fence | None = field(default=None, repr=False, compare=False)
    """This execution's hold on its row (what :meth:`fenced` checks); ``None`` outside a
    scheduler's execution."""
    triggered_by: str | None = None
    """The W3C ``traceparent`` of the span :meth:`~dbscheduler.Client.trigger` was called in,
    when this execution is the one that trigger made due and trace links are on (see
    :func:`dbscheduler.tracing.link_triggers`); else ``None``."""

    def fenced(self, target: Engine | Connection) -> AbstractContextManager[Connection]:
        """A transaction on ``target`` (an engine or a connection to the scheduler's database)
        that commits only while this execution still holds its lease; raises
        :class:`~dbscheduler.LeaseLost` (rolled back) otherwise. See
        :mod:`dbscheduler._engine.fencing`.

        >>> with ctx.fenced(engine) as conn:   # doctest: +SKIP
        ...     conn.execute(payments.insert().values(amount=10))
        """
        if self.fence is None:
            raise LifecycleError("ctx.fenced() needs a context given by a running scheduler")
        from ._engine.fencing import fenced  # the database side is only needed here

        return fenced(self.fence, target)


@dataclass(frozen=True)
class Result:
    """What a task function may return to control what is stored after it.

    Returning ``None`` (or nothing) is a plain success; raising is an error. Build one with
    :meth:`success` or :meth:`error`::

        def poll(ctx: TaskContext) -> Result:
            cursor = fetch_new(after=ctx.state)
            return Result.success(state=cursor)              # persisted as JSON

        def probe(ctx: TaskContext) -> Result:
            return Result.error("upstream 503", next_at=soon)  # overrides schedule and retry
    """

    status: Literal["success", "error"]
    message: str | None = None
    state: Any = UNSET
    """New persisted state; :data:`UNSET` keeps what is stored, ``None`` clears it."""
    next_at: datetime | None = None
    """When to run next (aware), overriding both the schedule and the failure settings."""

    @classmethod
    def success(cls, state: Any = UNSET, next_at: datetime | None = None) -> Result:
        """A successful execution, optionally storing ``state`` and choosing ``next_at``.

        >>> Result.success(state={"cursor": 42}).status
        'success'
        """
        return cls("success", None, state, next_at)

    @classmethod
    def error(
        cls, message: str | None = None, state: Any = UNSET, next_at: datetime | None = None
    ) -> Result:
        """A failed execution without raising; failure settings apply unless ``next_at`` is given.

        >>> Result.error("quota exceeded").message
        'quota exceeded'
        """
        return cls("error", message, state, next_at)


@dataclass(frozen=True)
class TaskInfo:
    """A snapshot of one task's row, as returned by ``Scheduler.tasks()`` and ``info()``.

    Fields carry the table's column names (``name`` for ``queue_name``, ``state`` for the
    decoded ``payload``), plus :attr:`running`::

        info = scheduler.info("nightly-report")
        if info.running:
            print(f"running on {info.locked_by} since {info.last_started_at}")
    """

    id: int
    name: str
    state: Any
    created_at: datetime
    next_process_at: datetime
    attempt: int
    reenqueue_attempt: int
    total_attempt: int
    paused: bool
    locked_by: str | None
    heartbeat_at: datetime | None
    last_started_at: datetime | None
    last_finished_at: datetime | None
    last_status: str | None
    last_error: str | None
    schedule: str | None
    stop_requested: bool = False
    """A cancel was asked for the running execution and not yet seen through."""
    state_error: str | None = None
    """Why the stored state cannot be decoded (``state`` is then ``None``), or ``None``.

    A row written by hand or by another program may hold text that is not JSON; its
    executions fail with this reason until the state is fixed or cleared."""
    raw_state: str | None = None
    """The stored text, exactly as it is, when it cannot be decoded (``None`` otherwise)."""
    handler: str | None = None
    """The name of the handler that runs the row (a declared task's is its own name)."""
    data: Any = None
    """The row's data (decoded JSON) as its handler receives it in ``ctx.data``."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The row's execution options that differ from the defaults (durations in seconds)."""
    last_success_at: datetime | None = None
    """When the task last succeeded, or ``None`` (never, or not known from before the run
    history existed)."""
    alert_after: timedelta | None = None
    """The dead-man limit: an alert when the last success (or the creation) is older."""
    alerted_at: datetime | None = None
    """When the current alert episode was raised (``on_overdue``); ``None`` when none is
    open. The next success ends it (``on_recovered``)."""
    overdue: bool = False
    """Late, on the database clock when read: unpaused and either due longer ago than
    ``overdue_after`` while no node runs it, or without a success for longer than
    ``alert_after``."""

    @property
    def running(self) -> bool:
        """True while a node holds the task's lease (``locked_by`` is set)."""
        return self.locked_by is not None

    @property
    def builtin(self) -> bool:
        """True for dbscheduler's own tasks (names starting with ``dbscheduler.``, such as
        ``dbscheduler.prune-runs``)."""
        return self.name.startswith(RESERVED_PREFIX)

    def to_dict(self) -> dict[str, Any]:
        """The fields, ``running`` and ``builtin`` as JSON-ready values (ISO 8601 UTC
        timestamps, ``alert_after`` in seconds)."""
        out: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            out[key] = _json_value(value)
        out["options"] = dict(self.options)
        out["running"] = self.running
        out["builtin"] = self.builtin
        return out


@dataclass(frozen=True)
class RunInfo:
    """One finished execution, from the run history (``scheduler.runs()``, newest first)::

        for run in scheduler.runs("nightly-report", status="error", limit=5):
            print(run.finished_at, run.node_id, run.duration, run.error)

    Timestamps are aware UTC datetimes from the database clock.
    """

    id: int
    name: str
    """The task's name."""
    token: int
    """The execution's fencing token (``total_attempt`` after its pick)."""
    attempt: int
    """Attempts of its occurrence, this one included (1 on the first try)."""
    node_id: str
    """The node that ran it (for a ``lost`` run, the node that vanished)."""
    scheduled_at: datetime
    """The due time that made it run."""
    started_at: datetime
    finished_at: datetime
    """When its finish was written (for a ``lost`` run: when another node found it lost)."""
    status: str
    """``success``, ``error``, ``lost``, ``cancelled``, ``timeout`` or ``skipped``."""
    error: str | None
    """``"Type: message"`` of a failure (truncated like ``last_error``), else ``None``."""
    traceback: str | None = None
    """The traceback of a failure that raised (the innermost frames, at most 8 KB), else
    ``None``."""

    @property
    def duration(self) -> timedelta:
        """``finished_at - started_at``."""
        return self.finished_at - self.started_at

    @property
    def cursor(self) -> str:
        """Where a listing that ends with this run goes on: ``runs(cursor=run.cursor)`` gives
        the runs that finished before it (an opaque text, safe in a URL).

        >>> older = client.runs(limit=50, cursor=page[-1].cursor)   # doctest: +SKIP
        """
        raw = f"{self.finished_at.isoformat()}|{self.id}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values, ISO 8601 UTC timestamps, plus ``duration`` in
        seconds.

        >>> run.to_dict()["duration"]   # doctest: +SKIP
        0.734
        """
        out = {key: _json_value(value) for key, value in self.__dict__.items()}
        out["duration"] = self.duration.total_seconds()
        return out


def parse_run_cursor(cursor: str) -> tuple[datetime, int]:
    """``(finished_at, id)`` of :attr:`RunInfo.cursor`; ``ValueError`` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, id_ = raw.rsplit("|", 1)
        when = datetime.fromisoformat(at)
        if when.utcoffset() is None:
            raise ValueError("naive")
        return when, int(id_)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise ValueError(f"cursor {cursor[:40]!r} is not one a runs listing gave (use the "
                         "cursor of the last run of a page, or none for the newest)") from None


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


@dataclass(frozen=True)
class GroupInfo:
    """A concurrency group: its limit (``None``: none) and its executions running now
    (``client.groups()``, ``scheduler.groups()``)::

        for group in client.groups():
            print(group.name, group.running, "/", group.limit)
    """

    name: str
    limit: int | None
    running: int
    tasks: int
    """Rows of the group."""
    updated_at: datetime | None = None
    """When its limit was last set."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {"name": self.name, "limit": self.limit, "running": self.running,
                "tasks": self.tasks,
                "updated_at": self.updated_at.isoformat() if self.updated_at else None}
