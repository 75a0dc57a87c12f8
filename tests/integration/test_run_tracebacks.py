"""A failure's traceback in the run history on every real database: written with the run of
a function that raised, read back by ``runs()``, absent for successes and returned errors;
and the revision that adds the column keeps every run row of an upgraded table."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import sqlalchemy as sa
from fastapi.testclient import TestClient

from dbscheduler import Client, FixedRate, Result, Scheduler, TaskContext
from dbscheduler.migrate import upgrade
from dbscheduler.table import make_runs_table
from dbscheduler.web import create_app
from tests.helpers import running, wait_until
from tests.unit.test_cli import invoke

T0 = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc)


def parse_order(order: dict[str, object]) -> None:
    raise KeyError(f"order {order['id']} has no field 'total' ✓")


def test_the_run_of_a_function_that_raised_keeps_its_traceback(
        migrated: tuple[str, str]) -> None:
    url, table = migrated
    s = Scheduler(url, table=table, node_id="tb-node", poll_interval=0.1, lease=3)

    def importer(ctx: TaskContext) -> None:
        parse_order({"id": 42})

    s.add("importer", importer, schedule=FixedRate(3600))
    s.add("soft", lambda ctx: Result.error("quota exceeded"), schedule=FixedRate(3600))
    s.add("fine", lambda ctx: None, schedule=FixedRate(3600))
    with running(s):
        for name in ("importer", "soft", "fine"):
            s.trigger(name)
        wait_until(lambda: len(s.runs()) == 3, what="three runs")
    with Client(url, table=table) as client:
        by_name = {r.name: r for r in client.runs()}
    failed = by_name["importer"]
    assert failed.error == "KeyError: \"order 42 has no field 'total' ✓\""
    assert failed.traceback is not None
    lines = failed.traceback.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert ", in importer" in failed.traceback and ", in parse_order" in failed.traceback
    assert lines[-1] == failed.error
    assert by_name["soft"].traceback is None and by_name["soft"].error == "quota exceeded"
    assert by_name["fine"].traceback is None and by_name["fine"].to_dict()["traceback"] is None

    # The same traceback on the command line and over HTTP.
    db = ["--url", url, "--table", table]
    shown = invoke("runs", "--traceback", *db, env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "importer · token 1 · error" in shown.stdout and failed.traceback in shown.stdout
    assert json.loads(invoke("runs", "--json", "importer", *db).stdout)[0]["traceback"] == (
        failed.traceback)
    with TestClient(create_app(url, table=table)) as http:
        (run,) = http.get("/api/tasks/importer/runs").json()["runs"]
        assert run["traceback"] == failed.traceback
        page = http.get("/tasks/importer").text
        assert '<details class="traceback"><summary>Traceback</summary>' in page
        assert "in parse_order" in page


def test_upgrade_keeps_every_run_row_and_adds_an_empty_traceback(
        db_url: str, table_name: str) -> None:
    engine = sa.create_engine(db_url)
    try:
        upgrade(engine, table_name, revision="dbscheduler_0008")
        old = make_runs_table(table_name, revision=8)
        rows = [{"task_name": name, "token": token, "attempt": 1, "node_id": "node-1",
                 "scheduled_at": T0, "started_at": T0, "finished_at": T0, "status": status,
                 "error": error}
                for name, token, status, error in (("report", 7, "success", None),
                                                   ("import ✓", 3, "error", "KeyError: 'x'"))]
        with engine.begin() as conn:
            conn.execute(sa.insert(old), rows)
            before = [dict(r) for r in conn.execute(sa.select(old).order_by(old.c.id)).mappings()]
        upgrade(engine, table_name)
        new = make_runs_table(table_name)
        with engine.connect() as conn:
            after = [dict(r) for r in conn.execute(sa.select(new).order_by(new.c.id)).mappings()]
    finally:
        engine.dispose()
    assert [{k: v for k, v in r.items() if k != "traceback"} for r in after] == before
    assert [r["traceback"] for r in after] == [None, None]
    with Client(db_url, table=table_name) as client:
        assert [(r.name, r.error, r.traceback) for r in client.runs()] == [
            ("import ✓", "KeyError: 'x'", None), ("report", None, None)]
