"""Execution options: checked before anything is written, stored as JSON and read back,
jitter within its bounds, misfire decisions, node tags, importable functions."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from dbscheduler._engine.isolation import check_importable
from dbscheduler._engine.options import (
    DEFAULT_GRACE,
    TaskOptions,
    jittered,
    misfired,
    node_tags,
    options_from,
)
from dbscheduler.schedules.once import NEVER
from tests.helpers import wait_until

T = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)


def test_every_option_round_trips_through_the_stored_json() -> None:
    given = {"priority": -3, "group": "reports ✓", "requires": "gpu",
             "timeout": timedelta(seconds=90), "isolation": "process", "misfire": "skip",
             "grace": 2.5, "jitter": timedelta(milliseconds=1500)}
    options = options_from(given, "task 'x'")
    text = options.to_json()
    assert text is not None
    assert json.loads(text) == {"priority": -3, "group": "reports ✓", "requires": "gpu",
                                "timeout": 90.0, "isolation": "process", "misfire": "skip",
                                "grace": 2.5, "jitter": 1.5}
    assert TaskOptions.from_json(text) == options


def test_defaults_store_nothing() -> None:
    assert options_from({}, "x").to_json() is None
    assert options_from({"priority": 0, "misfire": "run", "jitter": 0}, "x").to_json() is None
    assert TaskOptions.from_json(None) == TaskOptions()
    assert TaskOptions().grace == DEFAULT_GRACE


@pytest.mark.parametrize(("given", "message"), [
    ({"priorty": 1}, r"task 'x': unknown option\(s\) priorty; the options are"),
    ({"priority": 1.5}, "priority must be an integer"),
    ({"priority": True}, "priority must be an integer"),
    ({"priority": 2**31}, "priority must be an integer between"),
    ({"group": ""}, "group must be a non-empty string"),
    ({"group": "a\nb"}, "group must be a non-empty string|control character"),
    ({"group": "x" * 256}, "group is longer than 255"),
    ({"requires": 5}, "requires must be a non-empty string"),
    ({"timeout": 0}, r"timeout must be > 0"),
    ({"timeout": "5s"}, "timeout must be a timedelta or a number of seconds"),
    ({"timeout": float("nan")}, "timeout must be a finite duration"),
    ({"isolation": "fork"}, "isolation must be 'thread' or 'process'"),
    ({"misfire": "later"}, "misfire must be 'run' or 'skip'"),
    ({"grace": -1}, r"grace must be >= 0"),
    ({"jitter": -2}, r"jitter must be > 0"),
])
def test_bad_options_are_refused_naming_the_option(given: dict[str, object],
                                                  message: str) -> None:
    with pytest.raises(ValueError, match=message):
        options_from(given, "task 'x'")


def test_stored_options_are_read_leniently() -> None:
    # A row written by hand or by a newer version: what cannot be read runs at its default.
    options = TaskOptions.from_json('{"priority": 7, "timeout": "soon", "future": 1}')
    assert options == TaskOptions(priority=7)
    assert TaskOptions.from_json("not json") == TaskOptions()


def test_jitter_stays_within_its_bounds_and_spreads() -> None:
    options = TaskOptions(jitter=timedelta(seconds=10))
    delays = [(jittered(T, options, NEVER) - T).total_seconds() for _ in range(2000)]
    assert all(0 <= d < 10 for d in delays)
    assert min(delays) < 1 and max(delays) > 9  # uniform over the whole range
    assert jittered(T, TaskOptions(), NEVER) == T
    assert jittered(NEVER, options, NEVER) == NEVER  # "never" stays never


def test_misfire_skips_only_past_the_grace() -> None:
    skip = TaskOptions(misfire="skip", grace=timedelta(seconds=5))
    assert not misfired(skip, T, T + timedelta(seconds=5))
    assert misfired(skip, T, T + timedelta(seconds=5, microseconds=1))
    assert not misfired(TaskOptions(), T, T + timedelta(days=1))  # "run" always runs


def test_a_node_id_is_always_one_of_its_tags() -> None:
    assert node_tags([], "n1") == {"n1"}
    assert node_tags({"gpu", "eu"}, "n1") == {"gpu", "eu", "n1"}
    with pytest.raises(ValueError, match="not the string 'gpu'"):
        node_tags("gpu", "n1")
    with pytest.raises(ValueError, match="tag must be a non-empty string"):
        node_tags([""], "n1")


def module_level(ctx: object) -> None:
    """Importable by name."""


def test_process_isolation_needs_an_importable_function() -> None:
    check_importable(module_level, "task 'x'")

    def nested(ctx: object) -> None: ...

    for fn in (nested, lambda ctx: None):
        with pytest.raises(ValueError, match="task 'x': isolation='process' runs the function "
                                             "in a child process"):
            check_importable(fn, "task 'x'")


def test_scheduler_add_refuses_bad_options_before_anything_is_written(tmp_path: Path) -> None:
    from dbscheduler import FixedRate, Scheduler

    scheduler = Scheduler(f"sqlite:///{tmp_path / 'x.sqlite3'}")

    def nested(ctx: object) -> None: ...

    with pytest.raises(ValueError, match=r"task 'a': unknown option\(s\) priorty"):
        scheduler.add("a", module_level, schedule=FixedRate(5), priorty=1)
    with pytest.raises(ValueError, match="task 'b': isolation='process' runs the function"):
        scheduler.add("b", nested, schedule=FixedRate(5), isolation="process")
    with pytest.raises(ValueError, match="tags must be a collection of strings"):
        Scheduler(f"sqlite:///{tmp_path / 'x.sqlite3'}", tags="gpu")  # type: ignore[arg-type]
    assert scheduler._tasks == {}
    assert not (tmp_path / "x.sqlite3").exists()


def test_a_thread_task_ignoring_its_timeout_is_reported_loudly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import threading

    from dbscheduler._engine import timeouts as _timeouts
    from dbscheduler._engine.execution import Execution, TaskDef
    from dbscheduler.context import TaskContext
    from dbscheduler.failures import NoRetry
    from dbscheduler.schedules import FixedRate

    monkeypatch.setattr(_timeouts, "KILL_AFTER", 0.3)
    task = TaskDef.build("stubborn", module_level, FixedRate(5), NoRetry(),
                         options_from({"timeout": 0.2}, "x"))
    ctx = TaskContext(name="stubborn", node_id="n", attempt=1, reenqueue_attempt=0,
                      total_attempt=3, scheduled_at=T, started_at=T, created_at=T, state=None)
    ex = Execution(task, ctx, 1, 3)
    done_early = Execution(task, TaskContext(**{**ctx.__dict__,
                                                "stop_requested": threading.Event()}), 2, 1)
    timeouts = _timeouts.Timeouts()
    timeouts.arm(ex, 0.2)
    timeouts.arm(done_early, 0.2)
    done_early.returned = True  # in time: nothing happens to it

    def errors() -> list[str]:
        return [r.getMessage() for r in list(caplog.records) if r.levelname == "ERROR"]

    # The error comes KILL_AFTER after both deadlines, which were handled in their order.
    wait_until(errors, 30, "the error about the ignored timeout")
    assert ex.timed_out and ex.ctx.stop_requested.is_set()
    assert not done_early.timed_out and not done_early.ctx.stop_requested.is_set()
    assert any("task='stubborn' token=3] the function ignores the stop requested at its "
               "timeout" in m
               and "a thread cannot be killed; it keeps its lease until it returns" in m
               for m in errors()), errors()
