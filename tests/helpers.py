"""Small helpers shared by the test suites."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from dbscheduler import Client, Scheduler, TaskInfo


def wait_until(condition: Callable[[], object], timeout: float = 30, what: str = "") -> None:
    """Poll ``condition`` until it is true; fail the test after ``timeout`` seconds."""
    # The default waits long enough for a machine ten times slower: it costs nothing when the
    # event comes, and only a failing test waits it out.
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what or condition}")
        time.sleep(0.02)


def user_rows(source: Client | Scheduler) -> list[TaskInfo]:
    """The rows of ``source``'s table but the built-in tasks' (``dbscheduler.prune-runs``)."""
    return [t for t in source.tasks() if not t.builtin]


def no_keys(source: Client | Scheduler) -> bool:
    """No row but the built-in tasks' (a delivered key's row is gone)."""
    return not user_rows(source)


@contextmanager
def running(scheduler: Scheduler, shutdown_timeout: float = 5) -> Iterator[Scheduler]:
    """The scheduler started for the block, shut down after it."""
    scheduler.start()
    try:
        yield scheduler
    finally:
        scheduler.shutdown(timeout=shutdown_timeout)
