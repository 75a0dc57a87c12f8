"""What happens after a failed execution: :class:`NoRetry` (the default), :class:`LinearBackoff`,
:class:`ArithmeticBackoff` and :class:`GeometricBackoff`.

A failure setting only answers "how long until the retry of attempt ``n``?"; the planner
(:func:`dbscheduler._engine.planning.plan_next`) then takes the **earlier** of that retry time
and the schedule's next regular occurrence, and gives every occurrence a fresh retry budget.

>>> from datetime import timedelta
>>> backoff = GeometricBackoff(timedelta(seconds=10), max_attempts=4)
>>> [backoff.retry_delay(n) for n in (1, 2, 3, 4)]  # doctest: +NORMALIZE_WHITESPACE
[datetime.timedelta(seconds=10), datetime.timedelta(seconds=20),
 datetime.timedelta(seconds=40), None]
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from dbscheduler.schedules.base import _as_timedelta, _show

from .logfields import engine_log

__all__ = [
    "MAX_RETRY_DELAY",
    "ArithmeticBackoff",
    "FailureSettings",
    "GeometricBackoff",
    "LinearBackoff",
    "NoRetry",
]

logger = engine_log("dbscheduler.failures")

MAX_RETRY_DELAY: Final = timedelta(days=3650)
"""The longest retry delay any backoff returns (about ten years).

Growing backoffs are capped here when no smaller ``max_delay`` is given, so that no attempt
number, however large, overflows ``timedelta``; ``delay`` and ``max_delay`` may not exceed it.
"""

_ZERO: Final = timedelta(0)
_MICROSECOND: Final = timedelta(microseconds=1)
_CEILING_US: Final = MAX_RETRY_DELAY // _MICROSECOND


class FailureSettings(abc.ABC):
    """Base class of the failure settings: the delay before retrying a failed occurrence.

    A custom policy implements :meth:`retry_delay`::

        @dataclass(frozen=True)
        class RetryTwiceQuickly(FailureSettings):
            def retry_delay(self, attempt: int) -> timedelta | None:
                return timedelta(seconds=1) if attempt < 3 else None
    """

    @abc.abstractmethod
    def retry_delay(self, attempt: int) -> timedelta | None:
        """Delay before the next try, or ``None`` for no retry.

        ``attempt`` is the row's ``attempt`` after the failed execution: the attempts of this
        occurrence so far, the failed one included (the first retry is asked with ``1``).
        Values below 1 are read as 1.

        >>> LinearBackoff(5, max_attempts=2).retry_delay(1)
        datetime.timedelta(seconds=5)
        """


def _check_delay(value: object, where: str) -> timedelta:
    delay = _as_timedelta(value, where)
    if delay <= _ZERO:
        raise ValueError(f"{where} must be > 0, got {_show(value)}")
    if delay > MAX_RETRY_DELAY:
        raise ValueError(f"{where} must be at most {MAX_RETRY_DELAY.days} days, got {_show(value)}")
    return delay


def _check_max_attempts(value: object, where: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where} must be an int >= 1 or None, got {value!r}")
    if value < 1:
        raise ValueError(f"{where} must be >= 1 (or None for no limit), got {value!r}")


def _exhausted(attempt: int, max_attempts: int | None) -> bool:
    return max_attempts is not None and max(attempt, 1) >= max_attempts


def _scaled(delay: timedelta, factor: int, cap_us: int) -> timedelta:
    """``delay * factor``, capped at ``cap_us`` microseconds, without building huge values."""
    delay_us = delay // _MICROSECOND
    # Compare before multiplying into a timedelta (which would overflow); the int product
    # itself is cheap because callers keep `factor` small or pre-capped.
    if factor > cap_us // delay_us:
        return timedelta(microseconds=cap_us)
    return timedelta(microseconds=min(delay_us * factor, cap_us))


@dataclass(frozen=True)
class NoRetry(FailureSettings):
    """No retry: a failed execution waits for the schedule's next regular occurrence.

    This is the default ``on_failure``.

    >>> NoRetry().retry_delay(1) is None
    True
    """

    def retry_delay(self, attempt: int) -> timedelta | None:
        """Always ``None``.

        >>> NoRetry().retry_delay(7) is None
        True
        """
        return None


@dataclass(frozen=True)
class LinearBackoff(FailureSettings):
    """Retry after the same ``delay`` every time: d, d, d …

    ``delay`` is a ``timedelta`` or seconds (> 0). ``max_attempts`` bounds the attempts of
    one occurrence, the first try included (``max_attempts=3``: one try and two retries);
    ``None`` retries until the next regular occurrence comes first.

    >>> LinearBackoff(30, max_attempts=3).retry_delay(2)
    datetime.timedelta(seconds=30)
    >>> LinearBackoff(30, max_attempts=3).retry_delay(3) is None
    True
    """

    delay: timedelta
    """Delay before each retry (normalised to ``timedelta``)."""
    max_attempts: int | None = None
    """Attempts per occurrence, the first try included; ``None`` = unbounded."""

    def __init__(self, delay: timedelta | float, max_attempts: int | None = None) -> None:
        object.__setattr__(self, "delay", _check_delay(delay, "LinearBackoff.delay"))
        _check_max_attempts(max_attempts, "LinearBackoff.max_attempts")
        object.__setattr__(self, "max_attempts", max_attempts)

    def retry_delay(self, attempt: int) -> timedelta | None:
        """``delay``, or ``None`` once ``attempt >= max_attempts``.

        >>> LinearBackoff(10).retry_delay(10_000)
        datetime.timedelta(seconds=10)
        """
        if _exhausted(attempt, self.max_attempts):
            return None
        return self.delay


@dataclass(frozen=True)
class ArithmeticBackoff(FailureSettings):
    """Retry after ``delay * (2n - 1)`` for attempt ``n``: d, 3d, 5d, 7d …

    Capped at :data:`MAX_RETRY_DELAY`. ``max_attempts`` as for :class:`LinearBackoff`.

    >>> b = ArithmeticBackoff(10)
    >>> [int(b.retry_delay(n).total_seconds()) for n in (1, 2, 3)]
    [10, 30, 50]
    """

    delay: timedelta
    """The first retry delay (normalised to ``timedelta``)."""
    max_attempts: int | None = None
    """Attempts per occurrence, the first try included; ``None`` = unbounded."""

    def __init__(self, delay: timedelta | float, max_attempts: int | None = None) -> None:
        object.__setattr__(self, "delay", _check_delay(delay, "ArithmeticBackoff.delay"))
        _check_max_attempts(max_attempts, "ArithmeticBackoff.max_attempts")
        object.__setattr__(self, "max_attempts", max_attempts)

    def retry_delay(self, attempt: int) -> timedelta | None:
        """``delay * (2n - 1)`` capped at :data:`MAX_RETRY_DELAY`, or ``None`` when exhausted.

        >>> ArithmeticBackoff(1).retry_delay(10**9) == MAX_RETRY_DELAY
        True
        """
        if _exhausted(attempt, self.max_attempts):
            return None
        n = max(attempt, 1)
        return _scaled(self.delay, 2 * n - 1, _CEILING_US)


@dataclass(frozen=True)
class GeometricBackoff(FailureSettings):
    """Retry after ``delay * 2**(n-1)`` for attempt ``n``: d, 2d, 4d, 8d …, capped at ``max_delay``.

    Without ``max_delay`` the cap is :data:`MAX_RETRY_DELAY`. No attempt number overflows:
    the exponent is bounded before anything is computed. ``max_attempts`` as for
    :class:`LinearBackoff`.

    >>> from datetime import timedelta
    >>> b = GeometricBackoff(timedelta(seconds=1), max_delay=timedelta(seconds=5))
    >>> [int(b.retry_delay(n).total_seconds()) for n in (1, 2, 3, 4, 10_000)]
    [1, 2, 4, 5, 5]
    """

    delay: timedelta
    """The first retry delay (normalised to ``timedelta``)."""
    max_attempts: int | None = None
    """Attempts per occurrence, the first try included; ``None`` = unbounded."""
    max_delay: timedelta | None = None
    """Largest delay (>= ``delay``); ``None`` = :data:`MAX_RETRY_DELAY`."""

    def __init__(
        self,
        delay: timedelta | float,
        max_attempts: int | None = None,
        max_delay: timedelta | float | None = None,
    ) -> None:
        first = _check_delay(delay, "GeometricBackoff.delay")
        object.__setattr__(self, "delay", first)
        _check_max_attempts(max_attempts, "GeometricBackoff.max_attempts")
        object.__setattr__(self, "max_attempts", max_attempts)
        cap = None
        if max_delay is not None:
            cap = _check_delay(max_delay, "GeometricBackoff.max_delay")
            if cap < first:
                raise ValueError(
                    f"GeometricBackoff.max_delay must be >= delay ({_show(first)}), "
                    f"got {_show(max_delay)}"
                )
        object.__setattr__(self, "max_delay", cap)

    def retry_delay(self, attempt: int) -> timedelta | None:
        """``min(delay * 2**(n-1), max_delay)``, or ``None`` when exhausted.

        >>> GeometricBackoff(1).retry_delay(10**9) == MAX_RETRY_DELAY
        True
        """
        if _exhausted(attempt, self.max_attempts):
            return None
        cap_us = (self.max_delay or MAX_RETRY_DELAY) // _MICROSECOND
        exponent = max(attempt, 1) - 1
        # 2**exponent beyond the cap's bit length already exceeds any cap (delay >= 1 µs):
        # stop there instead of building a billion-bit integer.
        if exponent >= cap_us.bit_length():
            return timedelta(microseconds=cap_us)
        return _scaled(self.delay, 1 << exponent, cap_us)
