"""Upgrading a populated revision-2 table to the runtime-task revision keeps every row and
value, and gives each declared task the handler of its own name."""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from dbscheduler.migrate import upgrade, version_table_for
from dbscheduler.table import make_table

T0 = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc)


def test_upgrade_of_a_populated_0002_table_keeps_every_value(
    db_url: str, table_name: str
) -> None:
    engine = sa.create_engine(db_url)
    try:
        upgrade(engine, table_name, revision="dbscheduler_0002")
        old = make_table(table_name, revision=2)
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
        with engine.begin() as conn:
            conn.execute(sa.insert(old), rows)
            before = {r.queue_name: dict(r._mapping)
                      for r in conn.execute(sa.select(old).order_by(old.c.id))}

        upgrade(engine, table_name)

        new = make_table(table_name)
        with engine.connect() as conn:
            version = conn.execute(
                sa.text(f"SELECT version_num FROM {version_table_for(table_name)}")
            ).scalar_one()
            after = {r.queue_name: dict(r._mapping)
                     for r in conn.execute(sa.select(new).order_by(new.c.id))}
        assert version == "dbscheduler_0003"
        assert set(after) == set(before) == {"idle", "running ✓"}
        for name, values in before.items():
            assert {k: v for k, v in after[name].items() if k in values} == values, name
            assert (after[name]["handler"], after[name]["data"], after[name]["options"]) == (
                name, None, None)
    finally:
        engine.dispose()
