"""Rows created at run time: the per-handler due-time lookup, the create-or-update of a
runtime task, and the fenced delete that ends a one-off job."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from .. import _faultpoints
from ..dialects import db_now
from ..logfields import engine_log
from .base import StoreBase

__all__ = ["UNION_LIMIT", "RuntimeRow", "due_candidates", "next_due_of", "write_runtime"]

log = engine_log("dbscheduler.store")

UNION_LIMIT = 64
"""Up to this many handlers, the poll asks for each handler's earliest due time separately
(an index lookup each); beyond it, one ``IN`` over all of them."""


def next_due_of(
    store: StoreBase, known: Collection[str], *, later: bool = False
) -> sa.Select[tuple[datetime]]:
    """The earliest ``next_process_at`` of the unpaused rows whose handler is in ``known``
    (``later``: only of those not yet due).

    Each handler's minimum is one descent of the ``(handler, next_process_at)`` index, so the
    cost does not grow with the rows of the table (a million pending one-off jobs); a single
    ``min`` over ``handler IN (…)`` would read every matching index entry on most databases.
    """
    # An alias: inside the pick's ``UPDATE … RETURNING`` the plain table would be correlated
    # with the updated row.
    t = store.table.alias("later") if later else store.table
    unpaused = sa.and_(t.c.paused == False,  # noqa: E712
                       *([t.c.next_process_at > db_now()] if later else []))
    names = sorted(known)
    if not names or len(names) > UNION_LIMIT:
        return sa.select(sa.func.min(t.c.next_process_at)).where(
            unpaused, store.dialect.names_in(t.c.handler, names)
        )
    each = [
        sa.select(sa.func.min(t.c.next_process_at).label("due")).where(
            unpaused, t.c.handler == sa.literal(h, t.c.handler.type)
        )
        for h in names
    ]
    if len(each) == 1:
        return each[0]
    mins = sa.union_all(*each).subquery("per_handler")
    return sa.select(sa.func.min(mins.c.due))


def due_candidates(
    store: StoreBase, known: Collection[str], limit: int, exclude: Collection[int]
) -> sa.ColumnElement[bool] | None:
    """``id IN`` the ``limit`` earliest due rows of each handler in ``known`` (one descent of
    the handler index each): where the due rows of a pick are, for a planner that would
    otherwise walk the due-time index past every row of other handlers. ``None`` for a long
    list of handlers."""
    if not known or len(known) > UNION_LIMIT:
        return None
    t = store.table
    each = [
        sa.select(t.c.id)
        .where(t.c.handler == sa.literal(h, t.c.handler.type), t.c.paused == False,  # noqa: E712
               t.c.next_process_at <= db_now(),
               *([t.c.id.not_in(sorted(exclude))] if exclude else []))
        .order_by(t.c.next_process_at)
        .limit(int(limit))
        for h in sorted(known)
    ]
    if len(each) == 1:
        return t.c.id.in_(each[0])
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
            "data": row.data, "options": row.options, "created_at": now,
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
