"""PrometheusMetrics on a running node and a real database, read through a real scrape."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from dbscheduler import Client, FixedDelay, FixedRate, Scheduler, TaskContext
from dbscheduler.client import TaskCounts
from dbscheduler.metrics import MetricsServer, PrometheusMetrics, serve
from dbscheduler.migrate import upgrade
from tests.helpers import running, wait_until
from tests.integration.scrape import parse, scrape_text, value


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def registry() -> Iterator[tuple[CollectorRegistry, MetricsServer]]:
    reg = CollectorRegistry()
    server = serve(0, reg, addr="127.0.0.1")
    yield reg, server
    server.stop()


class Tally:
    """What the task functions themselves count."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: dict[str, int] = {}

    def add(self, name: str) -> None:
        with self.lock:
            self.calls[name] = self.calls.get(name, 0) + 1

    def get(self, name: str) -> int:
        with self.lock:
            return self.calls.get(name, 0)


def _node(url: str, table: str, tally: Tally) -> Scheduler:
    s = Scheduler(url, table=table, poll_interval=0.2, lease=6, max_workers=4)

    @s.task("ok", schedule=FixedDelay(0.02))
    def ok(ctx: TaskContext) -> None:
        tally.add("ok")

    @s.task("fails", schedule=FixedDelay(0.05))
    def fails(ctx: TaskContext) -> None:
        tally.add("fails")
        raise RuntimeError("boom")

    @s.task("coro", schedule=FixedDelay(0.03))
    async def coro(ctx: TaskContext) -> None:
        await asyncio.sleep(0.001)
        tally.add("coro")

    return s


def _run_until(s: Scheduler, tally: Tally, each: int) -> None:
    with running(s):
        wait_until(lambda: all(tally.get(n) >= each for n in ("ok", "fails", "coro")),
                   timeout=60, what=f"{each} executions of every task")


def test_counters_equal_the_executions_the_tasks_counted(
    migrated: tuple[str, str], registry: tuple[CollectorRegistry, MetricsServer]
) -> None:
    url, table = migrated
    reg, server = registry
    tally = Tally()
    s = _node(url, table, tally)
    s.add_listener(PrometheusMetrics(reg))
    _run_until(s, tally, each=15)
    # After shutdown every ended execution has been reported: the scrape is final.
    samples = parse(scrape_text(server.port))
    ex = "dbscheduler_executions_total"
    assert value(samples, ex, task="ok", status="success") == tally.get("ok")
    assert value(samples, ex, task="coro", status="success") == tally.get("coro")
    assert value(samples, ex, task="fails", status="error") == tally.get("fails")
    total = sum(tally.calls.values())
    counted = sum(v for (name, _), v in samples.items() if name == ex)
    assert counted == total
    for task in ("ok", "fails", "coro"):
        assert value(samples, "dbscheduler_execution_seconds_count", task=task) == tally.get(task)
        assert value(samples, "dbscheduler_execution_seconds_bucket", task=task,
                     le="+Inf") == tally.get(task)
    assert value(samples, "dbscheduler_start_lag_seconds_count") == total
    assert value(samples, "dbscheduler_start_lag_seconds_bucket", le="0.001") is not None
    assert value(samples, "dbscheduler_running") == 0
    assert (value(samples, "dbscheduler_picked_rows_total") or 0) >= total
    for name in ("lease_lost", "lost_executions", "poll_errors", "heartbeat_errors"):
        assert value(samples, f"dbscheduler_{name}_total") == 0, name
    # Without a client there is no cluster-wide gauge to serve.
    assert not any(name == "dbscheduler_overdue_tasks" for name, _ in samples)


def test_per_task_false_has_no_task_label(
    migrated: tuple[str, str], registry: tuple[CollectorRegistry, MetricsServer]
) -> None:
    url, table = migrated
    reg, server = registry
    tally = Tally()
    s = _node(url, table, tally)
    s.add_listener(PrometheusMetrics(reg, per_task=False))
    _run_until(s, tally, each=5)
    text = scrape_text(server.port)
    assert "task=" not in text
    samples = parse(text)
    assert value(samples, "dbscheduler_executions_total", status="success") == (
        tally.get("ok") + tally.get("coro"))
    assert value(samples, "dbscheduler_executions_total", status="error") == tally.get("fails")
    assert value(samples, "dbscheduler_execution_seconds_count") == sum(tally.calls.values())


def test_running_gauge_while_an_execution_runs(
    migrated: tuple[str, str], registry: tuple[CollectorRegistry, MetricsServer]
) -> None:
    url, table = migrated
    reg, server = registry
    started, release = threading.Event(), threading.Event()
    s = Scheduler(url, table=table, poll_interval=0.2, lease=6)

    @s.task("slow", schedule=FixedRate(0.1))
    def slow(ctx: TaskContext) -> None:
        started.set()
        release.wait(20)

    s.add_listener(PrometheusMetrics(reg))
    try:
        with running(s):
            assert started.wait(20)
            assert value(parse(scrape_text(server.port)), "dbscheduler_running") == 1
            release.set()
            # At least one: once released, FixedRate(0.1) runs again at once, and a slow
            # scrape may first see the counter at 2 or more.
            wait_until(lambda: (value(parse(scrape_text(server.port)),
                                      "dbscheduler_executions_total", task="slow",
                                      status="success") or 0) >= 1, what="the finish reported")
    finally:
        release.set()


def test_cluster_gauges_and_counts_from_the_table(
    migrated: tuple[str, str], registry: tuple[CollectorRegistry, MetricsServer]
) -> None:
    url, table = migrated
    reg, server = registry
    # Rows written by a node that is gone: none of them is picked from now on.
    writer = Scheduler(url, table=table)
    for name in ("idle-a", "late", "held", "a-bit-late"):
        writer.add(name, lambda: None, schedule=FixedRate(3600))
    writer.start()
    writer.shutdown()
    client = Client(url, table=table)
    try:
        now = client.db_now()
        client.reschedule("late", now - timedelta(minutes=5))
        client.reschedule("a-bit-late", now - timedelta(seconds=20))
        client.pause("held")
        started, release = threading.Event(), threading.Event()
        s = Scheduler(url, table=table, poll_interval=0.2, lease=6)

        @s.task("busy", schedule=FixedRate(0.1))
        def busy(ctx: TaskContext) -> None:
            started.set()
            release.wait(20)

        s.add_listener(PrometheusMetrics(reg, client=s.client, refresh=timedelta(0)))
        try:
            with running(s):
                assert started.wait(20)
                # The five rows, and dbscheduler's own pruning task (idle, due in 10 min).
                assert client.counts(timedelta(seconds=60)) == TaskCounts(
                    total=6, running=1, paused=1, overdue=1, idle=3)
                assert client.counts(timedelta(seconds=5)).overdue == 2
                samples = parse(scrape_text(server.port))
                assert value(samples, "dbscheduler_overdue_tasks") == 1
                by_state = {s: value(samples, "dbscheduler_tasks", state=s)
                            for s in ("running", "paused", "overdue", "idle")}
                assert by_state == {"running": 1, "paused": 1, "overdue": 1, "idle": 3}
                release.set()
        finally:
            release.set()
    finally:
        client.close()


def test_heartbeat_errors_and_lost_leases_are_counted(
    tmp_path: object, registry: tuple[CollectorRegistry, MetricsServer]
) -> None:
    # PostgreSQL behind a TCP proxy that starts refusing while an execution runs: the
    # heartbeat fails (the hook the engine calls), then the watchdog counts the lease lost.
    from tests.chaos.faults import proxy_for
    from tests.conftest import backend_url, drop_table, unique_table

    url = backend_url("postgresql", tmp_path)  # type: ignore[arg-type]
    table = unique_table()
    engine = sa.create_engine(url)
    upgrade(engine, table)
    engine.dispose()
    reg, server = registry
    started = threading.Event()
    try:
        with proxy_for(url) as proxy:
            s = Scheduler(proxy.url_through(url), table=table, poll_interval=0.2, lease=1.5)

            @s.task("long", schedule=FixedRate(3600))
            def long(ctx: TaskContext) -> None:
                started.set()
                ctx.stop_requested.wait(20)

            s.add_listener(PrometheusMetrics(reg))
            with running(s, shutdown_timeout=1):
                s.trigger("long")
                assert started.wait(20)
                proxy.set_mode("refuse")

                def counted() -> bool:
                    samples = parse(scrape_text(server.port))
                    return bool((value(samples, "dbscheduler_heartbeat_errors_total") or 0) >= 1
                                and value(samples, "dbscheduler_lease_lost_total") == 1
                                and (value(samples, "dbscheduler_poll_errors_total") or 0) >= 1)

                wait_until(counted, timeout=20, what="heartbeat and poll errors, a lost lease")
                proxy.set_mode("forward")
    finally:
        drop_table(url, table)
