"""SQL Server ≥ 2017 (pyodbc): the pick is one ``UPDATE`` of a locked CTE with ``OUTPUT``.

Timestamps are ``DATETIME2(6)`` holding UTC, compared against ``SYSUTCDATETIME()``.

The pick is the classic SQL Server queue statement::

    WITH dbscheduler_due AS (
        SELECT TOP n * FROM scheduled_tasks WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
        WHERE <filter> AND next_process_at <= DATEADD(…, :ahead, SYSUTCDATETIME())
          AND (locked_by IS NULL OR next_process_at <= SYSUTCDATETIME())
        ORDER BY priority DESC, next_process_at)
    UPDATE dbscheduler_due SET attempt = dbscheduler_due.attempt + 1, …
    OUTPUT inserted.*

``UPDLOCK`` takes update locks that two pickers cannot both hold, ``READPAST`` skips rows
another picker holds instead of waiting for them, ``ROWLOCK`` keeps our locks at row level so
other pickers skip just the rows taken (not whole pages), and ``READCOMMITTEDLOCK`` keeps the
read a locking read where the database has ``READ_COMMITTED_SNAPSHOT`` on (the Azure SQL
default): the documented condition for ``READPAST`` there. The same statement copies the
values it overwrites into the ``prev_*`` columns, which is how the engine learns that a row
belonged to a vanished node. It is one autocommit statement: its locks end with it.

SQL Server holds the update lock on every due row the plan *read*, not only the ``TOP n`` it
took: with a scan and sort (small tables) a concurrent picker may get fewer rows for the
moment, never the same ones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.mssql import DATETIME2, NVARCHAR
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeEngine

from .base import (
    ConnectProblem,
    Dialect,
    PickedRow,
    db_now,
    db_now_plus,
    driver_error,
    fence_conditions,
    insert_if_absent_statement,
    row_dicts,
)
from .common import names_from_text, pick_due, pick_started, picked_columns

PICK_HINTS = "WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)"
"""Table hints of the pick's locking read (see the module docstring)."""

INSERT_GUARD_HINTS = "WITH (UPDLOCK, HOLDLOCK)"
"""Hints of the registration's existence probe: ``HOLDLOCK`` (serializable) keeps a key-range
lock on the absent name until commit, ``UPDLOCK`` makes two probes of the same range queue up
instead of deadlocking; the same protection as ``MERGE … WITH (HOLDLOCK)``."""

FENCE_HINTS = "WITH (HOLDLOCK, ROWLOCK, NOWAIT)"
"""A fenced transaction's final check: a shared row lock kept until the transaction ends,
refused at once (error 1222) when another session holds the row."""

IN_LIST_LIMIT = 1000
"""Longest name list sent as plain ``IN (?, …)``; SQL Server allows 2,100 parameters per
statement, so longer lists travel as one JSON text instead."""

_NATIVE_CODE = re.compile(r"\((\d+)\)")

_PREVIOUS = ("locked_by", "next_process_at", "last_started_at")
"""Columns whose values before the pick are copied to ``prev_<name>``."""


@compiles(db_now, "mssql")
def _now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    # SYSUTCDATETIME() is DATETIME2(7) in UTC and a runtime constant, evaluated when the
    # statement starts; storing it in DATETIME2(6) rounds it to the microsecond.
    return "SYSUTCDATETIME()"


@compiles(db_now_plus, "mssql")
def _now_plus(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    # DATEADD takes an INT: add whole seconds and the microsecond rest separately, so a lease
    # longer than 35 minutes (2**31 microseconds) cannot overflow. The one bound parameter is
    # rendered three times; SQLAlchemy sends its value for each placeholder.
    (seconds,) = element.clauses
    s = compiler.process(seconds, **kw)
    whole = f"CAST(FLOOR({s}) AS INT)"
    rest = f"CAST(ROUND(({s} - FLOOR({s})) * 1000000, 0) AS INT)"
    return f"DATEADD(microsecond, {rest}, DATEADD(second, {whole}, SYSUTCDATETIME()))"


class MSSQLDialect(Dialect):
    name = "mssql"
    returning_update = True

    def timestamp_type(self) -> TypeEngine[Any]:
        return DATETIME2(precision=6)  # type: ignore[no-untyped-call]

    def bind_timestamp(self, utc: datetime) -> Any:
        return utc.replace(tzinfo=None)  # DATETIME2 holds UTC wall time

    def text_type(self) -> TypeEngine[str]:
        # NVARCHAR(max), not the deprecated NTEXT SQLAlchemy picks when it cannot see the server.
        return NVARCHAR(None)

    def name_type(self, length: int) -> TypeEngine[str]:
        return sa.Unicode(length, collation="Latin1_General_100_BIN2")

    def offline_url(self, name: str) -> str:
        return "mssql+pyodbc://"

    insert_guard_hints = INSERT_GUARD_HINTS

    # -- registration --------------------------------------------------------------------
    def insert_if_absent(
        self, conn: Connection, table: sa.Table, values: Mapping[str, Any]
    ) -> None:
        """``INSERT … SELECT … WHERE NOT EXISTS (… WITH (UPDLOCK, HOLDLOCK))``.

        Racing nodes serialise on the key-range lock of the probe: the second one waits for
        the first to commit, then finds the row and inserts nothing. The savepoint is a second
        line of defence (a duplicate that slips through is not an error); any other integrity
        error is re-raised.
        """
        savepoint = conn.begin_nested()
        try:
            conn.execute(insert_if_absent_statement(table, values, INSERT_GUARD_HINTS))
        except sa.exc.IntegrityError:
            savepoint.rollback()
            if not _name_exists(conn, table, values["queue_name"]):
                raise
        else:
            savepoint.commit()

    # -- filters -------------------------------------------------------------------------
    def names_in(self, column: ColumnElement[str], names: Sequence[str]) -> ColumnElement[bool]:
        names = list(names)
        if len(names) <= IN_LIST_LIMIT:
            return column.in_(names)
        # One NVARCHAR(max) parameter, split by OPENJSON (needs database compatibility level
        # ≥ 130, the default of every database created on SQL Server 2016 or later). The
        # values are given the column's binary collation so the comparison stays exact.
        values = sa.text(
            "SELECT value COLLATE Latin1_General_100_BIN2 AS value FROM OPENJSON(:names)"
        ).bindparams(sa.bindparam("names", json.dumps(names), type_=sa.UnicodeText()))
        return column.in_(values.columns(sa.column("value", sa.Unicode())))

    def names_table(self, param: str) -> tuple[sa.FromClause, ColumnElement[str]]:
        # OPENJSON needs database compatibility level >= 130 (see names_in); the binary
        # collation keeps the comparison exact.
        return names_from_text(param, (
            f"SELECT value COLLATE Latin1_General_100_BIN2 AS name FROM OPENJSON(:{param})"))

    # -- the pick ------------------------------------------------------------------------
    def fence_statement(
        self,
        table: sa.Table,
        id_: int,
        token: int,
        node_id: str,
        claim: str | None = None,
        *,
        margin: float | None = None,
        lock: bool = True,
    ) -> sa.Select[Any]:
        # A shared row lock held to the end of the transaction (SQL Server has no FOR SHARE),
        # refused at once rather than waited for (NOWAIT: the check looks again).
        t = table
        stmt = sa.select(t.c.id).where(*fence_conditions(t, id_, token, node_id, claim, margin))
        return stmt.with_hint(t, FENCE_HINTS, "mssql") if lock else stmt

    def fence_lock_refused(self, exc: BaseException) -> bool:
        return 1222 in _odbc_error(exc)[1]  # lock request time out period exceeded

    def is_transient(self, exc: BaseException) -> bool:
        state, codes = _odbc_error(exc)
        return state == "40001" or bool(codes & {1205})  # 1205: chosen as deadlock victim

    def is_missing_table(self, exc: BaseException) -> bool:
        state, codes = _odbc_error(exc)
        return state == "42S02" or 208 in codes  # 208: invalid object name

    def connect_problem(self, exc: BaseException) -> ConnectProblem | None:
        state, codes = _odbc_error(exc)
        if 4060 in codes:
            return ConnectProblem("database", "the server has no such database, or the login "
                                              "may not open it (4060)")
        if 18456 in codes or state == "28000":
            return ConnectProblem("login", "login failed: unknown user or wrong password (18456)")
        if state in ("08001", "08S01", "HYT00"):
            return ConnectProblem("host", "no server answers at that address (SQLSTATE "
                                          f"{state})")
        return None

    def pick(
        self,
        conn: Connection,
        table: sa.Table,
        *,
        where: ColumnElement[bool],
        limit: int,
        lease: timedelta,
        node_id: str,
        claim: str,
        params: Mapping[str, Any],
        ahead: float = 0.0,
    ) -> list[PickedRow]:
        # READPAST skips a row another session holds, whatever its lock: no pick waits.
        where = sa.and_(where, self.handler_condition(table.c.handler))
        stmt = pick_statement(table, where, limit, lease, node_id, claim)
        return row_dicts(conn.execute(stmt, {"p_ahead": float(ahead), **params}))


def pick_statement(
    table: sa.Table,
    where: ColumnElement[bool],
    limit: int,
    lease: timedelta,
    node_id: str,
    claim: str,
) -> sa.Update:
    """The one-statement pick (module docstring); every value is a bound parameter.

    ``TOP`` is rendered by SQLAlchemy from the Python ``int`` ``limit`` (it inlines ``TOP``
    on SQL Server), never from user text.
    """
    t = table
    due = (
        sa.select(t)
        .with_hint(t, PICK_HINTS, "mssql")
        .where(where, pick_due(t))
        .order_by(t.c.priority.desc(), t.c.next_process_at)
        .limit(int(limit))
        .cte("dbscheduler_due")
    )
    # SQL Server evaluates every SET expression on the row as it was: the prev_* copies get
    # the overwritten values whatever their order.
    return (
        sa.update(due)
        .values(
            **{f"prev_{name}": due.c[name] for name in _PREVIOUS},
            claim=claim,
            attempt=due.c.attempt + 1,
            total_attempt=due.c.total_attempt + 1,
            last_started_at=pick_started(due),
            next_process_at=db_now_plus(lease.total_seconds()),
            locked_by=node_id,
            heartbeat_at=db_now(),
            stop_requested=False,
        )
        .returning(*picked_columns(due))
    )


def _name_exists(conn: Connection, table: sa.Table, name: str) -> bool:
    found = conn.execute(sa.select(table.c.id).where(table.c.queue_name == name)).first()
    return found is not None


def _odbc_error(exc: BaseException) -> tuple[str | None, set[int]]:
    """pyodbc's ``(SQLSTATE, message)``, the message carrying native numbers as ``(208)``."""
    args: tuple[Any, ...] = getattr(driver_error(exc), "args", ())
    state = args[0] if args and isinstance(args[0], str) else None
    message = str(args[1]) if len(args) > 1 else ""
    return state, {int(n) for n in _NATIVE_CODE.findall(message)}
