"""Oracle ≥ 19 (python-oracledb, thin or thick): ``FOR UPDATE SKIP LOCKED`` cursor, then update.

**The pick.** Oracle rejects ``FETCH FIRST`` together with ``FOR UPDATE`` (ORA-02014), and a
``ROWNUM`` limit in the same query block applies before ``ORDER BY``. With ``SKIP LOCKED``,
Oracle locks a row only when it is *fetched*, skipping rows another session holds and rows
changed since the cursor opened, so the pick opens the ordered cursor and fetches just
``limit`` rows. The driver's fetch buffer is sized to ``limit`` for that one cursor
(``arraysize`` and ``prefetchrows``), otherwise it would fetch, and lock, up to 100 rows ahead.
The update by id then runs in the same transaction (the portable pick of
:class:`~.base.Dialect`).

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

**Flags** are ``INTEGER`` 0/1 (no ``BOOLEAN`` before 23ai): :class:`~dbscheduler.table.Flag`
binds them as numbers, and comparisons are ``paused = :param``, never a boolean literal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, ExecutionContext
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter, ColumnElement

from ..table import UTCDateTime
from .base import Dialect, PickedRow, db_now, db_now_plus
from .mssql import insert_if_absent_statement

NOW_SQL = "FROM_TZ(CAST(SYS_EXTRACT_UTC(SYSTIMESTAMP) AS TIMESTAMP), '+00:00')"
"""The database clock in UTC, at the numeric offset python-oracledb thin mode can read."""

IN_LIST_LIMIT = 1000
"""Oracle allows at most 1,000 expressions in one ``IN`` list (ORA-01795)."""

FETCH_ROWS_OPTION = "dbscheduler_fetch_rows"
"""Execution option: size the driver's fetch buffer of this one statement to N rows."""


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


def _size_fetch_buffer(
    conn: Connection,
    cursor: Any,
    statement: str,
    parameters: Any,
    context: ExecutionContext | None,
    executemany: bool,
) -> None:
    """``before_cursor_execute``: honour :data:`FETCH_ROWS_OPTION` on this statement's cursor."""
    rows = context.execution_options.get(FETCH_ROWS_OPTION) if context is not None else None
    if rows:
        # Rows are locked as the driver fetches them: fetch no more than we will take.
        cursor.arraysize = rows
        if hasattr(cursor, "prefetchrows"):
            cursor.prefetchrows = rows


class OracleDialect(Dialect):
    name = "oracle"

    # -- engine set-up -------------------------------------------------------------------
    def configure_engine(self, engine: Engine) -> None:
        """Bind timestamps and text as the columns need; size the pick's fetch buffer.

        On an application's own engine, its statements are affected only in that their
        ``CLOB`` (``Text``) parameters are bound as ``CLOB``, as SQLAlchemy 1.x did; the
        timestamp rule and the fetch size apply to dbscheduler's columns and statements only.
        Calling this twice adds nothing.
        """
        if not event.contains(engine, "do_setinputsizes", _bind_types):
            event.listen(engine, "do_setinputsizes", _bind_types)
        if not event.contains(engine, "before_cursor_execute", _size_fetch_buffer):
            event.listen(engine, "before_cursor_execute", _size_fetch_buffer)

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
    def names_in(self, column: ColumnElement[str], names: Sequence[str]) -> ColumnElement[bool]:
        names = list(names)
        chunks = [names[i : i + IN_LIST_LIMIT] for i in range(0, len(names), IN_LIST_LIMIT)]
        if len(chunks) <= 1:
            return column.in_(names)
        return sa.or_(*(column.in_(chunk) for chunk in chunks))

    # -- the pick ------------------------------------------------------------------------
    def pick(
        self,
        conn: Connection,
        table: sa.Table,
        *,
        where: ColumnElement[bool],
        limit: int,
        lease: timedelta,
        node_id: str,
    ) -> list[PickedRow]:
        # The update is `id IN (…picked ids)`: keep it within one IN list. A node with more
        # free workers picks again at once (the poller re-polls after a non-empty pick).
        return super().pick(
            conn,
            table,
            where=where,
            limit=min(limit, IN_LIST_LIMIT),
            lease=lease,
            node_id=node_id,
        )

    def select_due_for_update(
        self, conn: Connection, table: sa.Table, *, where: ColumnElement[bool], limit: int
    ) -> list[dict[str, Any]]:
        result = conn.execute(
            due_for_update_statement(table, where).execution_options(
                **{FETCH_ROWS_OPTION: int(limit)}
            )
        )
        try:
            return [dict(r) for r in result.mappings().fetchmany(limit)]
        finally:
            result.close()


def due_for_update_statement(table: sa.Table, where: ColumnElement[bool]) -> sa.Select[Any]:
    """Due rows, oldest first, ``FOR UPDATE SKIP LOCKED``, with no row limit in the SQL."""
    return (
        sa.select(table, db_now().label("db_now"))
        .where(where, table.c.next_process_at <= db_now())
        .order_by(table.c.next_process_at)
        .with_for_update(skip_locked=True)
    )
