"""Upgrading a populated table to the trigger-link revision keeps every row and value; the new
column is empty."""

from __future__ import annotations

from datetime import datetime, timezone

from tests.harness.migrations import upgrade_populated

T0 = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc)
PREVIOUS = 6


def test_upgrade_of_a_populated_table_keeps_every_value(db_url: str, table_name: str) -> None:
    base = {"created_at": T0, "next_process_at": T0, "heartbeat_at": None,
            "last_finished_at": None, "last_error": None, "claim": None,
            "prev_locked_by": None, "prev_next_process_at": None,
            "prev_last_started_at": None, "attempt": 0, "reenqueue_attempt": 3,
            "total_attempt": 9, "paused": False, "stop_requested": False,
            "last_started_at": T0, "last_status": "success"}
    rows = [
        {**base, "queue_name": "declared", "payload": '{"n": 1}', "locked_by": None,
         "schedule": "cron 0 3 * * * UTC", "handler": "declared", "data": None,
         "options": None},
        {**base, "queue_name": "runtime ✓", "payload": None, "locked_by": "node-1",
         "schedule": "fixed-rate 60s", "handler": "mail", "data": '{"to": "ü"}',
         "options": "{}"},
    ]
    _, after, engine = upgrade_populated(db_url, table_name, PREVIOUS, rows)
    engine.dispose()
    assert {name: row["trigger_link"] for name, row in after.items()} == {
        "declared": None, "runtime ✓": None}
