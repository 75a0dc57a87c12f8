"""Connecting: a bad host, database, user or password each say so; a missing table is only a
missing table; transient errors are recognised by their codes; ``start(wait=...)``;
``postgres://`` URLs. Real servers, never mocks."""

from __future__ import annotations

import contextlib
import logging
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from dbscheduler import DatabaseUnreachable, FixedRate, Scheduler, SchemaMissing
from dbscheduler._engine.history import PRUNE_TASK
from dbscheduler.cli import cli
from dbscheduler.dialects import dialect_for
from tests.conftest import backend_url

SERVERS = ("postgresql", "mysql")


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> sa.URL:
    """The URL of a real PostgreSQL / MariaDB server."""
    return sa.engine.make_url(backend_url(str(request.param), tmp_path))


def start_error(url: sa.URL | str, wait: float | None = None) -> DatabaseUnreachable:
    scheduler = Scheduler(url if isinstance(url, str) else url.render_as_string(False))
    scheduler.add("x", lambda: None, schedule=FixedRate(60))
    try:
        with pytest.raises(DatabaseUnreachable) as caught:
            scheduler.start(wait=wait)
        return caught.value
    finally:
        scheduler.shutdown()


def cli_error(url: sa.URL, *command: str) -> str:
    result = CliRunner().invoke(
        cli, [*command, "--url", url.render_as_string(hide_password=False)],
        env={"DBSCHEDULER_URL": None, "DBSCHEDULER_TABLE": None}, catch_exceptions=False,
    )
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def test_a_missing_database_is_not_a_missing_table(server: sa.URL) -> None:
    bad = server.set(database="no_such_db_13")
    error = start_error(bad)
    assert not isinstance(error, SchemaMissing)
    assert error.kind == "database"
    assert "the server has no database 'no_such_db_13'" in str(error)
    for command in (["list"], ["show", "x"], ["trigger", "x"], ["migrate"]):
        line = cli_error(bad, *command)
        assert "has no database 'no_such_db_13'" in line, line
        assert "does not exist" not in line and "migrate" not in line, line


def test_an_unknown_user_says_so(server: sa.URL) -> None:
    bad = server.set(username="no_such_user_13")
    error = start_error(bad)
    if server.get_backend_name() == "postgresql":
        assert error.kind == "user"
        assert "no user (role) 'no_such_user_13'" in str(error)
    else:  # MySQL does not tell an unknown user from a wrong password
        assert error.kind == "login"
        assert "unknown user or wrong password" in str(error)
    assert "unknown user" in cli_error(bad, "list") or "no user" in cli_error(bad, "list")


def test_a_wrong_password_says_so_on_mysql(tmp_path: Path) -> None:
    # PostgreSQL here trusts local connections (no password is checked); its message is
    # covered in tests/unit/test_first_hour.py.
    url = sa.engine.make_url(backend_url("mysql", tmp_path)).set(password="wrong-13")
    error = start_error(url)
    assert error.kind == "login" and "wrong password" in str(error)
    line = cli_error(url, "list")
    assert "wrong password" in line and "wrong-13" not in line


def test_nothing_listening_and_an_unknown_host(server: sa.URL) -> None:
    refused = server.set(host="127.0.0.1", port=1)
    error = start_error(refused)
    assert error.kind == "host" and "no server answers" in str(error)
    assert "no server answers" in cli_error(refused, "list")
    unknown = server.set(host="no-such-host-13.invalid")
    error = start_error(unknown)
    assert error.kind == "host" and "does not resolve" in str(error)


def test_a_missing_table_is_still_schema_missing(server: sa.URL) -> None:
    scheduler = Scheduler(server.render_as_string(False), table="t_never_created_13")
    try:
        with pytest.raises(SchemaMissing, match="dbscheduler migrate"):
            scheduler.start()
    finally:
        scheduler.shutdown()


# -- classification by code, on errors the real servers raise ---------------------------


def _error(engine: sa.Engine, sql: str) -> sa.exc.DBAPIError:
    with engine.connect() as conn, pytest.raises(sa.exc.DBAPIError) as caught:
        conn.execute(sa.text(sql))
    return caught.value


def _deadlock(engine: sa.Engine, table: str) -> sa.exc.DBAPIError:
    """Two transactions locking two rows in opposite orders: the server kills one."""
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, v INTEGER)"))
        conn.execute(sa.text(f"INSERT INTO {table} (id, v) VALUES (1, 0), (2, 0)"))
    errors: list[sa.exc.DBAPIError] = []
    both_hold = threading.Barrier(2, timeout=10)

    def worker(first: int, second: int) -> None:
        try:
            with engine.begin() as conn:
                conn.execute(sa.text(f"UPDATE {table} SET v = 1 WHERE id = {first}"))
                both_hold.wait()
                conn.execute(sa.text(f"UPDATE {table} SET v = 1 WHERE id = {second}"))
        except sa.exc.DBAPIError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=a) for a in ((1, 2), (2, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors, "no deadlock happened"
    return errors[0]


def test_errors_are_classified_by_code(server: sa.URL) -> None:
    engine = sa.create_engine(server)
    dialect = dialect_for(engine)
    table = f"t_deadlock_{int(time.time() * 1000) % 10**9}"
    try:
        missing = _error(engine, "SELECT * FROM no_such_table_13")
        assert dialect.is_missing_table(missing) and not dialect.is_transient(missing)
        assert dialect.connect_problem(missing) is None
        # "does not exist", but not a table: a message text must not decide.
        other = _error(engine, "SELECT no_such_function_13()")
        assert "does not exist" in str(other.orig)
        assert not dialect.is_missing_table(other)
        deadlock = _deadlock(engine, table)
        assert dialect.is_transient(deadlock) and not dialect.is_missing_table(deadlock)
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
        engine.dispose()


def test_sqlite_busy_is_transient_and_no_such_table_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "busy.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER)")
    holder.execute("BEGIN IMMEDIATE")
    engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0})
    dialect = dialect_for(engine)
    try:
        busy = _error(engine, "INSERT INTO t VALUES (1)")
        assert dialect.is_transient(busy) and not dialect.is_missing_table(busy)
        missing = _error(engine, "SELECT * FROM nope")
        assert dialect.is_missing_table(missing) and not dialect.is_transient(missing)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        engine.dispose()


# -- start(wait=...) ---------------------------------------------------------------------


def test_start_waits_for_a_server_that_never_comes_then_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="dbscheduler")
    began = time.monotonic()
    error = start_error("postgresql+psycopg://postgres@127.0.0.1:1/test", wait=1.5)
    elapsed = time.monotonic() - began
    # Waits its 1.5 s, then gives up: the upper bound only tells it from waiting for good,
    # and holds on a machine ten times slower.
    assert 1.4 <= elapsed < 20, elapsed
    assert error.kind == "host"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "retrying for up to" in warnings[0].getMessage()


def test_start_without_wait_raises_at_once() -> None:
    began = time.monotonic()
    start_error("postgresql+psycopg://postgres@127.0.0.1:1/test")
    # One refused connection takes milliseconds; a retry loop would run past this bound.
    assert time.monotonic() - began < 10


def test_start_never_waits_for_a_wrong_database(server: sa.URL) -> None:
    began = time.monotonic()
    start_error(server.set(database="no_such_db_13"), wait=60)
    assert time.monotonic() - began < 30  # half the wait it was given: it did not wait


@pytest.fixture
def late_proxy(server: sa.URL) -> Iterator[tuple[int, threading.Event]]:
    """A port where nothing listens until ``up`` is set; then a TCP relay to ``server``."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    up, done = threading.Event(), threading.Event()

    def pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def serve() -> None:
        up.wait()
        with socket.create_server(("127.0.0.1", port)) as listener:
            listener.settimeout(0.2)
            while not done.is_set():
                try:
                    client, _ = listener.accept()
                except TimeoutError:
                    continue
                upstream = socket.create_connection((server.host, server.port))
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port, up
    up.set()
    done.set()
    thread.join(5)


def test_start_waits_until_the_server_answers(
    server: sa.URL, late_proxy: tuple[int, threading.Event], caplog: pytest.LogCaptureFixture
) -> None:
    from dbscheduler.migrate import upgrade

    port, up = late_proxy
    table = f"t_wait_{int(time.time() * 1000) % 10**9}"
    engine = sa.create_engine(server)
    upgrade(engine, table)
    caplog.set_level(logging.WARNING, logger="dbscheduler")
    scheduler = Scheduler(server.set(port=port).render_as_string(False), table=table)
    scheduler.add("x", lambda: None, schedule=FixedRate(60))
    threading.Timer(1.0, up.set).start()
    began = time.monotonic()
    try:
        scheduler.start(wait=60)
        assert 0.9 <= time.monotonic() - began < 30  # once the server came, not at the end
        assert [t.name for t in scheduler.tasks()] == [PRUNE_TASK, "x"]
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    finally:
        scheduler.shutdown(timeout=5)
        for name in (table, f"{table}_version"):
            sa.Table(name, sa.MetaData()).drop(engine, checkfirst=True)
        engine.dispose()


# -- URLs as people paste them -------------------------------------------------------------


def test_postgres_and_driverless_urls_use_our_drivers(server: sa.URL) -> None:
    scheme = "postgres" if server.get_backend_name() == "postgresql" else "mysql"
    plain = server.set(drivername=scheme).render_as_string(False)
    scheduler = Scheduler(plain)
    try:
        expected = "psycopg" if scheme == "postgres" else "pymysql"
        assert scheduler.engine.driver == expected
        with scheduler.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
    finally:
        scheduler.engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql"])
def test_cli_takes_a_postgres_url(migrated: tuple[str, str]) -> None:
    url, table = migrated
    plain = url.replace("postgresql+psycopg://", "postgres://")
    result = CliRunner().invoke(cli, ["list", "--url", plain, "--table", table],
                                env={"DBSCHEDULER_URL": None}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("no tasks in table ")
