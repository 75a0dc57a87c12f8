"""The command line as a newcomer first meets it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result

from dbscheduler.cli import cli
from tests.harness.inprocess import seed

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args: str, env: Mapping[str, str | None] | None = None) -> Result:
    base: dict[str, str | None] = {"DBSCHEDULER_URL": None, "DBSCHEDULER_TABLE": None,
                                   "COLUMNS": None}
    return CliRunner().invoke(cli, list(args), env={**base, **(env or {})},
                              catch_exceptions=False)


def one_error_line(result: Result, code: int = 1) -> str:
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("Error: ") and "Traceback" not in result.stderr, result.stderr
    return lines[-1]


# -- read-only commands create nothing ------------------------------------------------------


@pytest.mark.parametrize("command", [["list"], ["list", "--json"], ["show", "foo"],
                                     ["show", "foo", "--json"], ["trigger", "foo"]])
def test_commands_in_an_empty_directory_create_no_database(
    command: list[str], tmp_path: Path
) -> None:
    assert Path.cwd() == tmp_path  # conftest: every test runs in its own empty directory
    line = one_error_line(invoke(*command))
    assert f"no database at {tmp_path / 'dbscheduler.sqlite3'} (no such file)" in line
    assert "dbscheduler migrate --url 'sqlite:///dbscheduler.sqlite3'" in line
    assert list(tmp_path.iterdir()) == []


def test_a_sqlite_file_without_the_table_stays_without_it(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite3"
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE users (id INTEGER)"))
    line = one_error_line(invoke("list", "--url", f"sqlite:///{path}"))
    assert "table 'scheduled_tasks' does not exist" in line and "dbscheduler migrate" in line
    assert sa.inspect(engine).get_table_names() == ["users"]
    engine.dispose()


# -- "no task named" says where it looked ---------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
def test_an_unknown_name_names_the_database_and_table(migrated: tuple[str, str]) -> None:
    url, table = migrated
    with_password = sa.engine.make_url(url)
    if with_password.get_backend_name() == "postgresql":
        with_password = with_password.set(password="s3cret")  # trust: the server ignores it
    url = with_password.render_as_string(hide_password=False)
    line = one_error_line(invoke("show", "foo", "--url", url, "--table", table))
    shown = with_password.render_as_string(hide_password=True)
    assert line == f"Error: no task named 'foo' in table '{table}' on {shown}"
    assert "s3cret" not in line


# -- show: an old error is labelled as old -------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"])
def test_show_marks_an_error_from_an_earlier_failure(migrated: tuple[str, str]) -> None:
    url, table = migrated
    seed(url, table, "flaky")
    engine = sa.create_engine(url)
    t = sa.table(table, sa.column("queue_name"), sa.column("last_status"),
                 sa.column("last_error"), sa.column("last_finished_at"))

    def set_status(status: str) -> None:
        with engine.begin() as conn:
            conn.execute(t.update().values(
                last_status=status, last_error="ValueError: disk full",
                last_finished_at="2026-11-22 02:40:22.000000"))

    try:
        set_status("success")
        shown = invoke("show", "flaky", "--url", url, "--table", table)
        assert shown.exit_code == 0, shown.output
        line = next(x for x in shown.stdout.splitlines() if x.startswith("last error"))
        assert "ValueError: disk full  (from an earlier failure; the last run ended: success at" \
            " 2026-11-22 02:40:22" in line, line
        as_json = json.loads(invoke("show", "flaky", "--json", "--url", url, "--table",
                                    table).stdout)
        assert as_json["last_error"] == "ValueError: disk full"  # JSON unchanged
        set_status("error")
        shown = invoke("show", "flaky", "--url", url, "--table", table)
        line = next(x for x in shown.stdout.splitlines() if x.startswith("last error"))
        assert line.split(None, 2)[2] == "ValueError: disk full"
    finally:
        engine.dispose()


# -- run: --url/--table after MODULE:ATTR --------------------------------------------------

APP = """
import os
from dbscheduler import FixedRate, Scheduler

# Reads the variables the command line sets, as the examples do.
scheduler = Scheduler(os.environ.get("DBSCHEDULER_URL"),
                      table=os.environ.get("DBSCHEDULER_TABLE", "scheduled_tasks"),
                      poll_interval=0.2)
fixed = Scheduler("sqlite:///fixed.sqlite3")


@scheduler.task("tick", schedule=FixedRate(0.2))
def tick(ctx):
    pass
"""


def test_run_takes_url_and_table_after_the_module(tmp_path: Path) -> None:
    (tmp_path / "runapp.py").write_text(textwrap.dedent(APP))
    db = tmp_path / "given.sqlite3"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBSCHEDULER_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dbscheduler", "run", "runapp:scheduler",
         "--url", f"sqlite:///{db}", "--table", "jobs"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        deadline = time.monotonic() + 20
        ran = False
        while time.monotonic() < deadline and not ran and proc.poll() is None:
            time.sleep(0.1)
            if db.exists():
                engine = sa.create_engine(f"sqlite:///{db}")
                try:
                    with engine.connect() as conn:
                        ran = bool(conn.execute(sa.text(
                            "SELECT total_attempt FROM jobs WHERE queue_name = 'tick'"
                        )).scalar())
                except sa.exc.OperationalError:
                    pass  # the table is being created
                finally:
                    engine.dispose()
        assert proc.poll() is None, proc.communicate()[1]
        assert ran, "the node did not run its task on the --url database"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert not (tmp_path / "dbscheduler.sqlite3").exists()


def test_run_refuses_a_url_its_scheduler_does_not_use(tmp_path: Path) -> None:
    (tmp_path / "runapp2.py").write_text(textwrap.dedent(APP))
    sys.path.insert(0, str(tmp_path))
    try:
        for args in (["run", "runapp2:fixed", "--url", "sqlite:///other.sqlite3"],
                     ["--url", "sqlite:///other.sqlite3", "run", "runapp2:fixed"]):
            line = one_error_line(invoke(*args), code=2)
            assert "--url does not apply to `run`: the Scheduler at runapp2:fixed uses " \
                   "sqlite:///fixed.sqlite3, not sqlite:///other.sqlite3" in line, line
        line = one_error_line(invoke("run", "runapp2:fixed", "--table", "jobs"), code=2)
        assert "uses table 'scheduled_tasks', not 'jobs'" in line
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("runapp2",):
            sys.modules.pop(name, None)
