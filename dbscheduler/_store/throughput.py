"""Runs per minute from the run history: a plain read of two columns, bucketed in Python
(no date arithmetic of any one database)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import sqlalchemy as sa

from ..dialects import db_now_plus
from ..dialects.types import to_utc

if TYPE_CHECKING:
    from .base import StoreBase

__all__ = ["THROUGHPUT_ROWS", "finished_since"]

THROUGHPUT_ROWS = 20_000
"""Most run rows read for one chart (the newest; a busier hour is drawn from them)."""


def finished_since(store: StoreBase, window: timedelta
                   ) -> tuple[datetime, list[tuple[datetime, str]]]:
    """``(database now, [(finished_at, status)])`` of the runs that finished within
    ``window``, newest first, at most :data:`THROUGHPUT_ROWS`."""
    runs = store.runs_table
    stmt = (sa.select(runs.c.finished_at, runs.c.status)
            .where(runs.c.finished_at >= db_now_plus(-window.total_seconds()))
            .order_by(runs.c.finished_at.desc()).limit(THROUGHPUT_ROWS))
    with store.read() as conn:
        now = store.now(conn)
        rows = []
        for at, status in conn.execute(stmt):
            when = to_utc(at)
            assert when is not None
            rows.append((when, str(status)))
    return now, rows
