"""``fenced(ctx)``: ``ctx.fenced`` on Django's own connection, so the ORM's writes commit only
while the execution holds its lease.

``ctx.fenced`` takes a SQLAlchemy connection. Here that connection is an adapter over the
DB-API connection Django's ORM uses in this thread: the lease check and the ORM's statements
are one transaction on one database session, committed (or rolled back) once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from django.db import connections
from sqlalchemy.pool import SingletonThreadPool

from ...logfields import engine_log
from ._settings import settings_of

if TYPE_CHECKING:
    from ...context import TaskContext

__all__ = ["fenced", "sqlalchemy_engine"]

log = engine_log("dbscheduler.contrib.django")


def _current(alias: str) -> Any:
    """Django's DB-API connection to ``alias`` in the calling thread, opened if needed."""
    wrapper = connections[alias]
    wrapper.ensure_connection()
    return wrapper.connection


_engines: dict[str, sa.Engine] = {}
_engines_lock = threading.Lock()

_DRIVERS = {"psycopg": "postgresql+psycopg", "psycopg2": "postgresql+psycopg2",
            "sqlite3": "sqlite+pysqlite", "pymysql": "mysql+pymysql",
            "MySQLdb": "mysql+mysqldb", "oracledb": "oracle+oracledb"}


def sqlalchemy_engine(alias: str | None = None) -> sa.Engine:
    """A SQLAlchemy engine whose connections are Django's own connection to ``alias`` (of the
    calling thread); closing one leaves Django's connection open. For ``ctx.fenced`` and
    other SQLAlchemy code that must share the ORM's transaction.

    >>> with sqlalchemy_engine().connect() as conn:  # doctest: +SKIP
    ...     conn.exec_driver_sql("SELECT 1").scalar()
    1
    """
    alias = alias or settings_of().database
    with _engines_lock:
        engine = _engines.get(alias)
        if engine is None:
            wrapper = connections[alias]
            wrapper.ensure_connection()
            module = type(wrapper.connection).__module__.split(".")[0]
            if module not in _DRIVERS:
                raise ValueError(
                    f"fenced(): Django's connection {alias!r} uses the driver {module!r}, "
                    f"which dbscheduler does not know; it knows {', '.join(_DRIVERS)}"
                )
            # One pooled connection per thread: that thread's Django connection, replaced
            # when Django has reconnected since, and never closed here (Django owns it).
            engine = sa.create_engine(f"{_DRIVERS[module]}://", creator=lambda: _current(alias),
                                      poolclass=SingletonThreadPool)
            for method in ("do_close", "do_terminate"):
                setattr(engine.dialect, method, _leave_open)

            @sa.event.listens_for(engine, "checkout")
            def _still_djangos(dbapi_connection: Any, record: Any, proxy: Any) -> None:
                if dbapi_connection is not _current(alias):
                    raise sa.exc.DisconnectionError("Django reconnected")

            _engines[alias] = engine
        return engine


def _leave_open(dbapi_connection: Any) -> None:
    pass


@contextmanager
def fenced(ctx: TaskContext, using: str | Any = None) -> Iterator[sa.Connection]:
    """``ctx.fenced`` on Django's connection ``using`` (an alias of ``DATABASES``, or a
    connection such as ``django.db.connection``; default: the scheduler's database):
    the block's ORM writes commit only if the execution still holds its lease, else
    :class:`~dbscheduler.LeaseLost` is raised and nothing is written.

    ::

        @scheduler.task("charge", schedule=FixedRate(60))
        def charge(ctx: TaskContext) -> None:
            amount = compute()
            with fenced(ctx):
                Payment.objects.create(amount=amount)

    The database must be the one that holds the scheduler's table. Call it outside
    ``transaction.atomic()``: the fenced transaction is the outermost one (``atomic`` blocks
    inside it become savepoints). The SQLAlchemy connection it yields runs on the same
    transaction, for code that wants it.
    """
    alias = getattr(using, "alias", using) or settings_of().database
    django_conn = connections[alias]
    if django_conn.in_atomic_block:
        raise ValueError(
            f"fenced(): Django's connection {alias!r} is inside transaction.atomic(); call "
            "fenced(ctx) outside it (the fenced transaction must hold the lease check and "
            "the writes, and commit them together)"
        )
    engine = sqlalchemy_engine(alias)
    django_conn.ensure_connection()
    autocommit = django_conn.get_autocommit()
    # Django's manual-transaction mode: the ORM's statements join the transaction that the
    # fence begins on the same DB-API connection, and only the fence commits it.
    django_conn.set_autocommit(False)
    try:
        with engine.connect() as conn, ctx.fenced(conn) as inner:
            yield inner
    finally:
        try:
            if django_conn.connection is not None:
                django_conn.rollback()  # nothing is left open: a no-op after the commit
                django_conn.set_autocommit(autocommit)
        except Exception:
            # A connection that broke in the block: Django opens a new one when next used,
            # and the block's own error is the one to see.
            log.warning("fenced(): Django's connection %r could not be reset; closing it",
                        alias, exc_info=True)
            django_conn.close()
