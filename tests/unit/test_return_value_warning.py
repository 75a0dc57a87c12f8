"""A task returning a value that is neither None nor a Result is warned about, once."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone

import pytest

from dbscheduler import FixedRate, NoRetry, Result, TaskContext
from dbscheduler._engine.execution import Ended, Execution, TaskDef
from dbscheduler._engine.executor import Executor
from dbscheduler.listeners import Listeners


def _run_times(name: str, fn: object, times: int) -> list[Ended]:
    ended: list[Ended] = []
    done = threading.Semaphore(0)

    def on_ended(e: Ended) -> None:
        ended.append(e)
        done.release()

    executor = Executor(1, on_ended, Listeners())
    task = TaskDef.build(name, fn, FixedRate(60), NoRetry())  # type: ignore[arg-type]
    try:
        for token in range(1, times + 1):
            now = datetime.now(timezone.utc)
            ex = Execution(task, TaskContext(name, "node", 1, 0, token, now, now, now, None),
                           id=1, token=token)
            ex.lease_until = time.monotonic() + 30
            executor.submit(ex)
            assert done.acquire(timeout=5)
    finally:
        executor.shutdown()
    return ended


@pytest.fixture(autouse=True)
def _logger_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    # An Alembic env.py run earlier in the session (logging.config.fileConfig) disables the
    # loggers that exist at that moment.
    monkeypatch.setattr(logging.getLogger("dbscheduler.executor"), "disabled", False)


def test_a_returned_value_is_warned_about_once_per_task(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="dbscheduler.executor")
    ended = _run_times("returns-42", lambda: 42, 3)
    assert [e.status for e in ended] == ["success"] * 3
    warnings = [r for r in caplog.records if r.name == "dbscheduler.executor"]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert "'returns-42'" in message and "42" in message
    assert "Result.success(state=" in message


def test_none_and_results_are_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="dbscheduler.executor")
    _run_times("returns-none", lambda: None, 2)
    _run_times("returns-result", lambda: Result.success(state={"n": 1}), 2)
    assert [r for r in caplog.records if r.name == "dbscheduler.executor"] == []
