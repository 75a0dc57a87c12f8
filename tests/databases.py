"""Reaching the test databases: a real server for each backend, and throwaway tables.

A backend's server is found in this order:

1. an environment URL (``DBSCHEDULER_TEST_<BACKEND>_URL``);
2. the local service on its standard port;
3. a testcontainers container, when a Docker engine answers;
4. otherwise a skip with the reason — or a failure, for backends named in
   ``DBSCHEDULER_REQUIRE_DATABASES`` (CI sets ``postgresql,mysql``).
"""

from __future__ import annotations

import atexit
import os
import socket
import uuid
from dataclasses import dataclass
from functools import cache

import sqlalchemy as sa

from dbscheduler.companion_tables import groups_table_name

LOCAL = {
    "postgresql": ("127.0.0.1", 5432, "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
    "mysql": ("127.0.0.1", 3306, "mysql+pymysql://root@127.0.0.1:3306/test"),
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


@dataclass(frozen=True)
class Found:
    url: str | None
    reason: str


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
