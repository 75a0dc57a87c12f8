"""``dbscheduler.testing`` used the way a user's own tests would use it (SQLite files)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from dbscheduler import (
    Cron,
    FixedDelay,
    FixedRate,
    LinearBackoff,
    Result,
    Scheduler,
    TaskContext,
)
from dbscheduler.testing import TestScheduler

START = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


def _scheduler(tmp_path: Path) -> Scheduler:
    return Scheduler(f"sqlite:///{tmp_path / 'test.sqlite3'}")


def test_a_fixed_rate_task_runs_twice_after_two_periods(tmp_path: Path) -> None:
    calls: list[datetime] = []
    scheduler = _scheduler(tmp_path)
    scheduler.add("sync", lambda ctx: calls.append(ctx.started_at), schedule=FixedRate(60))
    with TestScheduler(scheduler, now=START) as ts:
        assert ts.run_due() == []  # first due one period after registration
        runs = ts.advance(timedelta(seconds=119))
        assert [r.started_at for r in runs] == [START + timedelta(seconds=60)]
        runs = ts.advance(1)
        assert [r.started_at for r in runs] == [START + timedelta(seconds=120)]
        assert calls == [START + timedelta(seconds=60), START + timedelta(seconds=120)]
        info = ts.info("sync")
        assert info.reenqueue_attempt == 2 and info.last_status == "success"
        assert info.next_process_at == START + timedelta(seconds=180)
        assert ts.now == START + timedelta(seconds=120)


def test_a_failing_task_with_linear_backoff_retries_at_the_right_time(tmp_path: Path) -> None:
    attempts: list[int] = []

    def flaky(ctx: TaskContext) -> None:
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionError("upstream down")

    scheduler = _scheduler(tmp_path)
    scheduler.add("flaky", flaky, schedule=FixedDelay(3600),
                  on_failure=LinearBackoff(30, max_attempts=5))
    with TestScheduler(scheduler, now=START) as ts:
        first = START + timedelta(hours=1)
        runs = ts.advance(timedelta(hours=1, minutes=5))
        assert [(r.status, r.attempt, r.started_at) for r in runs] == [
            ("error", 1, first),
            ("error", 2, first + timedelta(seconds=30)),
            ("success", 3, first + timedelta(seconds=60)),
        ]
        assert runs[0].error == "ConnectionError: upstream down"
        assert runs[-1].next_at == first + timedelta(seconds=60) + timedelta(hours=1)
        assert ts.info("flaky").attempt == 0


def test_a_berlin_cron_keeps_its_wall_time_across_the_spring_forward(tmp_path: Path) -> None:
    berlin = ZoneInfo("Europe/Berlin")
    scheduler = _scheduler(tmp_path)
    scheduler.add("report", lambda: None, schedule=Cron("0 9 * * *", tz="Europe/Berlin"))
    # 2026-03-29: clocks go from 02:00 CET to 03:00 CEST.
    with TestScheduler(scheduler, now=datetime(2026, 3, 27, 12, tzinfo=timezone.utc)) as ts:
        runs = ts.advance(timedelta(days=3))
    assert [r.started_at.astimezone(berlin).strftime("%d %H:%M") for r in runs] == [
        "28 09:00", "29 09:00", "30 09:00"
    ]
    assert [r.started_at.hour for r in runs] == [8, 7, 7]  # UTC: 24 h, then 23 h apart


def test_state_and_next_at_from_a_result_are_stored(tmp_path: Path) -> None:
    def page(ctx: TaskContext) -> Result:
        cursor = (ctx.state or 0) + 1
        return Result.success(state=cursor, next_at=ctx.started_at + timedelta(minutes=5))

    scheduler = _scheduler(tmp_path)
    scheduler.add("page", page, schedule=FixedRate(3600))
    with TestScheduler(scheduler, now=START) as ts:
        runs = ts.advance(timedelta(hours=1, minutes=10))
        assert [r.started_at - START for r in runs] == [
            timedelta(hours=1), timedelta(hours=1, minutes=5), timedelta(hours=1, minutes=10)
        ]
        assert ts.info("page").state == 3


def test_async_tasks_run_too(tmp_path: Path) -> None:
    seen: list[str] = []

    async def job(ctx: TaskContext) -> None:
        seen.append(ctx.name)

    scheduler = _scheduler(tmp_path)
    scheduler.add("job", job, schedule=FixedRate(10))
    with TestScheduler(scheduler, now=START) as ts:
        assert len(ts.advance(30)) == 3
    assert seen == ["job"] * 3


def test_the_database_gets_its_own_clock_back(tmp_path: Path) -> None:
    scheduler = _scheduler(tmp_path)
    scheduler.add("sync", lambda: None, schedule=FixedRate(60))
    with TestScheduler(scheduler, now=START) as ts:
        assert scheduler.client.db_now() == START
        ts.advance(30)
        assert scheduler.client.db_now() == START + timedelta(seconds=30)
    assert abs(scheduler.client.db_now() - datetime.now(timezone.utc)) < timedelta(minutes=1)


def test_a_schedule_that_never_moves_on_is_reported(tmp_path: Path) -> None:
    scheduler = _scheduler(tmp_path)
    scheduler.add("spin", lambda: None, schedule=FixedDelay(0))
    with TestScheduler(scheduler, now=START, max_runs=20) as ts, \
            pytest.raises(RuntimeError, match="never moves on"):
        ts.run_due()


def test_only_sqlite_and_only_a_scheduler_never_started(tmp_path: Path) -> None:
    scheduler = _scheduler(tmp_path)
    scheduler.start()
    try:
        with pytest.raises(RuntimeError, match="never started"):
            TestScheduler(scheduler)
    finally:
        scheduler.shutdown()
    with pytest.raises(ValueError, match="naive"):
        TestScheduler(_scheduler(tmp_path / "x"), now=datetime(2026, 1, 1))


def test_the_run_history_is_written_on_the_test_clock(tmp_path: Path) -> None:
    def report(ctx: TaskContext) -> None:
        if ctx.total_attempt == 2:
            raise ConnectionError("upstream down")

    scheduler = _scheduler(tmp_path)
    scheduler.add("report", report, schedule=FixedRate(600))
    with TestScheduler(scheduler, now=START) as ts:
        runs = ts.advance(timedelta(hours=2))
        # Twelve runs of the user's task; dbscheduler's own pruning task (every ten minutes
        # on a real node) is neither registered nor run here.
        assert [r.name for r in runs] == ["report"] * 12
        assert [t.name for t in ts.tasks()] == ["report"]
        history = scheduler.runs("report", limit=20)
        assert [r.started_at for r in history] == [
            START + timedelta(minutes=10 * n) for n in range(12, 0, -1)]
        assert [(r.status, r.error) for r in history if r.status != "success"] == [
            ("error", "ConnectionError: upstream down")]
        assert {r.node_id for r in history} == {"testing"}
        assert ts.info("report").last_success_at == START + timedelta(hours=2)
