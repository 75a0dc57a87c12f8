"""PrometheusMetrics as a listener, and the cached cluster gauges, without a database."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from prometheus_client import CollectorRegistry

from dbscheduler import Listener, Outcome, TaskContext
from dbscheduler.client import TaskCounts
from dbscheduler.listeners import Listeners
from dbscheduler.metrics import PrometheusMetrics

NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)


def _ctx(name: str = "t", token: int = 1, lag: float = 0.25) -> TaskContext:
    return TaskContext(name, "node", 1, 0, token, NOW - timedelta(seconds=lag), NOW, NOW, None)


def _outcome(status: Any = "success", seconds: float = 0.5) -> Outcome:
    return Outcome(status, timedelta(seconds=seconds), None, NOW)


class FakeClient:
    def __init__(self) -> None:
        self.calls = 0
        self.fail = False

    def counts(self, overdue_after: timedelta) -> TaskCounts:
        self.calls += 1
        if self.fail:
            raise OSError("database down")
        return TaskCounts(total=10, running=2, paused=1, overdue=3, idle=4)


def test_a_refused_execution_never_started_does_not_unbalance_running() -> None:
    reg = CollectorRegistry()
    m = PrometheusMetrics(reg)
    m.on_started(_ctx(token=1))
    assert reg.get_sample_value("dbscheduler_running") == 1
    m.on_finished(_ctx(token=2), _outcome("lost"))  # on_started was never called for it
    assert reg.get_sample_value("dbscheduler_running") == 1
    m.on_finished(_ctx(token=1), _outcome())
    assert reg.get_sample_value("dbscheduler_running") == 0
    assert reg.get_sample_value("dbscheduler_executions_total",
                                {"task": "t", "status": "lost"}) == 1
    assert reg.get_sample_value("dbscheduler_start_lag_seconds_sum") == 0.25
    assert reg.get_sample_value("dbscheduler_start_lag_seconds_bucket", {"le": "0.25"}) == 1
    assert reg.get_sample_value("dbscheduler_start_lag_seconds_bucket", {"le": "0.1"}) == 0


def test_engine_signals_reach_the_counters_through_the_listeners() -> None:
    reg = CollectorRegistry()
    listeners = Listeners()
    listeners.add(PrometheusMetrics(reg))
    listeners.add(object())  # an object with none of the hooks is skipped
    listeners.on_pick(4, 0)
    listeners.on_pick(4, 3)
    listeners.on_heartbeat_error(OSError("x"))
    listeners.on_poll_error(OSError("x"))
    listeners.on_lease_lost(_ctx())
    for name, expected in (("picks", 2), ("picked_rows", 3), ("empty_picks", 1),
                           ("heartbeat_errors", 1), ("poll_errors", 1), ("lease_lost", 1)):
        assert reg.get_sample_value(f"dbscheduler_{name}_total") == expected, name


def test_listener_base_has_the_new_hooks_as_no_ops() -> None:
    Listener().on_pick(1, 0)
    Listener().on_heartbeat_error(OSError())


def test_cluster_gauges_query_at_most_once_per_refresh() -> None:
    reg = CollectorRegistry()
    client = FakeClient()
    PrometheusMetrics(reg, client=client, refresh=timedelta(hours=1))  # type: ignore[arg-type]
    assert client.calls == 0  # registering asks nothing of the database
    for _ in range(5):
        assert reg.get_sample_value("dbscheduler_overdue_tasks") == 3
        assert reg.get_sample_value("dbscheduler_tasks", {"state": "idle"}) == 4
    assert client.calls == 1


def test_cluster_gauges_are_absent_while_the_database_fails() -> None:
    reg = CollectorRegistry()
    client = FakeClient()
    client.fail = True
    PrometheusMetrics(reg, client=client, refresh=timedelta(0))  # type: ignore[arg-type]
    assert reg.get_sample_value("dbscheduler_overdue_tasks") is None
    client.fail = False
    assert reg.get_sample_value("dbscheduler_overdue_tasks") == 3


def test_per_task_false_bounds_the_series_with_many_tasks() -> None:
    reg = CollectorRegistry()
    m = PrometheusMetrics(reg, per_task=False)
    for i in range(10_000):
        m.on_started(_ctx(f"task-{i}", token=1))
        m.on_finished(_ctx(f"task-{i}", token=1), _outcome())
    samples = [s for f in reg.collect() for s in f.samples]
    assert all("task" not in s.labels for s in samples)
    assert len(samples) < 200
    assert reg.get_sample_value("dbscheduler_executions_total", {"status": "success"}) == 10_000
