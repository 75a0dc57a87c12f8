"""The MariaDB/MySQL pick reads about as many rows as it takes, not every due row: with
thousands of rows due, a pick of a few examines a few (each of its reads is an index walk
that stops at its limit), whatever the table's statistics say."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy.engine import Connection

from dbscheduler import Client
from dbscheduler._store.handlers import handler_params
from dbscheduler._store.pick import _conditions
from dbscheduler.migrate import upgrade

DUE = 3_000
PENDING = 1_000
LIMIT = 10


@pytest.fixture(params=["mysql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _reads(conn: Connection) -> int:
    """Rows this session's handlers have read so far (index and table reads alike)."""
    rows = conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Handler_read%%'")
    return sum(int(value) for _, value in rows)


@pytest.mark.parametrize("analyze", [False, True], ids=["unanalysed", "analysed"])
def test_a_pick_reads_rows_in_proportion_to_its_limit(
    db_url: str, table_name: str, analyze: bool
) -> None:
    client = Client(db_url, table=table_name)
    try:
        upgrade(client.engine, table_name)
        now = client.db_now()
        client.schedule_once_many([(f"later-{i}", "drain", now + timedelta(days=1), None)
                                   for i in range(PENDING)])
        client.schedule_once_many([(f"job-{i}", "drain", now, None) for i in range(DUE)])
        # A few rows of other priorities, which come first (priority > 0) or last (< 0).
        client.schedule_once_many([(f"first-{i}", "drain", now, None) for i in range(3)])
        store = client._store
        with store.engine.connect() as conn:
            conn.exec_driver_sql(f"UPDATE {table_name} SET priority = 5 "
                                 "WHERE queue_name LIKE 'first-%%'")
            conn.exec_driver_sql(f"UPDATE {table_name} SET priority = -5 "
                                 "WHERE queue_name IN ('job-0', 'job-1')")
            conn.commit()
            if analyze:
                conn.exec_driver_sql(f"ANALYZE TABLE {table_name}").all()
        where = _conditions(store, frozenset())
        with store.autocommit() as conn:
            before = _reads(conn)
            rows = store.dialect.pick(
                conn, store.table, where=where, limit=LIMIT, lease=timedelta(minutes=5),
                node_id="n1", claim=uuid.uuid4().hex,
                params=handler_params(store, frozenset({"drain"})))
            read = _reads(conn) - before  # with the SHOW's own few reads
        names = sorted(str(r["queue_name"]) for r in rows)
        # The pick's order: priority first, then due time (priority -5 comes last).
        assert names[:3] == ["first-0", "first-1", "first-2"]
        assert len(rows) == LIMIT and "job-0" not in names and "job-1" not in names
        # Old single read: a range over every due row plus a sort (thousands of reads).
        assert read < 20 * LIMIT, f"the pick read {read} rows to take {LIMIT}"
    finally:
        client.close()
