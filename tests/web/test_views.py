"""What the pages and the API say about a task, as pure functions: states on the database
clock, schedules in words, upcoming fire times, durations."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from dbscheduler import RunInfo, TaskInfo
from dbscheduler.web.pages import CHART_H, CHART_W, duration_chart, fmt_duration
from dbscheduler.web.views import describe_schedule, filter_tasks, states_of, upcoming

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)
IDLE = TaskInfo(
    id=1, name="t", state=None, created_at=NOW, next_process_at=NOW + timedelta(hours=1),
    attempt=0, reenqueue_attempt=0, total_attempt=0, paused=False, locked_by=None,
    heartbeat_at=None, last_started_at=None, last_finished_at=None, last_status=None,
    last_error=None, schedule="fixed-rate 3600s",
)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("cron 0 3 * * * Europe/Berlin", "every day at 03:00 Europe/Berlin"),
        ("cron 30 6 * * * UTC", "every day at 06:30 UTC"),
        ("cron */5 * * * * UTC", "every 5 minutes"),
        ("cron * * * * * UTC", "every minute"),
        ("cron */15 * * * * * UTC", "every 15 seconds"),
        ("cron 30 * * * * UTC", "every hour at :30"),
        ("cron 0 */2 * * * UTC", "every 2 hours at :00 UTC"),
        ("cron 0 9 * * 1 Europe/Paris", "every Monday at 09:00 Europe/Paris"),
        ("cron 0 9 * * 1-5 UTC", "every weekday at 09:00 UTC"),
        ("cron 0 0 1 * * UTC", "on day 1 of every month at 00:00 UTC"),
        ("cron 5,35 3 * * * UTC", "cron 5,35 3 * * *"),
        ("cron 0 3 * * 1#2 America/New_York", "cron 0 3 * * 1#2 (America/New_York)"),
        ("fixed-rate 300s", "every 5 minutes"),
        ("fixed-rate 1.5s", "every 1.5 seconds"),
        ("fixed-rate 86400s", "every day"),
        ("fixed-delay 0s", "again as soon as each run ends"),
        ("fixed-delay 60s", "1 minute after each run ends"),
        ("dynamic app.tasks.next_time", "decided by app.tasks.next_time after each run"),
        (None, "no schedule recorded"),
        ("something new", "something new"),
    ],
)
def test_schedules_in_words(text: str | None, words: str) -> None:
    assert describe_schedule(text) == words


def test_states_on_the_database_clock() -> None:
    assert states_of(IDLE, NOW) == {"idle"}
    assert states_of(replace(IDLE, locked_by="n1"), NOW) == {"running"}
    assert states_of(replace(IDLE, paused=True), NOW) == {"paused"}
    for status in ("error", "lost", "timeout"):
        assert states_of(replace(IDLE, last_status=status), NOW) == {"failing"}
    assert states_of(replace(IDLE, last_status="cancelled"), NOW) == {"idle"}
    # Overdue: due more than 60 s ago, not paused, not running.
    due = NOW - timedelta(seconds=60)
    assert states_of(replace(IDLE, next_process_at=due), NOW) == {"idle"}
    late = replace(IDLE, next_process_at=due - timedelta(milliseconds=1))
    assert states_of(late, NOW) == {"overdue"}
    assert states_of(replace(late, paused=True), NOW) == {"paused"}
    assert states_of(replace(late, last_status="error"), NOW) == {"overdue", "failing"}
    # Or past its alert_after without a success (TaskInfo.overdue, judged by the client).
    assert states_of(replace(IDLE, last_status="error", overdue=True), NOW) == {
        "overdue", "failing"}


def test_filter_by_state_and_text() -> None:
    a = replace(IDLE, name="Nightly-Report")
    b = replace(IDLE, name="cleanup", paused=True, schedule="fixed-delay 300s")
    assert filter_tasks([a, b], NOW, None, "report") == [a]
    assert filter_tasks([a, b], NOW, None, "delay") == [b]
    assert filter_tasks([a, b], NOW, "paused", None) == [b]
    assert filter_tasks([a, b], NOW, "paused", "report") == []


def test_upcoming_times_and_what_they_assume() -> None:
    cron = replace(IDLE, schedule="cron 0 3 * * * Europe/Berlin",
                   next_process_at=datetime(2026, 11, 24, 2, 0, tzinfo=timezone.utc))
    coming = upcoming(cron, NOW, 3)
    assert [t.isoformat() for t in coming.times] == [
        "2026-11-24T02:00:00+00:00", "2026-11-25T02:00:00+00:00", "2026-11-26T02:00:00+00:00"]
    assert coming.note is None
    # An overdue fixed-rate task runs once now, then keeps its grid from there.
    overdue = replace(IDLE, next_process_at=NOW - timedelta(minutes=90))
    times = upcoming(overdue, NOW, 3).times
    assert times[0] == NOW - timedelta(minutes=90)
    assert times[1:] == [NOW + timedelta(minutes=30), NOW + timedelta(minutes=90)]
    assert "no time" in (upcoming(replace(IDLE, schedule="fixed-delay 60s"), NOW).note or "")
    dynamic = upcoming(replace(IDLE, schedule="dynamic a.b"), NOW)
    assert dynamic.times == [IDLE.next_process_at] and "task's code" in (dynamic.note or "")
    assert "paused" in (upcoming(replace(IDLE, paused=True), NOW).note or "")
    running = upcoming(replace(cron, locked_by="n1"), NOW, 2)
    assert running.times[0] == datetime(2026, 11, 24, 2, 0, tzinfo=timezone.utc)
    assert "running now" in (running.note or "")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0042, "4 ms"), (12.44, "12.4 s"), (185, "3 min 5 s"), (7800, "2 h 10 min")],
)
def test_durations(seconds: float, text: str) -> None:
    assert fmt_duration(timedelta(seconds=seconds)) == text


def _run(started: datetime, seconds: float) -> RunInfo:
    return RunInfo(1, "t", 4, 1, "n1", started, started, started + timedelta(seconds=seconds),
                   "success", None)


def test_the_duration_chart_puts_the_newest_on_the_right_scaled_to_the_longest() -> None:
    runs = [_run(NOW - timedelta(minutes=i), s) for i, s in enumerate([1.0, 4.0, 2.0])]
    bars = duration_chart(runs)  # runs() order: newest first
    assert [b.run for b in bars] == list(reversed(runs))
    assert [round(b.height) for b in bars] == [round((CHART_H - 4) * f) for f in (.5, 1, .25)]
    assert all(b.y + b.height == CHART_H for b in bars)
    assert bars[-1].x + bars[-1].width <= CHART_W and bars[0].x > CHART_W / 2  # few: right
    assert duration_chart([]) == []
    assert duration_chart([_run(NOW, 0.0)])[0].height >= 2  # a zero-length run stays visible
