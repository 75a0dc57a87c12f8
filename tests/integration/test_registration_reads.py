"""Registration reads the rows of the tasks it registers, not the table.

A node registers its declared tasks at every start. Beside a backlog of one-off jobs (a
hundred thousand rows is a production shape) a registration that read every row to find its
own few cost a third of a second per start and grew with the backlog. Here the statements a
registration sends are counted with the rows each returned, on a table holding many other
rows.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import Client
from dbscheduler._store import Registration, Store
from dbscheduler.dialects import create_engine

OTHERS = 2_000


def test_registration_reads_only_the_rows_it_registers(migrated: tuple[str, str],
                                                        backend: str) -> None:
    if backend not in ("postgresql", "mysql"):
        pytest.skip("rows returned are counted where the driver reports them for a SELECT")
    url, table = migrated
    later = datetime.now(timezone.utc) + timedelta(days=1)
    with Client(url, table=table) as client:
        client.schedule_once_many((f"job-{i}", "mail", later) for i in range(OTHERS))
    store = Store(create_engine(url, lease=timedelta(seconds=30)), table)
    read: list[tuple[str, int]] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and f"{table}.queue_name" in statement:
            read.append((statement, cursor.rowcount))

    sa.event.listen(store.engine, "after_cursor_execute", seen)
    try:
        def item(name: str) -> Registration:
            return Registration(name, "every 60s", lambda now: now)

        store.register([item("a"), item("b")])  # both new: read, insert, read back
        fetched = sum(max(rows, 0) for _, rows in read)
        assert fetched <= 2, read  # the two new rows, once inserted
        read.clear()
        store.register([item("a"), item("b"), item("c")])  # two present, one new
        fetched = sum(max(rows, 0) for _, rows in read)
        assert fetched <= 2 + 1, read  # the two present, then the new one
    finally:
        sa.event.remove(store.engine, "after_cursor_execute", seen)
        store.engine.dispose()
    with Client(url, table=table) as client:
        assert {client.info(n).schedule for n in "abc"} == {"every 60s"}
        assert client.count_tasks() == OTHERS + 3
