"""Database backends. :func:`dialect_for` returns the one for an engine."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy.engine import Engine

from .base import Dialect, PickedRow, db_now, db_now_plus
from .mssql import MSSQLDialect
from .mysql import MySQLDialect
from .oracle import OracleDialect
from .postgresql import PostgreSQLDialect
from .sqlite import SQLiteDialect

__all__ = ["Dialect", "PickedRow", "db_now", "db_now_plus", "dialect_for", "engine_options"]

_BY_NAME: dict[str, type[Dialect]] = {
    "sqlite": SQLiteDialect,
    "postgresql": PostgreSQLDialect,
    "mysql": MySQLDialect,
    "mariadb": MySQLDialect,
    "mssql": MSSQLDialect,
    "oracle": OracleDialect,
}


def engine_options(backend: str, lease: timedelta) -> dict[str, Any]:
    """``create_engine`` options for an engine the Scheduler creates itself.

    Timeouts turn a hung connection (a partition, a dead server) into an error instead of a
    thread stuck forever. They are generous (two leases and ten seconds): leases are guarded
    by the heartbeat's watchdog, not by them, and a statement that merely waits for a lock
    must not fail. On MySQL/MariaDB, READ COMMITTED keeps the pick's locking read from
    taking gap locks, which made concurrent picks deadlock.
    """
    ms = int((2 * lease.total_seconds() + 10) * 1000)
    if backend == "postgresql":
        return {"connect_args": {"connect_timeout": 10, "tcp_user_timeout": ms,
                                 "options": f"-c statement_timeout={ms}"}}
    if backend in ("mysql", "mariadb"):
        seconds = ms / 1000
        return {"isolation_level": "READ COMMITTED",
                "connect_args": {"connect_timeout": 10, "read_timeout": seconds,
                                 "write_timeout": seconds}}
    return {}


def dialect_for(engine: Engine) -> Dialect:
    """The backend for ``engine``; an unsupported database raises ``ValueError``."""
    try:
        return _BY_NAME[engine.dialect.name]()
    except KeyError:
        supported = ", ".join(sorted(_BY_NAME))
        raise ValueError(
            f"database {engine.dialect.name!r} is not supported; use one of: {supported}"
        ) from None
