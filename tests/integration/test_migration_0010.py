"""Upgrading a populated history to the revision of the status index keeps every run row and
value, adds ``<table>_runs_status_idx`` on ``(status, finished_at)``, and the status filter
reads the same runs through it, newest first, page after page; on PostgreSQL and MariaDB
the plan of a rare status reads that index, not the table."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import Client
from dbscheduler.migrate import HEAD, upgrade, version_table_for
from dbscheduler.table import make_runs_table, make_table

T0 = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc)
PREVIOUS = 9
STATUSES = ("success", "error", "cancelled", "lost", "timeout", "skipped")


def _runs(count: int) -> list[dict[str, object]]:
    """``count`` runs of three tasks, one finished per second from ``T0``; every 7th
    cancelled, the others cycling through the statuses; some finish at the same instant (the
    cursor's tie-break on ``id``)."""
    rows: list[dict[str, object]] = []
    for i in range(count):
        status = "cancelled" if i % 7 == 0 else STATUSES[i % len(STATUSES)]
        at = T0 + timedelta(seconds=i - i % 3 if i % 5 == 0 else i)
        rows.append({"task_name": f"task ✓ {i % 3}", "token": i + 1, "attempt": 1 + i % 2,
                     "node_id": f"node-{i % 2}", "scheduled_at": at, "started_at": at,
                     "finished_at": at, "status": status,
                     "error": None if status == "success" else f"failed #{i} ü",
                     "traceback": "Traceback …" if status == "error" else None})
    return rows


def test_upgrade_keeps_every_run_row_and_adds_the_status_index(db_url: str,
                                                              table_name: str) -> None:
    task = {"queue_name": "task ✓ 0", "created_at": T0, "next_process_at": T0,
            "handler": "task ✓ 0", "schedule": "fixed-rate 60s", "attempt": 0,
            "reenqueue_attempt": 5, "total_attempt": 9, "paused": False,
            "stop_requested": False, "last_status": "cancelled", "last_success_at": T0}
    engine = sa.create_engine(db_url)
    try:
        upgrade(engine, table_name, revision=f"dbscheduler_{PREVIOUS:04d}")
        old_tasks = make_table(table_name, revision=PREVIOUS)
        old = make_runs_table(table_name, revision=PREVIOUS)
        with engine.begin() as conn:
            conn.execute(sa.insert(old_tasks), [task])
            conn.execute(sa.insert(old), _runs(60))
            tasks_before = [dict(r) for r in conn.execute(sa.select(old_tasks)).mappings()]
            before = [dict(r) for r in
                      conn.execute(sa.select(old).order_by(old.c.id)).mappings()]
        upgrade(engine, table_name)
        new = make_runs_table(table_name)
        with engine.connect() as conn:
            after = [dict(r) for r in conn.execute(sa.select(new).order_by(new.c.id)).mappings()]
            tasks_after = [dict(r) for r in
                           conn.execute(sa.select(make_table(table_name))).mappings()]
            version = conn.execute(
                sa.text(f"SELECT version_num FROM {version_table_for(table_name)}"))
            assert version.scalar_one() == HEAD
        assert after == before and len(after) == 60
        assert tasks_after == tasks_before
        indexes = {i["name"]: i["column_names"]
                   for i in sa.inspect(engine).get_indexes(new.name, schema=new.schema)}
        assert indexes[f"{new.name}_status_idx"] == ["status", "finished_at"]
    finally:
        engine.dispose()

    expected = sorted((r for r in before if r["status"] == "cancelled"),
                      key=lambda r: (r["finished_at"], r["id"]), reverse=True)
    with Client(db_url, table=table_name) as client:
        assert len(client.runs(limit=1000)) == 60
        seen: list[int] = []
        cursor = None
        while True:  # pages of 3, newest first, each older than the last of the previous
            page = client.runs(status="cancelled", limit=3, cursor=cursor)
            seen += [r.id for r in page]
            if len(page) < 3:
                break
            cursor = page[-1].cursor
        assert seen == [r["id"] for r in expected]
        since = T0 + timedelta(seconds=30)
        assert [r.id for r in client.runs(status="cancelled", since=since)] == [
            r["id"] for r in expected if r["finished_at"] >= since]
        assert {r.status for r in client.runs(status=["cancelled", "lost"], limit=1000)} == {
            "cancelled", "lost"}



def test_a_rare_status_is_read_from_the_status_index(migrated: tuple[str, str],
                                                     backend: str) -> None:
    # The plan the runs page's status=cancelled gets on a history whose statistics are
    # fresh: the database reads the status's rows from the index, never the whole table.
    if backend not in ("postgresql", "mysql"):
        pytest.skip("the plan is checked on PostgreSQL and MariaDB")
    url, table = migrated
    runs = make_runs_table(table)
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.insert(runs), [
                {"task_name": f"task-{i % 50}", "token": i, "attempt": 1, "node_id": "n",
                 "scheduled_at": T0 + timedelta(seconds=i), "started_at": T0 + timedelta(
                     seconds=i), "finished_at": T0 + timedelta(seconds=i),
                 "status": "cancelled" if i % 5000 == 0 else "success"}
                for i in range(1, 20_001)])
            conn.exec_driver_sql(("ANALYZE " if backend == "postgresql" else "ANALYZE TABLE ")
                                 + runs.name)
        sent: list[tuple[str, Any]] = []

        def capture(conn: Any, cursor: Any, statement: str, params: Any, *args: Any) -> None:
            if runs.name in statement:
                sent.append((statement, params))

        sa.event.listen(engine, "before_cursor_execute", capture)
        with Client(engine=engine, table=table) as client:
            found = client.runs(status="cancelled")
        sa.event.remove(engine, "before_cursor_execute", capture)
        assert [r.token for r in found] == [20_000, 15_000, 10_000, 5_000]
        (statement, params), = sent
        with engine.connect() as conn:
            if backend == "postgresql":
                plan = json.dumps(conn.exec_driver_sql(
                    f"EXPLAIN (FORMAT JSON) {statement}", params).scalar_one())
                assert "Seq Scan" not in plan and f"{runs.name}_status_idx" in plan, plan
            else:
                rows = conn.exec_driver_sql(f"EXPLAIN {statement}", params).mappings().all()
                assert [(r["table"], r["key"]) for r in rows] == [
                    (runs.name, f"{runs.name}_status_idx")], rows
    finally:
        engine.dispose()
