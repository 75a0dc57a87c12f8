"""Upgrading a populated table to the revision of the hot path's indexes keeps every row and
value; on PostgreSQL it drops ``<table>_claim_idx`` and keeps in ``<table>_alert_idx`` only
the rows with an alert, elsewhere it changes no index. A pick whose answer was lost still
finds its rows after it, bounded by the lease; the lateness check still reads the alert
index."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from dbscheduler import Client
from dbscheduler._store import Store
from dbscheduler._store.alerts import late_rows
from dbscheduler._store.handlers import handler_params
from dbscheduler._store.pick import _conditions
from dbscheduler.dialects import create_engine
from dbscheduler.table import make_table
from tests.harness.migrations import upgrade_populated
from tests.helpers import rows_read

T0 = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc)
PREVIOUS = 11
LEASE = timedelta(seconds=30)


def _tasks(count: int) -> list[dict[str, object]]:
    """``count`` rows of two handlers, some with a claim, due at ``T0`` or a day later."""
    return [{"queue_name": f"task ✓ {i}", "created_at": T0,
             "next_process_at": T0 + timedelta(days=i % 2), "handler": f"h{i % 2}",
             "attempt": 0, "reenqueue_attempt": 0, "total_attempt": i % 4,
             "paused": False, "stop_requested": False, "priority": (-1, 0, 3)[i % 3],
             "claim": uuid.UUID(int=i).hex if i % 5 else None}
            for i in range(count)]


def test_upgrade_keeps_every_row_and_leaves_postgresql_two_indexes_fewer_to_write(
        db_url: str, table_name: str) -> None:
    _, _, engine = upgrade_populated(db_url, table_name, PREVIOUS, _tasks(60))
    try:
        new = make_table(table_name)
        reflected = {i["name"]: i for i in sa.inspect(engine).get_indexes(new.name,
                                                                          schema=new.schema)}
    finally:
        engine.dispose()
    alert = reflected[f"{new.name}_alert_idx"]
    assert alert["column_names"] == ["alerted_at", "alert_after"]
    where = alert.get("dialect_options", {}).get("postgresql_where")
    if engine.dialect.name == "postgresql":
        assert f"{new.name}_claim_idx" not in reflected
        assert where == "((alert_after IS NOT NULL) OR (alerted_at IS NOT NULL))"
    else:
        assert reflected[f"{new.name}_claim_idx"]["column_names"] == ["claim"]
        assert where is None
    with Client(db_url, table=table_name) as client:
        assert client.counts(timedelta(minutes=5)).total == 60


def test_a_pick_read_back_by_its_claim_finds_what_it_took_and_nothing_else(
        migrated: tuple[str, str]) -> None:
    url, table = migrated
    store = Store(create_engine(url, lease=LEASE), table)
    t = store.table
    try:
        with store.engine.begin() as conn:
            conn.execute(sa.insert(t), [
                {**row, "next_process_at": datetime.now(timezone.utc) - timedelta(seconds=1)}
                for row in _tasks(6)])
        claim = uuid.uuid4().hex
        known = frozenset({"h0", "h1"})
        with store.autocommit() as conn:
            taken = store.dialect.pick(conn, t, where=_conditions(store, frozenset()),
                                       limit=4, lease=LEASE, node_id="n1", claim=claim,
                                       params=handler_params(store, known))
        assert len(taken) == 4
        with store.read() as conn:
            found = store.dialect.claimed(conn, t, node_id="n1", claim=claim, lease=LEASE)
            other = store.dialect.claimed(conn, t, node_id="n2", claim=claim, lease=LEASE)
            # A lease already over is not this pick's any more.
            conn.execute(sa.update(t).where(t.c.id == taken[0]["id"])
                         .values(next_process_at=datetime.now(timezone.utc)
                                 - timedelta(seconds=5)))
            conn.commit()
            still = store.dialect.claimed(conn, t, node_id="n1", claim=claim, lease=LEASE)
        assert sorted(r["id"] for r in found) == sorted(r["id"] for r in taken)
        assert other == []
        assert sorted(r["id"] for r in still) == sorted(r["id"] for r in taken[1:])
    finally:
        store.engine.dispose()


def test_postgresql_reads_late_rows_through_the_partial_alert_index(
        migrated: tuple[str, str], backend: str) -> None:
    if backend != "postgresql":
        pytest.skip("PostgreSQL's partial alert index")
    url, table = migrated
    engine = sa.create_engine(url)
    t = make_table(table)
    try:
        # Many rows without an alert, a few past their limit, one alerted and recovered.
        now = datetime.now(timezone.utc)
        rows = [{**row, "next_process_at": now + timedelta(hours=1), "claim": None,
                 "alert_after": None, "alerted_at": None, "last_success_at": None}
                for row in _tasks(3000)]
        for row in rows[:5]:
            row.update(alert_after=60.0, created_at=now - timedelta(hours=2))
        rows[5].update(alerted_at=now - timedelta(minutes=5), last_success_at=now)
        with engine.begin() as conn:
            conn.execute(sa.insert(t), rows)
            conn.exec_driver_sql(f"ANALYZE {t.name}")
        store = Store(create_engine(url, lease=LEASE), table)
        try:
            with store.read() as conn:
                before = rows_read(conn, t.name)
                late = late_rows(store, timedelta(hours=1), one_offs=False)
                read = rows_read(conn, t.name) - before
        finally:
            store.engine.dispose()
        assert sorted((x.kind, x.id) for x in late) == sorted(
            [("dead", r) for r in range(1, 6)] + [("recovered", 6)])
        # The dead and recovered reads take the few rows with an alert, not the 3,000.
        assert read < 100, read
    finally:
        engine.dispose()
