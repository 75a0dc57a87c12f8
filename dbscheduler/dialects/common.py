"""What every dialect module shares besides :class:`~.base.Dialect`: the database-clock
functions (compiled per backend), the picked row's type and columns, the words for a failed
connection, and the portable insert-if-absent statement."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from .types import UTCDateTime

__all__ = [
    "FENCE_PAUSE", "FENCE_SLACK", "FENCE_TRIES", "PICKED", "ConnectKind", "ConnectProblem",
    "FenceBounds", "PickedRow", "db_now", "db_now_plus", "driver_error", "fence_conditions",
    "first_int_arg", "insert_if_absent_statement", "names_from_text", "pick_binds",
    "pick_due", "pick_limit", "pick_params", "pick_started", "picked_columns", "row_dicts",
    "seconds_param",
]

PickedRow = Mapping[str, Any]
"""A picked row: the columns of :data:`PICKED` with their values after the pick
(``prev_locked_by``, ``prev_next_process_at`` and ``prev_last_started_at`` as they were before
it)."""

PICKED: tuple[str, ...] = (
    "id", "queue_name", "handler", "schedule", "options", "payload", "data", "created_at",
    "attempt", "reenqueue_attempt", "total_attempt", "last_started_at", "heartbeat_at",
    "priority", "task_group", "trigger_link", "prev_locked_by", "prev_next_process_at",
    "prev_last_started_at", "claim",
)
"""The columns a pick returns: what running a picked row takes. The others (a last error of
up to 2,000 characters, timestamps nothing reads there) cost every picked row their transfer
and conversion, a quarter of the node's CPU for a pick; the rare execution that reports its
whole row (a lost one) reads it. ``claim`` is the pick's random stamp: with the token it
identifies the execution for ``ctx.fenced``, even where the token comes back after a
failover lost the last commits. ``heartbeat_at`` is the database's time of the pick and
``last_started_at`` the time the execution starts: later by the wait of a row picked ahead of
its due time (:func:`pick_due`)."""


def picked_columns(table: sa.FromClause) -> list[sa.ColumnElement[Any]]:
    """:data:`PICKED` of ``table`` (the scheduler table, or a statement's name for it)."""
    return [table.c[name] for name in PICKED]


def row_dicts(result: sa.CursorResult[Any]) -> list[PickedRow]:
    """Every row of ``result`` as a plain dict: zipped with the keys once fetched, which a
    busy node's poller does for hundreds of picked rows a second (a ``RowMapping`` per row
    costs several times as much)."""
    keys = list(result.keys())
    return [dict(zip(keys, row, strict=True)) for row in result.all()]


class db_now(FunctionElement[datetime]):
    """The database's current time in UTC, compiled per dialect (never the node's clock)."""

    type = UTCDateTime()
    inherit_cache = True
    name = "db_now"


class db_now_plus(FunctionElement[datetime]):
    """``db_now() + seconds``; the single argument is a number of seconds (a bound float)."""

    type = UTCDateTime()
    inherit_cache = True
    name = "db_now_plus"

    def __init__(self, seconds: ColumnElement[Any] | float) -> None:
        super().__init__(
            seconds
            if isinstance(seconds, ColumnElement)
            else sa.literal(float(seconds), sa.Float())
        )


def pick_limit() -> ColumnElement[int]:
    """The pick's row limit as the bound parameter ``p_limit``: the statements built once
    (the PostgreSQL pick and its candidates) take each pick's limit with its parameters."""
    return sa.bindparam("p_limit", type_=sa.Integer())


def names_from_text(param: str, select: str) -> tuple[sa.FromClause, ColumnElement[str]]:
    """``Dialect.names_table`` from the text of a ``SELECT`` of one column ``name`` that
    reads the parameter ``:<param>`` (the names as JSON text), e.g. through ``JSON_TABLE``."""
    names = (
        sa.text(select)
        .bindparams(sa.bindparam(param, type_=sa.UnicodeText()))
        .columns(sa.column("name", sa.Unicode()))
        .subquery(f"{param}_h")
    )
    return names, names.c.name


def pick_due(table: sa.FromClause) -> ColumnElement[bool]:
    """The pick's due condition on ``table`` (the scheduler table or an alias of it), with the
    bound parameter ``p_ahead``: due within ``p_ahead`` seconds of the database's now.

    A row picked ahead starts at its due time from the node's memory, so a load spread over
    time is picked in batches rather than a row or two per statement. A row another node
    holds is taken only once its lease is over, never ahead: until then it is that node's.
    """
    due = table.c.next_process_at
    return sa.and_(due <= db_now_plus(seconds_param("p_ahead")),
                   sa.or_(table.c.locked_by.is_(None), due <= db_now()))


def pick_started(table: sa.FromClause) -> ColumnElement[datetime]:
    """The pick's value of ``last_started_at``: the later of the database's now and the
    row's due time (a row picked ahead starts when it is due). It reads ``next_process_at``,
    which the pick overwrites with the lease: MySQL assigns left to right, so this must be
    assigned before that."""
    due = table.c.next_process_at
    return sa.case((due > db_now(), due), else_=db_now())


def pick_binds(table: sa.Table) -> dict[str, ColumnElement[Any]]:
    """The pick's lease, node and claim as the bound parameters ``p_lease``, ``p_node`` and
    ``p_claim`` (keywords of ``Dialect.pick_values``): a pick statement built once takes
    each pick's own through :func:`pick_params`."""
    t = table
    return {"lease": seconds_param("p_lease"),
            "node_id": sa.bindparam("p_node", type_=t.c.locked_by.type),
            "claim": sa.bindparam("p_claim", type_=t.c.claim.type)}


def pick_params(
    claim: str, node_id: str, lease: timedelta, ahead: float = 0.0
) -> dict[str, Any]:
    """The values of :func:`pick_binds` for one pick, and ``p_ahead`` of :func:`pick_due`."""
    return {"p_claim": claim, "p_node": node_id, "p_lease": lease.total_seconds(),
            "p_ahead": float(ahead)}


FENCE_TRIES = 10
"""Tries of a fenced transaction's final check where it never waits for a lock (MySQL,
SQL Server, Oracle) while another session holds the row for a moment."""
FENCE_PAUSE = 0.01
"""Seconds between those tries."""
FENCE_SLACK = 0.05
"""Seconds a fenced transaction's final check demands on top of its bounds: the server's
timers fire a little late, and the COMMIT takes its own time to arrive."""


@dataclass(frozen=True)
class FenceBounds:
    """How long the server lets a fenced transaction sit idle (``idle`` seconds, from its
    start to its final check) and how long the final check may wait for a lock and the idle
    time after it may last (``final`` seconds each) before it ends the transaction.

    >>> FenceBounds(idle=2.0, final=0.3).final
    0.3
    """

    idle: float
    final: float


def fence_conditions(
    table: sa.Table, id_: int, token: int, node_id: str, claim: str | None,
    margin: float | None,
) -> list[ColumnElement[bool]]:
    """The row is still the execution's: its id, fencing token, node and the pick's claim
    (a token that came back after a failover has another claim); with ``margin``, its lease
    also ends more than that many seconds after the database's now."""
    t = table
    conditions = [t.c.id == id_, t.c.total_attempt == token, t.c.locked_by == node_id]
    if claim is not None:
        conditions.append(t.c.claim == claim)
    if margin is not None:
        conditions.append(t.c.next_process_at > db_now_plus(margin))
    return conditions


def seconds_param(name: str) -> ColumnElement[float]:
    """A bound number of seconds, typed so every driver sends it as a float."""
    return sa.bindparam(name, type_=sa.Float())


ConnectKind = Literal["host", "starting", "read-only", "database", "user", "password", "login"]


@dataclass(frozen=True)
class ConnectProblem:
    """Why a connection failed, in words for the person who wrote the URL.

    ``kind`` is ``host`` (nothing answers at that address, or the name does not resolve),
    ``starting`` (the server answers but is not ready yet), ``read-only`` (it answers but
    refuses writes: a standby, or a replica), ``database`` (no such database), ``user``,
    ``password``, or ``login`` (user or password wrong; the server does not say which). Only
    ``host``, ``starting`` and ``read-only`` can go away by waiting (a failover promotes).
    """

    kind: ConnectKind
    message: str

    @property
    def may_pass(self) -> bool:
        """True when the same URL may work later (the server is down or still starting)."""
        return self.kind in ("host", "starting", "read-only")


def driver_error(exc: BaseException) -> BaseException:
    """The driver's exception inside a SQLAlchemy one (``exc.orig``), else ``exc`` itself."""
    orig = getattr(exc, "orig", None)
    return orig if isinstance(orig, BaseException) else exc


def first_int_arg(exc: BaseException) -> int | None:
    """The error number PyMySQL and pyodbc-style drivers put first in ``args``."""
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def insert_if_absent_statement(
    table: sa.Table, values: Mapping[str, Any], guard_hints: str | None = None
) -> sa.Insert:
    """``INSERT INTO t (…) SELECT :v, … WHERE NOT EXISTS (SELECT * FROM t WHERE name = :name)``.

    For backends without an upsert (SQL Server takes ``guard_hints`` on the probe; Oracle
    renders ``FROM DUAL``). ``None`` values are left out: the columns default to ``NULL``, and an
    untyped ``NULL`` parameter in a select list is something drivers describe differently.
    """
    present = {k: v for k, v in values.items() if v is not None}
    binds = {
        name: sa.bindparam(f"v_{name}", value, type_=table.c[name].type)
        for name, value in present.items()
    }
    existing = table.alias("existing")
    probe = sa.select(existing.c.id).where(existing.c.queue_name == binds["queue_name"])
    if guard_hints is not None:
        probe = probe.with_hint(existing, guard_hints, "mssql")
    return sa.insert(table).from_select(
        list(binds), sa.select(*binds.values()).where(~probe.exists())
    )
