"""Lateness: which tasks are overdue or past their dead-man limit, and the conditional writes
that let exactly one node raise (and end) each alert episode.

A check reads one bounded page: three index range reads joined by ``UNION ALL`` (late by due
time on the ``next_process_at`` index, oldest first; past ``alert_after`` and recovered on
``(alerted_at, alert_after)``), each stopping after :data:`PAGE` rows. It then claims what it
found with one conditional ``UPDATE`` per kind: the rows that statement changed are this
node's, and no other node's (the condition includes the episode's state, and a row lock
serialises two nodes' updates of one row).

Which rows a claim changed comes back with the statement where ``UPDATE … RETURNING`` (or
``OUTPUT``) exists. Elsewhere (MySQL/MariaDB, Oracle) the claim also stamps the rows with a
random marker, read back by a plain ``SELECT``; the marker lives in ``prev_last_started_at``,
a copy the pick makes and reads only while a node holds the row, so that claim touches idle
rows only, and the rows of the page that are running at that moment (a dead man between two
failing runs) are claimed one conditional ``UPDATE`` each.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

import sqlalchemy as sa

from .._engine import faultpoints as _faultpoints
from ..dialects import db_now, db_now_plus
from ..dialects.types import to_utc
from .base import StoreBase

__all__ = ["PAGE", "Late", "LateKind", "claim", "late_rows", "overdue_where", "rows_by_id"]

LateKind = Literal["overdue", "dead", "recovered"]

PAGE = 500
"""Rows of each kind one check reads and claims at most (a backlog is claimed page by page,
one page per check): within Oracle's 1,000-item ``IN`` lists and SQL Server's 2,100
parameters."""

ONE_OFF_PREFIX = "once "
"""How the ``schedule`` text of a one-off job starts (``Once.describe()``)."""


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


def not_one_off(t: sa.Table | Any) -> sa.ColumnElement[bool]:
    """The row is not a one-off job (nor a batch key, which is one)."""
    return sa.or_(t.c.schedule.is_(None), t.c.schedule.not_like(ONE_OFF_PREFIX + "%"))


def dead_where(t: sa.Table | Any) -> sa.ColumnElement[bool]:
    """Unpaused, with a dead-man limit, and no success (or creation) within it."""
    return sa.and_(
        t.c.paused == _flag(False),
        t.c.alert_after.is_not(None),
        sa.func.coalesce(t.c.last_success_at, t.c.created_at) < db_now_plus(-t.c.alert_after),
    )


def _recovered_where(t: sa.Table | Any) -> sa.ColumnElement[bool]:
    return sa.and_(t.c.alerted_at.is_not(None), t.c.last_success_at > t.c.alerted_at)


def _late_where(t: sa.Table | Any, kind: LateKind, overdue_after: timedelta,
                one_offs: bool) -> sa.ColumnElement[bool]:
    if kind == "recovered":
        return _recovered_where(t)
    quiet = t.c.alerted_at.is_(None)
    if kind == "dead":
        return sa.and_(quiet, dead_where(t))
    return sa.and_(quiet, overdue_where(t, overdue_after),
                   *([] if one_offs else [not_one_off(t)]))


_KINDS: tuple[LateKind, ...] = ("overdue", "dead", "recovered")


def late_rows(store: StoreBase, overdue_after: timedelta, *, page: int = PAGE,
              one_offs: bool = True) -> list[Late]:
    """The rows whose alert episode should start (not alerted yet, and overdue or past their
    limit) or end (alerted, and a success since): at most ``page`` of each kind, the longest
    overdue first; one query. ``one_offs=False`` leaves one-off jobs out of the overdue ones
    (their dead-man limit, when they have one, still counts)."""
    t = store.table
    # The kind is a number in the text: string literals of different lengths come back
    # blank-padded from an Oracle UNION, and a parameter would be typed badly by SQL Server.
    parts = []
    for code, kind in enumerate(_KINDS):
        inner = (sa.select(t.c.id).where(_late_where(t, kind, overdue_after, one_offs))
                 .limit(int(page)))
        if kind == "overdue":  # the due-time index, walked from the oldest
            inner = inner.order_by(t.c.next_process_at, t.c.id)
        # Each part a derived table: a member of a UNION may not have its own LIMIT or
        # ORDER BY on SQLite, and needs parentheses on MySQL.
        sub = inner.subquery(f"late_{kind}")
        parts.append(sa.select(sub.c.id, sa.literal_column(str(code), sa.Integer())
                               .label("kind")))
    with store.read() as conn:
        found = conn.execute(sa.union_all(*parts)).all()
    seen: dict[int, LateKind] = {}
    for id_, code in found:  # a row both overdue and past its limit is reported once
        seen.setdefault(int(id_), _KINDS[int(code)])
    return [Late(i, k) for i, k in seen.items()]


_EPOCH = datetime(1900, 1, 1, tzinfo=timezone.utc)


def _marker() -> datetime:
    """A timestamp no other claim writes: a random microsecond of 1900-2000."""
    return _EPOCH + timedelta(microseconds=secrets.randbelow(3_155_760_000_000_000))


def claim(store: StoreBase, kind: LateKind, ids: Sequence[int],
          overdue_after: timedelta, *, one_offs: bool = True) -> list[int]:
    """Start (or, for ``recovered``, end) the episodes of the rows ``ids`` (at most
    :data:`PAGE`) that no other node did, in one statement; returns the ids this node's
    statement changed."""
    if not ids:
        return []
    t = store.table
    where = [t.c.id.in_(list(ids)), _late_where(t, kind, overdue_after, one_offs)]
    values: dict[str, Any] = {"alerted_at": None if kind == "recovered" else db_now()}
    returning = store.dialect.returning_update
    marker = None
    if not returning:
        marker = _marker()
        # Idle rows only: the pick's read-back of a held row reads its prev_* copies.
        where.append(t.c.locked_by.is_(None))
        values["prev_last_started_at"] = sa.bindparam(
            "a_marker", marker, type_=t.c.prev_last_started_at.type)
    stmt = sa.update(t).where(*where).values(**values)
    if returning:
        with store.autocommit() as conn:
            won = [int(r[0]) for r in conn.execute(stmt.returning(t.c.id))]
            _faultpoints.reached("alert")
            return won
    # One short transaction: the update's row locks keep a pick on another node from
    # rewriting the marker before it is read back (a row alerted but never told).
    with store.begin() as conn:
        conn.execute(stmt)
        _faultpoints.reached("alert")
        mark = sa.bindparam("a_marker", marker, type_=t.c.prev_last_started_at.type)
        # A number, not the comparison itself: Oracle before 23 selects no booleans.
        ours_col = sa.case((t.c.prev_last_started_at == mark, sa.literal_column("1")),
                           else_=sa.literal_column("0"))
        found = conn.execute(
            sa.select(t.c.id, ours_col).where(
                t.c.id.in_(list(ids)),
                sa.or_(t.c.prev_last_started_at == mark,
                       sa.and_(t.c.locked_by.is_not(None),
                               _late_where(t, kind, overdue_after, one_offs))))).all()
    won = [int(id_) for id_, ours in found if int(ours)]
    # Rows running right now (a dead man that keeps failing, a recovered task already
    # running again): one conditional update each, as few as the node's running rows, after
    # the commit so that no lock of the page is held while waiting for a running row's.
    running = sorted(int(i) for i, ours in found if not int(ours))
    if running:
        with store.autocommit() as conn:
            for id_ in running:
                single = (sa.update(t).where(t.c.id == id_,
                                             _late_where(t, kind, overdue_after, one_offs))
                          .values(alerted_at=values["alerted_at"]))
                if conn.execute(single).rowcount == 1:
                    won.append(id_)
    return won


def rows_by_id(store: StoreBase, ids: list[int]) -> tuple[datetime, list[Mapping[str, Any]]]:
    """The database time and the rows ``ids`` (the alerts one check changed: a few pages)."""
    t = store.table
    found: list[Mapping[str, Any]] = []
    now: datetime | None = None
    with store.read() as conn:
        for start in range(0, len(ids), PAGE):
            rows = conn.execute(
                sa.select(t, db_now().label("db_now_"))
                .where(t.c.id.in_(ids[start:start + PAGE])).order_by(t.c.id)
            ).mappings().all()
            if rows and now is None:
                now = to_utc(rows[0]["db_now_"])
            found.extend(dict(r) for r in rows)
        if now is None:
            now = store.now(conn)
    assert now is not None
    return now, found


def open_episode(store: StoreBase, handler: str, before: tuple[datetime, int],
                 overdue_after: timedelta) -> bool:
    """Whether a row of ``handler`` before ``before`` (due time, then id) is overdue and
    already alerted: the episode a check's new overdue rows of that handler continue. Claims
    take the oldest rows first, so such a row, when there is one, is among the first of the
    handler's index."""
    t = store.table
    due = sa.bindparam("e_due", before[0], type_=t.c.next_process_at.type)
    stmt = (
        sa.select(t.c.id)
        .where(t.c.handler == handler, t.c.alerted_at.is_not(None),
               overdue_where(t, overdue_after),
               sa.or_(t.c.next_process_at < due,
                      sa.and_(t.c.next_process_at == due,
                              t.c.id < sa.bindparam("e_id", before[1], type_=t.c.id.type))))
        .order_by(t.c.next_process_at)
        .limit(1)
    )
    with store.read() as conn:
        return conn.execute(stmt).first() is not None
