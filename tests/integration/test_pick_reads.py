"""How much of the table the hot statements read when every row of it is due.

A burst makes thousands of rows due at once. A pick that sorted every due row to find the
first few read the whole burst on each of its picks, and its join with the table it updates
was planned as a scan of a small table; a joined finish that SQLite planned as a scan would
read every task for each row of the batch. These tests read the plans the databases choose
for the real statements, on a table with every row due.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler._store import Registration, Store
from dbscheduler._store.handlers import handler_params
from dbscheduler._store.pick import _conditions
from dbscheduler.dialects import create_engine
from dbscheduler.dialects.finishing import joined_statements
from tests.helpers import rows_read

LEASE = timedelta(seconds=30)
DUE = 2_000
LIMIT = 32


@pytest.fixture
def store(migrated: tuple[str, str], backend: str) -> Iterator[Store]:
    if backend not in ("postgresql", "sqlite"):
        pytest.skip("the plans read here are PostgreSQL's pick and SQLite's joined finish")
    url, table = migrated
    made = Store(create_engine(url, lease=LEASE), table)
    # Each task its own handler, more than the per-handler lookups cover: the benchmark's
    # case, where the pick has no candidates to narrow it.
    names = [f"burst-{i:04d}" for i in range(DUE)]
    made.register([Registration(n, "FixedRate(3600)", lambda now: now - timedelta(seconds=1))
                   for n in names])
    yield made
    made.engine.dispose()


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


def test_a_postgresql_pick_reads_about_the_rows_it_takes(store: Store, backend: str) -> None:
    if backend != "postgresql":
        pytest.skip("the plan of PostgreSQL's pick")
    t = store.table
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"ANALYZE {t.name}")  # statistics that say: everything is due
    names = frozenset(f"burst-{i:04d}" for i in range(DUE))
    where = _conditions(store, frozenset())

    def explain(conn: Any, cursor: Any, statement: str, *args: Any) -> tuple[str, Any]:
        return f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", args[0]

    with store.engine.connect() as conn:
        sa.event.listen(conn, "before_cursor_execute", explain, retval=True)
        with conn.begin() as tx:
            (row,) = store.dialect.pick(
                conn, t, where=where, limit=LIMIT, lease=LEASE, node_id="n1",
                claim=uuid.uuid4().hex, params=handler_params(store, names))
            tx.rollback()
    (plan,) = (json.loads(v) if isinstance(v, str) else v for v in row.values())
    read = [(n["Node Type"], n.get("Index Name"), n["Actual Rows"] * n["Actual Loops"])
            for n in _plan_nodes(plan[0]["Plan"])
            if n.get("Relation Name") == t.name and n.get("Alias") == t.name]
    assert read, plan
    # The due-time index walk stops at the limit; the row lookups take one row each.
    assert sum(rows for *_, rows in read) <= 2 * LIMIT, read



def test_a_postgresql_pick_keeps_one_generic_plan_that_reads_about_the_rows_it_takes(
    store: Store, backend: str
) -> None:
    """A prepared pick is planned once, not on every run, and that plan still stops at its
    limit. (When its custom plans were estimated cheaper than the generic one, PostgreSQL
    planned the 7 KB statement again on every pick: two thirds of its server time.)"""
    if backend != "postgresql":
        pytest.skip("PostgreSQL's plan cache")
    t = store.table
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"ANALYZE {t.name}")
    names = frozenset(f"burst-{i:04d}" for i in range(DUE))
    where = _conditions(store, frozenset())

    def pick(conn: sa.Connection) -> None:
        rows = store.dialect.pick(conn, t, where=where, limit=LIMIT, lease=LEASE,
                                  node_id="n1", claim=uuid.uuid4().hex,
                                  params=handler_params(store, names))
        assert len(rows) == LIMIT

    with store.engine.connect() as conn, conn.begin() as tx:
        # psycopg prepares the statement on its fifth run (and forgets it on a rollback);
        # the server then plans it five times for its parameters before it weighs the
        # generic plan. Each pick takes rows the earlier ones left due.
        for _ in range(15):
            pick(conn)
        plans = conn.exec_driver_sql(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%p_names_h%%' AND statement LIKE 'WITH%%'").all()
        assert plans and plans[0][0] > 0, plans  # (generic plans, custom plans)
        assert plans[0][1] <= 6, plans
        before = rows_read(conn, t.name)
        pick(conn)
        read = rows_read(conn, t.name) - before
        tx.rollback()
    # The generic plan walks the due-time index up to its limit too: never all 2,000 rows.
    assert read <= 4 * LIMIT, read



def test_sqlite_looks_up_a_joined_finishs_rows_by_key(store: Store, backend: str) -> None:
    if backend != "sqlite":
        pytest.skip("SQLite's plan of the joined finish")
    t = store.table
    for statement in joined_statements(store, True, 16):
        assert statement is not None
        compiled = statement.compile(dialect=store.engine.dialect)
        with store.engine.connect() as conn:
            steps = [r[3] for r in conn.exec_driver_sql(
                f"EXPLAIN QUERY PLAN {compiled}", (None,) * len(compiled.positiontup or ()))]
        assert any(s.startswith(f"SEARCH {t.name} USING INTEGER PRIMARY KEY") for s in steps), steps
        assert not any(s.startswith(f"SCAN {t.name}") for s in steps), steps
