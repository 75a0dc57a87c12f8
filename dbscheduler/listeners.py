"""Listeners: objects told about executions. Subclass :class:`Listener` and override the
hooks you need; every hook defaults to doing nothing.

>>> class Timings(Listener):
...     def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
...         statsd.timing(f"task.{ctx.name}", outcome.duration.total_seconds())
>>> scheduler.add_listener(Timings())  # doctest: +SKIP

A listener that raises is logged and never breaks the scheduler. Objects that do not subclass
:class:`Listener` are accepted too; the hooks they lack are skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from .context import Status, TaskContext, TaskInfo
from .logfields import engine_log

__all__ = ["AlertGroup", "Listener", "Listeners", "Outcome"]

log = engine_log("dbscheduler.listeners")


@dataclass(frozen=True)
class Outcome:
    """How an execution ended, given to ``on_finished``."""

    status: Status
    duration: timedelta
    error: str | None
    """``"Type: message"`` of the failure, or ``None``."""
    next_at: datetime | None
    """The next due time written to the row; ``None`` when the write was refused (lease lost)."""
    exception: BaseException | None = None
    """What the task function raised, if it raised (for tracing and error reporting)."""


@dataclass(frozen=True)
class AlertGroup:
    """Many tasks of one handler whose alert episodes one check started (or ended), given to
    ``on_overdue_group`` / ``on_recovered_group`` instead of one call per task.

    A check that claims more than a few rows of one handler (a backlog of one-off jobs, a
    handler no running node has) raises one group per handler and kind::

        class Pager(Listener):
            def on_overdue_group(self, group: AlertGroup) -> None:
                if not group.continued:
                    page(f"{group.count}{'+' if group.more else ''} tasks of "
                         f"{group.handler} late, the oldest by {group.late_by}")
    """

    handler: str
    """The handler the rows name (a declared task's is its own name)."""
    kind: Literal["overdue", "dead", "recovered"]
    """``overdue``: due longer ago than ``overdue_after`` and not picked; ``dead``: no
    success within ``alert_after``; ``recovered``: alerted rows that succeeded again."""
    count: int
    """How many rows of the handler this check claimed (at most a page per check)."""
    first: TaskInfo
    """One of them: the one late the longest (``recovered``: the first by name)."""
    late_by: timedelta | None
    """How late ``first`` is (as ``on_overdue``'s ``late_by``); ``None`` for ``recovered``."""
    names: tuple[str, ...]
    """The names of up to 20 of the rows, ``first``'s first."""
    one_offs: int
    """How many of them are one-off jobs (or batch keys)."""
    more: bool
    """The check claimed a full page: later checks may find more rows, each raising a group
    of its own with ``continued`` set."""
    continued: bool
    """``overdue`` only: older rows of this handler were alerted before this check and are
    still late, so this group continues an episode already raised (a pager may stay
    silent)."""


class Listener:
    """The hooks a listener may override. Each is called on an engine thread: keep it short.

    ::

        class Alerts(Listener):
            def on_lost_execution(self, info: TaskInfo) -> None:
                page_someone(f"{info.name} was lost on {info.locked_by}")

        scheduler.add_listener(Alerts())
    """

    def on_started(self, ctx: TaskContext) -> None:
        """An execution is about to call the task function."""

    def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
        """An execution ended and its finish was written (or refused: ``outcome.next_at``
        is ``None``)."""

    def on_lease_lost(self, ctx: TaskContext) -> None:
        """This node lost an execution's lease; ``ctx.stop_requested`` is set."""

    def on_lost_execution(self, info: TaskInfo) -> None:
        """This node picked a row whose previous execution's node vanished (``info`` is that
        execution as it was)."""

    def on_poll_error(self, exc: BaseException) -> None:
        """A poll failed; the poller retries with backoff."""

    def on_heartbeat_error(self, exc: BaseException) -> None:
        """A heartbeat statement failed; the next one retries, and executions whose lease
        runs out meanwhile get ``on_lease_lost``."""

    def on_pick(self, asked: int, got: int) -> None:
        """The poller picked because a row was due: it asked for ``asked`` rows (its free
        workers) and got ``got``. ``got == 0`` means another node took the due rows first
        (contention), or they were paused or rescheduled in the meantime."""

    def on_overdue(self, info: TaskInfo, late_by: timedelta) -> None:
        """A task became late: no node picked it for longer than ``overdue_after`` past its
        due time (``late_by``: since it was due), or it has ``alert_after`` and no success
        within it (``late_by``: since its last success, or its creation). Called on exactly
        one node of the cluster per episode; the episode ends with :meth:`on_recovered`.

        When one check finds more than a few late rows of one handler, it calls
        :meth:`on_overdue_group` once for them instead."""

    def on_recovered(self, info: TaskInfo) -> None:
        """A task that was reported late (:meth:`on_overdue`) succeeded again. Called on
        exactly one node of the cluster (:meth:`on_recovered_group` for many of one
        handler)."""

    def on_overdue_group(self, group: AlertGroup) -> None:
        """Many rows of one handler became late at one check (see :class:`AlertGroup`):
        called once for them, on exactly one node, instead of :meth:`on_overdue` per row.

        By default it calls :meth:`on_overdue` once, with the row late the longest, unless
        the group continues an episode already raised (``group.continued``)."""
        if not group.continued and group.late_by is not None:
            self.on_overdue(group.first, group.late_by)

    def on_recovered_group(self, group: AlertGroup) -> None:
        """Many alerted rows of one handler succeeded again at one check: called once for
        them, on exactly one node. By default it calls :meth:`on_recovered` once, with
        ``group.first``."""
        self.on_recovered(group.first)


class Listeners(Listener):
    """The registered listeners as one: each hook calls every listener in order, each
    failure isolated and logged."""

    def __init__(self) -> None:
        self._items: list[object] = []

    def add(self, listener: Listener | object) -> None:
        """Add ``listener`` (a :class:`Listener`, or any object with some of its hooks)."""
        self._items.append(listener)

    def _call(self, hook: Callable[..., None], *args: Any) -> None:
        name = hook.__name__
        for listener in list(self._items):
            method = getattr(listener, name, None)
            if method is None:
                continue
            try:
                method(*args)
            except Exception:
                log.exception("listener %r raised in %s; ignored", listener, name)

    def on_started(self, ctx: TaskContext) -> None:
        self._call(Listener.on_started, ctx)

    def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
        self._call(Listener.on_finished, ctx, outcome)

    def on_lease_lost(self, ctx: TaskContext) -> None:
        self._call(Listener.on_lease_lost, ctx)

    def on_lost_execution(self, info: TaskInfo) -> None:
        self._call(Listener.on_lost_execution, info)

    def on_poll_error(self, exc: BaseException) -> None:
        self._call(Listener.on_poll_error, exc)

    def on_heartbeat_error(self, exc: BaseException) -> None:
        self._call(Listener.on_heartbeat_error, exc)

    def on_pick(self, asked: int, got: int) -> None:
        self._call(Listener.on_pick, asked, got)

    def on_overdue(self, info: TaskInfo, late_by: timedelta) -> None:
        self._call(Listener.on_overdue, info, late_by)

    def on_recovered(self, info: TaskInfo) -> None:
        self._call(Listener.on_recovered, info)

    def on_overdue_group(self, group: AlertGroup) -> None:
        self._call_group(Listener.on_overdue_group, "on_overdue", group)

    def on_recovered_group(self, group: AlertGroup) -> None:
        self._call_group(Listener.on_recovered_group, "on_recovered", group)

    def _call_group(self, hook: Callable[..., None], per_row: str, group: AlertGroup) -> None:
        # A listener that is not a Listener and lacks the group hook gets what a Listener's
        # default would give it: its per-row hook, once.
        for listener in list(self._items):
            method = getattr(listener, hook.__name__, None)
            if method is None and getattr(listener, per_row, None) is None:
                continue
            try:
                if method is not None:
                    method(group)
                else:
                    hook(listener, group)
            except Exception:
                log.exception("listener %r raised in %s; ignored", listener, hook.__name__)
