"""Listeners: objects told about executions. Any of the hooks may be defined, or none.

>>> class Metrics:
...     def on_finished(self, ctx, outcome):
...         statsd.timing(f"task.{ctx.name}", outcome.duration.total_seconds())
>>> scheduler.add_listener(Metrics())  # doctest: +SKIP

A listener that raises is logged and never breaks the scheduler.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from .context import Status, TaskContext, TaskInfo

__all__ = ["Listener", "Listeners", "Outcome"]

log = logging.getLogger("dbscheduler.listeners")


@dataclass(frozen=True)
class Outcome:
    """How an execution ended, given to ``on_finished``."""

    status: Status
    duration: timedelta
    error: str | None
    """``"Type: message"`` of the failure, or ``None``."""
    next_at: datetime | None
    """The next due time written to the row; ``None`` when the write was refused (lease lost)."""


class Listener(Protocol):
    """The hooks a listener may define (all optional; this protocol is for documentation)."""

    def on_started(self, ctx: TaskContext) -> None: ...
    def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None: ...
    def on_lease_lost(self, ctx: TaskContext) -> None: ...
    def on_lost_execution(self, info: TaskInfo) -> None: ...
    def on_poll_error(self, exc: BaseException) -> None: ...


class Listeners:
    """The registered listeners, called in order, each failure isolated and logged."""

    def __init__(self) -> None:
        self._items: list[object] = []

    def add(self, listener: object) -> None:
        self._items.append(listener)

    def emit(self, hook: str, *args: Any) -> None:
        for listener in list(self._items):
            method = getattr(listener, hook, None)
            if method is None:
                continue
            try:
                method(*args)
            except Exception:
                log.exception("listener %r raised in %s; ignored", listener, hook)
