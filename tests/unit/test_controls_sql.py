"""The execution controls' SQL on SQL Server and Oracle (no server here): the group-limit
table, a pick settled against its group's limit, group listings, and the fenced
transaction's check. Statements are compiled by the real dialects and answered by the fake
driver of ``test_dialect_sql``; PostgreSQL, MariaDB and SQLite run them for real elsewhere."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.dialects import mssql, mysql, oracle, postgresql

from dbscheduler.dialects import dialect_named
from dbscheduler.migrate import offline_sql
from dbscheduler.table import COLUMNS, make_table
from tests.unit.test_dialect_sql import LEASE, NODE, TABLE, Reply, Rig, _rig, ops, row


@pytest.fixture(params=["mssql", "oracle"])
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    r = _rig(str(request.param))
    yield r
    r.engine.dispose()


def test_the_group_table_and_control_indexes_in_the_ddl() -> None:
    mssql, oracle = offline_sql("mssql"), offline_sql("oracle")
    assert re.search(r"CREATE TABLE scheduled_tasks_groups \(\s+name NVARCHAR\(255\) "
                     r"COLLATE Latin1_General_100_BIN2 NOT NULL,\s+max_running INTEGER NOT NULL,"
                     r"\s+updated_at DATETIME2\(6\) NULL,\s+PRIMARY KEY \(name\)\s+\)", mssql)
    assert ("CREATE INDEX scheduled_tasks_pick_idx ON scheduled_tasks (handler, priority DESC, "
            "next_process_at) WHERE priority != 0") in mssql
    assert ("CREATE INDEX scheduled_tasks_group_idx ON scheduled_tasks (task_group, locked_by) "
            "WHERE task_group IS NOT NULL") in mssql
    assert re.search(r"CREATE TABLE scheduled_tasks_groups \(\s+name VARCHAR2\(255 CHAR\) "
                     r"NOT NULL,\s+max_running INTEGER NOT NULL,\s+updated_at TIMESTAMP WITH "
                     r"TIME ZONE,\s+PRIMARY KEY \(name\)\s+\)", oracle)
    # Oracle has no partial index: the group index is whole, the pick's is not made.
    assert ("CREATE INDEX scheduled_tasks_group_idx ON scheduled_tasks (task_group, locked_by)"
            "\n") in oracle
    assert "pick_idx" not in oracle
    assert "ALTER TABLE scheduled_tasks ADD priority INTEGER DEFAULT 0 NOT NULL" in oracle


def test_a_pick_over_its_groups_limit_gives_the_excess_back(rig: Rig) -> None:
    picked = [row(f"g-{i}", id=i, handler="g", attempt=1, total_attempt=10 + i, locked_by=NODE,
                  claim="c" * 32, task_group="reports", prev_next_process_at=row()[4])
              for i in (1, 2, 3)]
    if rig.backend == "mssql":
        rig.db.on(r"^WITH dbscheduler_due AS", Reply(list(COLUMNS), picked))
    else:
        rig.db.on(r"WHERE \S+\.claim = :c_claim", Reply(list(COLUMNS), picked))
    # Every node's running rows counted: the group of limit 2 has 4 running, this pick's 3.
    rig.db.on(r"count\(scheduled_tasks\.id\) AS running",
              Reply(["name", "max_running", "running"], [("reports", 2, 4)]))
    kept = rig.store.pick(NODE, 3, LEASE, ["g"])
    assert [r["id"] for r in kept.rows] == [1] and kept.given_back == 2
    count = " ".join(rig.db.one(r"AS running").sql.split())
    assert ("FROM scheduled_tasks_groups LEFT OUTER JOIN scheduled_tasks ON "
            "scheduled_tasks.task_group = scheduled_tasks_groups.name AND "
            "scheduled_tasks.locked_by IS NOT NULL AND scheduled_tasks.next_process_at > ") in count
    # Given back fenced by token and node, as they were: the last of the pick's order.
    back = rig.db.one(r"^UPDATE scheduled_tasks SET .*locked_by=scheduled_tasks\.prev_locked_by")
    assert "scheduled_tasks.total_attempt = " in back.sql and "locked_by = " in back.sql
    params = back.params if isinstance(back.params, list) else [back.params]
    sent = [v for p in params for v in (p.values() if isinstance(p, dict) else p)]
    assert 12 in sent and 13 in sent and 11 not in sent


def test_group_limits_and_listing(rig: Rig) -> None:
    client = ops(rig.store)
    rig.db.on(r"^UPDATE scheduled_tasks_groups SET", Reply(rowcount=0))
    client.set_group_limit("reports", 2)
    insert = rig.db.one(r"^INSERT INTO scheduled_tasks_groups")
    assert "reports" in str(insert.params) and "reports" not in insert.sql
    client.set_group_limit("reports", None)
    rig.db.one(r"^DELETE FROM scheduled_tasks_groups WHERE")
    rig.db.on(r"GROUP BY scheduled_tasks\.task_group",
              Reply(["task_group", "running", "tasks"], [("reports", 1, 3)]))
    rig.db.on(r"^SELECT scheduled_tasks_groups\.name, scheduled_tasks_groups\.max_running",
              Reply(["name", "max_running", "updated_at"], [("reports", 2, None)]))
    (info,) = client.groups()
    assert (info.name, info.limit, info.running, info.tasks) == ("reports", 2, 1, 3)
    with pytest.raises(ValueError, match="limit must be an integer >= 0"):
        client.set_group_limit("reports", -1)
    with pytest.raises(ValueError, match="group must be a non-empty string"):
        client.set_group_limit(" reports", 1)


def test_the_fenced_checks_in_each_dialect() -> None:
    # The final check holds the row (refused at once where a lock wait is bounded only in
    # whole seconds, or not at all: MySQL, SQL Server, Oracle, which look again); both
    # compare the token, node and claim, and the lease against the database clock.
    table = make_table()
    for name, locked in [
        ("postgresql", r"WHERE .* FOR SHARE$"),
        ("mysql", r"WHERE .* LOCK IN SHARE MODE NOWAIT$"),
        ("mssql", r"FROM scheduled_tasks WITH \(HOLDLOCK, ROWLOCK, NOWAIT\) WHERE"),
        ("oracle", r"WHERE .* FOR UPDATE NOWAIT$"),
    ]:
        backend = dialect_named(name)
        assert backend is not None
        for lock in (True, False):
            stmt = backend.fence_statement(table, 7, 12, NODE, "c" * 32, margin=0.45,
                                           lock=lock)
            sql = " ".join(str(stmt.compile(dialect=_SA_DIALECTS[name]())).split())
            assert bool(re.search(locked, sql)) is lock, (name, sql)
            assert not re.search(r"FOR SHARE|LOCK IN|FOR UPDATE|HOLDLOCK", sql) or lock, sql
            for column in ("id", "total_attempt", "locked_by", "claim"):
                assert f"scheduled_tasks.{column} = " in sql, (name, column, sql)
            assert "scheduled_tasks.next_process_at > " in sql, (name, sql)


def test_a_fenced_transaction_on_sql_server_and_oracle(rig: Rig) -> None:
    # Driven through the real fencing code on the fake driver: a first check without a lock,
    # the user's statement, the final check holding the row and demanding the margin, then
    # COMMIT; a final check that finds nothing is LeaseLost and rolls back.
    from dbscheduler import LeaseLost
    from dbscheduler._engine.fencing import Fence, bounds_for, fenced

    fence = Fence(TABLE, 7, 12, NODE, "pay", claim="c" * 32, lease=3.0)
    rig.db.on(r"FROM scheduled_tasks", Reply(["id"], [(7,)]))
    with fenced(fence, rig.engine) as conn:
        conn.exec_driver_sql("INSERT INTO payments VALUES (1)")
    checks = rig.db.find(r"SELECT scheduled_tasks.id\s+FROM scheduled_tasks")
    assert len(checks) == 2, rig.db.sql()
    first, final = (" ".join(c.sql.split()) for c in checks)
    lock = "WITH (HOLDLOCK, ROWLOCK, NOWAIT)" if rig.backend == "mssql" else "FOR UPDATE NOWAIT"
    assert lock not in first and lock in final, (first, final)
    for sql in (first, final):
        assert "scheduled_tasks.claim = " in sql and "scheduled_tasks.next_process_at > " in sql
    statements = [" ".join(c.sql.split()) for c in rig.db.calls]
    assert statements.index(first) < statements.index("INSERT INTO payments VALUES (1)") \
        < statements.index(final), statements
    # The margins travel as bound numbers: none at the first check, the final one's after.
    with rig.engine.connect() as c:
        margin = rig.store.dialect.fence_margin(c, bounds_for(3.0))
    assert 0.0 in _values(checks[0].params) and margin in _values(checks[1].params), (
        checks[0].params, checks[1].params, margin)
    assert "c" * 32 in _values(checks[1].params)

    rig.db.calls.clear()
    rig.db.on(r"FOR UPDATE NOWAIT|NOWAIT\)", Reply(["id"], []))
    with pytest.raises(LeaseLost, match="at commit"), fenced(fence, rig.engine) as conn:
        conn.exec_driver_sql("INSERT INTO payments VALUES (2)")


def _values(params: object) -> list[object]:
    return list(params.values()) if isinstance(params, dict) else list(params)  # type: ignore[call-overload]


_SA_DIALECTS = {"postgresql": postgresql.dialect, "mysql": mysql.dialect,
                "mssql": mssql.dialect, "oracle": oracle.dialect}


def test_the_fence_margin_of_each_server_and_a_lease_too_short_for_it() -> None:
    # MySQL bounds an idle session in whole seconds only: its final check needs a second more
    # of lease than PostgreSQL's; MariaDB checks and commits in one statement and needs least.
    from types import SimpleNamespace

    import sqlalchemy as sa

    from dbscheduler._engine.fencing import Fence, _fenced_on, bounds_for
    from dbscheduler.dialects.mysql import MySQLDialect
    from dbscheduler.dialects.postgresql import PostgreSQLDialect

    def server(mariadb: bool) -> Any:
        return SimpleNamespace(dialect=SimpleNamespace(is_mariadb=mariadb))

    bounds = bounds_for(2.0)
    assert bounds.final == pytest.approx(0.2)
    assert PostgreSQLDialect().fence_margin(server(False), bounds) == pytest.approx(0.45)
    assert MySQLDialect().fence_margin(server(True), bounds) == pytest.approx(0.25)
    assert MySQLDialect().fence_margin(server(False), bounds) == pytest.approx(1.25)

    engine = sa.create_engine("mysql+pymysql://app@127.0.0.1:1/app")  # never connected
    conn = SimpleNamespace(engine=engine, dialect=SimpleNamespace(is_mariadb=False),
                           in_transaction=lambda: False)
    with pytest.raises(ValueError, match=r"lease of 2 s is too short .* at least 3 s"), \
            _fenced_on(Fence(TABLE, 7, 12, NODE, "pay", lease=2.0), conn):  # type: ignore[arg-type]
        pass
