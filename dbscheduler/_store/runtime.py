"""Rows created at run time: the per-handler due-time lookup, the create-or-update of a
runtime task, and the fenced delete that ends a one-off job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from .._engine import faultpoints as _faultpoints
from ..logfields import engine_log
from .base import StoreBase
from .controls import eligible
from .handlers import UNION_LIMIT

__all__ = ["UNION_LIMIT", "RuntimeRow", "next_due_of", "write_runtime"]

log = engine_log("dbscheduler.store")


def next_due_of(store: StoreBase) -> sa.Select[tuple[datetime]]:
    """The earliest ``next_process_at`` of the unpaused rows this node may take
    (:func:`~.controls.eligible`) whose handler passes the dialect's handler condition, run
    with the parameters of :func:`~.handlers.handler_params`. Built once: its text is the same
    whatever the node's names.

    By name, each name's earliest row is one walk of the ``(handler, next_process_at)``
    index in order, stopping at the first row that passes the filter, so the cost does not
    grow with the rows of the table (a million pending one-off jobs); a single ``min`` over
    ``handler IN (…)`` would read every matching index entry on most databases. Written as
    ``ORDER BY … LIMIT 1`` rather than ``min()``: with the filter, a planner misled by its
    estimates could aggregate every row of the handler instead. By the names lacked, the first
    row of the due-time index that passes.
    """
    if store.next_due is not None and store.next_due[0] == store.tags:
        return store.next_due[1]
    t = store.table
    unpaused = sa.and_(t.c.paused == False,  # noqa: E712
                       eligible(store, t, store.tags))
    names, name = store.dialect.names_table("p_names")
    first = (sa.select(t.c.next_process_at)
             .where(unpaused, t.c.handler == name)
             .order_by(t.c.next_process_at).limit(1)
             .scalar_subquery())
    by_name = sa.select(first.label("due")).select_from(names)
    rest = (sa.select(t.c.next_process_at.label("due"))
            .where(unpaused, store.dialect.lacks_condition(t.c.handler))
            .order_by(t.c.next_process_at).limit(1)
            .subquery("rest"))
    both = sa.union_all(by_name, sa.select(rest.c.due)).subquery("nexts")
    built = sa.select(sa.func.min(both.c.due))
    store.next_due = (store.tags, built)
    return built


@dataclass(frozen=True)
class RuntimeRow:
    """A runtime task to create or update: everything but its counters."""

    name: str
    handler: str
    schedule: str
    first_run: Callable[[datetime], datetime]
    data: str | None
    options: str | None
    """The options as stored JSON text (all of them)."""
    priority: int = 0
    group: str | None = None
    requires: str | None = None
    alert_after: float | None = None
    """The dead-man limit in seconds, or ``None``."""


def write_runtime(store: StoreBase, row: RuntimeRow) -> bool:
    """Create ``row``, or update the row of that name: its counters stay; handler, schedule,
    data and options are replaced and its next time recomputed unless it is running.

    Each statement is one autocommit write: an update; when no row has the name, an
    insert-if-absent and the update again. Returns True when no row existed before.
    """
    return store.retrying("schedule", lambda: _write(store, row))


def _write(store: StoreBase, row: RuntimeRow) -> bool:
    t = store.table
    with store.read() as conn:
        now = store.now(conn)
    first = row.first_run(now)
    idle = t.c.locked_by.is_(None)
    update = (
        sa.update(t)
        .where(t.c.queue_name == row.name)
        .values(
            handler=row.handler,
            schedule=row.schedule,
            data=row.data,
            options=row.options,
            priority=row.priority,
            task_group=row.group,
            requires=row.requires,
            alert_after=row.alert_after,
            next_process_at=sa.case((idle, first), else_=t.c.next_process_at),
            attempt=sa.case((idle, 0), else_=t.c.attempt),
            # A trigger's trace link belongs to the due time this replaces.
            trigger_link=sa.case((idle, sa.null()), else_=t.c.trigger_link),
        )
    )
    with store.autocommit() as conn:
        if conn.execute(update).rowcount:
            _faultpoints.reached("operation")
            store.notify(conn)
            return False
    with store.inserting() as conn:
        store.dialect.insert_if_absent(conn, t, {
            "queue_name": row.name, "handler": row.handler, "payload": None,
            "data": row.data, "options": row.options, "alert_after": row.alert_after,
            "created_at": now,
            "priority": row.priority, "task_group": row.group, "requires": row.requires,
            "next_process_at": first, "attempt": 0, "reenqueue_attempt": 0,
            "total_attempt": 0, "paused": False, "schedule": row.schedule,
            "stop_requested": False,
        })
        _faultpoints.reached("operation")
    # Whoever inserted the row (this call, or a racing one), the values asked for last win.
    with store.autocommit() as conn:
        conn.execute(update)
        store.notify(conn)
    return True
