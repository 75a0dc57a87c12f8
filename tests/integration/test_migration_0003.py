"""Upgrading a populated revision-2 table to the runtime-task revision keeps every row and
value, and gives each declared task the handler of its own name."""

from __future__ import annotations

from datetime import datetime, timezone

from tests.harness.migrations import upgrade_populated

T0 = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc)


def test_upgrade_of_a_populated_0002_table_keeps_every_value(
    db_url: str, table_name: str
) -> None:
    base = {"created_at": T0, "next_process_at": T0, "heartbeat_at": None,
            "last_finished_at": None, "last_error": None, "claim": None,
            "prev_locked_by": None, "prev_next_process_at": None,
            "prev_last_started_at": None}
    rows = [
        {**base, "queue_name": "idle", "payload": '{"n": 1, "ü": "ß"}', "attempt": 0,
         "reenqueue_attempt": 41, "total_attempt": 42, "paused": True, "locked_by": None,
         "last_started_at": T0, "last_status": "success",
         "schedule": "cron 0 3 * * * UTC", "stop_requested": False},
        {**base, "queue_name": "running ✓", "payload": None, "attempt": 2,
         "reenqueue_attempt": 0, "total_attempt": 7, "paused": False,
         "locked_by": "node-1", "last_started_at": T0, "last_status": "error",
         "schedule": "fixed-rate 60s", "stop_requested": True, "claim": "c" * 32,
         "prev_locked_by": "node-0", "prev_next_process_at": T0},
    ]
    _, after, engine = upgrade_populated(db_url, table_name, 2, rows)
    engine.dispose()
    for name in ("idle", "running ✓"):
        assert (after[name]["handler"], after[name]["data"], after[name]["options"]) == (
            name, None, None)
