"""Oracle ≥ 19 (oracledb thin mode): a ``FOR UPDATE SKIP LOCKED`` cursor, then update by id.

Oracle rejects ``FETCH FIRST`` together with ``FOR UPDATE``; with ``SKIP LOCKED`` a row is
locked only when it is fetched, so the pick fetches just as many rows as it wants.
Timestamps are ``TIMESTAMP WITH TIME ZONE`` in UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement

from .base import Dialect, db_now, db_now_plus

_NOW = "FROM_TZ(CAST(SYS_EXTRACT_UTC(SYSTIMESTAMP) AS TIMESTAMP), 'UTC')"
_IN_LIST_LIMIT = 1000  # ORA-01795


@compiles(db_now, "oracle")
def _now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return _NOW


@compiles(db_now_plus, "oracle")
def _now_plus(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    (seconds,) = element.clauses
    return f"({_NOW} + NUMTODSINTERVAL({compiler.process(seconds, **kw)}, 'SECOND'))"


class OracleDialect(Dialect):
    name = "oracle"

    def names_in(self, column: ColumnElement[str], names: Sequence[str]) -> ColumnElement[bool]:
        names = list(names)
        chunks = [names[i : i + _IN_LIST_LIMIT] for i in range(0, len(names), _IN_LIST_LIMIT)]
        if len(chunks) <= 1:
            return column.in_(names)
        return sa.or_(*(column.in_(chunk) for chunk in chunks))

    def select_due_for_update(
        self, conn: Connection, table: sa.Table, *, where: ColumnElement[bool], limit: int
    ) -> list[dict[str, Any]]:
        stmt = (
            sa.select(table, db_now().label("db_now"))
            .where(where, table.c.next_process_at <= db_now())
            .order_by(table.c.next_process_at)
            .with_for_update(skip_locked=True)
        )
        result = conn.execute(stmt)
        try:
            return [dict(r) for r in result.mappings().fetchmany(limit)]
        finally:
            result.close()
