"""Reaching the test databases: a real server for each backend, and throwaway tables.

A backend's server is found in this order:

1. an environment URL (``DBSCHEDULER_TEST_<BACKEND>_URL``): used as it is, never restarted;
2. PostgreSQL and MariaDB: a private server this run starts from the installed binaries
   (:mod:`tests.servers`), shared by the run's xdist workers and removed at its end; the
   machine's own servers are never used. SQL Server and Oracle: the local service on its
   standard port;
3. a testcontainers container, when a Docker engine answers;
4. otherwise a skip with the reason and the command that installs the server — or a failure,
   for backends named in ``DBSCHEDULER_REQUIRE_DATABASES`` (CI sets ``postgresql,mysql``).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import shutil
import socket
import tempfile
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import sqlalchemy as sa

from dbscheduler.table import groups_table_name
from tests.servers import (
    INSTALL,
    PrivateMariaDB,
    PrivatePostgres,
    PrivateServer,
    Unavailable,
    kill_all_in,
    start_watchdog,
)

LOCAL = {
    "mssql": (
        "127.0.0.1",
        1433,
        "mssql+pyodbc://sa:Dbscheduler-Test1@127.0.0.1:1433/master"
        "?driver=ODBC+Driver+18+for+SQL+Server&TrustServerCertificate=yes",
    ),
    "oracle": (
        "127.0.0.1",
        1521,
        "oracle+oracledb://system:dbscheduler@127.0.0.1:1521/?service_name=FREEPDB1",
    ),
}
IMAGES = {
    "postgresql": "postgres:16-alpine",
    "mysql": "mariadb:11",
    "mssql": "mcr.microsoft.com/mssql/server:2022-latest",
    "oracle": "gvenzl/oracle-free:slim",
}


PRIVATE: dict[str, type[PrivateServer]] = {"postgresql": PrivatePostgres,
                                          "mysql": PrivateMariaDB}
# As the servers ship, but without waiting for the disk at each commit: the data is thrown
# away at the end of the run, and the tests' many CREATE TABLEs would wait for it.
TEST_SETTINGS = {"postgresql": {"fsync": "off"},
                 "mysql": {"innodb-flush-log-at-trx-commit": "2"}}
RUN = "DBSCHEDULER_TEST_SERVERS"
"""``<owner pid> <directory>``: where this run keeps its private servers (set by
:func:`begin_run` in the process that owns the run, inherited by xdist workers)."""
SERVERS_DIR = "DBSCHEDULER_TEST_SERVERS_DIR"
"""Where a run makes its servers' directory, if set (default: see :func:`servers_base`)."""
MEMORY = Path("/dev/shm")
MEMORY_ROOM = 4 << 30
"""Free bytes ``/dev/shm`` must have to hold a run's servers (they use well under 1 GiB)."""


@dataclass(frozen=True)
class Found:
    url: str | None
    reason: str
    server: PrivateServer | None = None
    """The private server behind ``url``: the only kind a test may restart or kill."""


def required() -> set[str]:
    raw = os.environ.get("DBSCHEDULER_REQUIRE_DATABASES", "")
    return {part.strip() for part in raw.split(",") if part.strip()}


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _works(url: str) -> str | None:
    """None when the URL answers a query, else the error text."""
    try:
        engine = sa.create_engine(url, pool_pre_ping=True)
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1" if "oracle" not in url else "SELECT 1 FROM DUAL"))
        engine.dispose()
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


def _container(backend: str) -> str:
    if backend == "postgresql":
        from testcontainers.postgres import PostgresContainer

        pg = PostgresContainer(IMAGES[backend], driver="psycopg")
        pg.start()
        atexit.register(pg.stop)
        return str(pg.get_connection_url())
    if backend == "mysql":
        from testcontainers.mysql import MySqlContainer

        my = MySqlContainer(IMAGES[backend], dialect="pymysql")
        my.start()
        atexit.register(my.stop)
        return str(my.get_connection_url())
    if backend == "mssql":
        from testcontainers.mssql import SqlServerContainer

        ms = SqlServerContainer(IMAGES[backend], password="Dbscheduler-Test1")
        ms.start()
        atexit.register(ms.stop)
        return str(ms.get_connection_url())
    from testcontainers.oracle import OracleDbContainer

    ora = OracleDbContainer(IMAGES[backend])
    ora.start()
    atexit.register(ora.stop)
    return str(ora.get_connection_url())


# -- the run's private servers ------------------------------------------------------------------
def begin_run() -> None:
    """Make this process the owner of the run's private servers (none is started yet: the
    first test that needs one starts it). Nested runs reuse their parent's."""
    if os.environ.get(RUN):
        return
    # Named now, made by the first server: a run killed before it needs one leaves nothing.
    directory = servers_base() / f"dbscheduler-tests-{uuid.uuid4().hex[:12]}"
    os.environ[RUN] = f"{os.getpid()} {directory}"


def servers_base() -> Path:
    """The directory a run's servers live in: ``$DBSCHEDULER_TEST_SERVERS_DIR`` if set, else
    memory (``/dev/shm``) when it has room, else the temporary directory.

    In memory, the file syncs a server still makes with durability off cost nothing: creating a
    table by the migrations takes MariaDB 0.2 s there against 1.1 s on this project's machines'
    disk, and the suite creates hundreds."""
    if os.environ.get(SERVERS_DIR):
        return Path(os.environ[SERVERS_DIR])
    try:
        room = os.statvfs(MEMORY)
    except OSError:
        return Path(tempfile.gettempdir())
    if room.f_bavail * room.f_frsize >= MEMORY_ROOM and os.access(MEMORY, os.W_OK | os.X_OK):
        return MEMORY
    return Path(tempfile.gettempdir())


def end_run() -> None:
    """Stop and delete the run's private servers, when this process owns them."""
    if not os.environ.get(RUN):
        return
    owner, directory = _run()
    if owner != os.getpid():
        return
    kill_all_in(directory)
    shutil.rmtree(directory, ignore_errors=True)
    del os.environ[RUN]


def _run() -> tuple[int, Path]:
    if not os.environ.get(RUN):
        begin_run()  # not under pytest (a script importing this module): its own servers
        atexit.register(end_run)
    owner, directory = os.environ[RUN].split(" ", 1)
    return int(owner), Path(directory)


def private_server(backend: str) -> Found:
    """This run's private server for ``backend``: the first process to ask starts it (holding
    a lock in the run's directory), the others find it there."""
    owner, directory = _run()
    directory.mkdir(exist_ok=True)
    directory.chmod(0o755)  # the servers' own users walk into it
    state_file = directory / f"{backend}.json"
    with open(directory / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if state_file.exists():
            state = json.loads(state_file.read_text())
        else:
            if not (directory / "watchdog").exists():
                start_watchdog(directory, owner)
                (directory / "watchdog").touch()
            server = PRIVATE[backend](directory / backend, TEST_SETTINGS[backend])
            try:
                server.create()
                state = server.state()
            except Exception as exc:  # written down: the other tests skip (or fail) at once
                server.kill()
                reason = str(exc) if isinstance(exc, Unavailable) else f"{exc!r}"
                state = {"error": reason}
            state_file.write_text(json.dumps(state))
    if "error" in state:
        return Found(None, f"no private {backend} server: {state['error']}")
    server = PrivateServer.from_state(state)
    return Found(server.url, f"private server ({server!r})", server)


@cache
def find(backend: str) -> Found:
    """Where the tests reach ``backend`` (cached for the session)."""
    env = f"DBSCHEDULER_TEST_{backend.upper()}_URL"
    if os.environ.get(env):
        url = os.environ[env]
        problem = _works(url)
        if problem is None:
            return Found(url, f"{env}")
        return Found(None, f"{env}={url} does not answer: {problem}")
    if backend in PRIVATE:
        if PRIVATE[backend].binaries() is not None:
            return private_server(backend)
        missing = (f"the {PRIVATE[backend].label} server binaries are not installed "
                   f"(install them with: {INSTALL}), and {env} is not set")
        if _docker_answers():
            try:
                return Found(_container(backend), "testcontainers")
            except Exception as exc:
                return Found(None, f"{missing}; testcontainers failed: {exc}")
        return Found(None, f"{missing}; no Docker engine answers for testcontainers either")
    host, port, url = LOCAL[backend]
    if _port_open(host, port):
        problem = _works(url)
        if problem is None:
            return Found(url, "local service")
        local_reason = f"local service on {host}:{port} refused: {problem}"
    else:
        local_reason = f"nothing listens on {host}:{port}"
    if _docker_answers():
        try:
            return Found(_container(backend), "testcontainers")
        except Exception as exc:
            return Found(None, f"{local_reason}; testcontainers failed: {exc}")
    return Found(
        None,
        f"no {backend} server: {env} is not set, {local_reason}, and no Docker engine "
        "answers for testcontainers",
    )


def unique_table() -> str:
    """A table name no other test uses."""
    return f"t_{uuid.uuid4().hex[:12]}"


def drop_table(url: str, table: str) -> None:
    """Drop ``table``, its group-limit table, its run history, its items, its node registry
    and its migration version table, if they exist."""
    # Not DROP TABLE IF EXISTS: Oracle before 23ai rejects it.
    engine = sa.create_engine(url)
    try:
        for name in (table, groups_table_name(table), f"{table}_runs", f"{table}_items",
                     f"{table}_nodes", f"{table}_version"):
            sa.Table(name, sa.MetaData()).drop(engine, checkfirst=True)
    finally:
        engine.dispose()
