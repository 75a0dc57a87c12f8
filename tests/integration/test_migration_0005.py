"""Upgrading a populated revision-3 table to the run-history revision keeps every row and
value, gives each row its last success where the table knows it, and adds an empty run
history."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from dbscheduler.table import make_runs_table
from tests.harness.migrations import upgrade_populated

T0 = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc)


def test_upgrade_of_a_populated_0003_table_keeps_every_value(
    db_url: str, table_name: str
) -> None:
    base = {"created_at": T0, "next_process_at": T0, "heartbeat_at": None, "last_error": None,
            "claim": None, "prev_locked_by": None, "prev_next_process_at": None,
            "prev_last_started_at": None, "data": None, "options": None}
    finished = T0 + timedelta(seconds=3, microseconds=5)
    rows = [
        {**base, "queue_name": "succeeded", "handler": "succeeded",
         "payload": '{"n": 1, "ü": "ß"}', "attempt": 0, "reenqueue_attempt": 41,
         "total_attempt": 42, "paused": True, "locked_by": None, "last_started_at": T0,
         "last_finished_at": finished, "last_status": "success",
         "schedule": "cron 0 3 * * * UTC", "stop_requested": False},
        {**base, "queue_name": "failed ✓", "handler": "mail", "payload": None, "attempt": 2,
         "reenqueue_attempt": 3, "total_attempt": 7, "paused": False, "locked_by": "node-1",
         "last_started_at": T0, "last_finished_at": finished, "last_status": "error",
         "last_error": "ValueError: no", "schedule": "fixed-rate 60s", "stop_requested": True,
         "data": '{"to": "x"}', "options": "{}"},
        {**base, "queue_name": "never ran", "handler": "never ran", "payload": None,
         "attempt": 0, "reenqueue_attempt": 0, "total_attempt": 0, "paused": False,
         "locked_by": None, "last_started_at": None, "last_finished_at": None,
         "last_status": None, "schedule": "fixed-delay 5s", "stop_requested": False},
    ]
    _, after, engine = upgrade_populated(db_url, table_name, 4, rows)
    try:
        # The last success is known only where the last run succeeded.
        assert after["succeeded"]["last_success_at"] == finished
        assert after["failed ✓"]["last_success_at"] is None
        assert after["never ran"]["last_success_at"] is None
        for name in after:
            assert (after[name]["alert_after"], after[name]["alerted_at"]) == (None, None)
        runs = make_runs_table(table_name)
        assert sa.inspect(engine).has_table(runs.name)
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(runs)).scalar_one() == 0
    finally:
        engine.dispose()
