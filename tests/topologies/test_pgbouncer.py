"""A node behind a stock PgBouncer, in transaction and in session pooling, with the plain URL:
it connects, keeps its tasks' cadence (no server-side prepared statement the pool cannot keep),
wakes by polling and says once how to get instant wake-ups; with ``listen_url`` a trigger wakes
it at once."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from dbscheduler import FixedDelay, FixedRate, Scheduler, TaskContext
from dbscheduler.migrate import upgrade
from tests.conftest import backend_url
from tests.databases import drop_table, unique_table
from tests.helpers import wait_until
from tests.topologies.pgbouncer import pgbouncer

TASKS = 8


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``(url, table)``: the test PostgreSQL, with a migrated table of this test's own."""
    url = backend_url("postgresql", tmp_path)
    table = unique_table()
    engine = sa.create_engine(url)
    upgrade(engine, table)
    engine.dispose()
    yield url, table
    drop_table(url, table)


def _node(url: str, table: str, runs: Counter[str], lock: threading.Lock,
          cadence: int = TASKS, **options: object) -> Scheduler:
    node = Scheduler(url, table=table, lease=3, history=None, overdue_check=None, **options)

    def run(ctx: TaskContext) -> None:
        with lock:
            runs[ctx.name] += 1

    for i in range(cadence):
        node.add(f"cadence-{i}", run, schedule=FixedDelay(0.1))
    node.add("on-demand", run, schedule=FixedRate(3600))
    return node


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_a_node_behind_pgbouncer_runs_and_wakes_by_polling(
    server: tuple[str, str], mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    direct, table = server
    runs: Counter[str] = Counter()
    lock = threading.Lock()
    caplog.set_level(logging.INFO, logger="dbscheduler")
    with pgbouncer(direct, mode) as pooled:
        node = _node(pooled, table, runs, lock, poll_interval=0.5)
        node.start()
        try:
            # Past psycopg's prepare threshold (5 runs of a statement) many times over: a
            # prepared pick would fail on the next server session of a transaction pool.
            wait_until(lambda: min(runs[f"cadence-{i}"] for i in range(TASKS)) >= 15,
                       timeout=60, what="every task to run 15 times through the pooler")
            node.trigger("on-demand")
            wait_until(lambda: runs["on-demand"] >= 1, timeout=30,
                       what="the triggered task to run (found by a poll)")
        finally:
            node.shutdown(timeout=10)
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("dbscheduler")]
    problems = [r.getMessage() for r in caplog.records
                if r.name.startswith("dbscheduler") and r.levelno >= logging.WARNING]
    assert problems == []
    assert sum("connected through a pooler" in m for m in messages) == 1
    assert sum("LISTEN cannot be relied upon" in m for m in messages) == 1


def test_listen_url_gives_instant_wake_ups_behind_a_pooler(server: tuple[str, str]) -> None:
    direct, table = server
    runs: Counter[str] = Counter()
    lock = threading.Lock()
    with pgbouncer(direct, "transaction") as pooled:
        # A poll every minute and nothing else due: only LISTEN can run the trigger within
        # the wait below.
        node = _node(pooled, table, runs, lock, cadence=0, poll_interval=60,
                     listen_url=direct)
        node.start()
        try:
            wait_until(lambda: node._listener is not None and node._listener.ready,
                       timeout=30, what="LISTEN to be up")
            node.trigger("on-demand")
            wait_until(lambda: runs["on-demand"] >= 1, timeout=30,
                       what="the triggered task to run before the next poll")
        finally:
            node.shutdown(timeout=10)


def test_listen_url_is_checked(server: tuple[str, str], tmp_path: Path) -> None:
    direct, table = server
    with pytest.raises(ValueError, match="listen_url is for PostgreSQL"):
        Scheduler(f"sqlite:///{tmp_path / 'x.sqlite3'}", listen_url=direct)
    with pytest.raises(ValueError, match="names a mysql database"):
        Scheduler(direct, table=table, listen_url="mysql+pymysql://root@127.0.0.1/test")
