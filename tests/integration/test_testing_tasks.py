"""TestScheduler(scheduler, tasks=[...]): a test moves the clock for the named tasks only."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from dbscheduler import Cron, FixedRate, Scheduler, TaskContext
from dbscheduler.testing import TestScheduler


def test_test_scheduler_runs_only_the_named_tasks(tmp_path: Path) -> None:
    """A nightly cron tested across two days, next to a task due every second: only the
    named one runs (before, the other ran 172,800 times, past max_runs)."""
    scheduler = Scheduler(f"sqlite:///{tmp_path}/t.sqlite3")
    ran: list[str] = []

    @scheduler.task("nightly", schedule=Cron("0 3 * * *"))
    def nightly(ctx: TaskContext) -> None:
        ran.append(ctx.name)

    @scheduler.task("every-second", schedule=FixedRate(1))
    def every_second(ctx: TaskContext) -> None:
        ran.append(ctx.name)

    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with TestScheduler(scheduler, now=start, tasks=["nightly"]) as ts:
        runs = ts.advance(timedelta(days=2))
        assert [(r.name, r.started_at.day) for r in runs] == [("nightly", 1), ("nightly", 2)]
        assert ts.info("every-second").reenqueue_attempt == 0
    assert ran == ["nightly", "nightly"]


def test_test_scheduler_refuses_a_task_it_does_not_have(tmp_path: Path) -> None:
    scheduler = Scheduler(f"sqlite:///{tmp_path}/t.sqlite3")
    scheduler.add("nightly", lambda ctx: None, schedule=Cron("0 3 * * *"))
    with pytest.raises(ValueError, match=r"no task or handler named 'nighty'.*'nightly'"):
        TestScheduler(scheduler, tasks=["nighty"])
    with pytest.raises(ValueError, match=r"write tasks=\['nightly'\]"):
        TestScheduler(scheduler, tasks="nightly")
