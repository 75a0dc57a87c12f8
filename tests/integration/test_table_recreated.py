"""A node survives its table being dropped and recreated: it registers its tasks again."""

from __future__ import annotations

import logging
import re
import threading
import time

import pytest
import sqlalchemy as sa

from dbscheduler import FixedDelay, FixedRate, Scheduler, TaskContext
from dbscheduler.migrate import upgrade
from tests.conftest import drop_table
from tests.helpers import running, wait_until


@pytest.fixture(autouse=True)
def _loggers_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    # An Alembic env.py run earlier in the session (logging.config.fileConfig) disables the
    # loggers that exist at that moment.
    for name in ("dbscheduler.poller", "dbscheduler.finisher"):
        monkeypatch.setattr(logging.getLogger(name), "disabled", False)


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("gap", [0.0, 1.5], ids=["at-once", "after-a-gap"])
def test_tasks_run_again_after_the_table_is_dropped_and_recreated(
    migrated: tuple[str, str], gap: float, caplog: pytest.LogCaptureFixture
) -> None:
    url, table = migrated
    caplog.set_level(logging.WARNING, logger="dbscheduler")
    runs: list[float] = []
    lock = threading.Lock()

    def tick(ctx: TaskContext) -> None:
        with lock:
            runs.append(time.monotonic())

    scheduler = Scheduler(url, table=table, lease=2, poll_interval=0.2)
    scheduler.add("tick", tick, schedule=FixedRate(0.3))
    with running(scheduler):
        wait_until(lambda: len(runs) >= 2, timeout=10, what="two runs before the drop")
        drop_table(url, table)
        dropped = time.monotonic()
        time.sleep(gap)  # the gap is what the case is about, not a synchronisation
        engine = sa.create_engine(url)
        try:
            upgrade(engine, table)  # `dbscheduler migrate`
        finally:
            engine.dispose()
        wait_until(lambda: any(t > dropped + gap for t in runs), timeout=15,
                   what="a run after the table was recreated")
        info = scheduler.info("tick")
    assert info.total_attempt >= 1
    assert "registering its 1 task(s) again" in caplog.text


def test_a_finish_refused_because_the_row_is_gone_says_so(
    migrated: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    url, table = migrated
    caplog.set_level(logging.WARNING, logger="dbscheduler")
    started = threading.Event()
    deleted = threading.Event()
    finished = threading.Event()

    def slow(ctx: TaskContext) -> None:
        started.set()
        deleted.wait(30)  # finishes only once its row is gone

    scheduler = Scheduler(url, table=table, lease=10, poll_interval=0.2)
    scheduler.add("slow", slow, schedule=FixedDelay(3600))
    scheduler.add("other", lambda: None, schedule=FixedDelay(3600))

    class Done:
        def on_finished(self, ctx: TaskContext, outcome: object) -> None:
            if ctx.name == "slow":
                finished.set()

    scheduler.add_listener(Done())
    with running(scheduler):
        scheduler.trigger("slow")
        assert started.wait(10)
        scheduler.delete("slow", force=True)
        deleted.set()
        assert finished.wait(30)
    assert re.search(r"task='slow' token=\d+\] finish refused: the task's row is gone \(deleted, "
                     r"or the table was recreated\)", caplog.text)
    assert "another node owns the row" not in caplog.text
