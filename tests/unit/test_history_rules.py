"""The history's and the alerts' pure rules: settings, the overdue rule on a row, the JSON of
runs and tasks, durations for people. The dashboard's chart: ``tests/web/test_views.py``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from dbscheduler import RunInfo
from dbscheduler._engine.history import PRUNE_TASK, HistorySettings
from dbscheduler._engine.taskinfo import task_info
from dbscheduler.cli.render import human_duration

NOW = datetime(2031, 7, 14, 12, 0, tzinfo=timezone.utc)


def test_history_settings() -> None:
    assert HistorySettings.of(timedelta(days=7), 1000) == HistorySettings(timedelta(days=7), 1000)
    assert HistorySettings.of(3600, None) == HistorySettings(timedelta(hours=1), None)
    assert HistorySettings.of(86400 * 400, 5).keep == timedelta(days=400)  # over a year is fine
    assert HistorySettings.of(None, 1000) is None
    for history, per_task, message in ((0, 5, "history must be > 0"),
                                       (60, 0, "history_per_task must be an integer >= 1"),
                                       (60, True, "history_per_task must be an integer"),
                                       ("7d", 5, "history must be a timedelta")):
        with pytest.raises(ValueError, match=message):
            HistorySettings.of(history, per_task)  # type: ignore[arg-type]


def row(**values: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": 1, "queue_name": "t", "payload": None, "created_at": NOW - timedelta(days=1),
        "next_process_at": NOW + timedelta(minutes=1), "attempt": 0, "reenqueue_attempt": 0,
        "total_attempt": 3, "paused": False, "locked_by": None, "heartbeat_at": None,
        "last_started_at": None, "last_finished_at": None, "last_status": None,
        "last_error": None, "schedule": "fixed-rate 60s", "stop_requested": False,
        "last_success_at": None, "alert_after": None, "alerted_at": None,
    }
    base.update(values)
    return base


@pytest.mark.parametrize(("values", "overdue"), [
    ({}, False),
    ({"next_process_at": NOW - timedelta(seconds=61)}, True),
    ({"next_process_at": NOW - timedelta(seconds=59)}, False),
    ({"next_process_at": NOW - timedelta(hours=1), "paused": True}, False),
    ({"next_process_at": NOW - timedelta(hours=1), "locked_by": "n1"}, False),  # running
    # Dead man: no success within alert_after, counted from creation until a first success.
    ({"alert_after": 3600.0}, True),
    ({"alert_after": 3600.0, "last_success_at": NOW - timedelta(minutes=30)}, False),
    ({"alert_after": 3600.0, "last_success_at": NOW - timedelta(minutes=61)}, True),
    ({"alert_after": 3600.0, "locked_by": "n1"}, True),  # running, and still no success
    ({"alert_after": 3600.0, "paused": True}, False),
])
def test_the_overdue_rule_on_a_row(values: dict[str, Any], overdue: bool) -> None:
    assert task_info(row(**values), now=NOW, overdue_after=timedelta(seconds=60)).overdue is overdue
    assert task_info(row(**values)).overdue is False  # no clock given: not judged


def test_task_json_carries_the_alert_fields_and_builtin() -> None:
    info = task_info(row(queue_name=PRUNE_TASK, alert_after=90.5, alerted_at=NOW,
                         last_success_at=NOW), now=NOW)
    data = info.to_dict()
    assert info.builtin and data["builtin"] is True
    assert info.alert_after == timedelta(seconds=90.5) and data["alert_after"] == 90.5
    assert data["alerted_at"] == data["last_success_at"] == NOW.isoformat()
    assert data["overdue"] is False and data["running"] is False
    assert not task_info(row(queue_name="dbscheduler-like")).builtin


def run(started: datetime, seconds: float, status: str = "success") -> RunInfo:
    return RunInfo(1, "t", 4, 2, "n1", started, started, started + timedelta(seconds=seconds),
                   status, None if status == "success" else "boom")


def test_run_json_has_iso_times_and_the_duration_in_seconds() -> None:
    data = run(NOW, 1.25, "error").to_dict()
    assert data == {"id": 1, "name": "t", "token": 4, "attempt": 2, "node_id": "n1",
                    "scheduled_at": NOW.isoformat(), "started_at": NOW.isoformat(),
                    "finished_at": (NOW + timedelta(seconds=1.25)).isoformat(),
                    "status": "error", "error": "boom", "traceback": None, "duration": 1.25}


def test_durations_for_people() -> None:
    cases = [(0.0004, "0 ms"), (0.34, "340 ms"), (12.44, "12.4 s"), (185, "3m 5s"),
             (7800, "2h 10m"), (97200, "1d 3h")]
    assert [human_duration(timedelta(seconds=s)) for s, _ in cases] == [t for _, t in cases]
