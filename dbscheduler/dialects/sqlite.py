"""SQLite (the embedded default): ``BEGIN IMMEDIATE`` serialises writers across processes.

SQLite has no row locks, so the pick takes the database's write lock for its short
transaction; WAL mode lets readers go on meanwhile. Timestamps are ISO text in UTC (see
:mod:`dbscheduler.table`), which compares correctly as text against ``strftime`` output.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement

from .base import Dialect, db_now, db_now_plus

# strftime's %f gives milliseconds ("SS.SSS"); three zeros make the stored microsecond form.
_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'"

BUSY_TIMEOUT_MS = 30_000


@compiles(db_now, "sqlite")
def _now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return f"({_NOW})"


@compiles(db_now_plus, "sqlite")
def _now_plus(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    (seconds,) = element.clauses
    modifier = f"printf('%+.6f seconds', {compiler.process(seconds, **kw)})"
    return f"(strftime('%Y-%m-%d %H:%M:%f', 'now', {modifier}) || '000')"


class SQLiteDialect(Dialect):
    name = "sqlite"
    # Reads take a deferred transaction: they must not queue behind other nodes' write lock.
    read_options: ClassVar[dict[str, Any]] = {"dbscheduler_read": True}

    def configure_engine(self, engine: Engine) -> None:
        # pysqlite's own transaction handling begins lazily and never IMMEDIATE; take it over
        # so every transaction holds the write lock from its first statement and two nodes
        # can never both read a row as due.
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: sqlite3.Connection, record: Any) -> None:
            dbapi_conn.isolation_level = None
            cursor = dbapi_conn.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            read = conn.get_execution_options().get("dbscheduler_read")
            conn.exec_driver_sql("BEGIN" if read else "BEGIN IMMEDIATE")

    def insert_if_absent(
        self, conn: Connection, table: sa.Table, values: Mapping[str, Any]
    ) -> None:
        stmt = sqlite_insert(table).values(**values).on_conflict_do_nothing(
            index_elements=["queue_name"]
        )
        conn.execute(stmt)

    def insert_many_if_absent(
        self, conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        stmt = sqlite_insert(table).on_conflict_do_nothing(index_elements=["queue_name"])
        conn.execute(stmt, list(rows))

    def names_in(self, column: ColumnElement[str], names: Sequence[str]) -> ColumnElement[bool]:
        each = sa.func.json_each(sa.literal(json.dumps(list(names)))).table_valued("value")
        return column.in_(sa.select(each.c.value))
