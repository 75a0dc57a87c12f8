"""Upgrading a populated table to the revision of the MySQL/MariaDB pick index keeps every
row and value; on MariaDB/MySQL it adds ``<table>_rank_idx`` on ``(priority,
next_process_at)``; elsewhere it changes no index."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from dbscheduler import Client
from dbscheduler.migrate import upgrade, version_table_for
from dbscheduler.table import make_table

T0 = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc)
PREVIOUS = 10
REVISION = "dbscheduler_0011"


def _tasks(count: int) -> list[dict[str, object]]:
    """``count`` rows of two handlers, priorities -1, 0 and 3, due at ``T0`` or a day later."""
    return [{"queue_name": f"task ✓ {i}", "created_at": T0,
             "next_process_at": T0 + timedelta(days=i % 2), "handler": f"h{i % 3 % 2}",
             "attempt": 0, "reenqueue_attempt": 0, "total_attempt": 0, "paused": False,
             "stop_requested": False, "priority": (-1, 0, 3)[i % 3]}
            for i in range(count)]


def test_upgrade_keeps_every_row_and_adds_the_pick_index_where_needed(
        db_url: str, table_name: str) -> None:
    engine = sa.create_engine(db_url)
    try:
        upgrade(engine, table_name, revision=f"dbscheduler_{PREVIOUS:04d}")
        old = make_table(table_name, revision=PREVIOUS)
        with engine.begin() as conn:
            conn.execute(sa.insert(old), _tasks(60))
            before = [dict(r) for r in
                      conn.execute(sa.select(old).order_by(old.c.id)).mappings()]
        indexes_before = {i["name"] for i in sa.inspect(engine).get_indexes(old.name,
                                                                             schema=old.schema)}
        upgrade(engine, table_name, revision=REVISION)
        new = make_table(table_name, revision=11)
        with engine.connect() as conn:
            after = [dict(r) for r in conn.execute(sa.select(new).order_by(new.c.id)).mappings()]
            version = conn.execute(
                sa.text(f"SELECT version_num FROM {version_table_for(table_name)}"))
            assert version.scalar_one() == REVISION
        assert after == before and len(after) == 60
        indexes = {i["name"]: i["column_names"]
                   for i in sa.inspect(engine).get_indexes(new.name, schema=new.schema)}
        name = f"{new.name}_rank_idx"
        if engine.dialect.name == "mysql":
            assert name not in indexes_before
            assert indexes[name] == ["priority", "next_process_at"]
            assert set(indexes) == indexes_before | {name}
        else:
            assert set(indexes) == indexes_before
        upgrade(engine, table_name)  # the newest, for the client below
    finally:
        engine.dispose()

    with Client(db_url, table=table_name) as client:
        assert client.counts(timedelta(minutes=5)).total == 60
