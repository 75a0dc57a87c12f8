"""The ``dbscheduler`` command line on SQLite, PostgreSQL and MariaDB.

Most tests drive :data:`dbscheduler.cli.cli` with click's ``CliRunner``; a few run the real
``python -m dbscheduler`` in a subprocess (piped output, ``run`` with SIGTERM/SIGINT).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import Result

from dbscheduler import Scheduler, TaskNotFound
from dbscheduler.migrate import HEAD
from tests.databases import find
from tests.harness.inprocess import Node, db_now, seed
from tests.helpers import wait_until
from tests.unit.test_cli import ROOT, assert_fails, invoke, write_app

UNREACHABLE = "postgresql+psycopg://postgres@127.0.0.1:1/test"


@pytest.fixture
def db(migrated: tuple[str, str]) -> list[str]:
    """``--url URL --table NAME`` for the migrated table of this backend."""
    url, table = migrated
    return ["--url", url, "--table", table]


@pytest.fixture
def api(migrated: tuple[str, str]) -> Iterator[Scheduler]:
    url, table = migrated
    scheduler = Scheduler(url, table=table)
    yield scheduler
    scheduler.engine.dispose()


@pytest.fixture
def running(migrated: tuple[str, str]) -> Iterator[Node]:
    url, table = migrated
    node = Node(url, table)
    node.scheduler.start()
    yield node
    node.scheduler.shutdown(timeout=5)


# -- migrate -----------------------------------------------------------------------------


def test_migrate_creates_then_reports_up_to_date(db_url: str, table_name: str) -> None:
    first = invoke("migrate", "--url", db_url, "--table", table_name)
    assert first.exit_code == 0, first.output
    assert re.search(rf"upgraded table {table_name} on .*: \(no table\) -> {HEAD}",
                     first.stdout), first.stdout
    second = invoke("--url", db_url, "--table", table_name, "migrate")
    assert second.exit_code == 0, second.output
    assert f"table {table_name} on " in second.stdout
    assert f"is up to date (revision {HEAD})" in second.stdout
    listed = invoke("list", "--json", "--url", db_url, "--table", table_name)
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout) == []


def test_migrate_adopts_a_table_the_embedded_default_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'auto.sqlite3'}"
    made = Scheduler(url)
    assert made.tasks() == []  # the embedded default creates its table: zero set-up
    made.engine.dispose()
    result = invoke("migrate", "--url", url)
    assert result.exit_code == 0, result.output
    assert f"is up to date (revision {HEAD})" in result.stdout


def test_migrate_errors() -> None:
    assert_fails(invoke("migrate", "--url", UNREACHABLE), 1, f"cannot connect to {UNREACHABLE}")
    assert_fails(invoke("migrate", "--table", "no-dashes"), 2, "--table", "plain identifier")


# -- listing -----------------------------------------------------------------------------


def test_list_and_show_render_every_column(
    migrated: tuple[str, str], db: list[str], api: Scheduler
) -> None:
    url, table = migrated
    seed(url, table, "report-[weekly]", "cleanup")
    api.pause("cleanup")

    result = invoke("list", *db)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "\x1b[" not in out  # no colour codes when not a terminal
    header = next(line for line in out.splitlines() if "name" in line)
    for column in ("name", "schedule", "handler", "next run (UTC)", "last run", "attempt", "runs",
                   "paused", "running on"):
        assert column in header
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(" ")}
    weekly = rows["report-[weekly]"]  # markup characters in names are printed as they are
    info = api.info("report-[weekly]")
    assert "fixed-rate 3600s" in weekly
    assert info.next_process_at.strftime("%Y-%m-%d %H:%M:%S") in weekly
    assert re.search(r"\(in (59m \d+s|1h)\)", weekly), weekly
    assert "never ran" in weekly
    assert re.search(r"never ran\s+0\s+0\s+no\s+-$", weekly), weekly
    assert re.search(r"\s+yes\s+-$", rows["cleanup"]), rows["cleanup"]
    assert re.search(rf"2 task\(s\) in {table}, database time \d{{4}}-\d\d-\d\d ", out)
    assert all(line == line.rstrip() for line in out.splitlines())

    shown = invoke("show", "report-[weekly]", *db)
    assert shown.exit_code == 0, shown.output
    labels = [line.split("  ")[0] for line in shown.stdout.splitlines()]
    assert labels == ["name", "schedule", "handler", "data", "options", "status", "next run",
                      "paused", "last status", "last success", "overdue", "alert after",
                      "alerted", "last error", "last started", "last finished", "heartbeat",
                      "attempt", "runs", "state", "created", "locked by", "id"]
    assert re.search(r"^status\s+idle$", shown.stdout, re.M)
    assert re.search(r"^runs\s+0 started, 0 succeeded$", shown.stdout, re.M)
    assert re.search(rf"^id\s+{info.id}$", shown.stdout, re.M)


def test_json_output_is_task_info(
    migrated: tuple[str, str], db: list[str], api: Scheduler
) -> None:
    url, table = migrated
    seed(url, table, "b", "a")
    listed = invoke("list", "--json", *db)
    assert listed.exit_code == 0, listed.output
    data = json.loads(listed.stdout)
    assert data == [info.to_dict() for info in api.tasks()]
    assert [d["name"] for d in data] == ["a", "b"]
    first = data[0]
    assert first["running"] is False and first["locked_by"] is None
    for key in ("created_at", "next_process_at"):
        stamp = datetime.fromisoformat(first[key])
        assert stamp.utcoffset() == timedelta(0)
    shown = invoke("show", "b", "--json", *db)
    assert json.loads(shown.stdout) == api.info("b").to_dict()


def test_list_of_an_empty_table(db: list[str]) -> None:
    result = invoke("list", *db)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("no tasks in table ")
    assert json.loads(invoke("list", "--json", *db).stdout) == []


def test_url_and_table_before_or_after_the_command_and_from_the_environment(
    migrated: tuple[str, str],
) -> None:
    url, table = migrated
    seed(url, table, "job")
    expected = ["job"]

    def names(result: Result) -> list[str]:
        assert result.exit_code == 0, result.output
        return [t["name"] for t in json.loads(result.stdout)]

    assert names(invoke("--url", url, "--table", table, "list", "--json")) == expected
    assert names(invoke("list", "--json", "--url", url, "--table", table)) == expected
    assert names(invoke("--url", url, "list", "--table", table, "--json")) == expected
    env = {"DBSCHEDULER_URL": url, "DBSCHEDULER_TABLE": table}
    assert names(invoke("list", "--json", env=env)) == expected
    # The command's own option wins over the group's, which wins over the environment.
    other = f"t_other_{uuid.uuid4().hex[:8]}"
    assert names(invoke("--table", other, "list", "--json", "--table", table,
                        "--url", url)) == expected
    assert names(invoke("--table", table, "list", "--json",
                        env={"DBSCHEDULER_URL": url, "DBSCHEDULER_TABLE": other})) == expected
    assert names(invoke("--url", url, "list", "--json",
                        env={"DBSCHEDULER_URL": UNREACHABLE, "DBSCHEDULER_TABLE": table})
                 ) == expected


# -- operations --------------------------------------------------------------------------


def test_operations_change_the_row(
    migrated: tuple[str, str], db: list[str], api: Scheduler
) -> None:
    url, table = migrated
    seed(url, table, "job", "other")
    other = api.info("other")

    before = db_now(url, table)
    result = invoke("trigger", "job", *db)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("triggered 'job': next run ")
    assert before <= api.info("job").next_process_at <= db_now(url, table)

    result = invoke("pause", "job", *db)
    assert result.exit_code == 0, result.output
    assert result.stdout == "paused 'job' on every node\n"
    assert api.info("job").paused
    listed = invoke("list", *db).stdout
    assert re.search(r"^ job .*\s+yes\s+-$", listed, re.M), listed

    result = invoke("resume", "job", *db)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("resumed 'job': next run ")
    assert not api.info("job").paused

    result = invoke("reschedule", "job", "--at", "2031-06-01T14:30:15+02:00", *db)
    assert result.exit_code == 0, result.output
    assert "next run 2031-06-01 12:30:15 (in " in result.stdout
    assert api.info("job").next_process_at == datetime(2031, 6, 1, 12, 30, 15,
                                                       tzinfo=timezone.utc)
    result = invoke("reschedule", "job", "--at", "2031-07-01T00:00:00Z", *db)
    assert result.exit_code == 0, result.output
    assert api.info("job").next_process_at == datetime(2031, 7, 1, tzinfo=timezone.utc)

    idle = api.info("job")
    result = invoke("cancel", "job", *db)
    assert result.exit_code == 0, result.output
    assert result.stdout == "'job' is not running: nothing to cancel\n"
    assert api.info("job") == idle

    result = invoke("delete", "job", *db)
    assert result.exit_code == 0, result.output
    assert result.stdout == "deleted 'job'\n"
    with pytest.raises(TaskNotFound):
        api.info("job")
    assert api.tasks() == [other]


def test_reschedule_rejects_naive_and_malformed_times(
    migrated: tuple[str, str], db: list[str], api: Scheduler
) -> None:
    url, table = migrated
    seed(url, table, "job")
    before = api.info("job")
    assert_fails(invoke("reschedule", "job", "--at", "2031-06-01T14:30:00", *db), 2,
                 "'--at'", "no UTC offset", "2031-06-01T14:30:00Z")
    assert_fails(invoke("reschedule", "job", "--at", "tomorrow", *db), 2, "not an ISO 8601")
    assert_fails(invoke("reschedule", "job", *db), 2, "--at")
    assert api.info("job") == before


@pytest.mark.parametrize(
    "command",
    [["show"], ["show", "--json"], ["trigger"], ["pause"], ["resume"], ["cancel"], ["delete"],
     ["delete", "--force"], ["reschedule", "--at", "2031-01-01T00:00:00Z"]],
    ids=lambda c: "-".join(c).replace("--", ""),
)
def test_unknown_task_exits_1(migrated: tuple[str, str], db: list[str],
                              command: list[str]) -> None:
    result = invoke(command[0], "nope", *command[1:], *db)
    assert_fails(result, 1, "Error: no task named 'nope' in table ")


def test_commands_on_a_running_task(
    running: Node, db: list[str], api: Scheduler
) -> None:
    running.start_long()
    node = running.node_id

    listed = invoke("list", *db).stdout
    row = next(line for line in listed.splitlines() if line.startswith(" long "))
    assert "after the current run" in row and "running, started " in row
    assert row.endswith(f" {node}"), row
    shown = invoke("show", "long", *db).stdout
    assert re.search(rf"^status\s+running on {node}$", shown, re.M), shown
    assert re.search(r"^lease expires\s+\d{4}-", shown, re.M)
    assert re.search(r"^last status\s+never ran$", shown, re.M), shown  # the last *finished*
    data = json.loads(invoke("show", "long", "--json", *db).stdout)
    assert data["running"] is True and data["locked_by"] == node

    assert_fails(invoke("trigger", "long", *db), 1, f"is running on node '{node}'")
    assert_fails(invoke("delete", "long", *db), 1, f"running on node {node}", "--force")
    assert api.info("long").running

    result = invoke("cancel", "long", *db)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"asked the running execution of 'long' on node {node} to stop\n"
    # Seen at the node's next heartbeat (every 2 s); a bound of many heartbeats still tells.
    assert running.long_saw_stop.wait(30), "the node did not see the cancel"
    wait_until(lambda: not api.info("long").running, 60, "the cancelled execution to end")
    assert json.loads(invoke("show", "long", "--json", *db).stdout)["last_status"] == "cancelled"
    assert "cancelled" in invoke("list", *db).stdout

    running.long_started.clear()
    running.long_saw_stop.clear()
    running.start_long()
    result = invoke("delete", "long", "--force", *db)
    assert result.exit_code == 0, result.output
    assert result.stdout == "deleted 'long'\n"
    with pytest.raises(TaskNotFound):
        api.info("long")


# -- errors ------------------------------------------------------------------------------


def test_missing_table_exits_1_telling_to_migrate(
    backend: str, db_url: str, table_name: str
) -> None:
    if backend == "sqlite":
        pytest.skip("the embedded SQLite default creates its table on first use")
    for command in (["list"], ["list", "--json"], ["show", "x"], ["trigger", "x"],
                    ["pause", "x"], ["resume", "x"], ["cancel", "x"], ["delete", "x"],
                    ["reschedule", "x", "--at", "2031-01-01T00:00:00Z"]):
        result = invoke(*command, "--url", db_url, "--table", table_name)
        assert_fails(result, 1, f"table '{table_name}' does not exist",
                     "`dbscheduler migrate --url")


def test_database_errors_exit_1_without_traceback() -> None:
    assert_fails(invoke("list", "--url", UNREACHABLE), 1, f"cannot connect to {UNREACHABLE}")
    assert_fails(invoke("trigger", "x", "--url", UNREACHABLE), 1, "cannot connect")


# -- run ---------------------------------------------------------------------------------


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBSCHEDULER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def run_node_until_signal(url: str, table: str, directory: Path, attr: str, how: str) -> str:
    """Run ``python -m dbscheduler run`` until its tasks run, signal it, check exit 0.

    Returns the node's stderr.
    """
    module = write_app(directory)
    marker = directory / "beat.txt"
    api = Scheduler(url, table=table)
    try:
        with (directory / "stderr.log").open("w+") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "dbscheduler", "run", f"{module}:{attr}",
                 "--log-level", "info"],
                cwd=directory, stdout=subprocess.DEVNULL, stderr=err,
                env=subprocess_env(APP_URL=url, APP_TABLE=table, APP_MARKER=str(marker)),
            )
            try:
                wait_until(lambda: marker.exists() or proc.poll() is not None, 20, "a run")
                assert proc.poll() is None, (directory / "stderr.log").read_text()
                wait_until(lambda: api.info("waiter").running, 5, "the waiting task to start")
                proc.send_signal(getattr(signal, how))
                code = proc.wait(timeout=15)
            finally:
                if proc.poll() is None:
                    proc.kill()
            err.seek(0)
            log = err.read()
        assert code == 0, log
        assert "INFO    dbscheduler: [node=app-node task=- token=-] started with 2 task(s)" in log
        assert f"received {how}; shutting down" in log
        assert "[node=app-node task=- token=-] stopped" in log
        assert "Traceback" not in log
        # Graceful: the execution that was running saw stop_requested and ended its row.
        waiter = api.info("waiter")
        assert not waiter.running and waiter.last_finished_at is not None
        assert int(marker.read_text()) >= 1
        return log
    finally:
        api.engine.dispose()


def test_run_stops_gracefully_on_sigterm(migrated: tuple[str, str], tmp_path: Path) -> None:
    url, table = migrated
    run_node_until_signal(url, table, tmp_path, "scheduler", "SIGTERM")


def test_run_accepts_a_factory_and_stops_on_sigint(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'factory.sqlite3'}"
    run_node_until_signal(url, "scheduled_tasks", tmp_path, "make_scheduler", "SIGINT")


def test_run_with_a_missing_table_exits_1(tmp_path: Path) -> None:
    found = find("postgresql")
    if found.url is None:
        pytest.skip(found.reason)
    url = found.url
    module = write_app(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "dbscheduler", "run", f"{module}:scheduler"],
        cwd=tmp_path, capture_output=True, text=True, timeout=30,
        env=subprocess_env(APP_URL=url, APP_TABLE=f"t_missing_{uuid.uuid4().hex[:8]}",
                           APP_MARKER=str(tmp_path / "m")),
    )
    assert proc.returncode == 1, proc.stderr
    assert "does not exist" in proc.stderr and "dbscheduler migrate" in proc.stderr
    assert "Traceback" not in proc.stderr


# -- the real executable -----------------------------------------------------------------


def test_python_m_dbscheduler_piped_output(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'piped.sqlite3'}"
    long_name = "a-rather-long-task-name-for-the-nightly-warehouse-export"
    assert invoke("migrate", "--url", url).exit_code == 0
    seed(url, "scheduled_tasks", long_name, "short")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "dbscheduler", *args], cwd=tmp_path, capture_output=True,
            text=True, timeout=60, env=subprocess_env(DBSCHEDULER_URL=url),
        )

    listed = run("list")
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout
    lines = listed.stdout.splitlines()
    row = next(line for line in lines if long_name in line)
    assert "fixed-rate 3600s" in row and row.rstrip().endswith("-")  # one line, not wrapped
    assert len(row) > 80
    assert all(line == line.rstrip() for line in lines)

    missing = run("show", "nope")
    assert missing.returncode == 1
    assert missing.stdout == ""
    assert missing.stderr == f"Error: no task named 'nope' in table 'scheduled_tasks' on {url}\n"
