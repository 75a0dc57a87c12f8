"""What a listener sets in ``on_started`` is current inside the task function: one context
per execution, for thread and coroutine tasks alike (tracing spans depend on it)."""

from __future__ import annotations

import contextvars
import threading
import time
import types
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest

from dbscheduler import FixedRate, Listener, NoRetry, TaskContext
from dbscheduler._engine import executor as executor_module
from dbscheduler._engine.execution import Ended, Execution, TaskDef
from dbscheduler._engine.executor import Executor
from dbscheduler.listeners import Listeners

current: contextvars.ContextVar[str | None] = contextvars.ContextVar("current", default=None)


class SetsOnStart(Listener):
    def on_started(self, ctx: TaskContext) -> None:
        if not ctx.name.startswith("plain"):
            current.set(f"{ctx.name}#{ctx.total_attempt}")


def _execution(name: str, fn: Callable[..., Any], token: int) -> Execution:
    now = datetime.now(timezone.utc)
    task = TaskDef.build(name, fn, FixedRate(60), NoRetry())
    ctx = TaskContext(name, "node", 1, 0, token, now, now, now, None)
    ex = Execution(task, ctx, id=token, token=token)
    ex.lease_until, ex.margin = time.monotonic() + 30, 0.1
    return ex


def _run_all(executions: list[Execution], workers: int = 2) -> list[Ended]:
    ended: list[Ended] = []
    lock = threading.Lock()
    all_done = threading.Event()

    def on_ended(e: Ended) -> None:
        with lock:
            ended.append(e)
            if len(ended) == len(executions):
                all_done.set()

    listeners = Listeners()
    listeners.add(SetsOnStart())
    executor = Executor(workers, on_ended, listeners)
    try:
        for ex in executions:
            executor.submit(ex)
        assert all_done.wait(10)
    finally:
        executor.shutdown()
    return ended


def test_a_thread_task_sees_what_on_started_set() -> None:
    seen: list[str | None] = []
    _run_all([_execution("t", lambda: seen.append(current.get()), token=3)])
    assert seen == ["t#3"]


def test_a_coroutine_task_sees_what_on_started_set() -> None:
    seen: list[str | None] = []

    async def job() -> None:
        seen.append(current.get())

    ended = _run_all([_execution("c", job, token=5)])
    assert seen == ["c#5"] and ended[0].status == "success"


def test_the_context_is_per_execution_and_not_left_on_the_worker() -> None:
    # One worker runs them all in order: a value set for one execution must not leak into
    # the next one, which sets nothing.
    seen: dict[str, str | None] = {}

    def make(name: str) -> Callable[[], None]:
        return lambda: seen.__setitem__(name, current.get())

    async def coro_job() -> None:
        seen["async"] = current.get()

    async def plain_coro() -> None:
        seen["plain-async"] = current.get()

    executions = [
        _execution("t0", make("t0"), token=10),
        _execution("plain-1", make("plain-1"), token=11),
        _execution("async", coro_job, token=20),
        _execution("plain-async", plain_coro, token=21),
        _execution("t1", make("t1"), token=12),
        _execution("plain-2", make("plain-2"), token=13),
    ]
    _run_all(executions, workers=1)
    assert seen == {"t0": "t0#10", "plain-1": None, "async": "async#20", "plain-async": None,
                    "t1": "t1#12", "plain-2": None}
    assert current.get() is None


def test_a_coroutine_failure_is_an_error_of_the_execution() -> None:
    async def boom() -> None:
        raise ValueError("nope")

    (ended,) = _run_all([_execution("c", boom, token=1)])
    assert ended.status == "error" and ended.error == "ValueError: nope"


def test_python_3_10_fallback_also_runs_the_coroutine_in_the_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before 3.11 create_task takes no context: the task copies the one current at creation.
    monkeypatch.setattr(executor_module, "sys", types.SimpleNamespace(version_info=(3, 10, 0)))
    seen: list[str | None] = []

    async def job() -> None:
        seen.append(current.get())

    _run_all([_execution("old", job, token=9)])
    assert seen == ["old#9"]
