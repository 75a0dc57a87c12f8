"""Oracle ≥ 19 (python-oracledb, thin or thick): the portable one-statement pick.

**The pick** is :class:`~.base.Dialect`'s: one autocommit ``UPDATE … WHERE due AND id IN
(SELECT … ORDER BY priority DESC, next_process_at FETCH FIRST n ROWS ONLY)`` stamping a claim,
then a plain read of the claimed rows. No lock outlives the statement (a ``FOR UPDATE`` cursor
would hold its locks until the commit, across the round trips of the fetch and the update). Two
pickers that chose the same row queue on its row lock for one statement; Oracle then
re-evaluates the ``WHERE`` on the changed row (write consistency: the statement restarts) and
skips it.

**Timestamps** are ``TIMESTAMP WITH TIME ZONE`` holding UTC at offset ``+00:00``:

* python-oracledb returns such a value as a naive datetime of its *own* offset's wall clock,
  so every value we write must carry ``+00:00``; a named region (``'UTC'``) is not even
  readable in thin mode (``DPY-3022``). The clock is therefore
  ``FROM_TZ(CAST(SYS_EXTRACT_UTC(SYSTIMESTAMP) AS TIMESTAMP), '+00:00')``.
* a datetime bound with the driver's default type (``TIMESTAMP``) loses its offset and is
  converted by the server with the *session* time zone, which thin mode takes from the node's
  local zone. :meth:`OracleDialect.configure_engine` binds our timestamps as
  ``TIMESTAMP WITH TIME ZONE`` instead (python-oracledb sends the date and time with offset
  ``+00:00``; ours are already UTC), which also gives
  ``CASE … THEN :ts ELSE next_process_at END`` one data type.

**Text.** ``payload`` is a ``CLOB``; its parameters are bound as ``CLOB`` too (see
:func:`_bind_types`), so they can meet the column in an expression.

**Flags** are ``INTEGER`` 0/1 (no ``BOOLEAN`` before 23ai):
:class:`~dbscheduler.dialects.types.Flag` binds them as numbers, and comparisons are
``paused = :param``, never a boolean literal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.oracle import TIMESTAMP as ORA_TIMESTAMP
from sqlalchemy.engine import Connection, Engine, ExecutionContext
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter, ColumnElement
from sqlalchemy.types import TypeEngine

from .base import (
    ConnectKind,
    ConnectProblem,
    Dialect,
    db_now,
    db_now_plus,
    driver_error,
    fence_conditions,
    insert_if_absent_statement,
)
from .common import names_from_text
from .types import UTCDateTime

NOW_SQL = "FROM_TZ(CAST(SYS_EXTRACT_UTC(SYSTIMESTAMP) AS TIMESTAMP), '+00:00')"
"""The database clock in UTC, at the numeric offset python-oracledb thin mode can read."""

IN_LIST_LIMIT = 1000
"""Oracle allows at most 1,000 expressions in one ``IN`` list (ORA-01795)."""

TRANSIENT_CODES = frozenset({"ORA-00060", "ORA-08177"})
"""Deadlock detected; cannot serialize access."""
MISSING_TABLE = "ORA-00942"
_CONNECT_CODES: dict[str, tuple[ConnectKind, str]] = {
    "ORA-01017": ("login", "unknown user or wrong password"),
    "ORA-12514": ("database", "the listener does not know this service name"),
    "ORA-12505": ("database", "the listener does not know this SID"),
    "DPY-6001": ("database", "the listener does not know this service name"),
    "ORA-12541": ("host", "no listener at that address"),
    "ORA-12170": ("host", "connection timed out"),
    "DPY-6005": ("host", "cannot connect to the server"),
    "ORA-01033": ("starting", "the database is starting or stopping"),
    "ORA-01034": ("starting", "the database is not available"),
}
"""python-oracledb error codes of a connection that could not be opened."""



@compiles(db_now, "oracle")
def _now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return NOW_SQL


@compiles(db_now_plus, "oracle")
def _now_plus(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    # TIMESTAMP WITH TIME ZONE + INTERVAL DAY TO SECOND keeps the +00:00 offset.
    (seconds,) = element.clauses
    return f"({NOW_SQL} + NUMTODSINTERVAL({compiler.process(seconds, **kw)}, 'SECOND'))"


def _bind_types(
    inputsizes: dict[BindParameter[Any], Any],
    cursor: Any,
    statement: str,
    parameters: Any,
    context: ExecutionContext,
) -> None:
    """``do_setinputsizes``: bind timestamps as TIMESTAMP WITH TIME ZONE, text as CLOB.

    * :class:`UTCDateTime` values: see the module docstring.
    * ``CLOB`` parameters (the ``payload``): SQLAlchemy sends them as ``NVARCHAR``, which Oracle
      refuses next to the ``CLOB`` column in ``CASE … THEN :payload ELSE payload END``
      (ORA-00932), and which travels as ``LONG`` beyond 32,767 bytes, allowed in no expression
      (ORA-01461). Bound as ``CLOB`` they work everywhere, at the cost of a temporary LOB each.
    """
    dbapi = context.dialect.dbapi
    tstz = getattr(dbapi, "DB_TYPE_TIMESTAMP_TZ", None)
    nchar = bool(getattr(context.dialect, "_use_nchar_for_unicode", False))
    for bind in inputsizes:
        if isinstance(bind.type, UTCDateTime):
            if tstz is not None:
                inputsizes[bind] = tstz
        elif isinstance(bind.type, sa.Text):
            national = nchar and isinstance(bind.type, sa.UnicodeText)  # NCLOB columns
            lob = getattr(dbapi, "DB_TYPE_NCLOB" if national else "DB_TYPE_CLOB", None)
            if lob is not None:
                inputsizes[bind] = lob


class OracleDialect(Dialect):
    name = "oracle"

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
        # Oracle has no shared row lock: FOR UPDATE holds the row until the transaction ends;
        # NOWAIT refuses it at once (ORA-00054) where another session holds it, and the check
        # looks again.
        t = table
        stmt = sa.select(t.c.id).where(*fence_conditions(t, id_, token, node_id, claim, margin))
        return stmt.with_for_update(nowait=True) if lock else stmt

    def fence_lock_refused(self, exc: BaseException) -> bool:
        return _oracle_code(exc) == "ORA-00054"  # resource busy, NOWAIT specified

    def timestamp_type(self) -> TypeEngine[Any]:
        return ORA_TIMESTAMP(timezone=True)

    def flag_type(self) -> TypeEngine[Any]:
        return sa.SmallInteger()  # no BOOLEAN columns before 23ai

    def bind_flag(self, value: bool) -> Any:
        return int(value)

    def offline_url(self, name: str) -> str:
        return "oracle+oracledb://"

    def finish_offline_sql(self, sql: str) -> str:
        # Oracle has no transactional DDL, but the version row's INSERT needs a commit.
        return super().finish_offline_sql(sql) + "COMMIT\n\n/\n\n"

    def is_transient(self, exc: BaseException) -> bool:
        return _oracle_code(exc) in TRANSIENT_CODES

    def is_missing_table(self, exc: BaseException) -> bool:
        return _oracle_code(exc) == MISSING_TABLE

    def connect_problem(self, exc: BaseException) -> ConnectProblem | None:
        code = _oracle_code(exc)
        if code not in _CONNECT_CODES:
            return None
        kind, text = _CONNECT_CODES[code]
        return ConnectProblem(kind, f"{text} ({code})")

    # -- engine set-up -------------------------------------------------------------------
    def configure_engine(self, engine: Engine) -> None:
        """Bind timestamps and text as the columns need.

        On an application's own engine, its statements are affected only in that their
        ``CLOB`` (``Text``) parameters are bound as ``CLOB``, as SQLAlchemy 1.x did; the
        timestamp rule applies to dbscheduler's columns only.
        Calling this twice adds nothing.
        """
        if not event.contains(engine, "do_setinputsizes", _bind_types):
            event.listen(engine, "do_setinputsizes", _bind_types)

    # -- registration --------------------------------------------------------------------
    def insert_if_absent(
        self, conn: Connection, table: sa.Table, values: Mapping[str, Any]
    ) -> None:
        """``INSERT … SELECT … FROM DUAL WHERE NOT EXISTS``, and ORA-00001 means "present".

        Oracle does not lock an absent key, so two nodes can both find the name missing; the
        second insert then waits on the first one's uncommitted index entry and fails with
        ORA-00001 once it commits (``MERGE`` behaves the same). That failure is rolled back to
        a savepoint and ignored, after checking that the row really is there (any other
        integrity error is re-raised). The common case, a name already present, costs no
        error and no identity value.
        """
        savepoint = conn.begin_nested()
        try:
            conn.execute(insert_if_absent_statement(table, values))
        except sa.exc.IntegrityError:
            savepoint.rollback()
            found = conn.execute(
                sa.select(table.c.id).where(table.c.queue_name == values["queue_name"])
            ).first()
            if found is None:
                raise
        else:
            savepoint.commit()

    # -- filters -------------------------------------------------------------------------
    def names_table(self, param: str) -> tuple[sa.FromClause, ColumnElement[str]]:
        # The JSON bound as a CLOB: sixty-four names of 255 characters pass VARCHAR2's 4,000
        # bytes.
        return names_from_text(param, (
            f"SELECT name FROM JSON_TABLE(:{param}, '$[*]' COLUMNS (name VARCHAR2(1020 CHAR) "
            "PATH '$')) jt"))

    def names_in(self, column: ColumnElement[str], names: Sequence[str]) -> ColumnElement[bool]:
        names = list(names)
        chunks = [names[i : i + IN_LIST_LIMIT] for i in range(0, len(names), IN_LIST_LIMIT)]
        if len(chunks) <= 1:
            return column.in_(names)
        return sa.or_(*(column.in_(chunk) for chunk in chunks))


def _oracle_code(exc: BaseException) -> str | None:
    """``ORA-00942`` / ``DPY-6005``: python-oracledb's ``full_code`` of the error object."""
    args: tuple[Any, ...] = getattr(driver_error(exc), "args", ())
    code = getattr(args[0], "full_code", None) if args else None
    if isinstance(code, str):
        return code
    found = re.match(r"((?:ORA|DPY)-\d+)", str(driver_error(exc)))
    return found.group(1) if found else None
