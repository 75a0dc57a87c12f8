"""Rows that cannot be read: a column a hand edit or another program wrote in a form this
version cannot use fails that row's execution alone, visibly, on a bounded back-off.

What counts (each named in ``last_error``):

* ``schedule`` — a runtime task's schedule text :func:`~dbscheduler.schedules.parse` refuses;
* ``options`` — not a JSON object, or a known option with a value it refuses (an option this
  version does not know is ignored: a newer version's row still runs);
* ``data`` and ``payload`` — JSON that cannot be decoded;
* ``next_process_at`` — a time the database holds but Python cannot represent (a zero date,
  ``-infinity``, text that is not a time): read as :data:`UNREADABLE_TIME`.

The execution is not started; the row gets ``last_status = 'error'``, a ``last_error`` that
names the column and why, and its next try after :func:`retry_after` (1 s, doubling, at most
5 minutes), whatever its schedule says: the stored text stays as it is for someone to fix,
and a fixed row runs at its next try, or at once on ``trigger``. The log says it once per
episode per node, and once more when the row is readable again.

>>> retry_after(1), retry_after(4), retry_after(1_000)
(datetime.timedelta(seconds=1), datetime.timedelta(seconds=8), datetime.timedelta(seconds=300))
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from ..context import UNSET
from ..dialects.types import UNREADABLE_TIME
from ..errors import UnreadableRow
from ..logfields import about, engine_log
from .execution import Ended, Execution, truncate

__all__ = ["UNREADABLE_TIME", "Episodes", "UnreadableRow", "retry_after"]

log = engine_log("dbscheduler.rows")

FIRST_RETRY = timedelta(seconds=1)
"""The first retry of a row that cannot be read; each further one waits twice as long."""
MAX_RETRY = timedelta(minutes=5)
"""The longest wait between two tries of a row that cannot be read."""


def retry_after(attempt: int) -> timedelta:
    """How long after its ``attempt``-th failed try (1 for the first) a row that cannot be
    read is tried again: :data:`FIRST_RETRY` doubling, at most :data:`MAX_RETRY`."""
    doublings = min(max(attempt, 1) - 1, 20)  # 2**20 s is far past the cap: no overflow
    delay: timedelta = FIRST_RETRY * 2**doublings
    return min(delay, MAX_RETRY)


class Episodes:
    """The rows this node saw unreadable and not yet readable again: an error is logged
    when an episode begins (or its reason changes), not at every try, and a line when it
    ends. Used by one thread (the poller, or the test harness)."""

    LIMIT = 10_000
    """Rows remembered at most (one deleted while unreadable is never seen again)."""

    def __init__(self) -> None:
        self._open: dict[str, str] = {}

    def failed(self, execution: Execution, problem: UnreadableRow) -> Ended:
        """How ``execution`` ends: an error naming the column, without running, its next try
        after :func:`retry_after`, the stored values left as they are."""
        ctx = execution.ctx
        delay = retry_after(ctx.attempt)
        error = truncate(f"column {problem.column} cannot be read, the execution was not "
                         f"started (next try in {delay.total_seconds():g} s): "
                         f"{problem.reason}")
        name = ctx.name
        known = self._open.get(name)
        if known != str(problem):
            if len(self._open) >= self.LIMIT:
                self._open.clear()
            self._open[name] = str(problem)
            log.error("%s; the row's execution fails without running, tried again after a "
                      "back-off (1 s doubling up to %g s) until the row is fixed; logged once",
                      truncate(str(problem)), MAX_RETRY.total_seconds(),
                      extra=about(name, execution.token))
        elif log.isEnabledFor(logging.DEBUG):
            log.debug("still unreadable: %s", truncate(str(problem)),
                      extra=about(name, execution.token))
        return Ended(execution, "error", error, UNSET, ctx.started_at + delay,
                     time.monotonic())

    def readable(self, name: str, token: int) -> None:
        """The row ``name`` was read without a problem: end its episode, if one was open."""
        if self._open and self._open.pop(name, None) is not None:
            log.info("the row is readable again; it runs normally", extra=about(name, token))
