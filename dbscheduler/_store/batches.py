"""Keyed delayed batches in the database: pushing an item, reading and removing what a
delivery took, finishing a key, dropping a key, listing the pending keys.

A key is one row of the tasks table (``<handler>/<key>``) plus its items in
``<table>_items``. Every write is one autocommit statement, and each stays correct when the
process that sends it stops for any length of time right before or after it:

- a push inserts its item first, then creates or updates the key's row; until the row
  statement lands, the item simply waits (it is delivered with its key's next batch);
- a delivery reads the items pushed before its pick and, after the handler succeeded,
  deletes exactly those ids, fenced by its token;
- its finish deletes the key's row only when nothing is queued for it: no item left and no
  push marked the row while the delivery ran. The mark is a column of the row itself, so a
  push that lands while the finish statement runs makes the finish skip the delete on every
  database (a subquery alone would read the items as of the statement's start). Otherwise
  the row stays, idle, due when the remaining items' pushes said.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from .._engine import faultpoints as _faultpoints
from ..dialects import db_now
from ..dialects.types import to_utc
from ..logfields import engine_log
from .base import IN_CHUNK, StoreBase

__all__ = [
    "ARRIVED",
    "KeyRow",
    "Push",
    "drop_key",
    "on_existing_push",
    "pending_keys",
    "push_item",
    "queued_due",
    "queued_guards",
    "read_items",
    "remove_delivered",
]

log = engine_log("dbscheduler.store")

ARRIVED = json.dumps({"items_pushed_during_delivery": True})
"""The ``payload`` (state) a push writes on a key's row while its delivery runs: the finish
then keeps the row for the items that arrived. Cleared when the row is kept."""

NOTIFY_WITHIN = 1.0
"""A push wakes listening nodes (PostgreSQL) when its key comes due within this many
seconds: later times are found by the nodes' regular polls."""


@dataclass(frozen=True)
class Push:
    """One checked push, ready to write."""

    name: str
    """The key's row in the tasks table: ``<handler>/<key>`` (a ``-`` key with a suffix)."""
    handler: str
    key: str
    item: str | None
    """The item as JSON text (``None``: JSON ``null``)."""
    ontime: datetime | None
    """When the key should be due; ``None``: the database's now."""
    moves: bool
    """``update="always"``: this push moves the key's due time."""
    schedule: str
    """The ``schedule`` text of a row this push creates."""
    data: str | None = None
    """``data`` (JSON) of a row this push creates (the HTTP handler's target)."""


def _bind(name: str, column: sa.Column[Any]) -> sa.BindParameter[Any]:
    return sa.bindparam(f"p_{name}", type_=column.type)


def _ontime(t: sa.Table, at_now: bool) -> sa.ColumnElement[Any]:
    return db_now() if at_now else _bind("ontime", t.c.next_process_at)


def _row_values(t: sa.Table, at_now: bool) -> dict[str, Any]:
    """The key's row as a push creates it."""
    return {
        "queue_name": _bind("name", t.c.queue_name), "handler": _bind("handler", t.c.handler),
        "data": _bind("data", t.c.data), "created_at": db_now(),
        "next_process_at": _ontime(t, at_now), "attempt": 0, "reenqueue_attempt": 0,
        "total_attempt": 0, "paused": False, "schedule": _bind("schedule", t.c.schedule),
        "stop_requested": False,
    }


def on_existing_push(store: StoreBase, moves: bool, ontime: Any
                     ) -> list[tuple[sa.Column[Any], Any]]:
    """What a push due at ``ontime`` (an expression: a bulk push's proposed row) does to
    its key's existing row; the push's item is written before."""
    return _on_existing(store, moves, False, ontime=ontime)


def _on_existing(store: StoreBase, moves: bool, at_now: bool, *, own_item_seen: bool = True,
                 ontime: Any = None) -> list[tuple[sa.Column[Any], Any]]:
    """What a push does to the key's row when the row exists, in the order MySQL needs
    (it evaluates single-table assignments left to right: ``attempt`` is read first).

    Idle: ``always`` moves the due time; ``once`` moves it only for a new batch (no item of
    the key but this push's: the row outlived its items, after a ``drop``) or when the last
    delivery failed (``attempt > 0``: the overwrite rule), and either way that failure is
    then answered. Running: the due time is the lease; only the mark says items arrived.
    ``own_item_seen``: the statement sees the item this push inserted before it (not so in
    PostgreSQL's one statement, whose parts share one snapshot).
    """
    t, items = store.table, store.items
    idle = t.c.locked_by.is_(None)
    if moves:
        move: sa.ColumnElement[bool] = idle
    else:
        lowest, highest = items.alias("lowest"), items.alias("highest")
        if own_item_seen:  # min(id) = max(id): this push's item is the key's only one
            lone = (sa.select(sa.func.min(lowest.c.id))
                    .where(lowest.c.task_name == t.c.queue_name).correlate(t)
                    .scalar_subquery()
                    == sa.select(sa.func.max(highest.c.id))
                    .where(highest.c.task_name == t.c.queue_name).correlate(t)
                    .scalar_subquery())
        else:
            lone = ~sa.exists(sa.select(lowest.c.id).where(
                lowest.c.task_name == t.c.queue_name).correlate(t))
        move = sa.and_(idle, sa.or_(t.c.attempt > 0, lone))
    due = _ontime(t, at_now) if ontime is None else ontime
    return [
        (t.c.next_process_at, sa.case((move, due), else_=t.c.next_process_at)),
        (t.c.payload, sa.case((idle, t.c.payload),
                              else_=sa.literal(ARRIVED, t.c.payload.type))),
        (t.c.attempt, sa.case((idle, sa.literal_column("0", sa.Integer())),
                              else_=t.c.attempt)),
    ]


@dataclass(frozen=True)
class _Statements:
    """A push's statements, built once per table and kind of push (values are parameters:
    building a statement costs more than sending it)."""

    item: sa.Insert
    one: sa.Executable | None
    """Item and row in one statement (PostgreSQL)."""
    upsert: sa.Executable | None
    """The row, inserted or updated in one statement (MySQL/MariaDB, SQLite)."""
    update: sa.Update


_BUILT: weakref.WeakKeyDictionary[StoreBase, dict[tuple[bool, bool], _Statements]] = (
    weakref.WeakKeyDictionary())


def _statements(store: StoreBase, moves: bool, at_now: bool) -> _Statements:
    built = _BUILT.setdefault(store, {})
    found = built.get((moves, at_now))
    if found is not None:
        return found
    t, items = store.table, store.items
    # inline(): the new id is not fetched back (no OUTPUT / RETURNING INTO round trip).
    item = sa.insert(items).inline().values(
        task_name=_bind("name", items.c.task_name), handler=_bind("handler", items.c.handler),
        batch_key=_bind("key", items.c.batch_key), item=_bind("item", items.c.item),
        due_at=_ontime(t, at_now), moves=_bind("moves", items.c.moves), pushed_at=db_now(),
    )
    one = store.dialect.push_statement(
        item, t, _row_values(t, at_now),
        _on_existing(store, moves, at_now, own_item_seen=False),
        notify=(store.channel, NOTIFY_WITHIN) if store.dialect.supports_notify else None,
    )
    upsert = store.dialect.upsert_statement(t, _row_values(t, at_now),
                                            _on_existing(store, moves, at_now))
    update = (
        sa.update(t).where(t.c.queue_name == _bind("name", t.c.queue_name))
        .ordered_values(*_on_existing(store, moves, at_now))
    )
    built[(moves, at_now)] = found = _Statements(item, one, upsert, update)
    return found


def push_item(store: StoreBase, push: Push) -> None:
    """Write ``push``: one statement on PostgreSQL; elsewhere the item, then the row (an
    upsert, or an update and, when the key has no row, an insert-if-absent and the update
    again).

    Each statement is retried on its own after a deadlock: retrying the whole push after its
    item landed would queue the item twice.
    """
    at_now = push.ontime is None
    stmts = _statements(store, push.moves, at_now)
    params = {"p_name": push.name, "p_handler": push.handler, "p_key": push.key,
              "p_item": push.item, "p_moves": push.moves, "p_data": push.data,
              "p_schedule": push.schedule, **({} if at_now else {"p_ontime": push.ontime})}

    def run(stmt: sa.Executable) -> int:
        def once() -> int:
            with store.autocommit() as conn:
                return int(conn.execute(stmt, params).rowcount)

        return store.retrying("push", once)

    if stmts.one is not None:
        run(stmts.one)
        _faultpoints.reached("push")
        return
    run(stmts.item)
    _faultpoints.reached("push")
    if stmts.upsert is not None:
        run(stmts.upsert)
        return
    if run(stmts.update):
        return
    t = store.table
    now = store.db_now()  # insert-if-absent binds values: no SQL clock in it
    row = {"queue_name": push.name, "handler": push.handler, "data": push.data,
           "created_at": now, "next_process_at": now if at_now else push.ontime,
           "attempt": 0, "reenqueue_attempt": 0, "total_attempt": 0, "paused": False,
           "schedule": push.schedule, "stop_requested": False}

    def insert() -> None:
        with store.inserting() as conn:
            store.dialect.insert_if_absent(conn, t, row)

    store.retrying("push", insert)
    # Whoever inserted the row (this push, or a racing one), this push's rule applies to it.
    run(stmts.update)


def queued_guards(store: StoreBase) -> list[sa.ColumnElement[bool]]:
    """Conditions under which a finished delivery may delete its key's row: no push marked
    it while the delivery ran, and no item is left."""
    t, items = store.table, store.items
    return [
        t.c.payload.is_(None),
        ~sa.exists(sa.select(items.c.id).where(items.c.task_name == t.c.queue_name)),
    ]


def queued_due(store: StoreBase) -> sa.ColumnElement[Any]:
    """The due time of the items queued for the key in the row being updated: the first
    item's ``ontime``, moved by every later ``update="always"`` push; the database's now
    when none is left (the key is then removed by its next, empty, delivery)."""
    t, items = store.table, store.items
    first, mover, due = items.alias("first_item"), items.alias("mover"), items.alias("due_item")
    # Each level names the key's row explicitly: two levels down, automatic correlation
    # would read the tasks table as a FROM of its own (every key's items).
    first_id = sa.select(sa.func.min(first.c.id)).where(
        first.c.task_name == t.c.queue_name).correlate(t).scalar_subquery()
    last_move = sa.select(sa.func.max(mover.c.id)).where(
        mover.c.task_name == t.c.queue_name,
        sa.or_(mover.c.moves == sa.bindparam("q_moves", True, type_=mover.c.moves.type),
               mover.c.id == first_id),
    ).correlate(t).scalar_subquery()
    at = sa.select(due.c.due_at).where(due.c.id == last_move).correlate(t).scalar_subquery()
    return sa.func.coalesce(at, db_now())


def read_items(store: StoreBase, name: str, picked_at: datetime) -> list[tuple[int, str | None]]:
    """The items of the key ``name`` pushed before its delivery was picked (database clock),
    in push order, as ``(id, JSON text)``."""
    items = store.items
    stmt = (
        sa.select(items.c.id, items.c.item)
        .where(items.c.task_name == name,
               items.c.pushed_at <= sa.bindparam("r_picked", picked_at,
                                                 type_=items.c.pushed_at.type))
        .order_by(items.c.id)
    )
    with store.read() as conn:
        return [(int(r.id), r.item) for r in conn.execute(stmt)]


def remove_delivered(
    store: StoreBase, name: str, token: int, node_id: str, picked_at: datetime,
    ids: Sequence[int],
) -> int:
    """Delete the delivered items ``ids``, only while the delivery ``(name, token)`` picked at
    ``picked_at`` still holds its lease on ``node_id``. Returns how many were deleted.

    The pick time is part of the fence: a key whose row was deleted by hand and pushed to
    again starts over at token 1, and only the pick time tells its deliveries apart."""
    t, items = store.table, store.items
    held = sa.exists(sa.select(t.c.id).where(
        t.c.queue_name == name, t.c.total_attempt == token, t.c.locked_by == node_id,
        t.c.last_started_at == sa.bindparam("d_picked", picked_at,
                                            type_=t.c.last_started_at.type)))
    removed = 0
    for start in range(0, len(ids), IN_CHUNK):
        chunk = list(ids[start : start + IN_CHUNK])
        delete = sa.delete(items).where(items.c.task_name == name, items.c.id.in_(chunk), held)
        try:
            with store.autocommit() as conn:
                count = _rowcount(conn.execute(delete))
                _faultpoints.reached("delivered")
        except sa.exc.DBAPIError as exc:
            # The read-back counts what this delete removed too: counted once, not twice
            # (twice, the delivery was not known to have removed its items, and a finish
            # refused later left its run row "lost").
            count = _settle_removed(store, name, chunk, delete, exc)
        removed += count
    if ids and removed == len(ids):
        _remember(store, (name, token, node_id, to_utc(picked_at)))
    return removed


_DelivererKey = tuple[str, int, str, "datetime | None"]
_DELIVERED: weakref.WeakKeyDictionary[StoreBase, dict[_DelivererKey, None]] = (
    weakref.WeakKeyDictionary())
_DELIVERED_KEPT = 10_000
"""Deliveries remembered per store: far more than can wait for their finish at once."""


_delivered_lock = threading.Lock()


def _remember(store: StoreBase, key: _DelivererKey) -> None:
    with _delivered_lock:
        kept = _DELIVERED.setdefault(store, {})
        kept[key] = None
        while len(kept) > _DELIVERED_KEPT:  # the oldest first (dicts keep insertion order)
            del kept[next(iter(kept))]


def removed_all(store: StoreBase, name: str, token: int, node_id: str,
                picked_at: datetime) -> bool:
    """Whether the delivery ``(name, token)`` of ``node_id`` picked at ``picked_at`` removed
    every item it delivered, fenced by its lease (it is forgotten by this call): such a
    delivery succeeded whatever happens to its finish afterwards."""
    key = (name, token, node_id, to_utc(picked_at))
    with _delivered_lock:
        kept = _DELIVERED.get(store)
        return kept is not None and kept.pop(key, False) is None


def _settle_removed(store: StoreBase, name: str, chunk: list[int], delete: sa.Delete,
                    error: sa.exc.DBAPIError) -> int:
    """How many of ``chunk`` are removed after their fenced ``delete`` lost its answer (the
    connection dropped): the delete again on a new connection (fenced as before, it removes
    only what is left, and only while the delivery holds its lease), then a read of what is
    still there. Items that are gone were delivered: a delete that landed without an answer
    must not make the delivery a failure that nobody can deliver again. Re-raises ``error``
    when the database cannot be reached now either."""
    items = store.items
    try:
        with store.autocommit() as conn:
            conn.execute(delete)
            left = conn.execute(sa.select(sa.func.count()).select_from(items).where(
                items.c.task_name == name, items.c.id.in_(chunk))).scalar_one()
    except sa.exc.DBAPIError:
        raise error from None
    log.warning("batch %r: removing delivered items lost its answer (%s); read back, %d of "
                "%d are gone", name, error.orig, len(chunk) - int(left), len(chunk))
    return len(chunk) - int(left)


def drop_key(store: StoreBase, handler: str, key: str, names: Sequence[str] | None) -> int:
    """Delete the pending items of ``key`` (of the rows ``names``; of every row of the key
    when ``None``: a ``-`` key has one per push) and make its idle rows due now. Returns how
    many items were deleted.

    The rows are not deleted here: a push racing the drop could have its item read as absent
    by the delete and be left without a row. Due now, each is removed by its next delivery,
    which finds nothing to deliver, through the finish that races no push. A delivery running
    meanwhile ends as usual.
    """
    t, items = store.table, store.items
    with store.autocommit() as conn:
        if names is None:
            names = sorted({r.task_name for r in conn.execute(
                sa.select(items.c.task_name).where(
                    items.c.handler == handler, items.c.batch_key == key).distinct())})
        dropped = 0
        for name in names:
            dropped += _rowcount(conn.execute(sa.delete(items).where(items.c.task_name == name)))
            _faultpoints.reached("operation")
            if conn.execute(sa.update(t).where(
                    t.c.queue_name == name, t.c.handler == handler, t.c.locked_by.is_(None)
            ).values(next_process_at=db_now())).rowcount:
                store.notify(conn)
    return dropped


@dataclass(frozen=True)
class KeyRow:
    """One pending key as :func:`pending_keys` reads it."""

    name: str
    handler: str
    key: str
    items: int
    first_pushed_at: datetime
    last_pushed_at: datetime
    row: dict[str, Any] | None
    """The key's row in the tasks table, or ``None`` when its items wait without one (the
    push that wrote them stopped before its row statement)."""


def pending_keys(store: StoreBase, handler: str | None = None, limit: int | None = None
                 ) -> list[KeyRow]:
    """Every key with items waiting (of ``handler``), with its item count and its row,
    ordered by the row's due time (keys without a row last)."""
    t, items = store.table, store.items
    counts = (
        sa.select(items.c.task_name, sa.func.min(items.c.handler).label("handler"),
                  sa.func.min(items.c.batch_key).label("batch_key"),
                  sa.func.count().label("n"),
                  sa.func.min(items.c.pushed_at).label("first_pushed"),
                  sa.func.max(items.c.pushed_at).label("last_pushed"))
        .group_by(items.c.task_name)
    )
    if handler is not None:
        counts = counts.where(items.c.handler == handler)
    grouped = counts.subquery("pending")
    stmt = (
        sa.select(grouped, t)
        .select_from(grouped.outerjoin(t, t.c.queue_name == grouped.c.task_name))
        .order_by(sa.case((t.c.id.is_(None), 1), else_=0), t.c.next_process_at,
                  grouped.c.task_name)
    )
    if limit is not None:
        stmt = stmt.limit(int(limit))
    with store.read() as conn:
        found = conn.execute(stmt).mappings().all()
    out = []
    for r in found:
        row = {c.name: r[c] for c in t.c} if r[t.c.id] is not None else None
        first, last = to_utc(r[grouped.c.first_pushed]), to_utc(r[grouped.c.last_pushed])
        assert first is not None and last is not None
        out.append(KeyRow(r[grouped.c.task_name], r[grouped.c.handler], r[grouped.c.batch_key],
                          int(r[grouped.c.n]), first, last, row))
    return out


def _rowcount(result: sa.CursorResult[Any]) -> int:
    return max(int(result.rowcount), 0)

