"""Upgrading a populated table to the node-registry revision keeps every row and value and
adds an empty ``<table>_nodes`` that a starting node then writes its row to."""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from dbscheduler import Client, FixedRate, Scheduler
from dbscheduler.table import make_nodes_table
from tests.harness.migrations import upgrade_populated
from tests.web.conftest import wait_for

T0 = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc)
PREVIOUS = 7


def test_upgrade_keeps_every_value_and_adds_the_node_registry(db_url: str,
                                                             table_name: str) -> None:
    base = {"created_at": T0, "next_process_at": T0, "heartbeat_at": None,
            "last_finished_at": None, "last_error": None, "claim": None,
            "prev_locked_by": None, "prev_next_process_at": None,
            "prev_last_started_at": None, "attempt": 0, "reenqueue_attempt": 3,
            "total_attempt": 9, "paused": False, "stop_requested": False,
            "last_started_at": T0, "last_status": "success", "trigger_link": None}
    rows = [
        {**base, "queue_name": "declared", "payload": '{"n": 1}', "locked_by": None,
         "schedule": "cron 0 3 * * * UTC", "handler": "declared", "data": None,
         "options": None},
        {**base, "queue_name": "runtime ✓", "payload": None, "locked_by": "node-1",
         "schedule": "fixed-rate 60s", "handler": "mail", "data": '{"to": "ü"}',
         "options": "{}", "trigger_link": "00-abc 10"},
    ]
    _, after, engine = upgrade_populated(db_url, table_name, PREVIOUS, rows)
    try:
        assert after["runtime ✓"]["trigger_link"] == "00-abc 10"
        nodes = make_nodes_table(table_name)
        columns = [c["name"] for c in sa.inspect(engine).get_columns(nodes.name)]
        assert columns == [c.name for c in nodes.columns]
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(nodes)).scalar_one() == 0
    finally:
        engine.dispose()
    # A node started on the upgraded table registers itself beside the old rows.
    scheduler = Scheduler(db_url, table=table_name, node_id="upgraded-node", lease=3,
                          poll_interval=0.2)
    scheduler.add("fresh", lambda ctx: None, schedule=FixedRate(3600))
    scheduler.start()
    try:
        with Client(db_url, table=table_name) as client:
            wait_for(lambda: [n.node_id for n in client.nodes()] == ["upgraded-node"],
                     what="the node's row")
            assert {t.name for t in client.tasks()} >= {"declared", "runtime ✓", "fresh"}
    finally:
        scheduler.shutdown(timeout=5)
