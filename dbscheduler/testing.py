"""Testing your tasks: run them synchronously, on a database clock you move.

:class:`TestScheduler` takes your :class:`~dbscheduler.Scheduler` (not started), on an SQLite
database, and replaces that database's clock by one you control. Nothing runs in the
background: :meth:`~TestScheduler.advance` moves the clock and runs, in your test's thread,
every execution that falls due on the way, each at its due time, through the real engine —
the real table, pick, planning (schedules, failure settings, ``Result.next_at``) and fenced
finish. Only the clock is not real.

::

    from datetime import datetime, timedelta, timezone
    from dbscheduler import FixedRate, Scheduler
    from dbscheduler.testing import TestScheduler

    def test_sync_runs_every_minute(tmp_path):
        scheduler = Scheduler(f"sqlite:///{tmp_path}/test.sqlite3")
        scheduler.add("sync", sync, schedule=FixedRate(60))
        start = datetime(2026, 1, 1, tzinfo=timezone.utc)
        with TestScheduler(scheduler, now=start) as ts:
            runs = ts.advance(120)
            assert [r.status for r in runs] == ["success", "success"]
            assert ts.info("sync").next_process_at == start + timedelta(minutes=3)
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import sqlite3
import threading
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import Any

from sqlalchemy import event

from ._engine.execution import Ended
from ._engine.executor import call
from ._engine.finisher import Finisher
from ._engine.heartbeat import Heartbeat
from ._engine.options import misfired
from ._engine.poller import prepare, skipped
from ._engine.recovery import Recovery
from ._engine.unreadable import Episodes
from .context import Status, TaskContext, TaskInfo
from .errors import LifecycleError, TooManyRuns
from .listeners import Listeners, Outcome
from .scheduler import Scheduler
from .table import RESERVED_PREFIX

__all__ = ["Run", "TestScheduler", "TooManyRuns"]

NODE_ID = "testing"
"""``locked_by`` of the executions a :class:`TestScheduler` runs."""



@dataclass(frozen=True)
class Run:
    """One execution run by a :class:`TestScheduler`, as it was written to the table."""

    name: str
    status: Status
    """``success``, ``error``, ``cancelled``, or ``skipped`` (``misfire="skip"``, picked late)."""
    error: str | None
    """``"Type: message"`` of a failure (or ``Result.error``'s message), else ``None``."""
    attempt: int
    """Attempts of its occurrence, this one included (1 on the first try)."""
    scheduled_at: datetime
    """The due time that made it run (aware UTC)."""
    started_at: datetime
    """When it ran: the clock at its pick (aware UTC)."""
    next_at: datetime | None
    """The next due time written to the row."""


class TestScheduler:
    """Runs a :class:`~dbscheduler.Scheduler`'s tasks synchronously on a movable clock.

    Args:
        scheduler: your scheduler with its tasks added, not started, on an SQLite database
            (a file URL, or your own SQLite engine); the table is created if absent and the
            tasks registered at ``now``.
        now: where the clock starts (aware); default the current time.
        max_runs: executions one call may run before it concludes that a schedule never
            moves on (``FixedDelay(0)``, a ``Result.next_at`` in the past) and raises
            ``RuntimeError``.
        tasks: run only these tasks (the names of declared tasks, or of handlers for rows
            made with ``schedule()``); the others are registered but never run, so a test
            of one nightly cron can move the clock by days without running a task due every
            second. Default: every task.

    dbscheduler's built-in tasks (``dbscheduler.prune-runs``) are neither registered nor run:
    ``runs`` holds only your tasks' executions; ``scheduler.runs()`` reads their history.

    Use it as a context manager (or call :meth:`close`): it gives the database its own clock
    back. While it is open, ``scheduler.info()``, ``tasks()``, ``trigger()`` … see the test
    clock too. Coroutine tasks run on a private event loop: call the harness from synchronous
    test code.

    >>> with TestScheduler(scheduler, now=start) as ts:   # doctest: +SKIP
    ...     ts.advance(timedelta(hours=1))
    ...     ts.info("sync").last_status
    'success'
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(
        self, scheduler: Scheduler, *, now: datetime | None = None, max_runs: int = 1000,
        tasks: Iterable[str] | None = None,
    ) -> None:
        if scheduler.engine.dialect.name != "sqlite":
            raise ValueError(
                "TestScheduler needs a Scheduler on SQLite (a file URL or an SQLite engine): "
                f"it moves the database's clock, which {scheduler.engine.dialect.name} does "
                "not allow"
            )
        if scheduler._state != "new":
            raise LifecycleError("TestScheduler needs a Scheduler that was never started")
        if now is not None and (now.tzinfo is None or now.utcoffset() is None):
            raise ValueError(f"now={now.isoformat()} is naive; pass an aware datetime")
        self._only = _only(scheduler, tasks)
        self._scheduler = scheduler
        self._max_runs = max_runs
        self._now = _ceil_ms(now if now is not None else datetime.now(timezone.utc))
        self._clock = _SqliteClock(lambda: self._now)
        self._closed = False
        event.listen(scheduler.engine, "connect", self._clock.install)
        scheduler.engine.dispose()  # pooled connections would keep the real clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runs: list[Run] = []
        listeners = Listeners()
        listeners.add(scheduler._listeners)
        listeners.add(_Recorder(self._runs))
        self._listeners = listeners
        store = scheduler._store
        store.clock = lambda: self._now  # finishes plan with the clock this harness moves
        # Never started: it only keeps the finisher's bookkeeping, no thread beats.
        heartbeat = Heartbeat(store, NODE_ID, scheduler.lease, lambda ex: None,
                              lambda ex: None)
        self._finisher = Finisher(store, NODE_ID, heartbeat, listeners, lambda due: None,
                                  scheduler.poll_interval)
        self._recovery = Recovery(store, NODE_ID, listeners, lambda due: None)
        self._unreadable = Episodes()
        scheduler._ensure_schema()
        scheduler._register(list(scheduler._tasks.values()))

    # -- the clock -----------------------------------------------------------------------
    @property
    def now(self) -> datetime:
        """The database clock (aware UTC, millisecond precision like SQLite's)."""
        return self._now

    def advance(self, by: timedelta | float) -> list[Run]:
        """Move the clock ``by`` (a ``timedelta`` or seconds) and run, in order and each at its
        due time, every execution that falls due on the way (the end included).

        >>> [r.started_at.minute for r in ts.advance(timedelta(minutes=2))]  # doctest: +SKIP
        [1, 2]
        """
        delta = by if isinstance(by, timedelta) else timedelta(seconds=by)
        if delta < timedelta(0):
            raise ValueError(f"the clock only moves forward, got {by!r}")
        target = self._now + delta
        runs: list[Run] = []
        while (due := self._next_due()) is not None and due <= target:
            self._now = max(self._now, _ceil_ms(due))
            runs += self._run_due(self._max_runs - len(runs))
        self._now = target
        return runs

    def run_due(self) -> list[Run]:
        """Run every execution due at :attr:`now`, without moving the clock (a retry or a
        ``FixedDelay(0)`` that becomes due again at once runs too)."""
        return self._run_due(self._max_runs)

    # -- inspection ----------------------------------------------------------------------
    def info(self, name: str) -> TaskInfo:
        """The :class:`~dbscheduler.TaskInfo` of ``name`` (as ``scheduler.info``)."""
        return self._scheduler.info(name)

    def tasks(self) -> list[TaskInfo]:
        """Every row, ordered by name (as ``scheduler.tasks``)."""
        return self._scheduler.tasks()

    @property
    def runs(self) -> list[Run]:
        """Every execution run so far, in order."""
        return list(self._runs)

    # -- closing -------------------------------------------------------------------------
    def close(self) -> None:
        """Give the database its own clock back."""
        if self._closed:
            return
        self._closed = True
        self._scheduler._store.clock = None
        event.remove(self._scheduler.engine, "connect", self._clock.install)
        self._scheduler.engine.dispose()
        if self._loop is not None:
            self._loop.close()

    def __enter__(self) -> TestScheduler:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the engine, in this thread ------------------------------------------------------
    def _handlers(self) -> list[str]:
        """The handlers it runs: the user's (those named by ``tasks``), not dbscheduler's."""
        return [h for h in self._scheduler._handlers if not h.startswith(RESERVED_PREFIX)
                and (self._only is None or h in self._only)]

    def _next_due(self) -> datetime | None:
        return self._scheduler._store.poll(self._handlers()).next_due

    def _run_due(self, budget: int) -> list[Run]:
        if self._closed:
            raise LifecycleError("this TestScheduler is closed")
        tasks, store = self._scheduler._handlers, self._scheduler._store
        first = len(self._runs)
        while True:
            known = self._handlers()
            picked = store.pick(NODE_ID, max(1, len(known)), self._scheduler.lease, known)
            if not picked.rows:
                return self._runs[first:]
            for row in picked.rows:
                prepared = prepare(tasks, row, NODE_ID, self._recovery, store.table_name,
                                   lease=self._scheduler.lease)
                if prepared is None:
                    continue
                execution, problem = prepared
                ended: Ended
                ctx = execution.ctx
                if problem is not None:
                    ended = self._unreadable.failed(execution, problem)
                elif misfired(execution.task.options, ctx.scheduled_at, ctx.started_at):
                    ended = skipped(execution)
                else:
                    ended = call(execution, self._listeners, self._run_coroutine)
                self._finisher.write_now([ended])
            if len(self._runs) - first >= budget:
                raise TooManyRuns(
                    f"more than {self._max_runs} executions due at {self._now.isoformat()}: a "
                    "schedule that never moves on (FixedDelay(0), Result.next_at in the past)?"
                )

    def _run_coroutine(self, coro: Coroutine[Any, Any, Any], context: contextvars.Context) -> Any:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        # The task runs in a copy of ``context``: what on_started set is visible inside.
        return self._loop.run_until_complete(context.run(self._loop.create_task, coro))


def _only(scheduler: Scheduler, tasks: Iterable[str] | None) -> frozenset[str] | None:
    """The handlers ``tasks`` names, checked: an unknown name is a mistake in the test."""
    if tasks is None:
        return None
    if isinstance(tasks, str):
        raise ValueError(f"tasks= takes a list of names, got the string {tasks!r}; "
                         f"write tasks=[{tasks!r}]")
    names = frozenset(tasks)
    known = {h for h in scheduler._handlers if not h.startswith(RESERVED_PREFIX)}
    unknown = sorted(names - known)
    if unknown:
        raise ValueError(
            f"tasks=: no task or handler named {', '.join(map(repr, unknown))} on this "
            f"Scheduler; it has {', '.join(map(repr, sorted(known))) or 'none'}"
        )
    return names


class _Recorder:
    def __init__(self, runs: list[Run]) -> None:
        self._runs = runs

    def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
        self._runs.append(Run(ctx.name, outcome.status, outcome.error, ctx.attempt,
                              ctx.scheduled_at, ctx.started_at, outcome.next_at))


class _SqliteClock:
    """SQLite's ``strftime(…, 'now', …)`` answered from a movable clock.

    The engine reads the database time only through ``strftime`` with ``'now'``; this
    overrides that function on each new connection and hands every call to a private
    in-memory SQLite with ``'now'`` replaced by the test clock, so the formats and modifiers
    behave exactly as SQLite's own.
    """

    def __init__(self, now: Any) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._real = sqlite3.connect(":memory:", check_same_thread=False)

    def install(self, dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.create_function("strftime", -1, self._strftime)

    def _strftime(self, fmt: Any, time_value: Any = "now", *modifiers: Any) -> Any:
        if isinstance(time_value, str) and time_value.lower() == "now":
            time_value = self._now().strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        args = (fmt, time_value, *modifiers)
        marks = ", ".join("?" * len(args))
        with self._lock:
            return self._real.execute(f"SELECT strftime({marks})", args).fetchone()[0]


def _ceil_ms(value: datetime) -> datetime:
    """``value`` in UTC, rounded up to the millisecond (SQLite's clock resolution)."""
    value = value.astimezone(timezone.utc)
    micro = math.ceil(value.microsecond / 1000) * 1000
    return value.replace(microsecond=0) + timedelta(microseconds=micro)
