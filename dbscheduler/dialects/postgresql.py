"""PostgreSQL: the whole pick is one ``UPDATE … RETURNING`` statement, and ``NOTIFY`` wakes nodes.

The pick locks due rows with ``FOR UPDATE SKIP LOCKED`` in a CTE that also remembers what the
rows looked like before (who held them, when they were due), so a single round trip both takes
the rows and tells the engine which ones belonged to a vanished node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.util import ClauseAdapter

from .base import Dialect, PickedRow, db_now, db_now_plus


@compiles(db_now, "postgresql")
def _now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    # statement_timestamp(), not now(): now() is frozen at transaction start.
    return "statement_timestamp()"


@compiles(db_now_plus, "postgresql")
def _now_plus(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    (seconds,) = element.clauses
    return f"(statement_timestamp() + make_interval(secs => {compiler.process(seconds, **kw)}))"


class PostgreSQLDialect(Dialect):
    name = "postgresql"
    supports_notify = True
    single_statement_pick = True

    def insert_if_absent(
        self, conn: Connection, table: sa.Table, values: Mapping[str, Any]
    ) -> None:
        stmt = pg_insert(table).values(**values).on_conflict_do_nothing(
            index_elements=["queue_name"]
        )
        conn.execute(stmt)

    def insert_many_if_absent(
        self, conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        stmt = pg_insert(table).on_conflict_do_nothing(index_elements=["queue_name"])
        conn.execute(stmt, list(rows))

    def names_in(self, column: ColumnElement[str], names: Sequence[str]) -> ColumnElement[bool]:
        # One array parameter instead of thousands of IN placeholders.
        return column == sa.any_(sa.literal(list(names), ARRAY(sa.Unicode())))

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
        t = table
        later = t.alias("later")
        due = (
            sa.select(
                t.c.id,
                t.c.locked_by.label("prev_locked_by"),
                t.c.next_process_at.label("prev_next_process_at"),
                t.c.last_started_at.label("prev_last_started_at"),
            )
            .where(where, t.c.next_process_at <= db_now())
            .order_by(t.c.next_process_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
            .cte("due")
        )
        stmt = (
            sa.update(t)
            .where(t.c.id == due.c.id)
            .values(
                attempt=t.c.attempt + 1,
                total_attempt=t.c.total_attempt + 1,
                next_process_at=db_now_plus(lease.total_seconds()),
                locked_by=node_id,
                heartbeat_at=db_now(),
                last_started_at=db_now(),
                stop_requested=False,
            )
            .returning(
                *t.c,
                due.c.prev_locked_by,
                due.c.prev_next_process_at,
                due.c.prev_last_started_at,
                # The statement's snapshot still shows picked rows at their old (past) due
                # times, so "> now" leaves exactly the rows due later: the poller's next
                # wake-up, without another round trip.
                sa.select(sa.func.min(later.c.next_process_at))
                .where(ClauseAdapter(later).traverse(where), later.c.next_process_at > db_now())
                .scalar_subquery()
                .label("next_due"),
            )
        )
        return [dict(r) for r in conn.execute(stmt).mappings()]

    def notify(self, conn: Connection, channel: str, payload: str) -> None:
        conn.execute(sa.select(sa.func.pg_notify(channel, payload)))
