"""Upgrading a populated revision-3 table to the batches revision keeps every row and value
and adds an empty ``<table>_items`` that pushes and deliveries then use."""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from dbscheduler import Client
from dbscheduler.table import ITEM_COLUMNS, make_items_table
from tests.harness.migrations import upgrade_populated

T0 = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc)


def test_upgrade_of_a_populated_0003_table_keeps_every_value_and_adds_the_items_table(
    db_url: str, table_name: str
) -> None:
    base = {"created_at": T0, "next_process_at": T0, "heartbeat_at": None,
            "last_finished_at": None, "last_error": None, "claim": None,
            "prev_locked_by": None, "prev_next_process_at": None,
            "prev_last_started_at": None, "options": None}
    rows = [
        {**base, "queue_name": "declared", "handler": "declared", "data": None,
         "payload": '{"n": 1, "ü": "ß"}', "attempt": 0, "reenqueue_attempt": 41,
         "total_attempt": 42, "paused": True, "locked_by": None, "last_started_at": T0,
         "last_status": "success", "schedule": "cron 0 3 * * * UTC",
         "stop_requested": False},
        {**base, "queue_name": "runtime ✓", "handler": "mail", "data": '{"to": "ann"}',
         "payload": None, "attempt": 2, "reenqueue_attempt": 0, "total_attempt": 7,
         "paused": False, "locked_by": "node-1", "last_started_at": T0,
         "last_status": "error", "schedule": "once 2026-03-29T01:30:15+00:00",
         "stop_requested": True, "claim": "c" * 32, "prev_locked_by": "node-0"},
    ]
    _, after, engine = upgrade_populated(db_url, table_name, 5, rows)
    try:
        assert after["runtime ✓"]["data"] == '{"to": "ann"}'
        items = make_items_table(table_name)
        inspector = sa.inspect(engine)
        assert [c["name"] for c in inspector.get_columns(items.name)] == list(ITEM_COLUMNS)
        indexed = sorted(tuple(i["column_names"]) for i in inspector.get_indexes(items.name))
        assert indexed == [("handler", "batch_key"), ("task_name", "id")]
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(items)).scalar_one() == 0
    finally:
        engine.dispose()
    # The upgraded table takes pushes next to its old rows.
    with Client(db_url, table=table_name) as client:
        client.push("k", {"x": 1}, handler="digest", ontime=T0)
        assert [(b.key, b.items, b.due_at) for b in client.batches()] == [("k", 1, T0)]
        assert {t.name for t in client.tasks()} == {"declared", "runtime ✓", "digest/k"}
