"""Listing the tasks table a page at a time: filters, search, paging and counts in SQL.

The dashboard, the REST API and the command line show a page of rows and a few numbers; at
100,000 rows reading the whole table to filter and count it in Python cost each request
seconds. Here a page is one ``SELECT … ORDER BY queue_name`` with ``LIMIT``/``OFFSET`` (or a
keyset, ``queue_name > :after``), which the unique index on ``queue_name`` answers by reading
about the rows it returns when no filter is narrow; the numbers are one aggregate that sends
back one row whatever the table's size.

The states are the dashboard's and the command line's (:data:`STATES`); their SQL is the
Python rule of :func:`dbscheduler.web.views.states_of` and ``TaskInfo.overdue``, so that a
row listed under a state shows that state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ..dialects import db_now
from .alerts import ONE_OFF_PREFIX, dead_where, overdue_where
from .base import StoreBase

__all__ = ["FAILING_STATUSES", "STATES", "Listing", "count_listing", "count_matching",
           "group_waiting", "select_listing"]

STATES = ("running", "paused", "failing", "overdue", "idle")
"""The states a listing filters by, as the dashboard and ``dbscheduler list`` show them."""

FAILING_STATUSES = ("error", "lost", "timeout")
"""A task whose last run ended so is ``failing``."""

_ESCAPE = "!"
"""The ``LIKE`` escape character of a search: not ``\\`` (MySQL reads it inside the literal
too), not ``/`` (names use it)."""


@dataclass(frozen=True)
class Listing:
    """What a listing shows: rows in ``state``, of ``handler``, whose name, handler or
    schedule contains ``match`` (case-insensitive); batch keys' rows only with
    ``batch_keys``; ``overdue_after`` as :attr:`TaskInfo.overdue` uses it."""

    state: str | None = None
    handler: str | None = None
    match: str | None = None
    batch_keys: bool = True
    overdue_after: timedelta = timedelta(seconds=60)


def _flag(value: bool) -> sa.BindParameter[bool]:
    # Flags are compared with bound 0/1, never a boolean literal (SQL Server, old Oracle).
    return sa.bindparam(None, value, type_=sa.Boolean())


def _conditions(t: sa.Table, overdue_after: timedelta) -> dict[str, sa.ColumnElement[bool]]:
    """Each state but ``idle`` as a condition that is never NULL (a NULL column makes the
    condition false, so that ``idle``, none of them, can be counted by elimination)."""
    return {
        "running": t.c.locked_by.is_not(None),
        "paused": t.c.paused == _flag(True),
        "failing": sa.and_(t.c.last_status.is_not(None),
                           t.c.last_status.in_(FAILING_STATUSES)),
        "overdue": sa.or_(overdue_where(t, overdue_after), dead_where(t)),
    }


def batch_key_where(store: StoreBase, pending: sa.ColumnElement[Any] | None = None
                    ) -> sa.ColumnElement[bool]:
    """The row is a batch key's (:func:`dbscheduler.web.views.is_batch_key`): it has items
    waiting, or it is named ``<handler>/<key>`` and scheduled once, as a push makes it.
    ``pending``: the name column of the keys with items, joined to the row by the caller
    (else a subquery asks)."""
    t, items = store.table, store.items
    # The cheap tests first: a LIKE whose pattern is a column is compiled for each row.
    shaped = sa.and_(
        t.c.schedule.is_not(None),
        t.c.schedule.like(ONE_OFF_PREFIX + "%"),
        t.c.handler.is_not(None),
        t.c.handler != t.c.queue_name,
        t.c.queue_name.like(t.c.handler + "/%"),
    )
    waiting = (t.c.queue_name.in_(sa.select(items.c.task_name)) if pending is None
               else pending.is_not(None))
    return sa.or_(waiting, shaped)


def _match_where(t: sa.Table, match: str) -> sa.ColumnElement[bool]:
    needle = match.strip().lower()
    for special in (_ESCAPE, "%", "_"):
        needle = needle.replace(special, _ESCAPE + special)
    pattern = f"%{needle}%"
    return sa.or_(*(sa.func.lower(col).like(pattern, escape=_ESCAPE)
                    for col in (t.c.queue_name, t.c.handler, t.c.schedule)))


def _one(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
    """1 where ``condition`` holds, else 0 (NULL included); constants in the text, not
    parameters: SQL Server types a CASE of parameters badly."""
    one: sa.ColumnElement[int] = sa.literal_column("1", sa.Integer())
    zero: sa.ColumnElement[int] = sa.literal_column("0", sa.Integer())
    return sa.case((condition, one), else_=zero)


def _idle(states: dict[str, sa.ColumnElement[bool]]) -> sa.ColumnElement[int]:
    one: sa.ColumnElement[int] = sa.literal_column("1", sa.Integer())
    zero: sa.ColumnElement[int] = sa.literal_column("0", sa.Integer())
    return sa.case(*((cond, zero) for cond in states.values()), else_=one)


def _where(store: StoreBase, listing: Listing) -> list[sa.ColumnElement[bool]]:
    t = store.table
    where: list[sa.ColumnElement[bool]] = []
    if not listing.batch_keys:
        where.append(sa.not_(batch_key_where(store)))
    if listing.handler is not None:
        where.append(t.c.handler == listing.handler)
    if listing.match and listing.match.strip():
        where.append(_match_where(t, listing.match))
    if listing.state is not None:
        states = _conditions(t, listing.overdue_after)
        if listing.state == "idle":
            where.append(_idle(states) == 1)
        else:
            where.append(states[listing.state])
    return where


def listing_statement(store: StoreBase, listing: Listing, limit: int | None, offset: int = 0,
                      after: str | None = None) -> sa.Select[Any]:
    """The page's ``SELECT``: the table's columns and the database clock (``db_now_``),
    ordered by name."""
    t = store.table
    stmt = sa.select(t, db_now().label("db_now_")).where(*_where(store, listing))
    if after is not None:
        stmt = stmt.where(t.c.queue_name > after)
    stmt = stmt.order_by(t.c.queue_name)
    if limit is not None:
        stmt = stmt.limit(limit)
    if offset:
        stmt = stmt.offset(offset)
    return stmt


def select_listing(store: StoreBase, listing: Listing, limit: int | None, offset: int = 0,
                   after: str | None = None) -> list[dict[str, Any]]:
    """The rows of one page (each with ``db_now_``, the database clock), ordered by name."""
    stmt = listing_statement(store, listing, limit, offset, after)
    with store.read() as conn:
        return [dict(r._mapping) for r in conn.execute(stmt)]


@dataclass(frozen=True)
class ListingCounts:
    """One aggregate's answer: see :class:`dbscheduler.client.TaskTotals`."""

    db_now: datetime
    matching: int
    states: dict[str, int]
    batch_keys: int
    exact: bool = True
    estimate: int | None = None


def _with_pending(store: StoreBase, listing: Listing
                  ) -> tuple[sa.FromClause, sa.ColumnElement[bool] | None]:
    """What a count reads: the table, joined to the keys with items waiting when batch keys
    are left out, and the condition that says a row is one (None when they are not)."""
    if listing.batch_keys:
        return store.table, None
    # Joined once, not a subquery per row: MariaDB runs such a subquery for each row of the
    # scan (three times the count's cost at 100,000 rows).
    t = store.table
    pending = sa.select(store.items.c.task_name.label("name")).distinct().subquery("pending")
    return (t.outerjoin(pending, pending.c.name == t.c.queue_name),
            batch_key_where(store, pending.c.name))


_FLAGS = ("key_", "match_", *(s for s in STATES if s != "idle"))


def count_statement(store: StoreBase, listing: Listing, cap: int | None = None
                    ) -> sa.Select[Any]:
    """How many rows of each kind the listing's rows hold: one row per combination of flags
    (batch key, running, paused, failing, overdue, and whether the search matches: 64 at
    most, whatever the table's size) with its count. Each flag is computed once per row, in
    a derived table; only the handler filter narrows the rows, the state, the search and the
    batch keys are applied to the counts (:func:`count_listing`). With ``cap``, the derived
    table reads ``cap + 1`` rows at most (the counts then cost what ``cap`` rows do, and
    more than ``cap`` in all says there are more)."""
    t = store.table
    states = _conditions(t, listing.overdue_after)
    zero: sa.ColumnElement[int] = sa.literal_column("0", sa.Integer())
    one: sa.ColumnElement[int] = sa.literal_column("1", sa.Integer())
    source, is_key = _with_pending(store, listing)
    key = zero if is_key is None else _one(is_key)
    searched = _one(_match_where(t, listing.match)) if listing.match else one
    flags = sa.select(key.label("key_"), searched.label("match_"),
                      *(_one(cond).label(name) for name, cond in states.items()))
    flags = flags.select_from(source).where(*_where(store, Listing(handler=listing.handler)))
    if cap is not None:
        # No ORDER BY: which rows are read does not matter, only that at most cap + 1 are.
        flags = flags.limit(cap + 1)
    sub = flags.subquery("flags")
    columns = [sub.c[name] for name in _FLAGS]
    return sa.select(*columns, sa.func.count().label("n")).group_by(*columns)


def count_listing(store: StoreBase, listing: Listing, cap: int | None = None
                  ) -> ListingCounts:
    """The numbers of a listing, from one aggregate (at most 64 short rows come back) and
    the database clock: ``states`` under the handler filter (neither the state nor the
    search: the dashboard's filters count what a click on them shows), ``matching`` under
    every filter.

    With ``cap``, at most ``cap + 1`` rows are counted: when there are more, the numbers are
    those of the rows read (lower bounds, ``exact`` false) and ``estimate`` is the database's
    own estimate of the table's rows (its statistics; None where it has none)."""
    with store.read() as conn:
        found = [dict(r._mapping) for r in conn.execute(count_statement(store, listing, cap))]
        now = store.now(conn)
        read = sum(int(row["n"]) for row in found)
        exact = cap is None or read <= cap
        estimate = None if exact else store.dialect.estimated_rows(conn, store.table)
    counts = dict.fromkeys(("all", *STATES), 0)
    hidden = matching = 0
    for row in found:
        n = int(row["n"])
        if int(row["key_"]):
            hidden += n
            continue
        held = [s for s in STATES if s != "idle" and int(row[s])] or ["idle"]
        counts["all"] += n
        for state in held:
            counts[state] += n
        if int(row["match_"]) and (listing.state is None or listing.state in held):
            matching += n
    return ListingCounts(now, matching, counts, hidden, exact, estimate)


def count_matching(store: StoreBase, listing: Listing, cap: int | None = None) -> int:
    """How many rows the listing gives, by one ``COUNT(*)`` (no flag computed for rows the
    filters do not ask about: without filters, the cheapest count the database has); with
    ``cap``, of ``cap + 1`` rows at most (more than ``cap`` says there are more)."""
    source, is_key = _with_pending(store, listing)
    where = _where(store, replace(listing, batch_keys=True))
    if is_key is not None:
        where.append(sa.not_(is_key))
    if cap is None:
        stmt = sa.select(sa.func.count()).select_from(source).where(*where)
    else:
        # No ORDER BY: which rows are read does not matter, only that at most cap + 1 are.
        bounded: sa.Select[Any] = sa.select(
            sa.literal_column("1").label("one")).select_from(source)
        stmt = sa.select(sa.func.count()).select_from(
            bounded.where(*where).limit(cap + 1).subquery("bounded"))
    with store.read() as conn:
        return int(conn.execute(stmt).scalar_one())


def group_waiting(store: StoreBase, group: str, limit: int, cap: int = 10_000
                  ) -> tuple[list[str], int]:
    """The tasks of ``group`` waiting for room (due, not running, not paused): the first
    ``limit`` names, and how many there are (counted up to ``cap + 1``). Two statements
    that read the group's due rows, never the whole table."""
    t = store.table
    where = (t.c.task_group == group, t.c.locked_by.is_(None), t.c.paused == _flag(False),
             t.c.next_process_at <= db_now())
    names = sa.select(t.c.queue_name).where(*where).order_by(t.c.queue_name).limit(limit)
    bounded = sa.select(t.c.id).where(*where).limit(cap + 1).subquery("waiting")
    with store.read() as conn:
        found = [str(n) for n in conn.execute(names).scalars()]
        count = int(conn.execute(sa.select(sa.func.count()).select_from(bounded)).scalar_one())
    return found, count
