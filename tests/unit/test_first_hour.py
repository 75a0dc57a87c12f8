"""Rough edges a newcomer hits in the first hour, that need no database server."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import oracledb
import psycopg
import pymysql
import pytest

from dbscheduler import (
    Cron,
    FixedDelay,
    FixedRate,
    GeometricBackoff,
    LinearBackoff,
    NoRetry,
    Scheduler,
)
from dbscheduler.dialects import normalize_url
from dbscheduler.dialects.mssql import MSSQLDialect
from dbscheduler.dialects.mysql import MySQLDialect
from dbscheduler.dialects.oracle import OracleDialect
from dbscheduler.dialects.postgresql import PostgreSQLDialect


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgres://app:pw@db:5432/app", "postgresql+psycopg://app:pw@db:5432/app"),
        ("postgresql://app@db/app", "postgresql+psycopg://app@db/app"),
        ("mysql://root@db/app", "mysql+pymysql://root@db/app"),
        ("mariadb://root@db/app", "mariadb+pymysql://root@db/app"),
        ("postgresql+psycopg2://app@db/app", "postgresql+psycopg2://app@db/app"),
        ("sqlite:///dbscheduler.sqlite3", "sqlite:///dbscheduler.sqlite3"),
    ],
)
def test_urls_without_a_driver_get_ours(given: str, expected: str) -> None:
    assert normalize_url(given).render_as_string(hide_password=False) == expected


def test_scheduler_accepts_a_postgres_url_without_connecting() -> None:
    scheduler = Scheduler("postgres://app@127.0.0.1:1/app")
    assert scheduler.engine.url.drivername == "postgresql+psycopg"
    scheduler.engine.dispose()


# -- connection failures PostgreSQL reports only in words -------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "says"),
    [
        ('connection failed: connection to server at "db" (10.0.0.5), port 5432 failed: '
         'FATAL:  password authentication failed for user "app"', "password",
         "wrong or missing password for user 'app'"),
        ('connection failed: connection to server at "db", port 5432 failed: '
         "fe_sendauth: no password supplied", "password", "wrong or missing password"),
        ('connection failed: connection to server at "db", port 5432 failed: '
         "FATAL:  the database system is starting up", "starting", "not accept connections"),
        ('connection failed: connection to server at "db", port 5432 failed: '
         'FATAL:  database "ap" does not exist', "database", "no database 'ap'"),
    ],
)
def test_postgresql_connect_failures(text: str, kind: str, says: str) -> None:
    problem = PostgreSQLDialect().connect_problem(psycopg.OperationalError(text))
    assert problem is not None and problem.kind == kind and says in problem.message
    assert not PostgreSQLDialect().is_missing_table(psycopg.OperationalError(text))


def test_postgresql_codes() -> None:
    dialect = PostgreSQLDialect()
    assert dialect.is_transient(psycopg.errors.DeadlockDetected("x"))
    assert dialect.is_transient(psycopg.errors.SerializationFailure("x"))
    assert dialect.is_missing_table(psycopg.errors.UndefinedTable("x"))
    # An error raised by a statement on an open session is never a connection failure.
    assert dialect.connect_problem(psycopg.errors.UndefinedTable('database "x" does not exist'))\
        is None


def test_mysql_codes() -> None:
    dialect = MySQLDialect()
    assert dialect.is_transient(pymysql.err.OperationalError(1213, "Deadlock found"))
    assert dialect.is_transient(pymysql.err.OperationalError(1205, "Lock wait timeout"))
    assert dialect.is_missing_table(pymysql.err.ProgrammingError(1146, "Table 'a.b' doesn't exist"))
    assert not dialect.is_missing_table(
        pymysql.err.OperationalError(1049, "Unknown database 'doesn't exist'"))
    problem = dialect.connect_problem(pymysql.err.OperationalError(1049, "Unknown database 'x'"))
    assert problem is not None and problem.kind == "database"


class _OdbcError(Exception):
    """pyodbc's error shape, ``(SQLSTATE, message)``: its library is not installed here."""


def test_sql_server_codes() -> None:
    dialect = MSSQLDialect()
    assert dialect.is_missing_table(_OdbcError(
        "42S02", "[42S02] [SQL Server]Invalid object name 'scheduled_tasks'. (208)"))
    assert dialect.is_transient(_OdbcError(
        "40001", "[40001] [SQL Server]Transaction (Process ID 52) was deadlocked (1205)"))
    assert not dialect.is_missing_table(_OdbcError(
        "42000", "[42000] [SQL Server]Cannot open database \"x\" requested by the login. (4060)"))
    problem = dialect.connect_problem(_OdbcError(
        "28000", "[28000] [SQL Server]Login failed for user 'sa'. (18456)"))
    assert problem is not None and problem.kind == "login"


def test_oracle_codes() -> None:
    dialect = OracleDialect()

    def err(text: str) -> oracledb.DatabaseError:
        return oracledb.DatabaseError(text)

    assert dialect.is_missing_table(err("ORA-00942: table or view does not exist"))
    assert dialect.is_transient(err("ORA-00060: deadlock detected while waiting for resource"))
    assert not dialect.is_missing_table(err("ORA-00904: \"X\": invalid identifier"))
    problem = dialect.connect_problem(err("ORA-01017: invalid credential or not authorized"))
    assert problem is not None and problem.kind == "login"


# -- a retry that can never fire ---------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "on_failure", "warns"),
    [
        (FixedDelay(1), LinearBackoff(timedelta(seconds=1), max_attempts=3), True),
        (FixedDelay(0), LinearBackoff(0.5), True),
        (FixedRate(5), GeometricBackoff(10), True),
        (FixedDelay(5), LinearBackoff(timedelta(seconds=1), max_attempts=3), False),
        (FixedRate(60), GeometricBackoff(10, max_delay=600), False),
        (FixedDelay(1), NoRetry(), False),
        (Cron("* * * * *"), LinearBackoff(120), False),
    ],
)
def test_add_warns_when_the_retry_never_comes_first(
    schedule: FixedDelay, on_failure: LinearBackoff, warns: bool,
    caplog: pytest.LogCaptureFixture, tmp_path: Path,
) -> None:
    caplog.set_level(logging.WARNING, logger="dbscheduler.scheduler")
    scheduler = Scheduler(f"sqlite:///{tmp_path / 'never-opened.sqlite3'}")
    scheduler.add("t", lambda: None, schedule=schedule, on_failure=on_failure)
    records = [r for r in caplog.records if r.name == "dbscheduler.scheduler"]
    if warns:
        assert len(records) == 1 and records[0].levelno == logging.WARNING
        assert "'t'" in records[0].getMessage() and "never retries" in records[0].getMessage()
    else:
        assert records == []


def test_the_cluster_example_retries_before_its_next_run(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DBSCHEDULER_URL", f"sqlite:///{tmp_path / 'never-opened.sqlite3'}")
    caplog.set_level(logging.WARNING, logger="dbscheduler.scheduler")
    import importlib
    import sys

    sys.modules.pop("examples.cluster_app", None)
    app = importlib.import_module("examples.cluster_app")
    try:
        assert not [r for r in caplog.records if r.name == "dbscheduler.scheduler"]
        rebuild = app.scheduler._tasks["rebuild-index"]
        assert rebuild.on_failure.retry_delay(1) < rebuild.schedule.delay
    finally:
        app.scheduler.engine.dispose()
        sys.modules.pop("examples.cluster_app", None)


# -- task names ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["two\nlines", "tab\there", "bell\a", "esc\x1b[31mred",
                                  "del\x7f", "nel\x85", "nul\x00", "\r"])
def test_names_with_control_characters_are_rejected(name: str, tmp_path: Path) -> None:
    scheduler = Scheduler(f"sqlite:///{tmp_path / 'never-opened.sqlite3'}")
    with pytest.raises(ValueError, match="control character"):
        scheduler.add(name, lambda: None, schedule=FixedRate(60))
    assert not (tmp_path / "never-opened.sqlite3").exists()


@pytest.mark.parametrize("name", ["report-[weekly]", "日本語のタスク", "a b", "emoji-🎉",
                                  "x" * 255, "🎉" * 127])
def test_other_names_are_accepted(name: str, tmp_path: Path) -> None:
    scheduler = Scheduler(f"sqlite:///{tmp_path / 'never-opened.sqlite3'}")
    scheduler.add(name, lambda: None, schedule=FixedRate(60))


def test_the_name_limit_is_stated_in_utf16_code_units(tmp_path: Path) -> None:
    scheduler = Scheduler(f"sqlite:///{tmp_path / 'never-opened.sqlite3'}")
    with pytest.raises(ValueError) as caught:
        scheduler.add("🎉" * 128, lambda: None, schedule=FixedRate(60))  # 128 chars, 256 units
    message = str(caught.value)
    assert "256 UTF-16 code units" in message and "limit is 255 UTF-16 code units" in message
    assert "emoji" in message
