"""Declaring what a :class:`~dbscheduler.Scheduler` runs: tasks (a function with a row of its
own), handlers (a function for rows created at run time) and listeners; and checking what it
is given before anything is written (durations, node ids, task declarations: bad input raises
``ValueError`` naming the task and the field)."""

from __future__ import annotations

import os
import secrets
import socket
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ._durations import alert_after as checked_alert_after
from ._durations import duration
from ._execution import TaskDef, TaskFunction
from ._isolation import check_importable
from ._store import Registration, Store, refuse_reserved, validate_name
from ._wakeup import Wakeup
from .errors import LifecycleError
from .failures import FailureSettings, NoRetry
from .listeners import Listener, Listeners
from .logfields import engine_log
from .options import jittered, options_from
from .runtime import Handlers
from .schedules import FixedDelay, FixedRate, Schedule
from .schedules.once import NEVER

__all__ = ["Declarations", "declare_task", "default_node_id", "duration"]

log = engine_log("dbscheduler.scheduler")


def default_node_id() -> str:
    """Host name, process id and a short random suffix: unique even across restarts."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"[:255]


def _warn_if_retry_never_fires(
    name: str, schedule: Schedule, on_failure: FailureSettings
) -> None:
    """Warn when a failed run can never be retried: the next time is the earlier of the retry
    and the regular occurrence, and a retry no earlier than the period always loses."""
    if isinstance(schedule, FixedRate):
        period = schedule.period
    elif isinstance(schedule, FixedDelay):
        period = schedule.delay
    else:
        return
    first = on_failure.retry_delay(1)
    if first is None or first < period:
        return
    log.warning(
        "task %r: %r never retries: its first retry (after %s s) is not earlier than the "
        "next regular run of %s, which is taken instead; use a retry delay shorter than %s s",
        name, on_failure, first.total_seconds(), schedule.describe(), period.total_seconds(),
    )


def declare_task(
    name: str, fn: TaskFunction, schedule: Schedule, on_failure: FailureSettings | None,
    options: Mapping[str, Any] | None = None,
    alert_after: timedelta | float | None = None,
) -> TaskDef:
    """The :class:`TaskDef` of a declared task, every argument checked (the execution
    options by :func:`~dbscheduler.options.options_from`)."""
    try:
        validate_name(name)
    except ValueError as exc:
        raise ValueError(f"task {str(name)[:60]!r}: {exc}") from None
    refuse_reserved(name, "task")
    limit = None if alert_after is None else checked_alert_after(alert_after, name)
    if not isinstance(schedule, Schedule):
        raise ValueError(
            f"task {name!r}: schedule must be a Cron, FixedRate, FixedDelay or Dynamic, "
            f"got {schedule!r}"
        )
    on_failure = NoRetry() if on_failure is None else on_failure
    if not isinstance(on_failure, FailureSettings):
        raise ValueError(
            f"task {name!r}: on_failure must be NoRetry, LinearBackoff, ArithmeticBackoff "
            f"or GeometricBackoff, got {on_failure!r}"
        )
    if not callable(fn):
        raise ValueError(f"task {name!r}: the task function is not callable: {fn!r}")
    if len(schedule.describe()) > 500:
        raise ValueError(f"task {name!r}: schedule description longer than 500 characters")
    controls = options_from(options or {}, f"task {name!r}")
    if controls.isolation == "process":
        check_importable(fn, f"task {name!r}")
    definition = TaskDef.build(name, fn, schedule, on_failure, controls, limit)
    _warn_if_retry_never_fires(name, schedule, on_failure)
    return definition


F = TypeVar("F", bound=TaskFunction)


def _registration(d: TaskDef) -> Registration:
    options = d.options

    def first_run(now: datetime) -> datetime:
        return jittered(d.schedule.first_run(now), options, NEVER)

    return Registration(d.name, d.schedule.describe(), first_run, options.to_json(),
                        options.priority, options.group, options.requires,
                        None if d.alert_after is None else d.alert_after.total_seconds())


class Declarations:
    """The declaring half of :class:`~dbscheduler.Scheduler` (a mixin: the scheduler holds the
    attributes declared here)."""

    _lock: threading.Lock
    _state: str
    _tasks: dict[str, TaskDef]
    _handlers: Handlers
    _listeners: Listeners
    _store: Store
    _wakeup: Wakeup

    def _ensure_schema(self) -> None:
        raise NotImplementedError

    def task(
        self,
        name: str,
        *,
        schedule: Schedule,
        on_failure: FailureSettings | None = None,
        alert_after: timedelta | float | None = None,
        **options: Any,
    ) -> Callable[[F], F]:
        """Decorator registering a function as the task ``name``; ``options`` are the
        execution options (:class:`~dbscheduler.options.TaskOptions`: ``priority``,
        ``group``, ``requires``, ``timeout``, ``isolation``, ``misfire``, ``grace``,
        ``jitter``).

        ``alert_after`` (a timedelta or seconds): listeners get ``on_overdue`` when the task
        has not succeeded for that long (it keeps failing, or nobody runs it).

        >>> @scheduler.task("cleanup", schedule=FixedDelay(300), timeout=60)  # doctest: +SKIP
        ... def cleanup(ctx: TaskContext) -> None: ...
        """

        def register(fn: F) -> F:
            self.add(name, fn, schedule=schedule, on_failure=on_failure,
                     alert_after=alert_after, **options)
            return fn

        return register

    def add(
        self,
        name: str,
        fn: TaskFunction,
        *,
        schedule: Schedule,
        on_failure: FailureSettings | None = None,
        alert_after: timedelta | float | None = None,
        **options: Any,
    ) -> None:
        """Register ``fn`` as the task ``name`` (the function may be a coroutine function),
        with the execution ``options`` (see :meth:`task`).

        Its row is inserted if absent when the scheduler starts (at once if already started);
        a changed schedule or ``alert_after`` applies at once. Invalid arguments raise
        ``ValueError`` naming the task and the field, before anything is written; names
        starting with ``dbscheduler.`` are reserved.

        >>> scheduler.add("cleanup", cleanup, schedule=FixedDelay(300),
        ...               alert_after=timedelta(hours=1))   # doctest: +SKIP
        """
        definition = declare_task(name, fn, schedule, on_failure, options, alert_after)
        with self._lock:
            if name in self._tasks or name in self._handlers:
                raise ValueError(f"task {name!r} is already registered on this scheduler")
            if self._state == "stopped":
                raise LifecycleError("this scheduler was shut down; create a new one")
            self._tasks[name] = definition
            started = self._state == "running"
        if started:
            self._register([definition])
            self._wakeup.set()

    def handler(
        self, name: str, *, on_failure: FailureSettings | None = None
    ) -> Callable[[F], F]:
        """Decorator registering a function as the handler ``name``: no row; this node runs
        every row whose handler is ``name`` (``schedule``/``schedule_once`` from any process).

        >>> @scheduler.handler("send-report")   # doctest: +SKIP
        ... def send_report(ctx: TaskContext) -> None: mail(ctx.data["to"])
        """

        def register(fn: F) -> F:
            refuse_reserved(name, "handler")
            with self._lock:
                self._handlers.add(name, fn, on_failure)
            self._wakeup.set()
            return fn

        return register

    def sync(self) -> None:
        """Write the rows of the declared tasks (and create the table where the scheduler
        may), without starting: a deploy step before the new nodes come up."""
        self._ensure_schema()
        self._register(self._declared())

    def _declared(self) -> list[TaskDef]:
        """The tasks whose rows this node writes: the declared ones and the built-in ones."""
        return list(self._handlers.tasks.values())

    def _register(self, defs: list[TaskDef]) -> None:
        self._store.register([_registration(d) for d in defs])

    def add_listener(self, listener: Listener) -> None:
        """Add a :class:`~dbscheduler.Listener` (any object with some of its hooks works too).

        >>> scheduler.add_listener(Timings())   # doctest: +SKIP
        """
        self._listeners.add(listener)
