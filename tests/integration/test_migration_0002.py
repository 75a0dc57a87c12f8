"""Upgrading a populated revision-1 table to the current revision keeps every row and value."""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from dbscheduler.migrate import upgrade, version_table_for
from dbscheduler.table import make_table

T0 = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc)


def test_upgrade_of_a_populated_0001_table_keeps_every_value(
    db_url: str, table_name: str
) -> None:
    engine = sa.create_engine(db_url)
    try:
        upgrade(engine, table_name, revision="dbscheduler_0001")
        old = make_table(table_name, revision=1)
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
        assert set(after) == set(before) == {"idle", "running"}
        for name, values in before.items():
            kept = {k: v for k, v in after[name].items() if k in values}
            assert kept == values, name
            assert {k: after[name][k] for k in ("claim", "prev_locked_by",
                                                "prev_next_process_at",
                                                "prev_last_started_at")} == dict.fromkeys(
                ("claim", "prev_locked_by", "prev_next_process_at", "prev_last_started_at"))
        # The widened payload holds the documented limit (MySQL TEXT would stop at 64 KiB).
        big = "y" * 1_000_000
        with engine.begin() as conn:
            conn.execute(sa.update(new).where(new.c.queue_name == "idle").values(payload=big))
            stored = conn.execute(
                sa.select(new.c.payload).where(new.c.queue_name == "idle")).scalar_one()
        assert stored == big
    finally:
        engine.dispose()
