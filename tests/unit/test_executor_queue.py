"""How the executor hands queued executions to its workers: quick ones run back to back on
the workers already awake, blocking ones still each get a worker at once, and one picked
ahead of its due time waits in the queue, never in a worker, and never starts early."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from dbscheduler import FixedRate, NoRetry, TaskContext
from dbscheduler._engine.execution import Ended, Execution, TaskDef
from dbscheduler._engine.executor import Executor
from dbscheduler.listeners import Listeners


def _execution(fn: Callable[[], Any], n: int, not_before: float = 0.0) -> Execution:
    now = datetime.now(timezone.utc)
    task = TaskDef.build(f"t{n}", fn, FixedRate(60), NoRetry())
    ctx = TaskContext(f"t{n}", "node", 1, 0, n, now, now, now, None)
    ex = Execution(task, ctx, id=n, token=n)
    ex.lease_until, ex.margin = time.monotonic() + 30, 0.1
    ex.not_before = not_before
    return ex


class Ends:
    """Collects what ended; ``wait(n)`` until ``n`` executions did."""

    def __init__(self) -> None:
        self.ended: list[Ended] = []
        self._cond = threading.Condition()

    def __call__(self, e: Ended) -> None:
        with self._cond:
            self.ended.append(e)
            self._cond.notify_all()

    def wait(self, n: int, timeout: float = 10.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.ended) >= n, timeout), self.ended


@pytest.fixture
def ends() -> Ends:
    return Ends()


@pytest.fixture
def executor(ends: Ends) -> Iterator[Executor]:
    made = Executor(32, ends, Listeners())
    yield made
    made.shutdown()


def test_quick_executions_picked_ahead_run_on_a_few_workers(executor: Executor,
                                                             ends: Ends) -> None:
    # A pick ahead of a load spread over time: each execution due 2 ms after the one before.
    # When each waited for its time in a worker of its own, all 32 workers took turns.
    threads: set[int] = set()
    early: list[float] = []

    def note(due: float) -> Callable[[], None]:
        def run() -> None:
            threads.add(threading.get_ident())
            early.extend([due - time.monotonic()] if time.monotonic() < due else [])
        return run

    start = time.monotonic() + 0.05
    dues = [start + 0.002 * n for n in range(100)]
    executor.submit_many([_execution(note(due), n, due) for n, due in enumerate(dues)])
    ends.wait(100)
    assert all(e.status == "success" for e in ends.ended)
    assert early == []
    assert len(threads) <= 8, len(threads)


def test_blocking_executions_each_get_a_worker_at_once(executor: Executor,
                                                       ends: Ends) -> None:
    # Each waits for all the others: they can only end if all 16 run at the same time.
    together = threading.Barrier(16, timeout=5)
    executor.submit_many([_execution(together.wait, n) for n in range(16)])
    ends.wait(16)
    assert [e.status for e in ends.ended] == ["success"] * 16, [e.error for e in ends.ended]


def test_an_execution_picked_ahead_starts_at_its_time_and_not_before(executor: Executor,
                                                                      ends: Ends) -> None:
    started: dict[int, float] = {}
    now = time.monotonic()
    later, sooner = now + 0.3, now + 0.1
    # The later one first: the worker waiting for it must give way to the sooner one.
    executor.submit(_execution(lambda: started.__setitem__(1, time.monotonic()), 1, later))
    time.sleep(0.02)
    executor.submit(_execution(lambda: started.__setitem__(2, time.monotonic()), 2, sooner))
    ends.wait(2)
    assert started[2] >= sooner and started[1] >= later
    assert started[2] < started[1]
    assert started[2] - sooner < 0.08, "the sooner one waited for the later one's time"


def test_a_close_withdraws_an_execution_still_waiting_for_its_time(executor: Executor,
                                                                  ends: Ends) -> None:
    calls: list[int] = []
    waiting = _execution(lambda: calls.append(1), 1, time.monotonic() + 0.2)
    executor.submit(waiting)
    assert executor.close() == [waiting]
    time.sleep(0.3)
    assert calls == [] and ends.ended == []
