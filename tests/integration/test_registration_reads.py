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


MANY = 2_500


def test_many_new_tasks_go_in_a_few_statements_with_every_value(migrated: tuple[str, str],
                                                                backend: str) -> None:
    """A node declaring thousands of tasks inserts them in a few calls to the driver, a
    thousand rows at most each, and every column arrives as given: names with quotes and
    accents, schedules, options, controls, limits, due times to the microsecond. (On
    MySQL/MariaDB the rows travel as one JSON text per statement, which the server unpacks.)"""
    url, table = migrated
    store = Store(create_engine(url, lease=timedelta(seconds=30)), table)
    inserts: list[int] = []

    def seen(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
             executemany: bool) -> None:
        if statement.lstrip().upper().startswith("INSERT"):
            inserts.append(len(parameters) if executemany else 1)

    base = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc)

    def item(i: int) -> Registration:
        due = base + timedelta(seconds=i, microseconds=i)
        return Registration(
            f"task-{i:05d}-é'\"", f"every {i + 1}s", lambda now, due=due: due,
            options=None if i % 3 else f'{{"timeout": {i}}}', priority=i % 7 - 3,
            group=None if i % 2 else f"g{i % 5}", requires=None if i % 4 else "tag",
            alert_after=None if i % 5 else i / 4,
        )

    items = [item(i) for i in range(MANY)]
    sa.event.listen(store.engine, "before_cursor_execute", seen)
    try:
        store.register(items)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", seen)
    # Calls to the driver: one executemany is one call, whatever the driver makes of it.
    assert len(inserts) <= -(-MANY // 1000), inserts
    t = store.table
    with store.engine.connect() as conn:
        rows = {r.queue_name: r for r in conn.execute(sa.select(
            t.c.queue_name, t.c.handler, t.c.schedule, t.c.options, t.c.priority,
            t.c.task_group, t.c.requires, t.c.alert_after, t.c.next_process_at, t.c.paused,
            t.c.total_attempt))}
    store.engine.dispose()
    assert len(rows) == MANY
    for i, it in enumerate(items):
        row = rows[it.name]
        got = row.next_process_at
        got = got if got.tzinfo else got.replace(tzinfo=timezone.utc)
        assert (row.handler, row.schedule, row.options, row.priority, row.task_group,
                row.requires, row.alert_after, got, bool(row.paused), row.total_attempt) == (
            it.name, it.schedule, it.options, it.priority, it.group, it.requires,
            it.alert_after, it.first_run(base), False, 0), i


def test_a_row_another_node_inserts_first_gets_this_registration(migrated: tuple[str, str],
                                                                  backend: str) -> None:
    """Between a registration's read (the name is absent) and its insert, another node
    inserts the same name with another schedule. The insert then makes no row for it, and
    the registration, learning so from the insert itself or from its read-back, writes its own
    schedule over the other's: the last registration wins, as for a row that was there."""
    if backend not in ("postgresql", "mysql"):
        pytest.skip("one writer at a time: no other insert can come between the read and "
                    "the insert")
    url, table = migrated
    mine = Store(create_engine(url, lease=timedelta(seconds=30)), table)
    other = Store(create_engine(url, lease=timedelta(seconds=30)), table)
    first = datetime(2031, 1, 1, tzinfo=timezone.utc)
    theirs = datetime(2032, 1, 1, tzinfo=timezone.utc)
    done: list[bool] = []

    def before_insert(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not done and f"INSERT INTO {table.upper()} " in statement.upper():
            done.append(True)
            other.register([Registration("shared", "every 5s", lambda now: theirs),
                            Registration("theirs", "every 7s", lambda now: theirs)])

    sa.event.listen(mine.engine, "before_cursor_execute", before_insert)
    try:
        mine.register([Registration("shared", "every 60s", lambda now: first),
                       Registration("mine", "every 60s", lambda now: first)])
    finally:
        sa.event.remove(mine.engine, "before_cursor_execute", before_insert)
    assert done, "the registration sent no insert"
    t = mine.table
    with mine.engine.connect() as conn:
        rows = {r.queue_name: (r.schedule, r.next_process_at.replace(tzinfo=timezone.utc))
                for r in conn.execute(sa.select(t.c.queue_name, t.c.schedule,
                                                t.c.next_process_at))}
    mine.engine.dispose()
    other.engine.dispose()
    assert rows == {"shared": ("every 60s", first), "mine": ("every 60s", first),
                    "theirs": ("every 7s", theirs)}
