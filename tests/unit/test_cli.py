"""The ``dbscheduler`` command line without a database: help, ``ddl``, usage errors.

The commands that reach a database are in ``tests/integration/test_cli.py``, which shares
:func:`invoke`, :func:`assert_fails` and the app module of ``run`` from here.
"""

from __future__ import annotations

import re
import sys
import textwrap
import uuid
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dbscheduler import Scheduler
from dbscheduler.cli import cli, humanize, load_scheduler
from dbscheduler.migrate import offline_sql

ROOT = Path(__file__).resolve().parents[2]
DDL_DIALECTS = ("sqlite", "postgresql", "mysql", "mssql", "oracle")


def invoke(*args: str, env: Mapping[str, str | None] | None = None) -> Result:
    """Run the CLI in-process, isolated from the caller's DBSCHEDULER_* variables."""
    base: dict[str, str | None] = {"DBSCHEDULER_URL": None, "DBSCHEDULER_TABLE": None,
                                   "COLUMNS": None}
    return CliRunner().invoke(cli, list(args), env={**base, **(env or {})},
                              catch_exceptions=False)


def assert_fails(result: Result, code: int, *fragments: str) -> None:
    """Exit ``code``, the fragments in stderr, nothing on stdout, no traceback."""
    assert result.exit_code == code, (result.exit_code, result.output)
    assert result.stdout == ""
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


# -- pure helpers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (190, "in 3m 10s"),
        (-5, "5s ago"),
        (0.4, "now"),
        (-0.9, "now"),
        (59.9, "in 59s"),
        (3600, "in 1h"),
        (3661, "in 1h 1m"),
        (-(2 * 86400 + 7200 + 5), "2d 2h ago"),
        (86400 + 59, "in 1d"),
    ],
)
def test_humanize(seconds: float, text: str) -> None:
    assert humanize(timedelta(seconds=seconds)) == text


def test_help_and_version() -> None:
    result = invoke("--help")
    assert result.exit_code == 0, result.output
    for command in ("migrate", "ddl", "list", "show", "trigger", "pause", "resume",
                    "reschedule", "cancel", "delete", "run"):
        assert re.search(rf"^\s+{command}\s", result.stdout, re.M), command
    assert "DBSCHEDULER_URL" in result.stdout
    assert invoke("--version").stdout.strip().endswith("0.1.0")
    assert invoke("no-such-command").exit_code == 2
    assert invoke("show").exit_code == 2  # missing NAME


# -- ddl ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", [*DDL_DIALECTS, "mariadb"])
def test_ddl_prints_the_offline_migration(dialect: str) -> None:
    result = invoke("ddl", "--dialect", dialect)
    assert result.exit_code == 0, result.output
    assert result.stdout == offline_sql(dialect)


def test_ddl_write_reproduces_the_repository_files_byte_for_byte(tmp_path: Path) -> None:
    result = invoke("ddl", "--write", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == sorted(f"{d}.sql" for d in DDL_DIALECTS)
    for dialect in DDL_DIALECTS:
        assert (tmp_path / "out" / f"{dialect}.sql").read_bytes() == (
            ROOT / "ddl" / f"{dialect}.sql"
        ).read_bytes(), dialect
        assert f"{dialect}.sql" in result.stdout

    only = invoke("ddl", "--write", str(tmp_path / "one"), "--dialect", "mssql")
    assert only.exit_code == 0, only.output
    assert [p.name for p in (tmp_path / "one").iterdir()] == ["mssql.sql"]


def test_ddl_table_and_dialect_from_the_url() -> None:
    custom = invoke("ddl", "--dialect", "postgresql", "--table", "ops.jobs")
    assert custom.stdout == offline_sql("postgresql", "ops.jobs")
    assert "CREATE TABLE ops.jobs (" in custom.stdout
    # Without --dialect, the dialect of --url (default: the embedded SQLite file).
    assert invoke("ddl").stdout == offline_sql("sqlite")
    assert invoke("--url", "mysql+pymysql://u@h/db", "ddl").stdout == offline_sql("mysql")
    env = {"DBSCHEDULER_URL": "oracle+oracledb://u@h/db", "DBSCHEDULER_TABLE": "jobs"}
    assert invoke("ddl", env=env).stdout == offline_sql("oracle", "jobs")


def test_ddl_usage_errors() -> None:
    assert_fails(invoke("ddl", "--dialect", "db2"), 2, "'db2' is not one of")
    assert_fails(invoke("ddl", "--dialect", "sqlite", "--table", "1bad"), 2, "--table")
    assert_fails(invoke("--url", "duckdb:///x", "ddl"), 2, "pass --dialect")


# -- errors ------------------------------------------------------------------------------


def test_missing_driver_exits_1_with_a_hint() -> None:
    try:
        import cx_Oracle  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("cx_Oracle is installed here")
    result = invoke("list", "--url", "oracle+cx_oracle://scott:tiger@db/x")
    assert_fails(result, 1, "cannot load the database driver", "dbscheduler[oracle]")
    assert "tiger" not in result.stderr  # the password is never printed


def test_usage_errors_exit_2() -> None:
    assert_fails(invoke("list", "--table", "bad-name"), 2, "'--table'", "plain identifier")
    assert_fails(invoke("--table", "x;drop table y", "list"), 2, "'--table'")
    assert_fails(invoke("list", "--url", "not a url"), 2, "'--url'")
    assert_fails(invoke("list", "--url", "nosuchdb://x"), 2, "'--url'")
    assert_fails(invoke("list", "--bogus"), 2, "No such option")


# -- run ---------------------------------------------------------------------------------

APP = '''
import os
import pathlib

from dbscheduler import FixedRate, Scheduler

scheduler = Scheduler(os.environ["APP_URL"], table=os.environ["APP_TABLE"],
                      node_id="app-node", lease=1.5, poll_interval=0.2)


@scheduler.task("beat", schedule=FixedRate(0.2))
def beat(ctx):
    pathlib.Path(os.environ["APP_MARKER"]).write_text(str(ctx.total_attempt))


@scheduler.task("waiter", schedule=FixedRate(0.2))
def waiter(ctx):
    ctx.stop_requested.wait(30)  # runs until the node shuts down


def make_scheduler():
    return scheduler


not_a_scheduler = 42
'''


def write_app(directory: Path) -> str:
    """Write the app module into ``directory``; returns its (unique) module name."""
    name = f"app_{uuid.uuid4().hex[:8]}"
    (directory / f"{name}.py").write_text(textwrap.dedent(APP))
    return name


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_scheduler adds the cwd
    monkeypatch.setenv("APP_URL", f"sqlite:///{tmp_path / 'app.sqlite3'}")
    monkeypatch.setenv("APP_TABLE", "scheduled_tasks")
    monkeypatch.setenv("APP_MARKER", str(tmp_path / "m"))
    name = write_app(tmp_path)
    yield name
    sys.modules.pop(name, None)


def test_load_scheduler_accepts_an_object_or_a_factory(app_module: str) -> None:
    direct = load_scheduler(f"{app_module}:scheduler")
    assert isinstance(direct, Scheduler)
    assert load_scheduler(f"{app_module}:make_scheduler") is direct
    direct.engine.dispose()


def test_run_usage_errors_exit_2(app_module: str) -> None:
    assert_fails(invoke("run", "no_colon"), 2, "is not MODULE:ATTR")
    assert_fails(invoke("run", f"{app_module}:"), 2, "is not MODULE:ATTR")
    assert_fails(invoke("run", "no_such_module_xyz:app"), 2, "no module named 'no_such_module_xyz'")
    assert_fails(invoke("run", f"{app_module}:missing"), 2, "has no attribute 'missing'")
    assert_fails(invoke("run", f"{app_module}:not_a_scheduler"), 2, "not a dbscheduler.Scheduler")
    assert_fails(invoke("--url", "sqlite://", "run", f"{app_module}:scheduler"), 2,
                 "--url does not apply to `run`")
    assert_fails(invoke("run", f"{app_module}:scheduler", "--log-level", "LOUD"), 2)
