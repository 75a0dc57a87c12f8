"""``dbscheduler runs`` and ``dbscheduler list --overdue`` on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from dbscheduler import FixedRate, Scheduler, TaskContext
from dbscheduler._engine.history import PRUNE_TASK
from tests.helpers import running, wait_until
from tests.unit.test_cli import assert_fails, invoke


@pytest.fixture
def ran(migrated: tuple[str, str]) -> Iterator[tuple[Scheduler, list[str]]]:
    """A node that ran ``report`` five times (the 2nd and 4th failed) and ``cleanup`` once."""
    url, table = migrated
    s = Scheduler(url, table=table, node_id="cli-node", poll_interval=0.1)
    count = [0]
    done = threading.Event()

    def report(ctx: TaskContext) -> None:
        count[0] += 1
        if count[0] >= 5:
            done.set()
        if count[0] in (2, 4):
            raise ConnectionError(f"upstream answered 503 (try {count[0]})")

    s.add("report", report, schedule=FixedRate(0.2))
    s.add("cleanup", lambda: None, schedule=FixedRate(3600))
    with running(s):
        s.trigger("cleanup")
        assert done.wait(15)
        s.pause("report")
        wait_until(lambda: len(s.runs("report")) >= 5 and s.runs("cleanup"), 10, "the runs")
    yield s, ["--url", url, "--table", table]
    s.engine.dispose()


def test_runs_prints_a_readable_table_newest_first(ran: tuple[Scheduler, list[str]]) -> None:
    s, db = ran
    result = invoke("runs", *db)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert re.match(r"\s*finished \(UTC\)\s+task\s+status\s+duration\s+attempt\s+node\s+token"
                    r"\s+error", lines[0]), lines[0]
    runs = s.runs(limit=50)
    body = [line for line in lines[2:] if re.match(r"\s*\d{4}-\d\d-\d\d", line)]
    assert len(body) == len(runs)
    for line, run in zip(body, runs, strict=True):  # newest first, as runs() says
        assert run.name in line and run.status in line and "cli-node" in line
        assert f" {run.token} " in f"{line} "
        assert re.search(r"\b\d+ ms\b|\b\d+\.\d s\b", line), line  # a duration for people
    failed = [line for line in body if " error " in line]
    assert len(failed) == 2 and all("ConnectionError: upstream answered 503" in x for x in failed)
    assert f"{len(runs)} run(s) of any task" in lines[-1]


def test_runs_of_one_task_filtered_as_json(ran: tuple[Scheduler, list[str]]) -> None:
    s, db = ran
    result = invoke("runs", "report", "--status", "error", "--json", *db)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == [r.to_dict() for r in s.runs("report", status="error")]
    assert [d["error"] for d in data] == ["ConnectionError: upstream answered 503 (try 4)",
                                          "ConnectionError: upstream answered 503 (try 2)"]
    assert all(isinstance(d["duration"], float) and d["duration"] >= 0 for d in data)
    since = s.runs("report")[1].finished_at
    recent = json.loads(invoke("runs", "report", "--since", since.isoformat(), "--json",
                               *db).stdout)
    assert [d["token"] for d in recent] == [r.token for r in s.runs("report")[:2]]
    two = json.loads(invoke("runs", "--limit", "2", "--json", *db).stdout)
    assert [d["id"] for d in two] == [r.id for r in s.runs(limit=2)]
    both = json.loads(invoke("runs", "--status", "error", "--status", "success", "--json",
                             *db).stdout)
    assert len(both) == len(s.runs(limit=100))
    empty = invoke("runs", "nothing-here", *db)
    assert empty.exit_code == 0 and "no runs of task 'nothing-here'" in empty.stdout


def test_runs_usage_errors(ran: tuple[Scheduler, list[str]]) -> None:
    _, db = ran
    assert_fails(invoke("runs", "--since", "2026-03-29T00:00:00", *db), 2,
                 "'--since'", "has no UTC offset")
    assert_fails(invoke("runs", "--status", "failed", *db), 2, "'--status'")
    assert_fails(invoke("runs", "--limit", "0", *db), 2, "'--limit'")


def test_list_marks_overdue_tasks_and_list_overdue_is_a_probe(
    migrated: tuple[str, str]
) -> None:
    url, table = migrated
    db = ["--url", url, "--table", table]
    s = Scheduler(url, table=table)
    s.add("fine", lambda: None, schedule=FixedRate(3600))
    s.add("late", lambda: None, schedule=FixedRate(3600))
    s.sync()
    probe = invoke("list", "--overdue", *db)
    assert probe.exit_code == 0, probe.output
    assert "no overdue tasks" in probe.stdout
    s.reschedule("late", s.client.db_now() - timedelta(minutes=5))
    listing = invoke("list", *db)
    assert listing.exit_code == 0
    (late_line,) = [x for x in listing.stdout.splitlines() if x.lstrip().startswith("late")]
    assert "late overdue" in late_line
    assert not [x for x in listing.stdout.splitlines() if "fine overdue" in x]
    assert f"{PRUNE_TASK} (built-in)" in listing.stdout
    assert "1 overdue" in listing.stdout
    probe = invoke("list", "--overdue", *db)
    assert probe.exit_code == 1, probe.output
    assert "late overdue" in probe.stdout and "fine" not in probe.stdout
    as_json = invoke("list", "--overdue", "--json", *db)
    assert as_json.exit_code == 1
    assert [t["name"] for t in json.loads(as_json.stdout)] == ["late"]
    # Five minutes late is on time for a probe that allows ten.
    assert invoke("list", "--overdue", "--overdue-after", "600", *db).exit_code == 0
    shown = invoke("show", "late", *db).stdout
    assert re.search(r"^overdue\s+yes$", shown, re.M), shown
    s.engine.dispose()
