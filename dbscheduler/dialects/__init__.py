"""Database backends. :func:`dialect_for` returns the one for an engine."""

from __future__ import annotations

import difflib
import weakref
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from .base import ConnectProblem, Dialect, ListenUnavailable, PickedRow, db_now, db_now_plus
from .common import pick_limit
from .mssql import MSSQLDialect
from .mysql import MySQLDialect, driver_connect_args
from .oracle import OracleDialect
from .postgresql import PostgreSQLDialect
from .sessions import (
    CONNECT_TIMEOUT,
    IDLE_TRANSACTION_FLOOR,
    idle_transaction_timeout,
    missing,
    statement_timeout,
)
from .sqlite import SQLiteDialect
from .types import use_backends

__all__ = [
    "DEFAULT_URL",
    "IDLE_TRANSACTION_FLOOR",
    "ConnectProblem",
    "Dialect",
    "ListenUnavailable",
    "PickedRow",
    "autocommits",
    "connect_problem",
    "create_engine",
    "db_now",
    "db_now_plus",
    "dialect_for",
    "dialect_named",
    "engine_options",
    "idle_transaction_timeout",
    "names",
    "normalize_url",
    "pick_limit",
    "prepare_engine",
    "registered",
    "unknown_scheme",
]

DEFAULT_URL = "sqlite:///dbscheduler.sqlite3"
"""The embedded default: a SQLite file in the working directory, created on first use."""

_BY_NAME: dict[str, type[Dialect]] = {
    "sqlite": SQLiteDialect,
    "postgresql": PostgreSQLDialect,
    "mysql": MySQLDialect,
    "mariadb": MySQLDialect,
    "mssql": MSSQLDialect,
    "oracle": OracleDialect,
}
"""The supported databases by SQLAlchemy dialect name: the one list of dialects."""

_INSTANCES: dict[type[Dialect], Dialect] = {cls: cls() for cls in _BY_NAME.values()}


def dialect_named(name: str) -> Dialect | None:
    """The backend for a SQLAlchemy dialect name, or ``None`` if unsupported."""
    cls = _BY_NAME.get(name)
    return None if cls is None else _INSTANCES[cls]


def registered() -> list[tuple[Dialect, tuple[str, ...]]]:
    """Every backend with the SQLAlchemy dialect names it serves."""
    return [
        (backend, tuple(n for n, c in _BY_NAME.items() if c is cls))
        for cls, backend in _INSTANCES.items()
    ]


use_backends(registered())


def names() -> tuple[str, ...]:
    """The primary name of each backend (``mysql``, not its alias ``mariadb``)."""
    return tuple(backend.name for backend, _ in registered())


_DEFAULT_DRIVERS = {
    "postgres": "postgresql+psycopg",
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mariadb+pymysql",
}
"""URL schemes without a driver, and the driver dbscheduler's extras install for them.

SQLAlchemy's own defaults are psycopg2 and mysqlclient, which we do not depend on, and it
does not know ``postgres://`` at all (Heroku, Render and many PaaS hand out such URLs)."""


def normalize_url(url: str | URL) -> URL:
    """``url`` parsed, with a scheme that names no driver given the one we depend on.

    ``postgres://`` and ``postgresql://`` become ``postgresql+psycopg://``, ``mysql://``
    ``mysql+pymysql://`` and ``mariadb://`` ``mariadb+pymysql://``; an explicit driver
    (``postgresql+psycopg2://``) is kept. A malformed URL raises ``sqlalchemy.exc.ArgumentError``.

    >>> normalize_url("postgres://app@db/app").render_as_string()
    'postgresql+psycopg://app@db/app'
    """
    parsed = sa.engine.make_url(url)
    driver = _DEFAULT_DRIVERS.get(parsed.drivername)
    return parsed.set(drivername=driver) if driver else parsed


def unknown_scheme(url: URL) -> str:
    """What to say of a URL whose scheme SQLAlchemy has no dialect or driver for: the
    database or driver that is unknown, the nearest supported name, and the supported ones.

    >>> print(unknown_scheme(sa.engine.make_url("postgress://app@db/app")))
    ... # doctest: +NORMALIZE_WHITESPACE
    url 'postgress://app@db/app': unknown database 'postgress' (did you mean 'postgres'?);
    use one of postgresql (or postgres), mysql, mariadb, sqlite, mssql, oracle, e.g.
    'postgresql+psycopg://user@host/db'
    """
    shown = url.render_as_string(hide_password=True)
    backend, _, driver = url.drivername.partition("+")
    known = [*_BY_NAME, *_DEFAULT_DRIVERS]
    if backend in known and driver:
        return (f"url {shown!r}: unknown driver {driver!r} for {backend}; leave it out "
                f"({backend}://…) to use the one dbscheduler installs, or name an installed "
                "SQLAlchemy driver")
    near = difflib.get_close_matches(backend, known, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return (f"url {shown!r}: unknown database {backend!r}{hint}; use one of postgresql (or "
            "postgres), mysql, mariadb, sqlite, mssql, oracle, e.g. "
            "'postgresql+psycopg://user@host/db'")


def connect_problem(url: str | URL, exc: BaseException) -> ConnectProblem | None:
    """Why no connection to ``url`` could be opened, when ``exc`` says so (else ``None``)."""
    try:
        dialect = dialect_named(sa.engine.make_url(url).get_backend_name())
    except sa.exc.ArgumentError:
        return None
    return dialect.connect_problem(exc) if dialect else None


def engine_options(backend: str, lease: timedelta, url: URL | None = None) -> dict[str, Any]:
    """``create_engine`` options for an engine the Scheduler creates itself from ``url``.

    Only what the URL does not say itself: a ``connect_timeout`` (or any other connect
    parameter) given in the URL is kept. Timeouts turn a hung connection (a partition, a dead
    server) into an error instead of a thread stuck forever (:func:`.sessions.statement_timeout`);
    TCP keepalives notice a vanished peer within seconds. The server-side session bounds are
    set on each new connection by :meth:`Dialect.bound_sessions`, not here: PostgreSQL's
    ``options`` startup parameter is refused by poolers. On MySQL/MariaDB the engine
    autocommits (see below) and READ COMMITTED keeps the pick from taking gap locks, which
    made concurrent picks deadlock.
    """
    ms = int(statement_timeout(lease).total_seconds() * 1000)
    if backend == "postgresql":
        return {"connect_args": missing(url, {
            "connect_timeout": CONNECT_TIMEOUT, "tcp_user_timeout": ms, "keepalives": 1,
            "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
        })}
    if backend in ("mysql", "mariadb"):
        # Whole seconds: mysqlclient (``mysql+mysqldb://``) takes only an int; PyMySQL either.
        seconds = max(1, -(-ms // 1000))
        # Autocommit by default: the engine's writes are single statements, and a connection
        # that never switches modes needs no reset round trips when it goes back to the pool
        # (a reset is also what fails, noisily, on a connection cut meanwhile). Transactions
        # (registration, operations) switch to READ COMMITTED for their length.
        driver = url.get_driver_name() if url is not None else ""
        return {"isolation_level": "AUTOCOMMIT",
                "connect_args": missing(url, {"connect_timeout": CONNECT_TIMEOUT,
                                              "read_timeout": seconds,
                                              "write_timeout": seconds,
                                              **driver_connect_args(driver)})}
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


_prepared: weakref.WeakSet[Engine] = weakref.WeakSet()
_autocommit: weakref.WeakSet[Engine] = weakref.WeakSet()


def autocommits(engine: Engine) -> bool:
    """Whether ``engine`` (made by :func:`create_engine`) is in autocommit mode by default."""
    return engine in _autocommit


def commits_each_statement(engine: Engine) -> bool:
    """Whether a connection of ``engine`` in the dialect's ``autocommit_options`` commits every
    statement on its own: always on a server (its autocommit mode); on SQLite only once
    :func:`prepare_engine` has taken its transactions over (pysqlite's own implicit
    transaction otherwise lasts until the connection commits)."""
    return engine in _prepared or not dialect_for(engine).embedded


def prepare_engine(engine: Engine) -> Dialect:
    """The backend for ``engine``, its per-connection set-up attached once per engine (a
    Scheduler and its Client share one engine)."""
    dialect = dialect_for(engine)
    if engine not in _prepared:
        dialect.configure_engine(engine)
        _prepared.add(engine)
    return dialect


def create_engine(url: str | None, *, lease: timedelta) -> Engine:
    """An engine for ``url`` (the embedded default when ``None``) with the options of
    :func:`engine_options`; a malformed URL or an unsupported database raises ``ValueError``."""
    if url is not None and not isinstance(url, str):
        raise ValueError(f"url must be a string, got {type(url).__name__}")
    try:
        parsed = normalize_url(url or DEFAULT_URL)
    except sa.exc.ArgumentError as exc:
        raise ValueError(
            f"url {url!r} is not a database URL: {exc} (e.g. "
            "'postgresql+psycopg://user@host/db' or 'sqlite:///file.sqlite3')"
        ) from None
    options = engine_options(parsed.get_backend_name(), lease, parsed)
    # No pool_pre_ping: it would add a statement to every poll. A connection that died fails
    # its statement, SQLAlchemy discards it, and every loop of the engine retries.
    try:
        engine = sa.create_engine(
            parsed, pool_size=5, max_overflow=10, **options,
        )
    except sa.exc.NoSuchModuleError:
        raise ValueError(unknown_scheme(parsed)) from None
    try:
        prepare_engine(engine).bound_sessions(engine, lease, parsed)
        if options.get("isolation_level") == "AUTOCOMMIT":
            _autocommit.add(engine)
    except ValueError:
        engine.dispose()
        raise
    return engine
