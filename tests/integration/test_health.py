"""Scheduler.health() on real databases: ok while running, not ok with the reason when the
database cannot be reached (a closed port, or a TCP proxy that refuses or hangs)."""

from __future__ import annotations

import socket
import threading
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from dbscheduler import FixedRate, Health, Scheduler, TaskContext
from dbscheduler.migrate import upgrade
from tests.chaos.faults import proxy_for
from tests.conftest import backend_url, drop_table, unique_table
from tests.helpers import running, wait_until


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_healthy_while_running_with_an_execution(migrated: tuple[str, str]) -> None:
    url, table = migrated
    started, release = threading.Event(), threading.Event()
    s = Scheduler(url, table=table, poll_interval=0.2, lease=3, node_id="healthy-1")

    @s.task("slow", schedule=FixedRate(0.1))
    def slow(ctx: TaskContext) -> None:
        started.set()
        release.wait(20)

    before = s.health()
    assert not before.ok and before.db_reachable and before.reason is not None
    assert "new" in before.reason
    try:
        with running(s):
            assert started.wait(20)
            # Past a whole lease of the execution: the heartbeat (every lease / 3) has kept
            # extending it, and the node is healthy. Waited for, not slept: a heartbeat thread
            # starved of CPU on a busy machine comes late, not never.
            past = s.client.db_now() + timedelta(seconds=3.5)
            wait_until(lambda: (s.health().last_heartbeat_at or past) > past, timeout=60,
                       what="a heartbeat a whole lease after the execution started")
            h = s.health()
            assert h == Health(ok=True, node_id="healthy-1", db_reachable=True,
                               last_poll_at=h.last_poll_at,
                               last_heartbeat_at=h.last_heartbeat_at, running=1, reason=None)
            assert h.last_poll_at is not None and h.last_heartbeat_at is not None
            assert s.info("slow").running, "the heartbeat kept the execution's lease"
            release.set()
    finally:
        release.set()
    after = s.health()
    assert not after.ok and after.reason is not None and "stopped" in after.reason


def test_a_closed_port_is_an_unreachable_database() -> None:
    s = Scheduler(f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/test")
    h = s.health(timeout=15)
    assert not h.ok and not h.db_reachable and h.running == 0
    assert h.reason is not None and "database unreachable" in h.reason
    assert "OperationalError" in h.reason


def test_a_database_cut_off_by_a_proxy_is_reported_and_recovery_too(tmp_path: object) -> None:
    url = backend_url("postgresql", tmp_path)  # type: ignore[arg-type]
    table = unique_table()
    engine = sa.create_engine(url)
    upgrade(engine, table)
    engine.dispose()
    try:
        with proxy_for(url) as proxy:
            s = Scheduler(proxy.url_through(url), table=table, poll_interval=0.2, lease=6)
            s.add("tick", lambda: None, schedule=FixedRate(0.5))
            with running(s, shutdown_timeout=2):
                wait_until(lambda: s.health().ok, timeout=10, what="a healthy node")
                proxy.set_mode("refuse")
                h = s.health(timeout=5)
                assert not h.ok and not h.db_reachable
                assert h.reason is not None and "database unreachable" in h.reason
                proxy.set_mode("blackhole")
                # A pooled connection the refusing proxy already closed fails at once ("server
                # closed the connection"); the checks after it reach the silent proxy.
                reasons = []
                for _ in range(3):
                    started = time.monotonic()
                    h = s.health(timeout=1)
                    # A hanging database does not hang it (ten times the timeout, for a busy
                    # machine: a hang would last until TCP gives up, minutes).
                    assert time.monotonic() - started < 10
                    assert not h.ok and not h.db_reachable
                    reasons.append(h.reason or "")
                    if "did not answer" in reasons[-1]:
                        break
                assert "did not answer" in reasons[-1], reasons
                proxy.set_mode("forward")
                wait_until(lambda: s.health(timeout=2).ok, timeout=30, what="health again")
    finally:
        drop_table(url, table)
