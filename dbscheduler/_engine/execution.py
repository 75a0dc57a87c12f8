"""A registered task, one running execution of it and how it ended: the records the engine
passes around."""

from __future__ import annotations

import inspect
import time
import traceback as _traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..context import Status, TaskContext
from ..failures import FailureSettings
from ..schedules import Schedule
from ..table import MAX_ERROR_LENGTH
from .options import DEFAULT_OPTIONS, TaskOptions

TaskFunction = Callable[..., Any]


@dataclass(frozen=True)
class TaskDef:
    """What ``Scheduler.task`` / ``add`` registered under a name."""

    name: str
    fn: TaskFunction
    schedule: Schedule
    on_failure: FailureSettings
    takes_context: bool
    is_coroutine: bool
    options: TaskOptions = DEFAULT_OPTIONS
    alert_after: timedelta | None = None
    """The dead-man limit written to the row: an alert when no success for this long."""

    @classmethod
    def build(
        cls, name: str, fn: TaskFunction, schedule: Schedule, on_failure: FailureSettings,
        options: TaskOptions = DEFAULT_OPTIONS,
        alert_after: timedelta | None = None,
    ) -> TaskDef:
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            takes_context = True
        else:
            required = [
                p
                for p in params.values()
                if p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
            if len(required) > 1:
                raise ValueError(
                    f"task {name!r}: the function must take one argument (the TaskContext) "
                    f"or none, but {getattr(fn, '__qualname__', fn)!r} requires {len(required)}"
                )
            takes_context = bool(required) or any(
                p.kind is p.VAR_POSITIONAL for p in params.values()
            )
        is_coroutine = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
        )
        return cls(name, fn, schedule, on_failure, takes_context, is_coroutine, options,
                   alert_after)


@dataclass(eq=False)
class Execution:
    """One pick of one row, from the pick until its finish is written (or refused)."""

    task: TaskDef
    ctx: TaskContext
    id: int
    token: int
    started_mono: float = field(default_factory=time.monotonic)
    not_before: float = 0.0
    """Monotonic time before which its function must not start (a row picked ahead of its
    due time); 0 for a row picked when due."""
    lease_until: float = float("inf")
    """Monotonic time by which the lease surely ends, unless a heartbeat extends it."""
    margin: float = 0.0
    """How long before ``lease_until`` the node already counts the lease lost."""
    lease_lost: bool = False
    cancel_requested: bool = False
    timed_out: bool = False
    """Its ``timeout`` passed while it ran (the stop was requested for that)."""
    returned: bool = False
    """Set once the task function has returned (or raised)."""


@dataclass(frozen=True)
class Ended:
    """A task function's return, waiting for its finish to be written."""

    execution: Execution
    status: Status
    error: str | None
    state: Any
    next_at: datetime | None
    finished_mono: float
    exception: BaseException | None = None
    traceback: str | None = None
    """The failure's bounded traceback (:func:`bounded_traceback`), for the run history."""


ERROR_TEXT_LIMIT = MAX_ERROR_LENGTH // 2
"""Characters kept of an error: half the column, so that even four-byte characters fit
Oracle's 4,000-byte VARCHAR2 and SQL Server's UTF-16 NVARCHAR(2000)."""


def describe_error(exc: BaseException) -> str:
    """``"Type: message"``, one line, truncated to fit ``last_error``."""
    text = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    return truncate(text)


MAX_TRACEBACK_CHARS = 8192
"""Characters of a traceback kept in the run history (the innermost frames)."""


def bounded_traceback(exc: BaseException, limit: int = MAX_TRACEBACK_CHARS) -> str:
    """``exc``'s traceback as Python prints it, at most ``limit`` characters: when longer,
    the outermost frames give way (the innermost ones say where it failed) and a line says
    how many characters were left out.

    >>> try:
    ...     1 / 0
    ... except ZeroDivisionError as exc:
    ...     bounded_traceback(exc).splitlines()[-1]
    'ZeroDivisionError: division by zero'
    """
    text = "".join(_traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
    if len(text) <= limit:
        return text
    head = "Traceback (most recent call last):\n"
    kept = limit - len(head) - 60
    tail = text[-kept:]
    # Start the kept part at a frame's first line, not in the middle of one.
    frame = tail.find("\n  File ")
    if 0 <= frame < len(tail) // 2:
        tail = tail[frame + 1:]
    return f"{head}  … {len(text) - len(tail)} characters of outer frames left out …\n{tail}"


def truncate(text: str) -> str:
    """``text`` cut to :data:`ERROR_TEXT_LIMIT` characters, marked with an ellipsis."""
    return text if len(text) <= ERROR_TEXT_LIMIT else text[: ERROR_TEXT_LIMIT - 1] + "…"
