"""The pieces of "a row that cannot be read": the back-off, the episode log, stored options read
strictly, timestamps Python cannot represent."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest

from dbscheduler import FixedDelay, TaskContext
from dbscheduler._engine.execution import Execution, TaskDef
from dbscheduler._engine.options import TaskOptions
from dbscheduler._engine.unreadable import MAX_RETRY, Episodes, UnreadableRow, retry_after
from dbscheduler.context import UNSET
from dbscheduler.dialects.types import UNREADABLE_TIME, to_utc
from dbscheduler.failures import NoRetry

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)


def test_the_back_off_doubles_from_one_second_up_to_five_minutes() -> None:
    delays = [retry_after(n).total_seconds() for n in range(1, 12)]
    assert delays == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
    assert retry_after(0) == timedelta(seconds=1)
    assert retry_after(10**9) == MAX_RETRY  # no overflow at any attempt


def _execution(name: str, attempt: int, token: int = 1) -> Execution:
    task = TaskDef.build(name, lambda: None, FixedDelay(1), NoRetry())
    ctx = TaskContext(name=name, node_id="n", attempt=attempt, reenqueue_attempt=0,
                      total_attempt=token, scheduled_at=T0, started_at=T0, created_at=T0,
                      state=None)
    return Execution(task, ctx, 1, token)


def test_an_episode_is_logged_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    episodes = Episodes()
    problem = UnreadableRow("schedule", "unknown kind 'hourly'")
    with caplog.at_level(logging.INFO, logger="dbscheduler.rows"):
        ended = [episodes.failed(_execution("a", n, n), problem) for n in (1, 2, 3)]
        episodes.readable("b", 1)  # never unreadable: nothing to say
        episodes.readable("a", 4)
        episodes.readable("a", 5)
        episodes.failed(_execution("a", 1, 6), problem)  # a new episode
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == ["ERROR", "INFO", "ERROR"], lines
    assert "column schedule: unknown kind 'hourly'" in lines[0][1]
    assert "readable again" in lines[1][1]
    # Each try ends as an error, without touching the state, at its back-off.
    assert [e.status for e in ended] == ["error"] * 3
    assert all(e.state is UNSET for e in ended)
    assert [e.next_at for e in ended] == [T0 + timedelta(seconds=s) for s in (1, 2, 4)]
    assert ended[0].error is not None
    assert ended[0].error.startswith("column schedule cannot be read, the execution was not "
                                     "started (next try in 1 s): unknown kind 'hourly'")


def test_another_reason_is_another_episode(caplog: pytest.LogCaptureFixture) -> None:
    episodes = Episodes()
    with caplog.at_level(logging.ERROR, logger="dbscheduler.rows"):
        episodes.failed(_execution("a", 1), UnreadableRow("data", "x"))
        episodes.failed(_execution("a", 2), UnreadableRow("data", "x"))
        episodes.failed(_execution("a", 3), UnreadableRow("options", "y"))
    assert len(caplog.records) == 2


@pytest.mark.parametrize(("text", "fragment"), [
    ("{not json", "is not JSON"),
    ("[1, 2]", "is not a JSON object"),
    ('{"timeout": "soon"}', "timeout must be a timedelta or a number of seconds"),
    ('{"isolation": "fork"}', "isolation must be 'thread' or 'process'"),
    ('{"group": ""}', "group must be a non-empty string"),
])
def test_stored_options_read_to_run_a_row_refuse_what_they_cannot_use(
    text: str, fragment: str
) -> None:
    with pytest.raises(ValueError, match=fragment):
        TaskOptions.read(text)
    # What list and show print stays lenient: the defaults, with a warning.
    assert isinstance(TaskOptions.from_json(text), TaskOptions)


def test_stored_options_of_a_newer_version_still_run() -> None:
    read = TaskOptions.read('{"priority": 4, "timeout": 30, "shiny_new_option": true}')
    assert read == TaskOptions(priority=4, timeout=timedelta(seconds=30))
    assert TaskOptions.read(None) == TaskOptions.read("") == TaskOptions()


@pytest.mark.parametrize("stored", ["0000-00-00 00:00:00", "soon", "2026-13-45 25:00:00", ""])
def test_a_stored_time_python_cannot_represent_reads_as_the_earliest_time(stored: str) -> None:
    assert to_utc(stored) == UNREADABLE_TIME
    assert UNREADABLE_TIME < T0


def test_readable_stored_times_are_read_as_before() -> None:
    assert to_utc("2026-11-26 12:00:00.000000") == T0
    assert to_utc(datetime(2026, 11, 26, 12, 0)) == T0
    assert to_utc(None) is None
    with pytest.raises(TypeError):
        to_utc(12)
