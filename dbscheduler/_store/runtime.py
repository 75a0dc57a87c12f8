"""Rows created at run time: the per-handler due-time lookup, the create-or-update of a
runtime task, and the fenced delete that ends a one-off job."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from .. import _faultpoints
from ..dialects import db_now, pick_limit
from ..logfields import engine_log
from .base import StoreBase
from .controls import eligible
from .handlers import UNION_LIMIT, handler_filter

__all__ = ["UNION_LIMIT", "RuntimeRow", "due_candidates", "next_due_of", "write_runtime"]

log = engine_log("dbscheduler.store")


def next_due_of(
    store: StoreBase, known: Collection[str], *, later: bool = False
) -> sa.Select[tuple[datetime]]:
    """The earliest ``next_process_at`` of the unpaused rows whose handler is in ``known``
    and that this node may take (:func:`~.controls.eligible`; ``later``: only of those not
    yet due).

    Each handler's earliest row is one walk of the ``(handler, next_process_at)`` index in
    order, stopping at the first row that passes the filter, so the cost does not grow with
    the rows of the table (a million pending one-off jobs); a single ``min`` over ``handler IN
    (…)`` would read every matching index entry on most databases. Written as ``ORDER BY …
    LIMIT 1`` rather than ``min()``: with the filter, a planner misled by its estimates could
    aggregate every row of the handler instead.
    """
    # An alias: inside the pick's ``UPDATE … RETURNING`` the plain table would be correlated
    # with the updated row.
    t = store.later if later else store.table
    unpaused = sa.and_(t.c.paused == False,  # noqa: E712
                       eligible(store, t, store.tags),
                       *([t.c.next_process_at > db_now()] if later else []))
    names = sorted(known)
    if not names or len(names) > UNION_LIMIT:
        return sa.select(sa.func.min(t.c.next_process_at)).where(
            unpaused, handler_filter(store, t.c.handler, names)
        )
    each = [
        sa.select(
            sa.select(t.c.next_process_at)
            .where(unpaused, t.c.handler == sa.literal(h, t.c.handler.type))
            .order_by(t.c.next_process_at)
            .limit(1)
            .scalar_subquery()
            .label("due")
        )
        for h in names
    ]
    if len(each) == 1:
        return each[0]
    mins = sa.union_all(*each).subquery("per_handler")
    return sa.select(sa.func.min(mins.c.due))


def due_candidates(
    store: StoreBase, known: Collection[str], exclude: Collection[int]
) -> sa.ColumnElement[bool] | None:
    """``id IN`` the ``limit`` first due rows of each handler in ``known`` in the pick's order
    (priority, then due time): where the due rows of a pick are, for a planner that would
    otherwise walk the due-time index past every row of other handlers. ``None`` for a long
    list of handlers.

    Per handler, two index walks that each stop after ``limit`` rows: the rows of priority 0
    in due order (the ``(handler, next_process_at)`` index), and the others in priority order
    (the partial ``pick_idx``). The first ``limit`` rows overall are among them. The limit is
    the pick's own bound parameter (:func:`~dbscheduler.dialects.pick_limit`), so the
    condition is built once per set of names.
    """
    if not known or len(known) > UNION_LIMIT:
        return None
    t = store.table
    # A literal, not a parameter: so the partial index's predicate (priority != 0) matches.
    zero: sa.ColumnElement[int] = sa.literal_column("0")
    each = [
        sa.select(t.c.id)
        .where(t.c.handler == sa.literal(h, t.c.handler.type), t.c.paused == False,  # noqa: E712
               t.c.next_process_at <= db_now(), eligible(store, t, store.tags),
               t.c.priority == zero if plain else t.c.priority != zero,
               *([t.c.id.not_in(sorted(exclude))] if exclude else []))
        .order_by(*([] if plain else [t.c.priority.desc()]), t.c.next_process_at)
        .limit(pick_limit())
        for h in sorted(known)
        for plain in (True, False)
    ]
    ids = sa.union_all(*each).subquery("candidates")
    return t.c.id.in_(sa.select(ids.c.id))


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
    writing = store.begin() if store.dialect.insert_needs_transaction else store.autocommit()
    with writing as conn:
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
