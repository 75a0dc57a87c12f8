"""The executor never starts a task function without a lease."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

from dbscheduler import FixedRate, NoRetry, TaskContext
from dbscheduler._engine.execution import Ended, Execution, TaskDef
from dbscheduler._engine.executor import Executor
from dbscheduler.listeners import Listeners


def _execution(fn: object, lease_left: float) -> Execution:
    now = datetime.now(timezone.utc)
    task = TaskDef.build("t", fn, FixedRate(60), NoRetry())  # type: ignore[arg-type]
    ctx = TaskContext("t", "node", 1, 0, 7, now, now, now, None)
    ex = Execution(task, ctx, id=1, token=7)
    ex.lease_until, ex.margin = time.monotonic() + lease_left, 0.1
    return ex


def _run(ex: Execution) -> Ended:
    ended: list[Ended] = []
    done = threading.Event()

    def on_ended(e: Ended) -> None:
        ended.append(e)
        done.set()

    executor = Executor(1, on_ended, Listeners())
    try:
        executor.submit(ex)
        assert done.wait(5)
    finally:
        executor.shutdown()
    return ended[0]


def test_an_execution_whose_lease_already_ran_out_is_not_started() -> None:
    calls: list[int] = []
    ended = _run(_execution(lambda: calls.append(1), lease_left=-1.0))
    assert calls == []
    assert ended.status == "lost" and ended.error is not None and "lease" in ended.error
    assert ended.execution.ctx.stop_requested.is_set()


def test_an_execution_within_its_lease_runs() -> None:
    calls: list[int] = []
    ended = _run(_execution(lambda: calls.append(1), lease_left=30.0))
    assert calls == [1] and ended.status == "success"


def test_system_exit_in_a_task_is_an_error_not_a_dead_worker() -> None:
    def bye() -> None:
        raise SystemExit(3)

    ended = _run(_execution(bye, lease_left=30.0))
    assert ended.status == "error" and ended.error == "SystemExit: 3"
