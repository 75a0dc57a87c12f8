"""The operator's statements on SQL Server and Oracle, checked without a server (the
recording driver of ``test_dialect_sql``): the node registry's write, prune, reads and DDL,
and the tracebacks added to run rows."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from dbscheduler._store import RunRecord
from dbscheduler._store.history import write_tracebacks
from dbscheduler._store.nodes import NodeRecord, node_rows, prune_nodes, recent_handlers, write_node
from dbscheduler.migrate import offline_sql
from tests.unit.test_dialect_sql import NOW, Reply, Rig, _executed, _param_values, _rig

pytestmark = pytest.mark.filterwarnings("error::sqlalchemy.exc.SAWarning")



@pytest.fixture(params=["mssql", "oracle"])
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    r = _rig(str(request.param))
    yield r
    r.engine.dispose()


RECORD = NodeRecord("node-Ab9", "host-1", 4242, "0.1.0", ["gpu", "node-Ab9"], ["mail"])


def test_a_node_updates_its_row_and_inserts_it_only_the_first_time(rig: Rig) -> None:
    rig.db.on(r"^UPDATE scheduled_tasks_nodes", Reply(rowcount=0))
    write_node(rig.store, RECORD, running=3, started=True)
    update, insert = [c for c in _executed(rig.db) if re.match(r"^(UPDATE|INSERT)", c.sql)]
    assert "WHERE scheduled_tasks_nodes.node_id = " in update.sql
    clock = "SYSUTCDATETIME()" if rig.backend == "mssql" else "SYS_EXTRACT_UTC"
    assert clock in update.sql.upper() and clock in insert.sql.upper()
    assert insert.sql.startswith("INSERT INTO scheduled_tasks_nodes")
    values = _param_values(insert)
    assert {"node-Ab9", "host-1", 4242, 3, '["gpu", "node-Ab9"]', '["mail"]'} <= set(values)

    rig.db.calls.clear()
    rig.db.on(r"^UPDATE scheduled_tasks_nodes", Reply(rowcount=1))
    write_node(rig.store, RECORD, running=0)
    writes = [c.sql.split()[0] for c in _executed(rig.db)
              if re.match(r"^(UPDATE|INSERT|DELETE)", c.sql)]
    assert writes == ["UPDATE"]


def test_prune_and_reads_compare_on_the_database_clock(rig: Rig) -> None:
    rig.db.on(r"^DELETE FROM scheduled_tasks_nodes", Reply(rowcount=2))
    assert prune_nodes(rig.store, timedelta(days=7)) == 2
    (delete,) = rig.db.find(r"^DELETE FROM scheduled_tasks_nodes")
    assert "last_seen <" in delete.sql and -604800.0 in _param_values(delete)

    rig.db.on(r"FROM scheduled_tasks_nodes", Reply(["handlers"], [('["mail", "digest"]',)]))
    assert recent_handlers(rig.store, timedelta(days=1)) == (1, {"mail", "digest"})
    (read,) = rig.db.find(r"^SELECT \S+\.handlers")
    assert "last_seen >=" in read.sql and -86400.0 in _param_values(read)

    rig.db.calls.clear()
    rig.db.on(r"^SELECT \S+\.node_id", Reply(
        ["node_id", "host", "pid", "version", "tags", "handlers", "started_at", "last_seen",
         "running"],
        [("node-Ab9", "h", 1, "0.1.0", '["gpu"]', "[]", NOW, NOW, 2)]))
    rig.db.on(r"locked_by IS NOT NULL", Reply(["queue_name", "locked_by"],
                                               [("report", "node-Ab9")]))
    (row,) = node_rows(rig.store)
    assert row.values["tags"] == ["gpu"] and row.tasks == ["report"]
    assert row.values["last_seen"].tzinfo is not None


@pytest.mark.parametrize("dialect", ["mssql", "oracle"])
def test_nodes_ddl(dialect: str) -> None:
    sql = offline_sql(dialect)
    match = re.search(r"CREATE TABLE scheduled_tasks_nodes \((.*?)\n\)", sql, re.S)
    assert match, sql
    body = match.group(1)
    stamp = "DATETIME2(6)" if dialect == "mssql" else "TIMESTAMP WITH TIME ZONE"
    for column in ("started_at", "last_seen"):
        assert f"{column} {stamp} NOT NULL" in body
    assert "PRIMARY KEY (node_id)" in body


def test_tracebacks_are_one_update_by_the_run_rows_key(rig: Rig) -> None:
    started = datetime(2031, 7, 14, 12, 30, 40, 5, tzinfo=timezone.utc)
    runs = [RunRecord("import", 7, 1, "node-Ab9", started, started),
            RunRecord("report", 3, 2, "node-Ab9", started, started)]
    write_tracebacks(rig.store, [(runs[0], "Traceback …\nKeyError: 'x'"),
                                 (runs[1], "Traceback …\nValueError: y")])
    (update,) = rig.db.find(r"^UPDATE scheduled_tasks_runs SET traceback")
    text = " ".join(update.sql.split())
    assert re.search(r"WHERE scheduled_tasks_runs\.task_name = \S+ AND scheduled_tasks_runs\."
                     r"token = \S+ AND scheduled_tasks_runs\.started_at = \S+$", text), text
    values = _param_values(update)
    assert {"import", "report", 7, 3, "Traceback …\nKeyError: 'x'"} <= set(values)
    assert "KeyError" not in update.sql


@pytest.mark.parametrize("dialect", ["mssql", "oracle"])
def test_traceback_column_ddl(dialect: str) -> None:
    sql = offline_sql(dialect)
    column = "NVARCHAR(max)" if dialect == "mssql" else "CLOB"
    assert re.search(rf"ALTER TABLE scheduled_tasks_runs ADD traceback {re.escape(column)}",
                     sql), sql[-800:]


def test_runs_per_minute_read_two_columns_on_the_database_clock(rig: Rig) -> None:
    from dbscheduler.client import Client

    rig.db.on(r"^SELECT (TOP \S+ )?\S+\.finished_at, \S+\.status",
              Reply(["finished_at", "status"], [(NOW, "success"), (NOW, "error")]))
    minutes = Client(engine=rig.engine).throughput(5)
    assert [(ok, failed) for _, ok, failed in minutes][-1] == (1, 1)
    (read,) = rig.db.find(r"^SELECT (TOP \S+ )?\S+\.finished_at, \S+\.status")
    assert "finished_at >=" in read.sql and -300.0 in _param_values(read)
    assert ("TOP" if rig.backend == "mssql" else "FETCH FIRST") in read.sql
