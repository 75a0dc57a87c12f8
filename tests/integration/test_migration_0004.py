"""Upgrading a populated revision-3 table to the execution-controls revision keeps every row
and value, gives each row priority 0, no group and no required tag, and creates the
group-limit table."""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from dbscheduler.table import make_groups_table
from tests.harness.migrations import upgrade_populated

T0 = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc)


def test_upgrade_of_a_populated_0003_table_keeps_every_value(
    db_url: str, table_name: str
) -> None:
    base = {"created_at": T0, "next_process_at": T0, "heartbeat_at": None,
            "last_finished_at": None, "last_error": None, "claim": None,
            "prev_locked_by": None, "prev_next_process_at": None,
            "prev_last_started_at": None}
    rows = [
        {**base, "queue_name": "idle", "payload": '{"n": 1, "ü": "ß"}', "attempt": 0,
         "reenqueue_attempt": 41, "total_attempt": 42, "paused": True, "locked_by": None,
         "last_started_at": T0, "last_status": "success", "handler": "idle",
         "schedule": "cron 0 3 * * * UTC", "stop_requested": False, "data": None,
         "options": None},
        {**base, "queue_name": "running ✓", "payload": None, "attempt": 2,
         "reenqueue_attempt": 0, "total_attempt": 7, "paused": False,
         "locked_by": "node-1", "last_started_at": T0, "last_status": "error",
         "handler": "mail", "schedule": "fixed-rate 60s", "stop_requested": True,
         "claim": "c" * 32, "prev_locked_by": "node-0", "prev_next_process_at": T0,
         "data": '{"to": "a@b"}', "options": None},
    ]
    _, after, engine = upgrade_populated(db_url, table_name, 3, rows)
    try:
        for name in ("idle", "running ✓"):
            assert (after[name]["priority"], after[name]["task_group"],
                    after[name]["requires"]) == (0, None, None)
        groups = make_groups_table(table_name)
        with engine.begin() as conn:  # the new table takes limits
            conn.execute(sa.insert(groups).values(name="reports", max_running=2))
            assert conn.execute(sa.select(groups.c.name, groups.c.max_running)).all() == [
                ("reports", 2)]
    finally:
        engine.dispose()
