"""Database backends. :func:`dialect_for` returns the one for an engine."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from .base import Dialect, PickedRow, db_now, db_now_plus
from .mssql import MSSQLDialect
from .mysql import MySQLDialect
from .oracle import OracleDialect
from .postgresql import PostgreSQLDialect
from .sqlite import SQLiteDialect

__all__ = ["Dialect", "PickedRow", "db_now", "db_now_plus", "dialect_for"]

_BY_NAME: dict[str, type[Dialect]] = {
    "sqlite": SQLiteDialect,
    "postgresql": PostgreSQLDialect,
    "mysql": MySQLDialect,
    "mariadb": MySQLDialect,
    "mssql": MSSQLDialect,
    "oracle": OracleDialect,
}


def dialect_for(engine: Engine) -> Dialect:
    """The backend for ``engine``; an unsupported database raises ``ValueError``."""
    try:
        return _BY_NAME[engine.dialect.name]()
    except KeyError:
        supported = ", ".join(sorted(_BY_NAME))
        raise ValueError(
            f"database {engine.dialect.name!r} is not supported; use one of: {supported}"
        ) from None
