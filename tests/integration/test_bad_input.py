"""Bad input at the edges (rejected with a clear error before anything is written), on every
database (input validation, not fault injection: no fault is injected here).

Every invalid argument of ``Scheduler(...)``, ``add(...)``, the schedules and the failure
settings raises ``ValueError`` naming the field; operations on unknown names raise
``TaskNotFound``; a hand-made table missing a column raises ``SchemaMismatch`` naming it;
state that is not JSON is recorded as an error with that reason and the row stays
consistent; names of 1,000 characters are refused (the limit is 255) while unicode, quotes
and ``;`` work end to end.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import (
    ArithmeticBackoff,
    Cron,
    Dynamic,
    FixedDelay,
    FixedRate,
    GeometricBackoff,
    LinearBackoff,
    NoRetry,
    Outcome,
    Result,
    Scheduler,
    SchemaMismatch,
    TaskContext,
    TaskInfo,
    TaskNotFound,
)
from dbscheduler.table import RESERVED_PREFIX, make_table
from tests.chaos.checks import read_table
from tests.helpers import polled, running, wait_until

HOUR = FixedDelay(3600)


def names_in(url: str, table: str) -> list[str]:
    return sorted(str(r["queue_name"]) for r in read_table(url, table).rows
                  if not str(r["queue_name"]).startswith(RESERVED_PREFIX))  # built-in tasks




def ops_for(url: str, table: str) -> Scheduler:
    """A scheduler that is never started: the operations of another process."""
    return Scheduler(url, table=table, node_id="ops")


# -- Scheduler(...) ---------------------------------------------------------------------------
SCHEDULER_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("table with a dash", {"table": "bad-name"}, "table"),
    ("table starting with a digit", {"table": "1jobs"}, "table"),
    ("table with two dots", {"table": "a.b.c"}, "table"),
    ("table carrying SQL", {"table": "jobs; DROP TABLE x"}, "table"),
    ("table empty", {"table": ""}, "table"),
    ("table not a string", {"table": 42}, "table"),
    ("table None", {"table": None}, "table"),
    ("max_workers 0", {"max_workers": 0}, "max_workers"),
    ("max_workers negative", {"max_workers": -1}, "max_workers"),
    ("max_workers bool", {"max_workers": True}, "max_workers"),
    ("max_workers float", {"max_workers": 1.5}, "max_workers"),
    ("max_workers text", {"max_workers": "8"}, "max_workers"),
    ("node_id empty", {"node_id": ""}, "node_id"),
    ("node_id 256 chars", {"node_id": "n" * 256}, "node_id"),
    ("node_id not a string", {"node_id": 7}, "node_id"),
    ("lease 0", {"lease": 0}, "lease"),
    ("lease negative", {"lease": -1}, "lease"),
    ("lease timedelta 0", {"lease": timedelta(0)}, "lease"),
    ("lease text", {"lease": "30"}, "lease"),
    ("lease bool", {"lease": True}, "lease"),
    ("lease None", {"lease": None}, "lease"),
    ("lease NaN", {"lease": math.nan}, "lease"),
    ("lease infinite", {"lease": math.inf}, "lease"),
    ("poll_interval 0", {"poll_interval": 0}, "poll_interval"),
    ("poll_interval negative", {"poll_interval": -0.5}, "poll_interval"),
    ("poll_interval text", {"poll_interval": "1"}, "poll_interval"),
    ("poll_interval NaN", {"poll_interval": math.nan}, "poll_interval"),
    ("poll_interval infinite", {"poll_interval": math.inf}, "poll_interval"),
    ("url not a URL", {"url": "not a url"}, "url"),
    ("url not a string", {"url": 42}, "url"),
    ("engine not an engine", {"url": None, "engine": "sqlite://"}, "engine"),
    ("url and engine", {"url": "sqlite://", "engine": "<engine>"}, "engine"),
]


@pytest.mark.parametrize(("kwargs", "field"), [c[1:] for c in SCHEDULER_CASES],
                         ids=[c[0] for c in SCHEDULER_CASES])
def test_scheduler_rejects_invalid_arguments_naming_the_field(
    kwargs: dict[str, Any], field: str, tmp_path: Path
) -> None:
    kwargs = dict(kwargs)
    url = kwargs.pop("url", f"sqlite:///{tmp_path / 'db.sqlite3'}")
    engine = None
    if kwargs.get("engine") == "<engine>":
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'other.sqlite3'}")
        kwargs["engine"] = engine
    try:
        with pytest.raises(ValueError, match=field):
            Scheduler(url, **kwargs)
    finally:
        if engine is not None:
            engine.dispose()
    assert not (tmp_path / "db.sqlite3").exists(), "an invalid Scheduler created its database"


# -- schedules and failure settings -----------------------------------------------------------
SCHEDULE_CASES: list[tuple[str, Callable[[], object], str]] = [
    ("cron garbage", lambda: Cron("not a cron"), "Cron.expr"),
    ("cron 4 fields", lambda: Cron("* * * *"), "Cron.expr"),
    ("cron 7 fields", lambda: Cron("* * * * * * *"), "Cron.expr"),
    ("cron minute 61", lambda: Cron("61 * * * *"), "Cron.expr"),
    ("cron never fires", lambda: Cron("0 0 30 2 *"), "Cron.expr"),
    ("cron empty", lambda: Cron(""), "Cron.expr"),
    ("cron not a string", lambda: Cron(5), "Cron.expr"),  # type: ignore[arg-type]
    ("cron @reboot", lambda: Cron("@reboot"), "Cron.expr"),
    ("cron unknown tz", lambda: Cron("* * * * *", tz="Mars/Olympus_Mons"), "Cron.tz"),
    ("cron empty tz", lambda: Cron("* * * * *", tz=""), "Cron.tz"),
    ("cron tz None", lambda: Cron("* * * * *", tz=None), "Cron.tz"),  # type: ignore[arg-type]
    ("rate 0", lambda: FixedRate(0), "FixedRate.period"),
    ("rate negative", lambda: FixedRate(-1), "FixedRate.period"),
    ("rate timedelta 0", lambda: FixedRate(timedelta(0)), "FixedRate.period"),
    ("rate text", lambda: FixedRate("10"), "FixedRate.period"),  # type: ignore[arg-type]
    ("rate bool", lambda: FixedRate(True), "FixedRate.period"),
    ("rate None", lambda: FixedRate(None), "FixedRate.period"),  # type: ignore[arg-type]
    ("rate NaN", lambda: FixedRate(math.nan), "FixedRate.period"),
    ("rate infinite", lambda: FixedRate(math.inf), "FixedRate.period"),
    ("rate too large", lambda: FixedRate(1e20), "FixedRate.period"),
    ("delay negative", lambda: FixedDelay(-1), "FixedDelay.delay"),
    ("delay text", lambda: FixedDelay("1"), "FixedDelay.delay"),  # type: ignore[arg-type]
    ("delay NaN", lambda: FixedDelay(math.nan), "FixedDelay.delay"),
    ("delay None", lambda: FixedDelay(None), "FixedDelay.delay"),  # type: ignore[arg-type]
    ("dynamic not callable", lambda: Dynamic(5), "Dynamic.fn"),  # type: ignore[arg-type]
    ("dynamic None", lambda: Dynamic(None), "Dynamic.fn"),  # type: ignore[arg-type]
    ("linear 0", lambda: LinearBackoff(0), "LinearBackoff.delay"),
    ("linear negative", lambda: LinearBackoff(-5), "LinearBackoff.delay"),
    ("linear text", lambda: LinearBackoff("5"), "LinearBackoff.delay"),  # type: ignore[arg-type]
    ("linear NaN", lambda: LinearBackoff(math.nan), "LinearBackoff.delay"),
    ("linear too large", lambda: LinearBackoff(1e20), "LinearBackoff.delay"),
    ("linear max_attempts 0", lambda: LinearBackoff(1, max_attempts=0),
     "LinearBackoff.max_attempts"),
    ("linear max_attempts float", lambda: LinearBackoff(1, max_attempts=1.5),  # type: ignore[arg-type]
     "LinearBackoff.max_attempts"),
    ("linear max_attempts bool", lambda: LinearBackoff(1, max_attempts=True),
     "LinearBackoff.max_attempts"),
    ("arithmetic 0", lambda: ArithmeticBackoff(0), "ArithmeticBackoff.delay"),
    ("arithmetic max_attempts -1", lambda: ArithmeticBackoff(1, max_attempts=-1),
     "ArithmeticBackoff.max_attempts"),
    ("geometric negative", lambda: GeometricBackoff(-1), "GeometricBackoff.delay"),
    ("geometric max_delay < delay", lambda: GeometricBackoff(10, max_delay=5),
     "GeometricBackoff.max_delay"),
    ("geometric max_delay 0", lambda: GeometricBackoff(1, max_delay=0),
     "GeometricBackoff.max_delay"),
    ("geometric max_attempts text", lambda: GeometricBackoff(1, max_attempts="3"),  # type: ignore[arg-type]
     "GeometricBackoff.max_attempts"),
]


@pytest.mark.parametrize(("build", "field"), [c[1:] for c in SCHEDULE_CASES],
                         ids=[c[0] for c in SCHEDULE_CASES])
def test_schedules_and_failure_settings_reject_invalid_values(
    build: Callable[[], object], field: str
) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        build()


# -- add(...) ---------------------------------------------------------------------------------
def _two_args(a: object, b: object) -> None: ...


ADD_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("name None", {"name": None}, "name"),
    ("name int", {"name": 42}, "name"),
    ("name bytes", {"name": b"job"}, "name"),
    ("name empty", {"name": ""}, "name"),
    ("name blank", {"name": "   "}, "name"),
    ("name 256 chars", {"name": "n" * 256}, "255"),
    ("name 1000 chars", {"name": "n" * 1000}, "255"),
    ("name with NUL", {"name": "bad\x00name"}, "name"),
    ("name with tab and newline", {"name": "tab\tand\nnewline"}, "control character"),
    ("fn None", {"fn": None}, "function"),
    ("fn not callable", {"fn": "print"}, "function"),
    ("fn with two arguments", {"fn": _two_args}, "function"),
    ("schedule None", {"schedule": None}, "schedule"),
    ("schedule cron text", {"schedule": "*/5 * * * *"}, "schedule"),
    ("schedule number", {"schedule": 60}, "schedule"),
    ("schedule class", {"schedule": FixedRate}, "schedule"),
    ("on_failure text", {"on_failure": "retry"}, "on_failure"),
    ("on_failure number", {"on_failure": 3}, "on_failure"),
    ("on_failure class", {"on_failure": LinearBackoff}, "on_failure"),
    ("duplicate name", {"name": "ok"}, "already registered"),
]


def _try_add(scheduler: Scheduler, case: dict[str, Any]) -> str | None:
    """None when ``add`` raised ValueError naming the field, else what happened."""
    args: dict[str, Any] = {"name": "new", "fn": lambda: None, "schedule": HOUR,
                            "on_failure": NoRetry()}
    args.update(case["kwargs"])
    try:
        scheduler.add(args.pop("name"), args.pop("fn"), **args)
    except ValueError as exc:
        if case["field"] not in str(exc):
            return f"ValueError not naming {case['field']!r}: {exc}"
        return None
    except Exception as exc:
        return f"{type(exc).__name__} instead of ValueError: {exc}"
    return "accepted"


def test_add_rejects_every_invalid_argument_and_writes_nothing(
    migrated: tuple[str, str]
) -> None:
    url, table = migrated
    cases = [{"id": i, "kwargs": k, "field": f} for i, k, f in ADD_CASES]
    wrong: dict[str, str] = {}
    for case in cases:  # before start: a fresh scheduler each, never started
        fresh = Scheduler(url, table=table, node_id="edge")
        fresh.add("ok", lambda: None, schedule=HOUR)
        if problem := _try_add(fresh, case):
            wrong[f"before start: {case['id']}"] = problem
        fresh.engine.dispose()
    scheduler = Scheduler(url, table=table, node_id="edge", poll_interval=0.2, lease=2)
    scheduler.add("ok", lambda: None, schedule=HOUR)
    with running(scheduler):
        started_with = names_in(url, table)
        for case in cases:
            if problem := _try_add(scheduler, case):
                wrong[f"after start: {case['id']}"] = problem
        polled(scheduler)  # a bad add that slipped through would be registered by now
        rows = names_in(url, table)
    if started_with != ["ok"] or rows != ["ok"]:
        wrong["table"] = f"rows {rows!r}; only 'ok' may be written"
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in wrong.items())


def test_a_dynamic_schedule_returning_a_naive_time_writes_nothing(
    migrated: tuple[str, str]
) -> None:
    url, table = migrated
    scheduler = Scheduler(url, table=table, node_id="edge", poll_interval=0.2)
    scheduler.add("fine", lambda: None, schedule=HOUR)
    scheduler.add("naive", lambda: None,
                  schedule=Dynamic(lambda ctx: datetime(2030, 1, 1)))
    try:
        with pytest.raises(ValueError, match=r"Dynamic\.fn"):
            scheduler.start()
    finally:
        scheduler.shutdown(timeout=5)
    assert names_in(url, table) == [], "registration must be all or nothing"


def test_reschedule_rejects_naive_and_non_datetimes_and_changes_nothing(
    migrated: tuple[str, str]
) -> None:
    url, table = migrated
    with running(Scheduler(url, table=table, node_id="edge", poll_interval=0.2)) as s:
        s.add("job", lambda: None, schedule=HOUR)
        before = s.info("job").next_process_at
        for bad in (datetime(2030, 1, 1), "2030-01-01T00:00:00Z", 1893456000, None):
            with pytest.raises(ValueError, match="at"):
                s.reschedule("job", bad)  # type: ignore[arg-type]
        assert s.info("job").next_process_at == before


# -- unknown names ----------------------------------------------------------------------------
UNKNOWN_OPS: list[tuple[str, Callable[[Scheduler, str], object]]] = [
    ("trigger", lambda s, n: s.trigger(n)),
    ("reschedule", lambda s, n: s.reschedule(n, datetime.now(timezone.utc))),
    ("pause", lambda s, n: s.pause(n)),
    ("resume", lambda s, n: s.resume(n)),
    ("cancel", lambda s, n: s.cancel(n)),
    ("delete", lambda s, n: s.delete(n)),
    ("delete forced", lambda s, n: s.delete(n, force=True)),
    ("info", lambda s, n: s.info(n)),
]


def test_operations_on_unknown_names_raise_task_not_found(migrated: tuple[str, str]) -> None:
    url, table = migrated
    node = Scheduler(url, table=table, node_id="edge", poll_interval=0.2)
    node.add("known", lambda: None, schedule=HOUR)
    ops = ops_for(url, table)
    wrong: list[str] = []
    with running(node):
        before = [r for r in read_table(url, table).rows
                  if not str(r["queue_name"]).startswith(RESERVED_PREFIX)]
        for who, s in (("running node", node), ("never-started scheduler", ops)):
            for name in ("unknown", "Known", "known ", "known; DROP TABLE x", "ü" * 255):
                for op, call in UNKNOWN_OPS:
                    try:
                        call(s, name)
                    except TaskNotFound as exc:
                        if name[:20] not in str(exc):
                            wrong.append(f"{who} {op}({name!r}): message lacks the name: {exc}")
                    except Exception as exc:
                        wrong.append(f"{who} {op}({name!r}): {type(exc).__name__}: {exc}")
                    else:
                        wrong.append(f"{who} {op}({name!r}): no error")
        after = [r for r in read_table(url, table).rows
                 if not str(r["queue_name"]).startswith(RESERVED_PREFIX)]
    ops.engine.dispose()
    assert not wrong, "\n".join(wrong)
    assert [r["queue_name"] for r in after] == ["known"]
    assert {k: v for k, v in after[0].items() if k not in ("next_process_at",)} == {
        k: v for k, v in before[0].items() if k not in ("next_process_at",)}


# -- a hand-made table ------------------------------------------------------------------------
@pytest.mark.parametrize("missing", ["heartbeat_at", "stop_requested", "total_attempt",
                                     "schedule"])
def test_a_hand_made_table_missing_a_column_is_named(db_url: str, table_name: str,
                                                      missing: str) -> None:
    full = make_table(table_name)
    md = sa.MetaData()
    sa.Table(table_name, md, *[c._copy() for c in full.columns if c.name != missing])
    engine = sa.create_engine(db_url)
    md.create_all(engine)
    engine.dispose()
    scheduler = Scheduler(db_url, table=table_name, node_id="edge")
    scheduler.add("job", lambda: None, schedule=HOUR)
    try:
        with pytest.raises(SchemaMismatch, match=missing) as info:
            scheduler.start()
        assert "dbscheduler migrate" in str(info.value)
        assert info.value.missing[0] == missing  # then the missing companion tables
    finally:
        scheduler.shutdown(timeout=5)
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(f"SELECT count(*) FROM {table_name}")).scalar_one()
    finally:
        engine.dispose()
    assert rows == 0, "nothing may be written to a table that does not match"


# -- state that is not JSON -------------------------------------------------------------------
def _circular() -> dict[str, Any]:
    d: dict[str, Any] = {}
    d["self"] = d
    return d


BAD_STATES: list[tuple[str, Callable[[], Any]]] = [
    ("set", lambda: {"ids": {1, 2, 3}}),
    ("object", lambda: {"obj": object()}),
    ("bytes", lambda: b"raw"),
    ("datetime", lambda: {"when": datetime.now(timezone.utc)}),
    ("circular", _circular),
    ("tuple keys", lambda: {(1, 2): "x"}),
]


class Steps:
    """A task whose every execution returns the next planned result, run by trigger."""

    def __init__(self) -> None:
        self.results: list[Callable[[], Result]] = []
        self.outcomes: list[Outcome] = []
        self.lock = threading.Lock()

    def task(self, ctx: TaskContext) -> Result:
        with self.lock:
            make = self.results.pop(0)
        return make()

    def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)


def _run_step(s: Scheduler, steps: Steps, name: str, result: Callable[[], Result]) -> TaskInfo:
    done = len(steps.outcomes)
    steps.results.append(result)
    s.trigger(name)
    wait_until(lambda: len(steps.outcomes) > done and not s.info(name).running, 10,
               f"execution {done + 1} of {name}")
    return s.info(name)


def _success_with(make_state: Callable[[], Any]) -> Result:
    return Result.success(state=make_state())


def test_state_that_is_not_json_is_an_error_and_the_row_stays_consistent(
    migrated: tuple[str, str]
) -> None:
    url, table = migrated
    steps = Steps()
    s = Scheduler(url, table=table, node_id="edge", poll_interval=0.2, lease=5)
    s.add("stateful", steps.task, schedule=HOUR)
    s.add_listener(steps)
    wrong: list[str] = []
    with running(s):
        good = _run_step(s, steps, "stateful", lambda: Result.success(state={"n": 0}))
        assert good.last_status == "success" and good.state == {"n": 0}
        for i, (label, bad) in enumerate(BAD_STATES, start=1):
            before = s.info("stateful")
            info = _run_step(s, steps, "stateful", partial(_success_with, bad))
            outcome = steps.outcomes[-1]
            problems = []
            if info.last_status != "error" or outcome.status != "error":
                problems.append(f"status {info.last_status}/{outcome.status}")
            if "JSON" not in (info.last_error or "") or "JSON" not in (outcome.error or ""):
                problems.append(f"last_error {info.last_error!r}")
            if info.state != {"n": i - 1}:
                problems.append(f"state {info.state!r} instead of the previous one")
            if info.locked_by is not None or info.attempt != 0:
                problems.append(f"locked_by {info.locked_by} attempt {info.attempt}")
            if info.total_attempt != before.total_attempt + 1:
                problems.append(f"total_attempt {info.total_attempt}")
            if info.reenqueue_attempt != before.reenqueue_attempt:
                problems.append("counted as a success")
            if info.next_process_at < before.next_process_at:
                problems.append(f"next_process_at {info.next_process_at} went back")
            if problems:
                wrong.append(f"{label}: {'; '.join(problems)}")
            # The next execution works and stores its state again.
            after = _run_step(s, steps, "stateful", partial(Result.success, {"n": i}))
            if after.last_status != "success" or after.state != {"n": i}:
                wrong.append(f"after {label}: {after.last_status} {after.state!r}")
    assert not wrong, "\n".join(wrong)


def test_state_with_nan_is_not_stored_as_invalid_json(tmp_path: Path) -> None:
    """``NaN``/``Infinity`` are not JSON (RFC 8259): other readers of the table choke on
    them, so such state is refused like any other that is not JSON."""
    url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    steps = Steps()
    s = Scheduler(url, node_id="edge", poll_interval=0.2)
    s.add("nan", steps.task, schedule=HOUR)
    s.add_listener(steps)
    with running(s):
        _run_step(s, steps, "nan", lambda: Result.success(state={"n": 1}))
        info = _run_step(s, steps, "nan", lambda: Result.success(state={"x": math.nan}))
    assert info.last_status == "error", info
    assert info.state == {"n": 1}


# -- names ------------------------------------------------------------------------------------
ODD_NAMES = [
    "überprüfung-日本語-проверка-🚀",
    "it's \"quoted\"; DROP TABLE scheduled_tasks; --",
    "back\\slash %s %% _ * ? :name $1",
    "inner  spaces\u00a0and\u2003wide ones",
    "x" * 255,
    "é" * 255,
    "🚀" * 127,  # the limit counts UTF-16 units (SQL Server's NVARCHAR): 254 of 255
]


def _idle(ops: Scheduler, name: str) -> bool:
    return not ops.info(name).running


def test_odd_names_work_end_to_end(migrated: tuple[str, str]) -> None:
    url, table = migrated
    ran: list[str] = []
    s = Scheduler(url, table=table, node_id="edge", poll_interval=0.2)
    for name in ODD_NAMES:
        s.add(name, lambda ctx: ran.append(ctx.name), schedule=HOUR)
    with pytest.raises(ValueError, match="255"):
        s.add("n" * 1000, lambda: None, schedule=HOUR)
    ops = ops_for(url, table)
    try:
        with running(s):
            assert sorted(t.name for t in ops.tasks() if not t.builtin) == sorted(ODD_NAMES)
            for name in ODD_NAMES:
                ops.trigger(name)
            wait_until(lambda: sorted(ran) == sorted(ODD_NAMES), 15, "every odd name runs")
            for name in ODD_NAMES:
                wait_until(partial(_idle, ops, name), 60, "idle")
                info = ops.info(name)
                assert info.name == name and info.last_status == "success", info
                ops.pause(name)
                assert ops.info(name).paused
                ops.resume(name)
                at = datetime.now(timezone.utc) + timedelta(days=1)
                ops.reschedule(name, at)
                assert abs(ops.info(name).next_process_at - at) < timedelta(milliseconds=1)
                assert ops.cancel(name) is False
            for name in ODD_NAMES:
                ops.delete(name)
                with pytest.raises(TaskNotFound):
                    ops.info(name)
            assert [t for t in ops.tasks() if not t.builtin] == []
    finally:
        ops.engine.dispose()


def test_names_differing_only_in_case_are_distinct_and_padded_names_are_refused(
    migrated: tuple[str, str]
) -> None:
    # MySQL/MariaDB compare strings with trailing spaces ignored, so "report " and "report"
    # could never be two rows there: names with white space at either end are refused
    # everywhere (and operations on such names find nothing), case is significant everywhere.
    url, table = migrated
    names = ["report", "Report", "REPORT"]
    padded = ["report ", " report", "report\u00a0"]
    ran: list[str] = []
    s = Scheduler(url, table=table, node_id="edge", poll_interval=0.2)
    for name in names:
        s.add(name, lambda ctx: ran.append(ctx.name), schedule=HOUR)
    for name in padded:
        with pytest.raises(ValueError, match="white space"):
            s.add(name, lambda ctx: None, schedule=HOUR)
    ops = ops_for(url, table)
    try:
        with running(s):
            stored = names_in(url, table)
            assert sorted(stored) == sorted(names), f"one row per name, got {stored!r}"
            for name in names:
                ops.trigger(name)
            wait_until(lambda: len(ran) >= len(names), 60, "each task runs")
            polled(s)  # a second run of one of them would have come by now
            assert sorted(ran) == sorted(names)
            for name in names:
                assert ops.info(name).name == name
            for name in padded:
                with pytest.raises(TaskNotFound):
                    ops.trigger(name)
    finally:
        ops.engine.dispose()
