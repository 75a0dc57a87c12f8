"""One-off jobs through the real engine (SQLite, a clock the test moves): they retry by the
handler's failure settings and their row is deleted when they succeed or give up."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from dbscheduler import LinearBackoff, Scheduler, TaskContext
from dbscheduler.testing import TestScheduler

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_a_one_off_job_retries_then_its_row_goes(tmp_path: Path) -> None:
    scheduler = Scheduler(f"sqlite:///{tmp_path}/t.sqlite3")
    seen: list[tuple[str, object, int]] = []

    @scheduler.handler("flaky", on_failure=LinearBackoff(10, max_attempts=3))
    def flaky(ctx: TaskContext) -> None:
        seen.append((ctx.name, ctx.data, ctx.attempt))
        if ctx.data["fail"] and ctx.attempt < 99:
            raise RuntimeError("not yet")

    with TestScheduler(scheduler, now=START) as ts:
        scheduler.schedule_once("gives-up", "flaky", START + timedelta(seconds=5),
                                data={"fail": True})
        scheduler.schedule_once("succeeds", "flaky", START + timedelta(seconds=7),
                                data={"fail": False})
        runs = ts.advance(60)
        assert [(r.name, r.status, r.attempt) for r in runs] == [
            ("gives-up", "error", 1), ("succeeds", "success", 1),
            ("gives-up", "error", 2), ("gives-up", "error", 3),
        ]
        assert [r.scheduled_at - START for r in runs if r.name == "gives-up"] == [
            timedelta(seconds=5), timedelta(seconds=15), timedelta(seconds=25)]
        assert ts.tasks() == [], "both rows are gone: one succeeded, one gave up"
        assert ts.advance(3600) == []
    assert seen[1] == ("succeeds", {"fail": False}, 1)


def test_a_runtime_row_of_another_handler_is_left_alone(tmp_path: Path) -> None:
    scheduler = Scheduler(f"sqlite:///{tmp_path}/t.sqlite3")
    scheduler.handler("mine")(lambda ctx: None)
    with TestScheduler(scheduler, now=START) as ts:
        scheduler.schedule_once("theirs", "not-here", START)
        scheduler.schedule_once("ours", "mine", START)
        assert [r.name for r in ts.advance(60)] == ["ours"]
        (left,) = ts.tasks()
        assert (left.name, left.total_attempt, left.locked_by) == ("theirs", 0, None)
