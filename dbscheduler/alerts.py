"""Lateness alerts: overdue tasks and dead-man limits, each episode raised on exactly one node.

Every node checks, every ``overdue_check``, with one query (:mod:`dbscheduler._store.alerts`):

* **overdue** — unpaused, not running, and due longer ago than ``overdue_after``: no node picked
  it (every node that has it is down or saturated, or no running code registers it any more);
* **dead man** — a task with ``alert_after`` whose last success (or its creation, if it never
  succeeded) is older than that: it runs but keeps failing, or nobody runs it.

A late task that is not alerted yet gets ``alerted_at`` set by a conditional ``UPDATE``; the
one node whose update changed the row calls ``on_overdue(info, late_by)``. When the task next
succeeds, the one node that clears ``alerted_at`` calls ``on_recovered(info)``::

    class Pager(Listener):
        def on_overdue(self, info: TaskInfo, late_by: timedelta) -> None:
            page(f"{info.name} is late by {late_by}")

        def on_recovered(self, info: TaskInfo) -> None:
            page(f"{info.name} is back")

    scheduler.add_listener(Pager())
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

from ._faults import FaultLog
from ._store import Store
from ._store.alerts import claim, late_rows, rows_by_id
from ._taskinfo import task_info
from .listeners import Listener
from .logfields import about, engine_log

__all__ = ["AlertWatch"]

log = engine_log("dbscheduler.alerts")


class AlertWatch:
    """The thread that checks lateness every ``every`` on one node."""

    def __init__(self, store: Store, listeners: Listener, overdue_after: timedelta,
                 every: timedelta, *, first: timedelta | None = None) -> None:
        self._store = store
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
        """One check: start and end the episodes this node wins; returns how many."""
        found = late_rows(self._store, self._overdue_after)
        won = [late for late in found if claim(self._store, late, self._overdue_after)]
        if not won:
            return 0
        now, rows = rows_by_id(self._store, [late.id for late in won])
        by_id = {int(r["id"]): r for r in rows}
        for late in won:
            row = by_id.get(late.id)
            if row is None:  # deleted in between: nothing left to tell about
                continue
            info = task_info(row, now=now, overdue_after=self._overdue_after)
            if late.kind == "recovered":
                log.warning("recovered: it succeeded at %s", info.last_success_at,
                            extra=about(info.name))
                self._listeners.on_recovered(info)
                continue
            if late.kind == "overdue":
                late_by = now - info.next_process_at
                why = f"due {late_by} ago and not picked by any node"
            else:
                since = info.last_success_at or info.created_at
                late_by = now - since
                why = (f"no success for {late_by} (alert_after {info.alert_after}); last "
                       f"status {info.last_status}")
            log.warning("late: %s", why, extra=about(info.name))
            self._listeners.on_overdue(info, late_by)
        return len(won)
