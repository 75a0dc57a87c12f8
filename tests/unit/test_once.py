"""``Once``: its text reads back to an equal schedule; bad runtime input is refused."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dbscheduler import Client, Dynamic, FixedRate, Once
from dbscheduler._engine.runtime import runtime_row
from dbscheduler.schedules import parse
from dbscheduler.schedules.once import NEVER

offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda m: timezone(timedelta(minutes=m)))


@given(st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9998, 12, 30),
                    timezones=offsets))
def test_once_round_trips_through_its_text(at: datetime) -> None:
    once = Once(at)
    assert parse(once.describe()) == once
    assert parse(once.describe()).at == at


def test_once_runs_at_its_time_and_never_again() -> None:
    at = datetime(2026, 5, 1, 8, 30, tzinfo=timezone.utc)
    once = Once(at)
    assert once.first_run(at + timedelta(days=3)) == at
    assert once.next_run(scheduled_at=at, started_at=at, finished_at=at, ctx=None) == NEVER


@pytest.mark.parametrize("text", ["once 2026-05-01T08:30:00", "once tomorrow", "once"])
def test_bad_once_text_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="schedule"):
        parse(text)


def test_a_naive_at_is_refused() -> None:
    with pytest.raises(ValueError, match=r"Once\.at"):
        Once(datetime(2026, 5, 1))


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"name": "a\nb"}, "name"),
    ({"name": "x" * 300}, "name"),
    ({"handler": "h\x1b"}, "handler"),
    ({"schedule": Dynamic(lambda ctx: datetime.now(timezone.utc))}, "Dynamic"),
    ({"data": {"when": datetime.now(timezone.utc)}}, "data"),
    ({"options": {"priorty": 3}}, "priorty"),
    ({"options": {"priority": "high"}}, "priority"),
    ({"options": {"timeout": -1}}, "timeout"),
    ({"options": {"group": " g"}}, "group"),
])
def test_bad_runtime_input_names_the_field(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"name": "job", "handler": "h", "schedule": FixedRate(5),
                               "data": None, "options": {}}
    args.update(kwargs)
    with pytest.raises(ValueError, match=field):
        runtime_row(**args)  # type: ignore[arg-type]


def test_a_naive_at_is_refused_before_any_connection() -> None:
    client = Client("sqlite:////nonexistent/dir/never-opened.db")
    with pytest.raises(ValueError, match="at"):
        client.schedule_once("job", "h", datetime(2026, 5, 1))
