"""Bulk creation: many runtime tasks, one-off jobs or pushes written with one statement per
batch (the dialect's multi-row upsert), with the same result as writing them one by one.

- Runtime tasks and one-off jobs: create-or-update by name; an existing row keeps its
  counters, its handler, schedule, data and options are replaced and, unless it runs, its
  next time recomputed (:func:`write_runtime`'s rules, in one upsert per batch).
- Pushes: the items of a batch in one multi-row insert, then the keys' rows in one upsert
  per kind of push (``update="always"`` or ``"once"``). Several pushes to one key in one
  batch act on its row as they would one after another: the last ``always`` push sets the
  due time, or, with none, the first push does where a push may (a new key, a key whose last
  delivery failed). One difference: a key whose row outlived its items (after a ``drop``)
  is moved by a ``once`` push only when that push's item is its only one, so several
  ``once`` pushes to it in one batch leave its time as it was.

Each statement commits on its own; a batch whose statement meets a transient error is sent
again (an upsert written twice leaves the same rows).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

import sqlalchemy as sa

from .._engine import faultpoints as _faultpoints
from .base import StoreBase
from .batches import NOTIFY_WITHIN, Push, on_existing_push
from .runtime import RuntimeRow

__all__ = ["push_many", "write_runtime_many"]

_T = TypeVar("_T")


def _batches(rows: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for start in range(0, len(rows), size):
        yield rows[start:start + size]


class _Clock:
    """The database's time, read once and carried forward on this process's monotonic
    clock: a batch needs "now" for its first due times without a round trip of its own."""

    def __init__(self, store: StoreBase) -> None:
        self._at = store.db_now()
        self._start = time.monotonic()

    def now(self) -> datetime:
        return self._at + timedelta(seconds=time.monotonic() - self._start)


def _runtime_existing(t: sa.Table) -> Callable[[Callable[[str], Any]],
                                                 list[tuple[sa.Column[Any], Any]]]:
    def on_existing(new: Callable[[str], Any]) -> list[tuple[sa.Column[Any], Any]]:
        idle = t.c.locked_by.is_(None)
        return [
            (t.c.handler, new("handler")),
            (t.c.schedule, new("schedule")),
            (t.c.data, new("data")),
            (t.c.options, new("options")),
            (t.c.priority, new("priority")),
            (t.c.task_group, new("task_group")),
            (t.c.requires, new("requires")),
            (t.c.alert_after, new("alert_after")),
            (t.c.next_process_at, sa.case((idle, new("next_process_at")),
                                          else_=t.c.next_process_at)),
            (t.c.attempt, sa.case((idle, sa.literal_column("0", sa.Integer())),
                                  else_=t.c.attempt)),
            # A trigger's trace link belongs to the due time this replaces.
            (t.c.trigger_link, sa.case((idle, sa.null()), else_=t.c.trigger_link)),
        ]

    return on_existing


def write_runtime_many(store: StoreBase, rows: Sequence[RuntimeRow]) -> None:
    """Create or update every row of ``rows`` (names unique), one upsert per batch of the
    dialect's :attr:`~dbscheduler.dialects.base.Dialect.upsert_rows`, waking listening nodes
    once per batch.

    Up to the dialect's :attr:`~dbscheduler.dialects.base.Dialect.bulk_writers` batches are
    written at once, each on its own connection: while the server writes one, this process
    encodes the next (the names are unique, so the batches touch disjoint rows and their
    order does not change the result). When one fails, the others already sent are still
    written, and the first error is raised once they end."""
    t = store.table
    clock = _Clock(store)
    on_existing = _runtime_existing(t)

    def write(batch: Sequence[RuntimeRow]) -> None:
        now = clock.now()
        values = [
            {"queue_name": r.name, "handler": r.handler, "payload": None, "data": r.data,
             "options": r.options, "alert_after": r.alert_after, "created_at": now,
             "priority": r.priority, "task_group": r.group, "requires": r.requires,
             "next_process_at": r.first_run(now), "attempt": 0, "reenqueue_attempt": 0,
             "total_attempt": 0, "paused": False, "schedule": r.schedule,
             "stop_requested": False, "trigger_link": None}
            for r in batch
        ]
        store.retrying("schedule_many", partial(_upsert, store, values, on_existing))

    batches = list(_batches(rows, store.dialect.upsert_rows))
    writers = min(store.dialect.bulk_writers, len(batches))
    if writers <= 1:
        for batch in batches:
            write(batch)
        return
    with ThreadPoolExecutor(writers, thread_name_prefix="dbscheduler-bulk") as pool:
        futures = [pool.submit(write, batch) for batch in batches]
        try:
            for future in futures:
                future.result()
        finally:
            for future in futures:  # after a failure, send no batch not yet begun
                future.cancel()


def _upsert(store: StoreBase, values: list[dict[str, Any]],
            on_existing: Callable[[Callable[[str], Any]], Sequence[tuple[sa.Column[Any], Any]]],
            *, notify: bool = True) -> None:
    with store.inserting() as conn:
        store.dialect.upsert_many(conn, store.table, values, on_existing)
        _faultpoints.reached("operation")
        if notify:
            store.notify(conn)


def _insert(store: StoreBase, rows: list[dict[str, Any]]) -> None:
    with store.autocommit() as conn:
        # pushed_at on the database's clock: a delivery takes the items pushed before it.
        store.dialect.insert_rows(conn, store.items, rows, now=("pushed_at",))


def _push_existing(store: StoreBase, moves: bool, new: Callable[[str], Any]
                   ) -> list[tuple[sa.Column[Any], Any]]:
    return on_existing_push(store, moves, new("next_process_at"))


def push_many(store: StoreBase, pushes: Sequence[Push]) -> None:
    """Write ``pushes`` in push order: per batch, the items in one insert, then the keys'
    rows in one upsert per kind of push; listening nodes are woken once per batch when a key
    comes due within :data:`~dbscheduler._store.batches.NOTIFY_WITHIN` seconds."""
    clock = _Clock(store)
    for batch in _batches(pushes, store.dialect.upsert_rows):
        now = clock.now()
        due = [p.ontime if p.ontime is not None else now for p in batch]
        params = [{"task_name": p.name, "handler": p.handler, "batch_key": p.key,
                   "item": p.item, "due_at": at, "moves": p.moves}
                  for p, at in zip(batch, due, strict=True)]

        # Items first: until the row statement lands, an item simply waits for its key.
        store.retrying("push_many", partial(_insert, store, params))
        _faultpoints.reached("push")
        first: dict[str, tuple[Push, datetime]] = {}
        moved: dict[str, datetime] = {}
        for p, at in zip(batch, due, strict=True):
            first.setdefault(p.name, (p, at))
            if p.moves:  # the last "always" push of a key decides its time
                moved[p.name] = at
        rows: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
        for name, (p, at) in first.items():
            # A new key's row is created with its first push's data and schedule text.
            rows[name in moved].append({
                "queue_name": name, "handler": p.handler, "data": p.data,
                "created_at": now, "next_process_at": moved.get(name, at), "attempt": 0,
                "reenqueue_attempt": 0, "total_attempt": 0, "paused": False,
                "schedule": p.schedule, "stop_requested": False})
        soon = min(due) <= now + timedelta(seconds=NOTIFY_WITHIN)
        for moves in (True, False):
            if rows[moves]:
                store.retrying("push_many", partial(
                    _upsert, store, rows[moves], partial(_push_existing, store, moves),
                    notify=soon and store.dialect.supports_notify))
