"""PostgreSQL's ``infinity`` and ``-infinity`` timestamps, read as the ends of Python's range.

psycopg refuses to load them (``DataError: timestamp too large``), and the whole statement's
answer is lost with the one value: a row whose ``next_process_at`` someone set to
``'-infinity'`` made every poll of every node fail. Read through :class:`InfinityLoader`,
``-infinity`` is :data:`~dbscheduler.dialects.types.UNREADABLE_TIME` (the engine says so and
writes a readable time when it picks the row) and ``infinity`` the largest aware datetime (a
row that is never due); every other value goes to psycopg's own loader.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from .types import UNREADABLE_TIME

__all__ = ["register_infinity_loader"]

_LATEST = datetime.max.replace(tzinfo=timezone.utc)


def register_infinity_loader(dbapi_connection: Any) -> None:
    """Read ``timestamptz`` ±infinity on this psycopg 3 connection (text results, which
    SQLAlchemy asks for); other drivers are left as they are."""
    adapters = getattr(dbapi_connection, "adapters", None)
    if adapters is None:
        return
    import psycopg
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    oid = adapters.types["timestamptz"].oid
    inner_class = adapters.get_loader(oid, Format.TEXT)

    class InfinityLoader(Loader):  # the C loaders cannot be subclassed
        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            self._inner = inner_class(oid, context)

        def load(self, data: Any) -> Any:
            try:
                return self._inner.load(data)
            except psycopg.DataError:
                value = bytes(data)
                if value == b"-infinity":
                    return UNREADABLE_TIME
                if value == b"infinity":
                    return _LATEST
                raise

    adapters.register_loader(oid, InfinityLoader)
