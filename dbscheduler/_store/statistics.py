"""The planner's statistics of the table: a node makes sure the database has some.

PostgreSQL chooses the pick's plan from statistics that only ``ANALYZE`` gathers (autovacuum
runs it a while after rows change). A table it never analysed — new, filled by a bulk import
moments ago, or with autovacuum off — is believed to hold a few thousand rows whatever it
holds, and for that belief the pick's ordered index walk and a bitmap scan that sorts every due
row cost the same within a few percent: the server may take the second, whose cost grows with
the backlog (tens of milliseconds per pick at 20,000 due rows, instead of one), and the poll's
next due time likewise reads every row of the handler. No statement text can rule that out on
a server without plan hints, so when a pick or a poll is slow the node asks the dialect whether
the table has statistics at all and, if not, has them gathered: one ``ANALYZE``, which reads a
fixed-size sample and takes no lock that blocks reads or writes. A node checks when it
starts too, so one started on such a table gathers them before its first pick; later checks
come at most once a minute.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..dialects import Dialect
from ..logfields import engine_log

__all__ = ["SLOW", "Statistics"]

log = engine_log("dbscheduler.store")

SLOW = 0.025
"""Seconds after which a pick or a poll counts as slow enough to check the table's statistics
(on a table with statistics each takes about a millisecond)."""

RECHECK = 60.0
"""Seconds between two checks of the statistics, however many picks are slow."""


class Statistics:
    """Whether the table has planner statistics, checked after slow picks.

    >>> statistics = Statistics(dialect, table, store.autocommit)  # doctest: +SKIP
    >>> statistics.after(0.2)                                      # doctest: +SKIP
    """

    def __init__(self, dialect: Dialect, table: sa.Table,
                 autocommit: Callable[[], AbstractContextManager[Connection]]) -> None:
        self._dialect = dialect
        self._table = table
        self._autocommit = autocommit
        self._checked = float("-inf")
        self._refused = False

    def after(self, seconds: float) -> None:
        """Note a pick or poll that took ``seconds``: a slow one, a minute or more after the
        last check, leads to :meth:`ensure`."""
        if seconds >= SLOW and time.monotonic() - self._checked >= RECHECK:
            self.ensure()

    def ensure(self) -> None:
        """Gather the table's statistics if the database has none (a no-op on databases
        whose plans do not depend on them). Errors are logged, never raised: the pick works
        without statistics, only slower."""
        self._checked = time.monotonic()
        try:
            outcome = self._dialect.ensure_statistics(self._autocommit, self._table)
        except sa.exc.DBAPIError as exc:
            log.warning("could not gather planner statistics of %s (%s): run ANALYZE on it, "
                        "or let autovacuum do so", self._table.fullname, exc.orig)
            return
        if outcome == "gathered":
            log.info("%s had no planner statistics, which makes the pick's cost grow with "
                     "the rows that are due: analysed it", self._table.fullname)
        elif outcome == "refused" and not self._refused:
            self._refused = True
            log.warning("%s has no planner statistics and this database user may not "
                        "ANALYZE it: picks stay slow until autovacuum or its owner does",
                        self._table.fullname)
