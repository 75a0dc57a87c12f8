"""The ``scheduled_tasks`` table, defined once with SQLAlchemy Core for any validated name.

The migrations, the ``ddl/*.sql`` files and the engine all build the table from
:func:`make_table`, so there is exactly one definition of its shape.

Timestamps are stored in UTC with microsecond precision:

==========  =======================================================================
PostgreSQL  ``TIMESTAMP WITH TIME ZONE``
MySQL       ``DATETIME(6)`` holding UTC
SQL Server  ``DATETIME2(6)`` holding UTC
Oracle      ``TIMESTAMP(6) WITH TIME ZONE``
SQLite      ``VARCHAR(26)`` ISO-8601 text ``YYYY-MM-DD HH:MM:SS.ffffff`` in UTC; it sorts
            and compares as text, which is what lets SQLite compare against its own clock
==========  =======================================================================
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.types import TypeDecorator, TypeEngine

__all__ = [
    "MAX_ERROR_LENGTH",
    "MAX_NAME_LENGTH",
    "UTCDateTime",
    "make_table",
    "split_table_name",
]

DEFAULT_TABLE = "scheduled_tasks"
MAX_NAME_LENGTH = 255
"""Longest task name: the unique index must fit MySQL's and SQL Server's key size limits."""
MAX_ERROR_LENGTH = 2000
MAX_SCHEDULE_LENGTH = 500

_IDENT = r"[A-Za-z_][A-Za-z0-9_]{0,62}"
_TABLE_NAME = re.compile(rf"^(?:({_IDENT})\.)?({_IDENT})$")

_SQLITE_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


def split_table_name(qualified: str) -> tuple[str | None, str]:
    """Validate a table name and split it into ``(schema, name)``.

    Only plain identifiers are accepted (letters, digits, ``_``, at most 63 characters, with
    an optional ``schema.`` prefix), so the name can never carry SQL.

    >>> split_table_name("ops.scheduled_tasks")
    ('ops', 'scheduled_tasks')
    """
    if not isinstance(qualified, str):
        raise ValueError(f"table must be a string, got {type(qualified).__name__}")
    match = _TABLE_NAME.match(qualified)
    if match is None:
        raise ValueError(
            f"table {qualified!r} is not a plain identifier: use letters, digits and '_' "
            "(at most 63, not starting with a digit), with an optional 'schema.' prefix"
        )
    return match.group(1), match.group(2)


class UTCDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime in Python; the best UTC timestamp type on each database.

    Binding a naive datetime raises ``ValueError``: the library never guesses a timezone.
    """

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        name = dialect.name
        if name == "postgresql":
            from sqlalchemy.dialects.postgresql import TIMESTAMP as PG_TIMESTAMP

            return dialect.type_descriptor(PG_TIMESTAMP(timezone=True, precision=6))
        if name in ("mysql", "mariadb"):
            from sqlalchemy.dialects.mysql import DATETIME as MY_DATETIME

            return dialect.type_descriptor(MY_DATETIME(fsp=6))
        if name == "mssql":
            from sqlalchemy.dialects.mssql import DATETIME2

            return dialect.type_descriptor(DATETIME2(precision=6))  # type: ignore[no-untyped-call]
        if name == "oracle":
            from sqlalchemy.dialects.oracle import TIMESTAMP as ORA_TIMESTAMP

            return dialect.type_descriptor(ORA_TIMESTAMP(timezone=True))
        if name == "sqlite":
            return dialect.type_descriptor(sa.String(26))
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: pass an aware datetime")
        utc = value.astimezone(timezone.utc)
        if dialect.name == "sqlite":
            return utc.strftime(_SQLITE_FORMAT)
        if dialect.name in ("mysql", "mariadb", "mssql"):
            return utc.replace(tzinfo=None)
        return utc

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        return to_utc(value)


def to_utc(value: Any) -> datetime | None:
    """Read a timestamp as any driver returns it (aware, naive-UTC or SQLite text)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise TypeError(f"expected a timestamp, got {value!r}")
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


class Flag(TypeDecorator[bool]):
    """A boolean; ``NUMBER(1)`` 0/1 on Oracle, whose tables have no BOOLEAN before 23ai."""

    impl = sa.Boolean
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "oracle":
            return dialect.type_descriptor(sa.SmallInteger())
        return dialect.type_descriptor(sa.Boolean(create_constraint=False))

    def process_bind_param(self, value: bool | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        return int(bool(value)) if dialect.name == "oracle" else bool(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> bool | None:
        return None if value is None else bool(value)


class _FalseDefault(sa.sql.expression.ColumnElement[bool]):
    """The server default of a flag column: ``false`` on PostgreSQL, ``0`` elsewhere."""

    inherit_cache = True


@compiles(_FalseDefault)
def _false_zero(element: _FalseDefault, compiler: SQLCompiler, **kw: Any) -> str:
    return "0"


@compiles(_FalseDefault, "postgresql")
def _false_pg(element: _FalseDefault, compiler: SQLCompiler, **kw: Any) -> str:
    return "false"


def _text_type() -> TypeEngine[str]:
    # NVARCHAR(max), not the deprecated NTEXT SQLAlchemy picks when it cannot see the server.
    from sqlalchemy.dialects.mssql import NVARCHAR

    return sa.UnicodeText().with_variant(NVARCHAR(None), "mssql")


def _name_type() -> TypeEngine[str]:
    # Names are compared case- and accent-sensitively everywhere: "Report" and "report" are
    # two tasks. MySQL and SQL Server default to case-insensitive collations, hence the variants.
    return (
        sa.Unicode(MAX_NAME_LENGTH)
        .with_variant(sa.Unicode(MAX_NAME_LENGTH, collation="utf8mb4_bin"), "mysql", "mariadb")
        .with_variant(sa.Unicode(MAX_NAME_LENGTH, collation="Latin1_General_100_BIN2"), "mssql")
    )


def make_table(
    qualified_name: str = DEFAULT_TABLE, metadata: sa.MetaData | None = None
) -> sa.Table:
    """Build the scheduler table for a validated name (see :func:`split_table_name`).

    >>> make_table("jobs").c.queue_name.name
    'queue_name'
    """
    schema, name = split_table_name(qualified_name)
    metadata = metadata if metadata is not None else sa.MetaData()
    zero = _FalseDefault()
    table = sa.Table(
        name,
        metadata,
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            sa.Identity(),
            primary_key=True,
        ),
        sa.Column("queue_name", _name_type(), nullable=False),
        sa.Column("payload", _text_type(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column(
            "next_process_at",
            UTCDateTime(),
            nullable=False,
        ),
        sa.Column("attempt", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column(
            "reenqueue_attempt", sa.BigInteger(), nullable=False, server_default=sa.text("0")
        ),
        sa.Column(
            "total_attempt",
            sa.BigInteger(),
            nullable=False,
            server_default=sa.text("0"),
        ),
        sa.Column("paused", Flag(), nullable=False, server_default=zero),
        sa.Column("locked_by", sa.Unicode(255), nullable=True),
        sa.Column("heartbeat_at", UTCDateTime(), nullable=True),
        sa.Column("last_started_at", UTCDateTime(), nullable=True),
        sa.Column("last_finished_at", UTCDateTime(), nullable=True),
        sa.Column("last_status", sa.Unicode(16), nullable=True),
        sa.Column("last_error", sa.Unicode(MAX_ERROR_LENGTH), nullable=True),
        sa.Column("schedule", sa.Unicode(MAX_SCHEDULE_LENGTH), nullable=True),
        sa.Column(
            "stop_requested",
            Flag(),
            nullable=False,
            server_default=zero,
        ),
        sa.UniqueConstraint("queue_name", name=f"{name}_uq"),
        sa.Index(f"{name}_next_idx", "next_process_at"),
        schema=schema,
        sqlite_autoincrement=True,
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    return table


COLUMNS: tuple[str, ...] = tuple(c.name for c in make_table().columns)
"""The column names, in table order; a table missing one of them is rejected at start-up."""
