"""MySQL ≥ 8 and MariaDB ≥ 10.6: ``SELECT … FOR UPDATE SKIP LOCKED`` then ``UPDATE`` by id.

Neither server has ``UPDATE … RETURNING`` (MariaDB only on ``INSERT``/``DELETE``), so the
portable two-statement pick of :class:`~dbscheduler.dialects.base.Dialect` is used as is.
Timestamps are ``DATETIME(6)`` holding UTC, compared against ``UTC_TIMESTAMP(6)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler

from .base import Dialect, db_now, db_now_plus


@compiles(db_now, "mysql")
@compiles(db_now, "mariadb")
def _now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "UTC_TIMESTAMP(6)"


@compiles(db_now_plus, "mysql")
@compiles(db_now_plus, "mariadb")
def _now_plus(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    (seconds,) = element.clauses
    micros = f"CAST(ROUND({compiler.process(seconds, **kw)} * 1000000) AS SIGNED)"
    return f"TIMESTAMPADD(MICROSECOND, {micros}, UTC_TIMESTAMP(6))"


class MySQLDialect(Dialect):
    name = "mysql"

    def insert_if_absent(
        self, conn: Connection, table: sa.Table, values: Mapping[str, Any]
    ) -> None:
        # ON DUPLICATE KEY UPDATE id = id, not INSERT IGNORE: IGNORE would also swallow real
        # errors (truncation, bad values) as warnings.
        stmt = mysql_insert(table).values(**values)
        conn.execute(stmt.on_duplicate_key_update(id=table.c.id))

    def insert_many_if_absent(
        self, conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        stmt = mysql_insert(table).on_duplicate_key_update(id=table.c.id)
        conn.execute(stmt, list(rows))
