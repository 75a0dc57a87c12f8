"""The history prune yields the database between its batches: a wait as long as each batch
took, ended at once by a stop request."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from dbscheduler._engine.history import MAX_PAUSE, gently


def _batches(n: int, seconds: float, worked: list[float]) -> Iterator[int]:
    for _ in range(n):
        began = time.monotonic()
        time.sleep(seconds)  # the statement's own time
        worked.append(time.monotonic() - began)
        yield 100


def test_each_batch_is_followed_by_a_pause_as_long_as_it() -> None:
    worked: list[float] = []
    began = time.monotonic()
    assert sum(gently(_batches(4, 0.05, worked), threading.Event())) == 400
    took = time.monotonic() - began
    # At least the work plus as much again (a busy machine only makes both longer).
    assert took >= 2 * sum(worked) * 0.95, (took, worked)


def test_a_stop_during_a_pause_ends_the_prune() -> None:
    stop = threading.Event()
    seen: list[int] = []
    timer = threading.Timer(0.2, stop.set)
    timer.start()
    for deleted in gently(_batches(100, 2 * MAX_PAUSE, []), stop):
        seen.append(deleted)
    # The first batch (longer than the stop's delay), then a pause the stop ends: no second.
    assert seen == [100]
