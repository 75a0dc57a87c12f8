"""Lateness alerts with three real node processes on every real database: each episode is
raised on exactly one node (``on_overdue``), ended on exactly one (``on_recovered``), and a
healthy task is never alerted."""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dbscheduler import Client, FixedRate, Scheduler
from tests.harness import Cluster, cluster

pytestmark = pytest.mark.slow

NODES = ("node-0", "node-1", "node-2")
CHECK = 0.3
"""Every node looks for late tasks this often (seconds): many checks race for each alert."""
OVERDUE_AFTER = 5
"""Seconds past due before the orphan test counts a task overdue: longer than a healthy task
waits for a pick on a loaded machine (a CI run's nodes, starved of CPU, were a second late)."""


def start_three(c: Cluster, *extra: str) -> None:
    for node in NODES:
        c.start(node, "--tasks", "2", "--prefix", "healthy", "--rate", "0.4", "--work", "0.02",
                "--lease", "2", "--poll", "0.2", "--overdue-after", "1",
                "--overdue-check", str(CHECK), *extra)


def alerts(events: list[dict[str, Any]], kind: str) -> Counter[str]:
    return Counter(e["task"] for e in events if e["event"] == kind)


def test_a_task_no_running_node_has_is_reported_overdue_on_exactly_one_of_three_nodes(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    # A task whose only node is gone (its code was removed): its row stays, due, unpicked.
    gone = Scheduler(url, table=table, node_id="gone", overdue_check=None)
    gone.add("orphan", lambda: None, schedule=FixedRate(3600))
    gone.start()
    gone.shutdown(timeout=2)
    gone.reschedule("orphan", gone.client.db_now() - timedelta(seconds=OVERDUE_AFTER + 5))
    gone.engine.dispose()
    with cluster(url, table, tmp_path) as c:
        start_three(c, "--alert-after", "3", "--overdue-after", str(OVERDUE_AFTER))
        c.wait_for(lambda ev: alerts(ev, "overdue")["orphan"] >= 1, 20, "an overdue alert")
        # Many more checks on every node: still the one alert, and none for healthy tasks
        # (which have an alert_after of their own and keep succeeding).
        time.sleep(20 * CHECK)
        with Client(url, table=table, overdue_after=OVERDUE_AFTER) as client:  # as the nodes
            infos = {i.name: i for i in client.tasks()}
        events = c.events()
        c.stop_all()
    raised = [e for e in events if e["event"] == "overdue"]
    assert [e["task"] for e in raised] == ["orphan"], raised
    assert raised[0]["late_by"] >= OVERDUE_AFTER
    assert not alerts(events, "recovered")
    assert sum(1 for e in events if e["event"] == "start") >= 20, "healthy tasks ran"
    assert infos["orphan"].alerted_at is not None and infos["orphan"].overdue
    for name in ("healthy-0", "healthy-1"):
        assert infos[name].alerted_at is None and not infos[name].overdue, infos[name]


def test_a_task_that_keeps_failing_alerts_once_then_recovers_once(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    failing = tmp_path / "failing"
    failing.touch()
    with cluster(url, table, tmp_path) as c:
        start_three(c, "--alert-after", "3", "--fail-while", str(failing),
                    "--fail-only", "healthy-1", "--group", "steady:1:0.02")
        c.wait_for(lambda ev: alerts(ev, "overdue")["healthy-1"] >= 1, 20,
                   "the failing task's alert")
        time.sleep(10 * CHECK)  # a window of checks, its length the point: no second alert
        assert alerts(c.events(), "overdue")["healthy-1"] == 1
        failing.unlink()  # it succeeds from now on
        c.wait_for(lambda ev: alerts(ev, "recovered")["healthy-1"] >= 1, 20,
                   "its recovery")
        time.sleep(10 * CHECK)  # as above: no second recovery, no new alert
        events = c.events()
        c.stop_all()
    raised = [e for e in events if e["event"] == "overdue"]
    assert [(e["task"], e["last_status"]) for e in raised] == [("healthy-1", "error")], raised
    recovered = [e for e in events if e["event"] == "recovered"]
    assert [(e["task"], e["last_status"]) for e in recovered] == [("healthy-1", "success")]
    assert recovered[0]["t"] > raised[0]["t"]
    # healthy-0 and steady-0 (alert_after too, never failing) were never alerted.
    assert set(alerts(events, "overdue")) == {"healthy-1"}
    with Client(url, table=table) as client:
        assert client.info("healthy-1").alerted_at is None
