"""Small helpers shared by the test suites."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from dbscheduler import Scheduler


def wait_until(condition: Callable[[], object], timeout: float = 10, what: str = "") -> None:
    """Poll ``condition`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what or condition}")
        time.sleep(0.02)


@contextmanager
def running(scheduler: Scheduler, shutdown_timeout: float = 5) -> Iterator[Scheduler]:
    """The scheduler started for the block, shut down after it."""
    scheduler.start()
    try:
        yield scheduler
    finally:
        scheduler.shutdown(timeout=shutdown_timeout)
