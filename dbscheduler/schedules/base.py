"""The :class:`Schedule` interface the engine calls, and the duration and datetime helpers
shared by the schedules, :mod:`dbscheduler.failures` and :mod:`dbscheduler._engine.planning`.

A schedule is a small immutable value. The engine asks it for the first due time when the
task is registered (:meth:`Schedule.first_run`) and for the next regular occurrence after each
execution (:meth:`Schedule.next_run`); :meth:`Schedule.describe` gives the text stored in the
table's ``schedule`` column, which is how a deploy that changed a schedule is detected.

Every datetime going in must be timezone-aware; every datetime coming out is aware UTC.
"""

from __future__ import annotations

import abc
import math
from datetime import datetime, timedelta, timezone
from typing import Final

from dbscheduler.context import TaskContext

_UTC: Final = timezone.utc
_MAX_UTC: Final = datetime.max.replace(tzinfo=_UTC)
_MIN_UTC: Final = datetime.min.replace(tzinfo=_UTC)
_ZERO: Final = timedelta(0)
_SECOND: Final = timedelta(seconds=1)
_MICROSECOND: Final = timedelta(microseconds=1)


# --------------------------------------------------------------------------------------------
# Small helpers shared with failures.py and planning.py (private to the package)
# --------------------------------------------------------------------------------------------


def _as_timedelta(value: object, where: str) -> timedelta:
    """``value`` as a timedelta: a timedelta as is, an int/float as seconds; else ValueError.

    ``where`` names the field (``"FixedRate.period"``) so the message points at it.
    """
    if isinstance(value, timedelta):
        return value
    # bool is an int subclass, but FixedDelay(True) is almost certainly a mistake.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"{where} must be a timedelta or a number of seconds, got {value!r}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number of seconds, got {value!r}")
    try:
        return timedelta(seconds=value)
    except OverflowError:
        raise ValueError(f"{where} is too large: {value!r} seconds") from None


def _format_seconds(delta: timedelta) -> str:
    """A compact, stable text for a duration: ``"10s"``, ``"1.5s"``, ``"0.000001s"``.

    Exact to the microsecond (no float rounding), so equal durations always give equal text.
    """
    micros = delta // _MICROSECOND
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), 1_000_000)
    text = f"{whole}.{frac:06d}".rstrip("0") if frac else str(whole)
    return f"{sign}{text}s"


def _show(value: object) -> str:
    """How a rejected duration is shown in an error message (timedeltas as seconds)."""
    if isinstance(value, timedelta):
        return _format_seconds(value)
    return repr(value)


def _require_aware(value: object, what: str) -> datetime:
    """``value`` converted to aware UTC; ValueError if it is not an aware datetime."""
    if not isinstance(value, datetime):
        raise ValueError(f"{what} must be a datetime, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got naive {value.isoformat()}")
    try:
        return value.astimezone(_UTC)
    except OverflowError:
        # Only reachable at the very ends of the calendar (year 1 / 9999 with an offset).
        return _MAX_UTC if value.year > 1 else _MIN_UTC


def _add_clamped(moment: datetime, delta: timedelta) -> datetime:
    """``moment + delta``, saturating at the ends of ``datetime`` instead of overflowing.

    A saturated result (9999-12-31 UTC) means "effectively never"; raising would instead
    leave a finished execution without a next time.
    """
    try:
        return moment + delta
    except OverflowError:
        return _MAX_UTC if delta > _ZERO else _MIN_UTC


# --------------------------------------------------------------------------------------------
# The interface the engine calls
# --------------------------------------------------------------------------------------------


class Schedule(abc.ABC):
    """Base class of all schedules: decides when a task is due.

    Subclasses are frozen dataclasses, so they compare by value and can be shared between
    threads. A custom schedule implements the three methods below::

        @dataclass(frozen=True)
        class EveryMonday9(Schedule):
            def describe(self) -> str:
                return "every monday 09:00 UTC"

            def first_run(self, now: datetime) -> datetime:
                return Cron("0 9 * * mon").first_run(now)

            def next_run(self, *, scheduled_at, started_at, finished_at, ctx) -> datetime:
                return Cron("0 9 * * mon").next_after(started_at)
    """

    @abc.abstractmethod
    def describe(self) -> str:
        """Stable text stored in the ``schedule`` column.

        Equal schedules give equal text and a changed schedule gives different text: the
        engine compares it with the stored one to apply a changed schedule at deploy time.

        >>> from dbscheduler.schedules import Cron
        >>> Cron("*/5 * * * *").describe()
        'cron */5 * * * * UTC'
        """

    @abc.abstractmethod
    def first_run(self, now: datetime) -> datetime:
        """The first due time after registration; ``now`` is the database clock (aware).

        >>> from datetime import datetime, timezone
        >>> from dbscheduler.schedules import FixedDelay
        >>> FixedDelay(30).first_run(datetime(2026, 1, 1, tzinfo=timezone.utc)).isoformat()
        '2026-01-01T00:00:30+00:00'
        """

    @abc.abstractmethod
    def next_run(
        self,
        *,
        scheduled_at: datetime,
        started_at: datetime,
        finished_at: datetime,
        ctx: TaskContext | None,
    ) -> datetime:
        """The next *regular* occurrence after an execution (aware UTC).

        ``scheduled_at`` is the due time that made the execution run, ``started_at`` when it
        was picked, ``finished_at`` when it ended (all aware). Retries are not decided here:
        see :func:`dbscheduler._engine.planning.plan_next`.

        >>> from datetime import datetime, timezone
        >>> from dbscheduler.schedules import FixedDelay
        >>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
        >>> FixedDelay(5).next_run(scheduled_at=t, started_at=t, finished_at=t, ctx=None).second
        5
        """
