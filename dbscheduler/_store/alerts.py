"""Lateness: which tasks are overdue or past their dead-man limit, and the conditional writes
that let exactly one node raise (and end) each alert episode.

The check is one query: three index range reads joined by ``UNION ALL`` (late by due time on
the ``next_process_at`` index; past ``alert_after`` and recovered on ``(alerted_at,
alert_after)``), so its cost follows the late rows, not the table. When it finds something,
each node tries one conditional ``UPDATE`` of ``alerted_at`` per row: the node whose update
changes the row owns the episode's hook.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa

from .. import _faultpoints
from ..dialects import db_now, db_now_plus
from ..dialects.types import to_utc
from .base import StoreBase

__all__ = ["Late", "LateKind", "claim", "late_rows", "overdue_where", "rows_by_id"]

LateKind = Literal["overdue", "dead", "recovered"]


@dataclass(frozen=True)
class Late:
    """A row whose alert state should change, as the check found it."""

    id: int
    kind: LateKind


def _flag(value: bool) -> sa.BindParameter[bool]:
    # Flags are compared with bound 0/1, never a boolean literal (SQL Server, old Oracle).
    return sa.bindparam(None, value, type_=sa.Boolean())


def overdue_where(t: sa.Table | Any, overdue_after: timedelta) -> sa.ColumnElement[bool]:
    """Unpaused, idle, and due longer ago than ``overdue_after`` (database clock)."""
    return sa.and_(
        t.c.paused == _flag(False),
        t.c.locked_by.is_(None),
        t.c.next_process_at < db_now_plus(-overdue_after.total_seconds()),
    )


def dead_where(t: sa.Table | Any) -> sa.ColumnElement[bool]:
    """Unpaused, with a dead-man limit, and no success (or creation) within it."""
    return sa.and_(
        t.c.paused == _flag(False),
        t.c.alert_after.is_not(None),
        sa.func.coalesce(t.c.last_success_at, t.c.created_at) < db_now_plus(-t.c.alert_after),
    )


def _recovered_where(t: sa.Table | Any) -> sa.ColumnElement[bool]:
    return sa.and_(t.c.alerted_at.is_not(None), t.c.last_success_at > t.c.alerted_at)


def late_rows(store: StoreBase, overdue_after: timedelta) -> list[Late]:
    """The rows whose alert episode should start (not alerted yet, and overdue or past their
    limit) or end (alerted, and a success since); one query."""
    t = store.table
    quiet = t.c.alerted_at.is_(None)
    # The kind is a number in the text: string literals of different lengths come back
    # blank-padded from an Oracle UNION, and a parameter would be typed badly by SQL Server.
    parts = [
        sa.select(t.c.id, sa.literal_column(str(code), sa.Integer()).label("kind")).where(where)
        for code, where in enumerate([
            sa.and_(quiet, overdue_where(t, overdue_after)),
            sa.and_(quiet, dead_where(t)),
            _recovered_where(t),
        ])
    ]
    with store.read() as conn:
        found = conn.execute(sa.union_all(*parts)).all()
    seen: dict[int, LateKind] = {}
    for id_, code in found:  # a row both overdue and past its limit is reported once
        seen.setdefault(int(id_), _KINDS[int(code)])
    return [Late(i, k) for i, k in seen.items()]


_KINDS: tuple[LateKind, ...] = ("overdue", "dead", "recovered")


def claim(store: StoreBase, late: Late, overdue_after: timedelta) -> bool:
    """Start (or, for ``recovered``, end) the episode of ``late`` if no other node did:
    True when this node's conditional update changed the row."""
    t = store.table
    if late.kind == "recovered":
        stmt = sa.update(t).where(t.c.id == late.id, _recovered_where(t)).values(
            alerted_at=None)
    else:
        still = overdue_where(t, overdue_after) if late.kind == "overdue" else dead_where(t)
        stmt = sa.update(t).where(t.c.id == late.id, t.c.alerted_at.is_(None), still).values(
            alerted_at=db_now())
    with store.autocommit() as conn:
        changed = conn.execute(stmt).rowcount
        _faultpoints.reached("alert")
    return changed == 1


def rows_by_id(store: StoreBase, ids: list[int]) -> tuple[datetime, list[Mapping[str, Any]]]:
    """The database time and the rows ``ids`` (at most a few hundred: alerts that changed)."""
    t = store.table
    with store.read() as conn:
        found = conn.execute(
            sa.select(t, db_now().label("db_now_")).where(t.c.id.in_(ids)).order_by(t.c.id)
        ).mappings().all()
        now = to_utc(found[0]["db_now_"]) if found else store.now(conn)
    assert now is not None
    return now, [dict(r) for r in found]
