"""The column types whose storage differs per database, asking each dialect how it stores them.

:class:`UTCDateTime` and :class:`Flag` are SQLAlchemy type decorators: Python sees an aware
UTC datetime and a bool, and the backend's :class:`~dbscheduler.dialects.base.Dialect`
decides the database type and the bound value. :func:`text_type`, :func:`name_type`,
:func:`id_type` and :func:`table_options` gather every dialect's variant, so the one table
definition in :mod:`dbscheduler.table` carries no database's name.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Dialect as SADialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.types import TypeDecorator, TypeEngine

__all__ = [
    "UNREADABLE_TIME",
    "ColumnStorage",
    "FalseDefault",
    "Flag",
    "UTCDateTime",
    "as_utc",
    "id_type",
    "name_type",
    "state_type",
    "table_options",
    "text_type",
    "to_utc",
    "use_backends",
]

UNREADABLE_TIME = datetime.min.replace(tzinfo=timezone.utc)
"""What a stored timestamp Python cannot represent reads as (a MariaDB zero date, PostgreSQL's
``-infinity``, SQLite text that is not a time): the earliest time there is, so that one such
row never makes reading the table fail, and the engine that picks it can tell (and say so)."""



class ColumnStorage(Protocol):
    """How one database stores the column types of this module: the part of
    :class:`~dbscheduler.dialects.base.Dialect` the types ask for. Declared here, below the
    dialects, so that this module needs none of them: the dialect modules use these types."""

    def timestamp_type(self) -> TypeEngine[Any]: ...
    def bind_timestamp(self, utc: datetime) -> Any: ...
    def flag_type(self) -> TypeEngine[Any]: ...
    def bind_flag(self, value: bool) -> Any: ...
    def text_type(self) -> TypeEngine[str] | None: ...
    def state_type(self) -> TypeEngine[str] | None: ...
    def name_type(self, length: int) -> TypeEngine[str] | None: ...
    def id_type(self) -> TypeEngine[int] | None: ...
    def table_options(self) -> dict[str, Any]: ...


_BACKENDS: list[tuple[ColumnStorage, tuple[str, ...]]] = []
_BY_NAME: dict[str, ColumnStorage] = {}


def use_backends(backends: Iterable[tuple[ColumnStorage, tuple[str, ...]]]) -> None:
    """Make ``backends`` (each with the SQLAlchemy dialect names it serves) the ones the types
    ask. The dialect registry (:mod:`dbscheduler.dialects`) calls it once, when it is imported:
    every use of these types comes after, since importing this module imports the package."""
    _BACKENDS[:] = list(backends)
    _BY_NAME.clear()
    _BY_NAME.update((name, backend) for backend, names in _BACKENDS for name in names)


def _backend(sa_dialect: SADialect) -> ColumnStorage | None:
    return _BY_NAME.get(sa_dialect.name)


def _backends() -> list[tuple[ColumnStorage, tuple[str, ...]]]:
    return _BACKENDS


class UTCDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime in Python; the best UTC timestamp type on each database.

    Binding a naive datetime raises ``ValueError``: the library never guesses a timezone.
    """

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: SADialect) -> TypeEngine[Any]:
        backend = _backend(dialect)
        if backend is None:
            return dialect.type_descriptor(sa.DateTime(timezone=True))
        return dialect.type_descriptor(backend.timestamp_type())

    def process_bind_param(self, value: datetime | None, dialect: SADialect) -> Any:
        if value is None:
            return None
        utc = as_utc(value)
        backend = _backend(dialect)
        return utc if backend is None else backend.bind_timestamp(utc)

    def process_result_value(self, value: Any, dialect: SADialect) -> datetime | None:
        return to_utc(value)


def as_utc(value: datetime) -> datetime:
    """An aware ``value`` in UTC; a naive one raises ``ValueError`` (never a guessed zone).

    >>> as_utc(datetime.fromisoformat("2026-01-01T12:00+02:00")).hour
    10
    """
    if value.tzinfo is timezone.utc:  # the engine's own times already are
        return value
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value!r}: pass an aware datetime")
    return value.astimezone(timezone.utc)


def to_utc(value: Any) -> datetime | None:
    """Read a timestamp as any driver returns it (aware, naive-UTC or SQLite text); text that
    is no time (a zero date, a hand edit) reads as :data:`UNREADABLE_TIME`."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return UNREADABLE_TIME
    if not isinstance(value, datetime):
        raise TypeError(f"expected a timestamp, got {value!r}")
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


class Flag(TypeDecorator[bool]):
    """A boolean, stored as the backend's dialect says (Oracle before 23ai has no BOOLEAN)."""

    impl = sa.Boolean
    cache_ok = True

    def load_dialect_impl(self, dialect: SADialect) -> TypeEngine[Any]:
        backend = _backend(dialect)
        if backend is None:
            return dialect.type_descriptor(sa.Boolean(create_constraint=False))
        return dialect.type_descriptor(backend.flag_type())

    def process_bind_param(self, value: bool | None, dialect: SADialect) -> Any:
        if value is None:
            return None
        backend = _backend(dialect)
        return bool(value) if backend is None else backend.bind_flag(bool(value))

    def process_result_value(self, value: Any, dialect: SADialect) -> bool | None:
        return None if value is None else bool(value)


class FalseDefault(sa.sql.expression.ColumnElement[bool]):
    """The server default of a flag column: ``0`` unless a dialect compiles it otherwise."""

    inherit_cache = True


@compiles(FalseDefault)
def _false_zero(element: FalseDefault, compiler: SQLCompiler, **kw: Any) -> str:
    return "0"


def text_type() -> TypeEngine[str]:
    """Unbounded text (state and payloads), with each backend's own variant."""
    text: TypeEngine[str] = sa.UnicodeText()
    for backend, names in _backends():
        variant = backend.text_type()
        if variant is not None:
            text = text.with_variant(variant, *names)
    return text


def state_type() -> TypeEngine[str]:
    """The state (``payload``) column from revision 2: unbounded text that holds
    :data:`dbscheduler.table.MAX_STATE_BYTES` on every backend."""
    text: TypeEngine[str] = sa.UnicodeText()
    for backend, names in _backends():
        variant = backend.state_type() or backend.text_type()
        if variant is not None:
            text = text.with_variant(variant, *names)
    return text


def name_type(length: int) -> TypeEngine[str]:
    """A task name column: compared case- and accent-sensitively on every backend ("Report"
    and "report" are two tasks), with each backend's collation where its default differs."""
    name: TypeEngine[str] = sa.Unicode(length)
    for backend, names in _backends():
        variant = backend.name_type(length)
        if variant is not None:
            name = name.with_variant(variant, *names)
    return name


def id_type() -> TypeEngine[int]:
    """The primary key's type: a big integer unless a backend needs its own."""
    key: TypeEngine[int] = sa.BigInteger()
    for backend, names in _backends():
        variant = backend.id_type()
        if variant is not None:
            key = key.with_variant(variant, *names)
    return key


def table_options() -> dict[str, Any]:
    """Every backend's ``sa.Table`` keyword options (engine, charset, autoincrement…)."""
    options: dict[str, Any] = {}
    for backend, _ in _backends():
        options.update(backend.table_options())
    return options
