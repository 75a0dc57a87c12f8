"""The leases of running executions: the heartbeat that extends them, the give-back at
shutdown.

Both are fenced, autocommit statements for many executions at once: a heartbeat extends every
lease the node holds in one statement (in chunks under SQL Server's and Oracle's parameter
limits) and learns which it still holds, from the ``UPDATE`` itself where it returns rows,
else from a read right after it (the store chooses once which, when built); a release gives
leases back, due at once, with the interrupted try's attempt returned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from .._engine import faultpoints as _faultpoints
from ..dialects import db_now, db_now_plus
from .base import IN_CHUNK
from .base import StoreBase as Store

__all__ = ["Extended", "extend", "extended_read_back", "extended_returning", "fence",
           "release"]


Extended = Callable[
    ["Store", Connection, sa.Update, str, Sequence[int], Mapping[int, int], set[int], set[int]],
    None,
]
"""Runs one chunk's lease extension and adds the ids still held (and those asked to stop)."""


def fence(store: Store, node_id: str, id_: Any, token: Any) -> ColumnElement[bool]:
    """The row ``id_`` while execution ``token`` of ``node_id`` holds it."""
    t = store.table
    return sa.and_(t.c.id == id_, t.c.total_attempt == token, t.c.locked_by == node_id)


def extend(store: Store, extended: Extended, node_id: str, lease: timedelta,
           tokens: Mapping[int, int]) -> tuple[set[int], set[int]]:
    """Extend the lease of every execution in ``tokens`` (``id -> token``) by ``lease``;
    ``(alive, stop_requested)``: the ids this node still holds, and those of them whose
    cancel was requested.

    >>> extend(store, extended_returning, "n1", timedelta(seconds=30), {12: 7})  # doctest: +SKIP
    ({12}, set())
    """
    t = store.table
    ids = list(tokens)
    alive: set[int] = set()
    stop: set[int] = set()
    with store.autocommit() as conn:
        for start in range(0, len(ids), IN_CHUNK):
            chunk = ids[start : start + IN_CHUNK]
            stmt = (
                sa.update(t)
                .where(sa.or_(*(fence(store, node_id, i, tokens[i]) for i in chunk)))
                .values(next_process_at=db_now_plus(lease.total_seconds()), heartbeat_at=db_now())
            )
            extended(store, conn, stmt, node_id, chunk, tokens, alive, stop)
    return alive, stop


def extended_returning(
    store: Store, conn: Connection, stmt: sa.Update, node_id: str, chunk: Sequence[int],
    tokens: Mapping[int, int], alive: set[int], stop: set[int],
) -> None:
    """Run one chunk's lease extension, its changed rows returned by the statement."""
    t = store.table
    rows = conn.execute(stmt.returning(t.c.id, t.c.stop_requested)).all()
    _faultpoints.reached("heartbeat")
    alive.update(r.id for r in rows)
    stop.update(r.id for r in rows if r.stop_requested)


def extended_read_back(
    store: Store, conn: Connection, stmt: sa.Update, node_id: str, chunk: Sequence[int],
    tokens: Mapping[int, int], alive: set[int], stop: set[int],
) -> None:
    """Run one chunk's lease extension, then read back who still holds what."""
    t = store.table
    conn.execute(stmt)
    _faultpoints.reached("heartbeat")
    # A plain read after the committed update: who still holds what (a row taken
    # over in between is simply not ours, as it would be a moment later anyway).
    for r in conn.execute(
        sa.select(t.c.id, t.c.total_attempt, t.c.locked_by, t.c.stop_requested)
        .where(t.c.id.in_(chunk))
    ):
        if r.locked_by == node_id and r.total_attempt == tokens[r.id]:
            alive.add(r.id)
            if r.stop_requested:
                stop.add(r.id)


def release(store: Store, node_id: str, tokens: Mapping[int, int]) -> int:
    """Give back the leases in ``tokens`` (``id -> token``) this node still holds, due at
    once, so another node can pick them; how many were given back.

    >>> release(store, "node-1", {12: 7})  # doctest: +SKIP
    1
    """
    if not tokens:
        return 0
    t, b = store.table, sa.bindparam
    with store.autocommit() as conn:
        count = conn.execute(
            sa.update(t)
            .where(t.c.id == b("r_id"), t.c.total_attempt == b("r_token"),
                   t.c.locked_by == node_id)
            .values(
                locked_by=None,
                next_process_at=db_now(),
                # The interrupted try was not a failure: give its attempt back.
                attempt=sa.case((t.c.attempt > 0, t.c.attempt - 1), else_=0),
                stop_requested=False,
            ),
            [{"r_id": i, "r_token": tok} for i, tok in tokens.items()],
        ).rowcount
        _faultpoints.reached("release")
        if count != 0:  # -1: the driver does not count an executemany's rows
            store.notify(conn)
    return max(count, 0) if conn.dialect.supports_sane_multi_rowcount else len(tokens)
