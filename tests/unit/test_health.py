"""The health verdict over a node's parts, without a database (the ping is a function)."""

from __future__ import annotations

import threading
import time
import types
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from dbscheduler._engine.clock import Clock
from dbscheduler._engine.health import check

LEASE = timedelta(seconds=3)
POLL = timedelta(seconds=0.5)


def _ex(started_ago: float, lost: bool = False) -> Any:
    return types.SimpleNamespace(started_mono=time.monotonic() - started_ago, lease_lost=lost)


def _health(*, poll_ago: float | None = 0.1, beat_ago: float | None = None,
            tracked: list[Any] | None = None, state: str = "running",
            ping: Any = lambda: None, timeout: float = 2.0) -> Any:
    now = time.monotonic()
    tracked = tracked or []
    poller = types.SimpleNamespace(last_poll_at=None if poll_ago is None else now - poll_ago)
    heartbeat = types.SimpleNamespace(
        last_beat_at=None if beat_ago is None else now - beat_ago, tracked=lambda: tracked)
    executor = types.SimpleNamespace(running=lambda: tracked)
    return check(node_id="n", state=state, engine=sa.create_engine("sqlite://"), ping=ping,
                 clock=Clock(), poller=poller, heartbeat=heartbeat,  # type: ignore[arg-type]
                 executor=executor, poll_interval=POLL, lease=LEASE,  # type: ignore[arg-type]
                 timeout=timeout)


def test_a_polling_idle_node_is_healthy() -> None:
    h = _health(poll_ago=0.3)
    assert h.ok and h.reason is None and h.db_reachable and h.running == 0
    assert h.last_poll_at is not None and h.last_heartbeat_at is None


def test_a_poller_silent_for_a_few_intervals_is_not() -> None:
    h = _health(poll_ago=3 * 0.5 + 2.5)
    assert not h.ok and h.db_reachable
    assert h.reason is not None and "poller has not polled" in h.reason
    assert not _health(poll_ago=None).ok


def test_a_heartbeat_silent_for_a_lease_while_executions_run_is_not() -> None:
    assert _health(beat_ago=0.5, tracked=[_ex(10)]).ok
    # The execution began just now: the heartbeat has not been due yet, however old the last.
    assert _health(beat_ago=100, tracked=[_ex(0.2)]).ok
    h = _health(beat_ago=3.5, tracked=[_ex(10), _ex(1)])
    assert not h.ok and h.running == 2
    assert h.reason is not None and "no heartbeat for" in h.reason and "2 execution(s)" in h.reason
    # Executions already counted lost are the watchdog's business, not a stalled heartbeat.
    assert _health(beat_ago=100, tracked=[_ex(10, lost=True)]).ok


def test_a_failing_ping_means_an_unreachable_database() -> None:
    def ping() -> None:
        raise ConnectionRefusedError("connection refused")

    h = _health(ping=ping)
    assert not h.ok and not h.db_reachable
    assert h.reason == "database unreachable: ConnectionRefusedError: connection refused"


def test_a_hanging_ping_is_waited_for_once_and_not_piled_up() -> None:
    gate = threading.Event()
    calls: list[int] = []

    def ping() -> None:
        calls.append(1)
        gate.wait(60)

    engine = sa.create_engine("sqlite://")
    now = time.monotonic()
    parts: dict[str, Any] = dict(
        node_id="n", state="running", engine=engine, ping=ping, clock=Clock(),
        poller=types.SimpleNamespace(last_poll_at=now),
        heartbeat=types.SimpleNamespace(last_beat_at=None, tracked=lambda: []),
        executor=types.SimpleNamespace(running=lambda: []), poll_interval=POLL, lease=LEASE)
    try:
        started = time.monotonic()
        first = check(**parts, timeout=0.2)
        second = check(**parts, timeout=0.2)
        # Each check answers after its own timeout, not when the hung ping ends (60 s).
        assert time.monotonic() - started < 30
        assert not first.ok and not second.db_reachable
        assert second.reason is not None and "did not answer" in second.reason
        assert calls == [1]  # the second check waited on the first ping, not a new one
    finally:
        gate.set()


def test_a_broken_part_is_reported_never_raised() -> None:
    h = check(node_id="n", state="running", engine=sa.create_engine("sqlite://"),
              ping=lambda: None, clock=Clock(), poller=object(),  # type: ignore[arg-type]
              heartbeat=None, executor=None, poll_interval=POLL, lease=LEASE)
    assert not h.ok and h.reason is not None and h.reason.startswith("the health check failed")
