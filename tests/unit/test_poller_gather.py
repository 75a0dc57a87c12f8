"""A busy node picks for many free workers at once, not for each one as it frees."""

from __future__ import annotations

import time
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from dbscheduler._poller import FINISH_BACKLOG, GATHER_WAIT, Poller


def _poller(max_workers: int) -> Poller:
    # Only the executor's size matters to the decision; nothing here runs or connects.
    unused: Any = None
    return Poller(store=unused, node_id="n", lease=timedelta(seconds=30),
                  poll_interval=timedelta(seconds=5), tasks=unused,
                  executor=SimpleNamespace(max_workers=max_workers),  # type: ignore[arg-type]
                  heartbeat=unused, listeners=unused, wakeup=unused, clock=unused,
                  finisher=unused)


def test_half_the_workers_free_or_more_pick_at_once() -> None:
    poller = _poller(32)
    assert poller._gather(32) == 0
    assert poller._gather(16) == 0


def test_fewer_free_wait_for_more_then_pick_for_those_free() -> None:
    poller = _poller(32)
    first = poller._gather(1)
    assert 0 < first <= GATHER_WAIT + 1e-6
    # Woken by each worker that frees: the wait keeps its end, it does not start again.
    again = poller._gather(3)
    assert 0 < again <= first
    time.sleep(again)
    # Waited its longest: picks for the workers that are free (long tasks hold the rest).
    assert poller._gather(3) == 0
    # The next backlog pick while most are busy waits again.
    assert poller._gather(3) > 0


def test_enough_workers_freed_during_the_wait_end_it_at_once() -> None:
    poller = _poller(32)
    assert poller._gather(2) > 0
    assert poller._gather(20) == 0
    # The wait is over: a later small number starts a wait of its own, a whole one.
    assert poller._gather(2) > GATHER_WAIT / 2


def test_a_node_with_one_worker_never_waits() -> None:
    assert _poller(1)._gather(1) == 0


def _with(free: int, backlog: int, max_workers: int = 32) -> Poller:
    unused: Any = None
    return Poller(store=unused, node_id="n", lease=timedelta(seconds=30),
                  poll_interval=timedelta(seconds=5), tasks=unused,
                  executor=SimpleNamespace(max_workers=max_workers, free=free),  # type: ignore[arg-type]
                  heartbeat=unused, listeners=unused, wakeup=unused, clock=unused,
                  finisher=SimpleNamespace(backlog=backlog))  # type: ignore[arg-type]


def test_a_node_picks_no_faster_than_it_writes_its_finishes() -> None:
    # Free workers take rows while few finishes wait; as the unwritten finishes near
    # FINISH_BACKLOG times the workers, the pick takes fewer, then none: the leases a node
    # holds stay within what it can finish before they expire.
    assert _with(free=32, backlog=0)._room() == 32
    assert _with(free=32, backlog=FINISH_BACKLOG * 32 - 5)._room() == 5
    assert _with(free=32, backlog=FINISH_BACKLOG * 32 + 40)._room() <= 0
