"""Fixtures shared by every test: real databases, one fresh table per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.databases import find, required

SERVER_BACKENDS = ("postgresql", "mysql")
EXTRA_BACKENDS = ("mssql", "oracle")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--chaos-long", action="store_true",
                     help="run the long fault-injection suite (>= 10 minutes)")


def backend_url(backend: str, tmp_path: Path) -> str:
    """A URL for ``backend``; skips (or fails, when required) if no server is reachable."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'dbscheduler.sqlite3'}"
    found = find(backend)
    if found.url is None:
        if backend in required():
            pytest.fail(f"DBSCHEDULER_REQUIRE_DATABASES names {backend}, but {found.reason}")
        pytest.skip(found.reason)
    return found.url


def unique_table() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def drop_table(url: str, table: str) -> None:
    # Not DROP TABLE IF EXISTS: Oracle before 23ai rejects it.
    engine = sa.create_engine(url)
    try:
        for name in (table, f"{table}_version"):
            sa.Table(name, sa.MetaData()).drop(engine, checkfirst=True)
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", *SERVER_BACKENDS, *EXTRA_BACKENDS])
def backend(request: pytest.FixtureRequest) -> str:
    """Each test using it runs on SQLite, PostgreSQL, MariaDB/MySQL, SQL Server and Oracle;
    the last two skip with the reason where no server is reachable (DESIGN §7)."""
    return str(request.param)


@pytest.fixture(params=["sqlite", *SERVER_BACKENDS, *EXTRA_BACKENDS])
def any_backend(request: pytest.FixtureRequest) -> str:
    """Also SQL Server and Oracle: they skip with the reason where no server is reachable."""
    return str(request.param)


@pytest.fixture
def db_url(backend: str, tmp_path: Path) -> str:
    return backend_url(backend, tmp_path)


@pytest.fixture
def table_name(db_url: str) -> Iterator[str]:
    """A table name no other test uses; the table is dropped afterwards."""
    name = unique_table()
    yield name
    drop_table(db_url, name)


@pytest.fixture
def migrated(db_url: str, table_name: str) -> tuple[str, str]:
    """``(url, table)`` with the table created by the migrations."""
    from dbscheduler.migrate import upgrade

    engine = sa.create_engine(db_url)
    upgrade(engine, table_name)
    engine.dispose()
    return db_url, table_name


@pytest.fixture(autouse=True)
def _no_stray_default_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Scheduler() with no URL writes ./dbscheduler.sqlite3: keep tests out of the checkout.
    monkeypatch.chdir(tmp_path)
    os.environ.pop("DBSCHEDULER_URL", None)
