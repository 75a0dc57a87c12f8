"""SQLite ≥ 3.35 (the embedded default): every engine write is one autocommit statement.

SQLite has no row locks: each statement takes the database's write lock for its own length
(the pick is one ``UPDATE … RETURNING`` that copies what it overwrites to ``prev_*``: SQLite
evaluates every ``SET`` expression on the old row). Multi-statement transactions (registration,
operations) take the write lock at ``BEGIN IMMEDIATE``; WAL mode lets readers go on meanwhile.
A process frozen inside a statement or such a transaction blocks other writers on the machine
until it resumes or dies: SQLite is for one machine. Timestamps are ISO text in UTC (see
:mod:`dbscheduler.table`), which compares correctly as text against ``strftime`` output.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeEngine

from ..logfields import engine_log
from .base import ConnectProblem, Dialect, db_now, db_now_plus, driver_error, fence_conditions
from .finishing import Finishing, JoinedChunks
from .types import as_utc

_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})

log = engine_log("dbscheduler.dialects.sqlite")

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


def _enable_wal(cursor: sqlite3.Cursor) -> None:
    """Switch the file to WAL, waiting up to the busy timeout for other connections.

    Changing the journal mode needs the file to itself, and SQLite answers "database is
    locked" at once, without its busy handler, when another connection opens or switches it
    at the same moment (several nodes starting together). Once the file is in WAL mode the
    pragma is a no-op.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = (getattr(exc, "sqlite_errorcode", sqlite3.SQLITE_BUSY) & 0xFF) in _BUSY_CODES
            if not busy or time.monotonic() >= deadline:
                raise
            log.debug("journal_mode = WAL: %s; retrying", exc)
        time.sleep(pause + random.uniform(0, pause))  # jitter: openers must not collide again
        pause = min(pause * 2, 0.1)


class SQLiteDialect(Dialect):
    name = "sqlite"
    insert_needs_transaction = False
    returning_update = True
    batch_window = 0.01
    """Measured with a load spread over time (3,000 executions/s at their own phases): the
    node's CPU per execution 7–22 % lower (SQLite's work is the node's), start lag p50 at
    1,000 tasks × 1/s 1.5–1.6 ms against 2.6–3.4."""
    embedded = True
    # Reads take a deferred transaction: they must not queue behind other nodes' write lock.
    read_options: ClassVar[dict[str, Any]] = {"dbscheduler_read": True}
    # The connections are in the driver's autocommit mode (isolation_level None); skipping
    # the BEGIN leaves every statement its own transaction.
    autocommit_options: ClassVar[dict[str, Any]] = {"dbscheduler_autocommit": True}

    def finishing(self) -> Finishing:
        # The joined batch finish: every autocommit statement is a commit, which costs SQLite
        # more than the statement (one node: 3,900 → 6,500 executions/s). SQLite has one
        # writer, and a pick waits for the whole statement in progress: with 256 rows per
        # statement the benchmark's bursts were 20-30 % slower than with 32.
        return JoinedChunks(32)

    def configure_engine(self, engine: Engine) -> None:
        # pysqlite's own transaction handling begins lazily and never IMMEDIATE; take it over
        # so every transaction holds the write lock from its first statement and two nodes
        # can never both read a row as due.
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: sqlite3.Connection, record: Any) -> None:
            dbapi_conn.isolation_level = None
            cursor = dbapi_conn.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            _enable_wal(cursor)
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            options = conn.get_execution_options()
            if options.get("dbscheduler_autocommit"):
                return
            conn.exec_driver_sql("BEGIN" if options.get("dbscheduler_read") else "BEGIN IMMEDIATE")

    # -- column types --------------------------------------------------------------------
    def timestamp_type(self) -> TypeEngine[Any]:
        # ISO text in UTC: it sorts and compares as text against strftime's clock.
        return sa.String(26)

    def bind_timestamp(self, utc: datetime) -> Any:
        return utc.strftime("%Y-%m-%d %H:%M:%S.%f")

    def id_type(self) -> TypeEngine[int]:
        return sa.Integer()  # only INTEGER PRIMARY KEY is the rowid (AUTOINCREMENT)

    def table_options(self) -> dict[str, Any]:
        return {"sqlite_autoincrement": True}

    def insert_if_absent(
        self, conn: Connection, table: sa.Table, values: Mapping[str, Any]
    ) -> None:
        stmt = sqlite_insert(table).values(**values).on_conflict_do_nothing(
            index_elements=["queue_name"]
        )
        conn.execute(stmt)

    def upsert_statement(
        self,
        table: sa.Table,
        row: Mapping[str, Any],
        on_existing: Sequence[tuple[sa.Column[Any], Any]],
    ) -> sa.Executable | None:
        return sqlite_insert(table).values(**row).on_conflict_do_update(
            index_elements=["queue_name"], set_={c.name: v for c, v in on_existing})

    def upsert_many(
        self,
        conn: Connection,
        table: sa.Table,
        rows: Sequence[Mapping[str, Any]],
        on_existing: Callable[[Callable[[str], Any]], Sequence[tuple[sa.Column[Any], Any]]],
    ) -> None:
        # One INSERT … SELECT FROM json_each(<the rows as one JSON parameter>) ON CONFLICT
        # DO UPDATE: the same text for any number of rows, compiled once. A multi-row VALUES
        # is compiled again for every batch (0.8 s of CPU for 500 rows), and an executemany
        # in autocommit mode commits each row on its own.
        if not rows:
            return
        names = list(rows[0])
        # Built each time, compiled once: SQLAlchemy's cache knows the shape.
        stmt = self._upsert_many(table, names, on_existing)
        conn.execute(stmt, {"u_rows": json.dumps(
            [[self._json_value(r[n]) for n in names] for r in rows])})

    def _upsert_many(
        self, table: sa.Table, names: list[str],
        on_existing: Callable[[Callable[[str], Any]], Sequence[tuple[sa.Column[Any], Any]]],
    ) -> Any:
        each = sa.func.json_each(sa.bindparam("u_rows", type_=sa.UnicodeText())).table_valued(
            "value")
        values = [sa.func.json_extract(each.c.value, sa.literal_column(f"'$[{i}]'"))
                  for i in range(len(names))]
        # WHERE true: without it SQLite reads the ON of ON CONFLICT as a join's.
        insert = sqlite_insert(table).from_select(names, sa.select(*values).where(sa.true()))
        return insert.on_conflict_do_update(
            index_elements=["queue_name"],
            set_={c.name: v for c, v in on_existing(lambda n: insert.excluded[n])})

    def insert_rows(
        self, conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]],
        now: Sequence[str] = (),
    ) -> None:
        # INSERT … SELECT FROM json_each: one statement; an executemany in autocommit mode
        # commits each row on its own.
        if not rows:
            return
        names = list(rows[0])
        each = sa.func.json_each(sa.bindparam("r_rows", type_=sa.UnicodeText())).table_valued(
            "value")
        values = [sa.func.json_extract(each.c.value, sa.literal_column(f"'$[{i}]'"))
                  for i in range(len(names))]
        stmt = sa.insert(table).from_select(
            [*names, *now], sa.select(*values, *(db_now() for _ in now)))
        conn.execute(stmt, {"r_rows": json.dumps(
            [[self._json_value(r[n]) for n in names] for r in rows])})

    def _json_value(self, value: Any) -> Any:
        if isinstance(value, datetime):
            return self.bind_timestamp(as_utc(value))
        if isinstance(value, bool):
            return int(value)
        return value

    def insert_many_if_absent(
        self, conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]
    ) -> set[str]:
        stmt = sqlite_insert(table).on_conflict_do_nothing(index_elements=["queue_name"])
        # With RETURNING, SQLAlchemy sends the rows as multi-row INSERTs, about 2,000 per
        # statement; a plain executemany in autocommit mode commits each row on its own
        # (10,000 new tasks: 0.21 s instead of 0.53 s).
        return set(conn.execute(stmt.returning(table.c.queue_name), list(rows)).scalars())

    def hold_fence(
        self,
        conn: Connection,
        table: sa.Table,
        id_: int,
        token: int,
        node_id: str,
        claim: str | None = None,
        *,
        margin: float | None = None,
        lock: bool = True,
    ) -> bool:
        if not lock:
            return super().hold_fence(conn, table, id_, token, node_id, claim, margin=margin,
                                      lock=False)
        # SQLite has no row locks: a write takes the database's write lock, held until the
        # transaction ends. A write that changes nothing does exactly that.
        t = table
        found = conn.execute(
            sa.update(t)
            .where(*fence_conditions(t, id_, token, node_id, claim, margin))
            .values(id=t.c.id)
        ).rowcount
        return bool(found)

    def names_in(self, column: ColumnElement[str], names: Sequence[str]) -> ColumnElement[bool]:
        each = sa.func.json_each(sa.literal(json.dumps(list(names)))).table_valued("value")
        return column.in_(sa.select(each.c.value))

    def names_table(self, param: str) -> tuple[sa.FromClause, ColumnElement[str]]:
        each = (sa.func.json_each(sa.bindparam(param, type_=sa.UnicodeText()))
                .table_valued("value").alias(f"{param}_h"))
        return each, each.c.value

    def is_transient(self, exc: BaseException) -> bool:
        orig = driver_error(exc)
        if not isinstance(orig, sqlite3.Error):
            return False
        code = getattr(orig, "sqlite_errorcode", None)
        if code is not None:
            return (code & 0xFF) in _BUSY_CODES  # extended codes keep the primary in the low byte
        return str(orig).startswith(("database is locked", "database table is locked"))

    def is_missing_table(self, exc: BaseException) -> bool:
        orig = driver_error(exc)
        return isinstance(orig, sqlite3.OperationalError) and str(orig).startswith(
            "no such table"
        )

    def connect_problem(self, exc: BaseException) -> ConnectProblem | None:
        orig = driver_error(exc)
        if isinstance(orig, sqlite3.Error) and getattr(orig, "sqlite_errorcode", None) == (
            sqlite3.SQLITE_CANTOPEN
        ):
            return ConnectProblem(
                "database",
                "cannot open the SQLite file: its directory must exist and be writable",
            )
        return None
