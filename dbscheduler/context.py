"""What a task sees while it runs (:class:`TaskContext`), what it may return (:class:`Result`),
and what operations report about a row (:class:`TaskInfo`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

__all__ = ["UNSET", "Result", "Status", "TaskContext", "TaskInfo"]

Status = Literal["success", "error", "lost", "cancelled"]
"""The values of the ``last_status`` column."""


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
    triggered_by: str | None = None
    """The W3C ``traceparent`` of the span :meth:`~dbscheduler.Client.trigger` was called in,
    when this execution is the one that trigger made due and trace links are on (see
    :func:`dbscheduler.tracing.link_triggers`); else ``None``."""


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

    @property
    def running(self) -> bool:
        """True while a node holds the task's lease (``locked_by`` is set)."""
        return self.locked_by is not None

    def to_dict(self) -> dict[str, Any]:
        """The fields and ``running`` as JSON-ready values (ISO 8601 UTC timestamps)."""
        out: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            out[key] = value.isoformat() if isinstance(value, datetime) else value
        out["running"] = self.running
        return out
