"""Lateness alerts: overdue tasks and dead-man limits, each episode raised on exactly one node.

Every node checks, every ``overdue_check``, with one query (:mod:`dbscheduler._store.alerts`):

* **overdue** — unpaused, not running, and due longer ago than ``overdue_after``: no node picked
  it (every node that has it is down or saturated, or no running code registers it any more);
* **dead man** — a task with ``alert_after`` whose last success (or its creation, if it never
  succeeded) is older than that: it runs but keeps failing, or nobody runs it.

A check reads one bounded page of late rows (at most :data:`~dbscheduler._store.alerts.PAGE`
of each kind, the longest overdue first) and claims it with one conditional ``UPDATE`` per
kind: the one node whose update changed a row raises its episode. For a handler with a few
late rows (up to :data:`FEW`) that node calls ``on_overdue(info, late_by)`` per row; for more,
``on_overdue_group(group)`` once per handler and kind (:class:`~dbscheduler.listeners.AlertGroup`:
the count, the row late the longest, some names). A backlog larger than a page is claimed
page by page, one page per check; groups after the first carry ``continued``, and a
:class:`~dbscheduler.Listener` that does not override ``on_overdue_group`` gets ``on_overdue``
once per episode of the handler, for the row late the longest. When a task next succeeds, the
one node that clears ``alerted_at`` calls ``on_recovered(info)`` (``on_recovered_group`` for
many)::

    class Pager(Listener):
        def on_overdue(self, info: TaskInfo, late_by: timedelta) -> None:
            page(f"{info.name} is late by {late_by}")

        def on_overdue_group(self, group: AlertGroup) -> None:
            if not group.continued:
                page(f"{group.count} tasks of {group.handler} are late")

        def on_recovered(self, info: TaskInfo) -> None:
            page(f"{info.name} is back")

    scheduler.add_listener(Pager())

One-off jobs (``schedule_once``, batch keys) waiting in a backlog are not overdue tasks to a
pager: they are left out of the overdue check unless the scheduler is created with
``alert_one_offs=True``. Their dead-man limit (``alert_after``), when they have one, counts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from .._store import Store
from .._store.alerts import (
    ONE_OFF_PREFIX,
    PAGE,
    LateKind,
    claim,
    late_rows,
    open_episode,
    rows_by_id,
)
from ..context import TaskInfo
from ..listeners import AlertGroup, Listener
from ..logfields import about, engine_log
from .faults import FaultLog
from .taskinfo import task_info

__all__ = ["FEW", "AlertWatch"]

FEW = 5
"""Up to this many rows of one handler changed by one check get a call each; more, one
:class:`~dbscheduler.listeners.AlertGroup`."""

_NAMES = 20

log = engine_log("dbscheduler.alerts")


class AlertWatch:
    """The thread that checks lateness every ``every`` on one node."""

    def __init__(self, store: Store, listeners: Listener, overdue_after: timedelta,
                 every: timedelta, *, first: timedelta | None = None,
                 one_offs: bool = False) -> None:
        self._store = store
        self._one_offs = one_offs
        self._listeners = listeners
        self._overdue_after = overdue_after
        self._every = every.total_seconds()
        self._first = self._every if first is None else first.total_seconds()
        self._stop = threading.Event()
        self._faults = FaultLog(log, "checking for late tasks")
        self._thread = threading.Thread(target=self._run, name="dbscheduler-alerts",
                                        daemon=True)
        self.after_check: Callable[[], None] = lambda: None
        """Called after every check (tests wait on it)."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        wait = self._first
        while not self._stop.wait(wait):
            try:
                self.check()
                self._faults.ok()
            except Exception as exc:
                self._faults.failed(exc)
            self.after_check()
            wait = self._every

    def check(self) -> int:
        """One check: start and end the episodes this node wins (one page of each kind);
        returns how many rows it changed."""
        found = late_rows(self._store, self._overdue_after, one_offs=self._one_offs)
        kinds: dict[LateKind, list[int]] = {}
        for late in found:
            kinds.setdefault(late.kind, []).append(late.id)
        won: dict[int, LateKind] = {}
        full: set[LateKind] = set()
        for kind, ids in kinds.items():
            if len(ids) >= PAGE:
                full.add(kind)
            for id_ in claim(self._store, kind, ids, self._overdue_after,
                             one_offs=self._one_offs):
                won[id_] = kind
        if not won:
            return 0
        now, rows = rows_by_id(self._store, sorted(won))
        groups: dict[tuple[LateKind, str], list[tuple[TaskInfo, timedelta]]] = {}
        for row in rows:
            kind = won[int(row["id"])]
            info = task_info(row, now=now, overdue_after=self._overdue_after)
            handler = row.get("handler") or info.name
            groups.setdefault((kind, handler), []).append((info, _late_by(kind, info, now)))
        for (kind, handler), members in sorted(groups.items()):
            if len(members) <= FEW:
                for info, late_by in members:
                    self._tell(kind, info, late_by)
            else:
                self._tell_group(kind, handler, members, more=kind in full)
        return len(won)

    def _tell(self, kind: LateKind, info: TaskInfo, late_by: timedelta) -> None:
        if kind == "recovered":
            log.warning("recovered: it succeeded at %s", info.last_success_at,
                        extra=about(info.name))
            self._listeners.on_recovered(info)
            return
        if kind == "overdue":
            why = f"due {late_by} ago and not picked by any node"
        else:
            why = (f"no success for {late_by} (alert_after {info.alert_after}); last "
                   f"status {info.last_status}")
        log.warning("late: %s", why, extra=about(info.name))
        self._listeners.on_overdue(info, late_by)

    def _tell_group(self, kind: LateKind, handler: str,
                    members: list[tuple[TaskInfo, timedelta]], *, more: bool) -> None:
        if kind == "recovered":
            members.sort(key=lambda m: m[0].name)
        else:
            members.sort(key=lambda m: (-m[1], m[0].name))
        first, late_by = members[0]
        one_offs = sum(1 for info, _ in members
                       if (info.schedule or "").startswith(ONE_OFF_PREFIX))
        continued = kind == "overdue" and open_episode(
            self._store, handler, _oldest_due(members), self._overdue_after)
        group = AlertGroup(
            handler=handler, kind=kind, count=len(members), first=first,
            late_by=None if kind == "recovered" else late_by,
            names=tuple(info.name for info, _ in members[:_NAMES]), one_offs=one_offs,
            more=more, continued=continued,
        )
        if kind == "recovered":
            log.warning("recovered: %d tasks of handler %r (%s …)", group.count, handler,
                        first.name, extra=about(first.name))
            self._listeners.on_recovered_group(group)
            return
        log.warning("late: %d tasks of handler %r are %s (%s by %s the longest)%s%s",
                    group.count, handler,
                    "overdue" if kind == "overdue" else "past their alert_after",
                    first.name, late_by, "; more to come" if more else "",
                    "; continuing an open episode" if continued else "",
                    extra=about(first.name))
        self._listeners.on_overdue_group(group)


def _late_by(kind: LateKind, info: TaskInfo, now: datetime) -> timedelta:
    if kind == "overdue":
        return now - info.next_process_at
    if kind == "dead":
        return now - (info.last_success_at or info.created_at)
    return timedelta(0)


def _oldest_due(members: list[tuple[TaskInfo, timedelta]]) -> tuple[datetime, int]:
    return min((info.next_process_at, info.id) for info, _ in members)
