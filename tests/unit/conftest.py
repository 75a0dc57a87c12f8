"""Unit tests open no database: not a server, not a SQLite file, not an in-memory SQLite.

Every way a test could reach one is refused here, so a test that needs a database fails
loudly and belongs in ``tests/integration/``. (A subprocess is not covered: the tests that
start one are reviewed by hand.)
"""

from __future__ import annotations

import importlib
import socket
import sqlite3
from typing import NoReturn

import pytest


def _refuse(*args: object, **kwargs: object) -> NoReturn:
    raise AssertionError(
        "a unit test opened a database connection (or a socket): it belongs in tests/integration"
    )


@pytest.fixture(autouse=True)
def _no_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite3, "connect", _refuse)
    monkeypatch.setattr(sqlite3.dbapi2, "connect", _refuse)  # what SQLAlchemy calls
    monkeypatch.setattr(socket.socket, "connect", _refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", _refuse)
    for name in ("psycopg", "pymysql", "oracledb", "pyodbc"):  # psycopg's libpq has its own
        try:
            driver = importlib.import_module(name)
        except ImportError:
            continue
        monkeypatch.setattr(driver, "connect", _refuse)
