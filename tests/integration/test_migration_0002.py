"""Upgrading a populated revision-1 table to the current revision keeps every row and value."""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from dbscheduler.table import make_table
from tests.harness.migrations import upgrade_populated

T0 = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc)


def test_upgrade_of_a_populated_0001_table_keeps_every_value(
    db_url: str, table_name: str
) -> None:
    rows = [
        {"queue_name": "idle", "payload": '{"n": 1, "ü": "ß"}', "created_at": T0,
         "next_process_at": T0, "attempt": 0, "reenqueue_attempt": 41, "total_attempt": 42,
         "paused": True, "locked_by": None, "heartbeat_at": None, "last_started_at": T0,
         "last_finished_at": T0, "last_status": "success", "last_error": "old 😀 error",
         "schedule": "Cron(0 3 * * *)", "stop_requested": False},
        {"queue_name": "running", "payload": "x" * 60_000, "created_at": T0,
         "next_process_at": T0, "attempt": 2, "reenqueue_attempt": 0, "total_attempt": 7,
         "paused": False, "locked_by": "node-1", "heartbeat_at": T0,
         "last_started_at": T0, "last_finished_at": None, "last_status": "error",
         "last_error": None, "schedule": None, "stop_requested": True},
    ]
    _, after, engine = upgrade_populated(db_url, table_name, 1, rows)
    try:
        added = ("claim", "prev_locked_by", "prev_next_process_at", "prev_last_started_at")
        for name in ("idle", "running"):
            assert {k: after[name][k] for k in added} == dict.fromkeys(added)
        # The widened payload holds the documented limit (MySQL TEXT would stop at 64 KiB).
        new = make_table(table_name)
        big = "y" * 1_000_000
        with engine.begin() as conn:
            conn.execute(sa.update(new).where(new.c.queue_name == "idle").values(payload=big))
            stored = conn.execute(
                sa.select(new.c.payload).where(new.c.queue_name == "idle")).scalar_one()
        assert stored == big
    finally:
        engine.dispose()
