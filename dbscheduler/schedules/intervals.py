""":class:`FixedRate` (on a grid of due times) and :class:`FixedDelay` (a pause after each
execution)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from dbscheduler.context import TaskContext
from dbscheduler.schedules.base import (
    _MAX_UTC,
    _ZERO,
    Schedule,
    _add_clamped,
    _as_timedelta,
    _format_seconds,
    _require_aware,
    _show,
)


@dataclass(frozen=True)
class FixedRate(Schedule):
    """Run every ``period``, on a grid: next = previous *scheduled* time + ``period``.

    ``period`` is a ``timedelta`` or a number of seconds (> 0). The first run is one period
    after registration. When slots were missed (the node was down, or a run took longer
    than a period), the task runs **once** as soon as possible and then continues on the
    grid — there is no burst of catch-up runs. Precisely: the next time is the first point
    of the grid ``scheduled_at + k * period`` strictly after the execution's start.

    The grid is anchored at the due time of the last execution, so a manual trigger,
    reschedule or retry re-anchors it.

    >>> from datetime import datetime, timedelta, timezone
    >>> t = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    >>> s = FixedRate(60)
    >>> late = t + timedelta(seconds=150)  # started 2.5 periods late
    >>> s.next_run(scheduled_at=t, started_at=late, finished_at=late, ctx=None).time()
    datetime.time(12, 3)
    >>> FixedRate(10) == FixedRate(timedelta(seconds=10))
    True
    """

    period: timedelta
    """Time between due times (normalised to ``timedelta``)."""

    # An explicit __init__ (kept by @dataclass) so that FixedRate(10) type-checks while the
    # attribute stays a plain timedelta.
    def __init__(self, period: timedelta | float) -> None:
        normalised = _as_timedelta(period, "FixedRate.period")
        if normalised <= _ZERO:
            raise ValueError(f"FixedRate.period must be > 0, got {_show(period)}")
        object.__setattr__(self, "period", normalised)

    def describe(self) -> str:
        """``"fixed-rate <seconds>s"``.

        >>> FixedRate(1.5).describe()
        'fixed-rate 1.5s'
        """
        return f"fixed-rate {_format_seconds(self.period)}"

    def first_run(self, now: datetime) -> datetime:
        """``now + period``.

        >>> from datetime import datetime, timezone
        >>> FixedRate(60).first_run(datetime(2026, 1, 1, tzinfo=timezone.utc)).minute
        1
        """
        return _add_clamped(_require_aware(now, "FixedRate.first_run: now"), self.period)

    def next_run(
        self,
        *,
        scheduled_at: datetime,
        started_at: datetime,
        finished_at: datetime,
        ctx: TaskContext | None,
    ) -> datetime:
        """The first grid point ``scheduled_at + k * period`` (k >= 1) after ``started_at``.

        >>> from datetime import datetime, timezone
        >>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
        >>> FixedRate(10).next_run(scheduled_at=t, started_at=t, finished_at=t, ctx=None).second
        10
        """
        anchor = _require_aware(scheduled_at, "FixedRate.next_run: scheduled_at")
        started = _require_aware(started_at, "FixedRate.next_run: started_at")
        # An execution picked before its due time (clock granularity) counts as on time.
        elapsed = max(started - anchor, _ZERO)
        steps = elapsed // self.period + 1
        try:
            return anchor + steps * self.period
        except OverflowError:
            return _MAX_UTC


@dataclass(frozen=True)
class FixedDelay(Schedule):
    """Run again ``delay`` after the previous execution *finished*.

    ``delay`` is a ``timedelta`` or a number of seconds (>= 0); ``0`` runs the task again as
    soon as it ends. The first run is one delay after registration.

    >>> from datetime import datetime, timedelta, timezone
    >>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    >>> done = t + timedelta(seconds=42)
    >>> FixedDelay(300).next_run(scheduled_at=t, started_at=t, finished_at=done, ctx=None).time()
    datetime.time(0, 5, 42)
    """

    delay: timedelta
    """Pause between the end of one execution and the start of the next (``timedelta``)."""

    def __init__(self, delay: timedelta | float) -> None:
        normalised = _as_timedelta(delay, "FixedDelay.delay")
        if normalised < _ZERO:
            raise ValueError(f"FixedDelay.delay must be >= 0, got {_show(delay)}")
        object.__setattr__(self, "delay", normalised)

    def describe(self) -> str:
        """``"fixed-delay <seconds>s"``.

        >>> FixedDelay(0).describe()
        'fixed-delay 0s'
        """
        return f"fixed-delay {_format_seconds(self.delay)}"

    def first_run(self, now: datetime) -> datetime:
        """``now + delay``.

        >>> from datetime import datetime, timezone
        >>> FixedDelay(0).first_run(datetime(2026, 1, 1, tzinfo=timezone.utc)).isoformat()
        '2026-01-01T00:00:00+00:00'
        """
        return _add_clamped(_require_aware(now, "FixedDelay.first_run: now"), self.delay)

    def next_run(
        self,
        *,
        scheduled_at: datetime,
        started_at: datetime,
        finished_at: datetime,
        ctx: TaskContext | None,
    ) -> datetime:
        """``finished_at + delay``.

        >>> from datetime import datetime, timezone
        >>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
        >>> FixedDelay(1).next_run(scheduled_at=t, started_at=t, finished_at=t, ctx=None).second
        1
        """
        finished = _require_aware(finished_at, "FixedDelay.next_run: finished_at")
        return _add_clamped(finished, self.delay)
