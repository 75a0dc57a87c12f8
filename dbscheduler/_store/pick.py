"""The pick: one autocommit statement takes due rows, and a pick whose answer was lost is
reconciled by reading back what it claimed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection
from datetime import timedelta
from typing import TYPE_CHECKING

import sqlalchemy as sa

from .._engine import faultpoints as _faultpoints
from ..dialects import PickedRow, db_now_plus
from ..logfields import engine_log
from .controls import eligible
from .giveback import unpick
from .handlers import handler_params, learn_strangers

if TYPE_CHECKING:
    # The base, not the Store class: that one builds on this module.
    from .base import StoreBase as Store

__all__ = ["pick_rows", "unpick"]

log = engine_log("dbscheduler.store")


def pick_rows(
    store: Store,
    node_id: str,
    limit: int,
    lease: timedelta,
    known: Collection[str],
    exclude: Collection[int],
    ahead: float = 0.0,
) -> list[PickedRow]:
    """Take up to ``limit`` rows due within ``ahead`` seconds whose handler is among
    ``known``, except ``exclude``.

    Every pick stamps a fresh claim value on the rows it takes. When the statement fails
    (the connection dropped, the answer never came), the rows carrying that claim are read
    back: a pick that committed although its answer was lost hands its rows over to be run,
    instead of leaving them leased to this node until the lease runs out.
    """
    claim = uuid.uuid4().hex
    known = known if isinstance(known, frozenset) else frozenset(known)
    where = _conditions(store, frozenset(exclude))
    began = time.monotonic()
    try:
        with store.autocommit() as conn:
            rows = store.dialect.pick(
                conn, store.table, where=where, limit=limit, lease=lease, node_id=node_id,
                claim=claim, params=handler_params(store, known), ahead=ahead,
            )
            _faultpoints.reached("pick")
    except sa.exc.DBAPIError as exc:
        rows = _read_back(store, node_id, claim, lease, exc)
    # A slow pick on a table the database has no statistics of gets them gathered.
    store.statistics.after(time.monotonic() - began)
    strangers = [r for r in rows if r["handler"] not in known]
    if not strangers:
        return rows
    learn_strangers(store, [r["handler"] for r in strangers])
    # A read back by claim, or a pick filtered by the handlers this node lacks (when it has
    # many) before it met these: give them back as they were.
    with store.autocommit() as conn:
        unpick(store, conn, node_id, strangers)
    return [
        {k: v for k, v in r.items() if k != "next_due"}  # it counted the strangers too
        for r in rows
        if r["handler"] in known
    ]


def _conditions(store: Store, exclude: frozenset[int]) -> sa.ColumnElement[bool]:
    """The pick's ``where`` for the node's tags, ``exclude`` and takeover margin (the dialect
    adds the handler condition, whose text does not depend on the names): built once and kept
    while they stay the same (usually for the node's whole life), so the dialect can keep the
    statement built from it too."""
    margin = store.takeover_margin
    key = (store.tags, exclude, margin)
    cached: sa.ColumnElement[bool] | None = store.pick_conditions.get(key)
    if cached is not None:
        return cached
    t = store.table
    where = sa.and_(t.c.paused == False,  # noqa: E712
                    eligible(store, t, store.tags))
    if exclude:
        where = sa.and_(where, t.c.id.not_in(sorted(exclude)))
    if margin > 0:
        # This node's database clock reads ahead of the clock that wrote other nodes'
        # leases: a held row is taken only once its lease is over by that clock too.
        where = sa.and_(where, sa.or_(t.c.locked_by.is_(None),
                                      t.c.next_process_at <= db_now_plus(-margin)))
    if len(store.pick_conditions) > 16:  # exclusions come and go (after an outage)
        store.pick_conditions.clear()
    store.pick_conditions[key] = where
    return where


def _read_back(
    store: Store, node_id: str, claim: str, lease: timedelta, error: sa.exc.DBAPIError
) -> list[PickedRow]:
    """The rows the failed pick ``claim`` took after all (leased for ``lease`` from the
    pick, so no longer than that from now); re-raises ``error`` if none."""
    try:
        with store.read() as conn:
            rows = store.dialect.claimed(conn, store.table, node_id=node_id, claim=claim,
                                         lease=lease)
    except sa.exc.DBAPIError:
        raise error from None
    if not rows:
        raise error
    log.warning(
        "pick: the database took %d row(s) but its answer was lost (%s); read back by their "
        "claim, they run now", len(rows), error.orig,
    )
    return rows
