"""A busy node picks for many free workers at once, not for each one as it frees."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from dbscheduler._engine import poller as poller_module
from dbscheduler._engine.poller import FINISH_BACKLOG, GATHER_WAIT, Poller, next_backoff


class Clock:
    """The poller's monotonic clock, moved by the test: a 5 ms window measured on the real one
    closes during any stall of a loaded machine."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(poller_module, "time", SimpleNamespace(monotonic=fake.monotonic))
    return fake


def _poller(max_workers: int) -> Poller:
    # Only the executor's size matters to the decision; nothing here runs or connects.
    unused: Any = None
    return Poller(store=unused, node_id="n", lease=timedelta(seconds=30),
                  poll_interval=timedelta(seconds=5), tasks=unused,
                  executor=SimpleNamespace(max_workers=max_workers),  # type: ignore[arg-type]
                  heartbeat=unused, listeners=unused, wakeup=unused, clock=unused,
                  finisher=unused, recovery=unused)


def test_half_the_workers_free_or_more_pick_at_once(clock: Clock) -> None:
    poller = _poller(32)
    assert poller._gather(32) == 0
    assert poller._gather(16) == 0


def test_fewer_free_wait_for_more_then_pick_for_those_free(clock: Clock) -> None:
    poller = _poller(32)
    first = poller._gather(1)
    assert first == pytest.approx(GATHER_WAIT)
    # Woken by each worker that frees: the wait keeps its end, it does not start again.
    clock.now += GATHER_WAIT / 5
    again = poller._gather(3)
    assert again == pytest.approx(first - GATHER_WAIT / 5)
    clock.now += again
    # Waited its longest: picks for the workers that are free (long tasks hold the rest).
    assert poller._gather(3) == 0
    # The next backlog pick while most are busy waits again.
    assert poller._gather(3) > 0


def test_enough_workers_freed_during_the_wait_end_it_at_once(clock: Clock) -> None:
    poller = _poller(32)
    assert poller._gather(2) > 0
    clock.now += GATHER_WAIT / 2
    assert poller._gather(20) == 0
    # The wait is over: a later small number starts a wait of its own, a whole one.
    assert poller._gather(2) == pytest.approx(GATHER_WAIT)


def test_a_node_with_one_worker_never_waits(clock: Clock) -> None:
    assert _poller(1)._gather(1) == 0


def test_the_poll_backoff_stays_within_a_third_of_the_lease() -> None:
    # A node whose database comes back polls again well within its lease: with a 3 s lease
    # it was up to 10 s later, and a node whose Galera node rejoined ran again after 15 s.
    backoff = 0.5
    for _ in range(10):
        backoff = next_backoff(backoff, 0.5, timedelta(seconds=3))
        assert backoff <= 1.0
    assert next_backoff(8.0, 1.0, timedelta(minutes=5)) == 10.0
    assert next_backoff(5.0, 5.0, timedelta(seconds=3)) == 5.0  # never below the poll interval


def _with(free: int, backlog: int, max_workers: int = 32) -> Poller:
    unused: Any = None
    return Poller(store=unused, node_id="n", lease=timedelta(seconds=30),
                  poll_interval=timedelta(seconds=5), tasks=unused,
                  executor=SimpleNamespace(max_workers=max_workers, free=free),  # type: ignore[arg-type]
                  heartbeat=unused, listeners=unused, wakeup=unused, clock=unused,
                  finisher=SimpleNamespace(backlog=backlog),  # type: ignore[arg-type]
                  recovery=unused)


def test_a_node_picks_no_faster_than_it_writes_its_finishes() -> None:
    # Free workers take rows while few finishes wait; as the unwritten finishes near
    # FINISH_BACKLOG times the workers, the pick takes fewer, then none: the leases a node
    # holds stay within what it can finish before they expire.
    assert _with(free=32, backlog=0)._room() == 32
    assert _with(free=32, backlog=FINISH_BACKLOG * 32 - 5)._room() == 5
    assert _with(free=32, backlog=FINISH_BACKLOG * 32 + 40)._room() <= 0
