"""When a task runs: :class:`Cron`, :class:`FixedRate`, :class:`FixedDelay` and :class:`Dynamic`.

A schedule is a small immutable value. The engine asks it for the first due time when the
task is registered (:meth:`Schedule.first_run`) and for the next regular occurrence after each
execution (:meth:`Schedule.next_run`); :meth:`Schedule.describe` gives the text stored in the
table's ``schedule`` column, which is how a deploy that changed a schedule is detected.

Every datetime going in must be timezone-aware; every datetime coming out is aware UTC.

>>> from datetime import datetime, timezone
>>> now = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
>>> Cron("0 3 * * *", tz="Europe/Berlin").first_run(now).isoformat()
'2026-01-02T02:00:00+00:00'
>>> FixedRate(10).describe()
'fixed-rate 10s'
"""

from __future__ import annotations

import abc
import copy
import logging
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from dbscheduler.context import TaskContext

__all__ = ["Cron", "Dynamic", "FixedDelay", "FixedRate", "Schedule"]

logger = logging.getLogger("dbscheduler.schedules")

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

    A saturated result (9999-12-31 _UTC) means "effectively never"; raising would instead
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

        >>> Cron("*/5 * * * *").describe()
        'cron */5 * * * * UTC'
        """

    @abc.abstractmethod
    def first_run(self, now: datetime) -> datetime:
        """The first due time after registration; ``now`` is the database clock (aware).

        >>> from datetime import datetime, timezone
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
        """The next *regular* occurrence after an execution (aware _UTC).

        ``scheduled_at`` is the due time that made the execution run, ``started_at`` when it
        was picked, ``finished_at`` when it ended (all aware). Retries are not decided here:
        see :func:`dbscheduler.planning.plan_next`.

        >>> from datetime import datetime, timezone
        >>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
        >>> FixedDelay(5).next_run(scheduled_at=t, started_at=t, finished_at=t, ctx=None).second
        5
        """


# --------------------------------------------------------------------------------------------
# Cron
# --------------------------------------------------------------------------------------------

_ALIASES: Final[dict[str, str]] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# Jenkins-style hashed (H) and random (R) values make the expression differ between
# processes (or between parses), which breaks a cluster-wide schedule and describe().
_HASHED_OR_RANDOM: Final = re.compile(r"(?<![a-z])[hr](?![a-z])", re.IGNORECASE)

# Any fixed instant works as the starting point of the validity probe; it only has to be
# far from the ends of the calendar.
_PROBE_START: Final = datetime(2000, 1, 1, tzinfo=_UTC)
# croniter searches up to 50 years ahead for a match; past this year a failed search means
# the calendar ran out, not that the expression is broken.
_END_OF_TIME_YEAR: Final = 9000


# croniter reads a one-value range "a-a" (and "a-a/n") as a full wrap-around cycle, i.e. every
# value: "0 5-5 * * *" would fire every hour. Standard cron reads it as just "a".
_ONE_VALUE_RANGE: Final = re.compile(r"^(\w+)-\1(?:/\d+)?$", re.IGNORECASE)


def _single_value_ranges(field_text: str) -> str:
    return ",".join(_ONE_VALUE_RANGE.sub(r"\1", part) for part in field_text.split(","))


_CRONITER_ERRORS: Final = (CroniterError, ValueError, KeyError, TypeError, IndexError)
_FIELD_NAMES: Final = ("minute", "hour", "day-of-month", "month", "day-of-week")


def _to_croniter_order(fields: list[str]) -> list[str]:
    """Our order (6 fields: seconds first) to croniter's (seconds last)."""
    return [*fields[1:], fields[0]] if len(fields) == 6 else list(fields)


def _last_line(exc: BaseException) -> str:
    # croniter sometimes puts a whole traceback in its message: keep the last line.
    lines = str(exc).strip().splitlines()
    return lines[-1] if lines else type(exc).__name__


def _explain(fields: list[str]) -> str | None:
    """Which field croniter rejects, in the user's field order (its own message shows the
    fields reordered for it, which would confuse a 6-field user)."""
    names = ("second", *_FIELD_NAMES) if len(fields) == 6 else _FIELD_NAMES
    for index, (name, text) in enumerate(zip(names, fields, strict=True)):
        probe = ["*"] * len(fields)
        probe[index] = _single_value_ranges(text)
        try:
            croniter(" ".join(_to_croniter_order(probe)), _PROBE_START)
        except _CRONITER_ERRORS as exc:
            reason = "out of range" if "out of range" in str(exc) else "not acceptable"
            return f"the {name} field {text!r} is {reason}"
    return None


def _load_zone(name: object) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"Cron.tz must be an IANA time zone name such as 'Europe/Berlin', got {name!r}"
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"Cron.tz: unknown time zone {name!r}") from None


def _offsets(zone: ZoneInfo, wall: datetime) -> tuple[timedelta, timedelta]:
    """UTC offsets of the naive local ``wall`` time read with ``fold=0`` and ``fold=1``.

    PEP 495: equal offsets = the wall time exists once; fold 0 > fold 1 = it exists twice
    (fall-back); fold 0 < fold 1 = it does not exist (spring-forward gap).
    """
    off0 = wall.replace(tzinfo=zone, fold=0).utcoffset()
    off1 = wall.replace(tzinfo=zone, fold=1).utcoffset()
    assert off0 is not None and off1 is not None  # a ZoneInfo always answers
    return off0, off1


def _transition(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The UTC instant at which the offset changes, given instants on either side of it.

    ``before`` has the old offset, ``after`` the new one, and they are at most a DST jump
    apart, so a bisection to the second takes a dozen steps (zoneinfo does not expose its
    transition list). Transitions in tzdata fall on whole seconds.
    """
    before = before.replace(microsecond=0)  # still before the change, now on its grid
    old = before.astimezone(zone).utcoffset()
    lo, hi = 0, math.ceil((after - before) / _SECOND)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if (before + mid * _SECOND).astimezone(zone).utcoffset() == old:
            lo = mid
        else:
            hi = mid
    return before + hi * _SECOND


def _utc_from_wall(wall: datetime, offset: timedelta) -> datetime:
    return (wall - offset).replace(tzinfo=_UTC)


def _wall_of(moment: datetime, offset: timedelta) -> datetime:
    return (moment + offset).replace(tzinfo=None)


@dataclass(frozen=True)
class Cron(Schedule):
    """A cron expression evaluated in an IANA time zone, correct across DST changes.

    ``expr`` has **5 fields** ``minute hour day-of-month month day-of-week``, or
    **6 fields with the SECONDS FIRST**: ``second minute hour day-of-month month day-of-week``
    (the Spring / db-queue-scheduler / Quartz order). ``"*/15 * * * * *"`` runs every 15
    seconds and ``"0 */5 * * * *"`` every 5 minutes. **Beware: croniter, which evaluates the
    fields, puts the seconds LAST**; this class reorders them for it, so do not write
    croniter's order here. Field syntax is croniter's (``*/n``, ``a-b/n``, lists, names
    ``jan``/``mon``, ``L``, ``1#2``; day-of-month and day-of-week OR-ed when both are set),
    plus the aliases ``@hourly``, ``@daily``, ``@midnight``, ``@weekly``, ``@monthly``,
    ``@yearly``/``@annually``. Hashed (``H``) and random (``R``) values are rejected: they
    would differ between nodes.

    Next time: the first fire **strictly after** the execution's start (``first_run``:
    strictly after registration). A run that overlaps several fire times is followed by one
    run, not a burst.

    **Daylight saving time** (croniter alone gets this wrong; the rule is applied here on
    top of it). Which rule applies depends on the **hour field**:

    - *Elapsed-time rule* — the hour field contains ``*`` or ``/`` (``*``, ``*/2``,
      ``8-18/2``, ``1,*/6``) or covers all 24 hours (``0-23``): the task fires at every
      instant whose local wall-clock time matches. A wall time repeated by a fall-back fires
      on both passes, a wall time skipped by a spring-forward does not exist and does not
      fire. So ``"0 * * * *"`` fires every real hour: 23 times on the local day of a
      spring-forward, 25 times on the day of a fall-back (Europe/Berlin 2026-10-25: 02:00
      CEST and again 02:00 CET, one hour later); ``"*/15 * * * * *"`` fires every 15 real
      seconds straight through both changes.
    - *Wall-clock rule* — otherwise (fixed hours: ``2``, ``1-3``, ``2,14``): the task fires
      once per matching local wall time. A repeated wall time fires on its **first**
      occurrence only (``"30 2 * * *"`` on 2026-10-25 in Berlin: 02:30 CEST only), and a
      skipped wall time fires **at the moment the gap ends** (on 2026-03-29 in Berlin,
      02:30 does not exist: the task runs at 03:00 CEST). Several skipped times of one gap
      (``"0,30 2 * * *"``) coalesce into that single run.

    >>> from datetime import datetime, timezone
    >>> c = Cron("30 2 * * *", tz="Europe/Berlin")
    >>> c.next_after(datetime(2026, 3, 28, 12, tzinfo=timezone.utc)).isoformat()
    '2026-03-29T01:00:00+00:00'
    >>> Cron("*/15 * * * * *").next_after(datetime(2026, 1, 1, tzinfo=timezone.utc)).second
    15
    """

    expr: str
    """The cron expression (whitespace-normalised); 6 fields = seconds first."""
    tz: str = "UTC"
    """IANA time zone name the expression is read in, e.g. ``"Europe/Berlin"``."""

    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _template: croniter = field(init=False, repr=False, compare=False)
    _elapsed: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.expr, str):
            raise ValueError(f"Cron.expr must be a string, got {self.expr!r}")
        text = " ".join(self.expr.split())
        object.__setattr__(self, "expr", text)
        object.__setattr__(self, "_zone", _load_zone(self.tz))

        def bad(reason: object) -> ValueError:
            return ValueError(f"Cron.expr: {text!r} is not a valid cron expression: {reason}")

        fields = _ALIASES.get(text.lower(), text).split()
        if len(fields) not in (5, 6):
            raise bad(
                f"expected 5 fields (minute hour day month weekday) or 6 with the seconds "
                f"first (second minute hour day month weekday), got {len(fields)}"
            )
        if any(_HASHED_OR_RANDOM.search(f) for f in fields):
            raise bad("hashed (H) and random (R) values are not supported")
        croniter_fields = _to_croniter_order(fields)  # seconds first for us, last for croniter
        hour_text = croniter_fields[1]  # the DST rule is chosen on the text as written
        croniter_fields = [_single_value_ranges(f) for f in croniter_fields]
        try:
            template = croniter(" ".join(croniter_fields), _PROBE_START, ret_type=datetime)
            expanded = template.expanded
            copy.copy(template).get_next(datetime)
        except CroniterBadDateError:
            raise bad("it never fires") from None
        except _CRONITER_ERRORS as exc:
            raise bad(_explain(fields) or _last_line(exc)) from None
        object.__setattr__(self, "_template", template)
        object.__setattr__(
            self,
            "_elapsed",
            "*" in hour_text or "/" in hour_text or list(expanded[1]) == ["*"],
        )

    def describe(self) -> str:
        """``"cron <expr> <tz>"``.

        >>> Cron("0 3 * * *", tz="Europe/Berlin").describe()
        'cron 0 3 * * * Europe/Berlin'
        """
        return f"cron {self.expr} {self.tz}"

    def first_run(self, now: datetime) -> datetime:
        """The next fire time strictly after ``now``.

        >>> from datetime import datetime, timezone
        >>> Cron("0 * * * *").first_run(datetime(2026, 1, 1, 9, 0, tzinfo=timezone.utc)).hour
        10
        """
        return self.next_after(now)

    def next_run(
        self,
        *,
        scheduled_at: datetime,
        started_at: datetime,
        finished_at: datetime,
        ctx: TaskContext | None,
    ) -> datetime:
        """The first fire time strictly after ``started_at``.

        >>> from datetime import datetime, timezone
        >>> t = datetime(2026, 1, 1, 9, 0, 5, tzinfo=timezone.utc)
        >>> Cron("0 * * * *").next_run(scheduled_at=t, started_at=t, finished_at=t, ctx=None).hour
        10
        """
        return self.next_after(started_at)

    def next_after(self, dt: datetime) -> datetime:
        """The first fire time strictly after the aware datetime ``dt``, as aware UTC.

        A naive ``dt`` raises ``ValueError``. Past the year 9999 there is nothing left to
        fire: the result saturates at ``datetime.max`` (_UTC).

        >>> from datetime import datetime, timezone
        >>> berlin = Cron("0 * * * *", tz="Europe/Berlin")
        >>> t = berlin.next_after(datetime(2026, 10, 25, 0, 0, tzinfo=timezone.utc))
        >>> t.isoformat()  # 02:00 CET, the second pass through 02:00 local
        '2026-10-25T01:00:00+00:00'
        """
        after = _require_aware(dt, "Cron.next_after: dt")
        try:
            return self._next_after(after)
        except (OverflowError, ValueError) as exc:
            # croniter and datetime give up at the end of the calendar: nothing left to fire.
            if after.year >= _END_OF_TIME_YEAR:
                return _MAX_UTC
            raise ValueError(
                f"Cron.expr: {self.expr!r} found no fire time after {after.isoformat()}: {exc}"
            ) from exc

    # -- the DST-aware search ----------------------------------------------------------------
    #
    # croniter is used for calendar matching only: it is fed naive local wall times dressed as
    # UTC, where no DST exists, and returns the matching wall times in order. Mapping a wall
    # time to instants is done here with zoneinfo (PEP 495 folds), which is what makes the
    # result independent of croniter's own DST handling, which changed between versions.
    #
    # For a wall time c: one instant if it exists once; "early" (fold 0) and "late" (fold 1)
    # if repeated; none if skipped. Both "c -> early/only instant" and "c -> late instant"
    # are non-decreasing in c, so the first matching wall time after the current one gives
    # the answer, except for one case: the elapsed-time rule, with `after` on the first pass
    # of a repeated hour, where the second pass of a wall time *earlier* than the current one
    # is still to come (see _second_pass_lookback).

    def _walls(self, start: datetime) -> Iterator[datetime]:
        """Matching naive wall times strictly after ``start`` (floored to the second)."""
        # A shallow copy shares the parsed fields (read-only) and keeps this thread-safe.
        it = copy.copy(self._template)
        it.set_current(start.replace(microsecond=0, tzinfo=_UTC), force=True)
        while True:
            yield it.get_next(datetime).replace(tzinfo=None)

    def _next_after(self, after: datetime) -> datetime:
        zone = self._zone
        local = after.astimezone(zone)
        wall = local.replace(tzinfo=None)
        lookback = self._second_pass_lookback(after, wall) if self._elapsed else None

        walls = self._walls(wall)
        while True:
            c = next(walls)
            off0, off1 = _offsets(zone, c)
            if off0 == off1:
                found = _utc_from_wall(c, off0)
                if found > after:
                    break
                continue
            if off0 > off1:  # repeated wall time (fall-back)
                early, late = _utc_from_wall(c, off0), _utc_from_wall(c, off1)
                if early > after:
                    found = early
                    break
                if self._elapsed:
                    if late > after:
                        found = late
                        break
                    continue
                # Wall-clock rule and we are on the second pass: every repeated wall time of
                # this fold has had its (only) run, so continue after the fold.
                change = _transition(zone, early, late)
                walls = self._walls(_wall_of(change, off0) - _SECOND)
                continue
            # Skipped wall time (spring-forward gap), off0 < off1.
            change = _transition(zone, _utc_from_wall(c, off1), _utc_from_wall(c, off0))
            if not self._elapsed and change > after:
                logger.debug(
                    "cron %r: %s does not exist in %s, running at the end of the gap (%s)",
                    self.expr, c, self.tz, change,
                )
                found = change
                break
            walls = self._walls(_wall_of(change, off1) - _SECOND)

        if lookback is not None and lookback < found:
            return lookback
        return found

    def _second_pass_lookback(self, after: datetime, wall: datetime) -> datetime | None:
        """Elapsed-time rule only: the earliest second-pass fire of the current fold.

        When ``after`` is on the first pass of a repeated hour (say 02:10 CEST on fall-back
        day in Berlin), a wall time before 02:10, e.g. 02:00, still fires at 02:00 CET.
        """
        off0, off1 = _offsets(self._zone, wall)
        if not off0 > off1 or after != _utc_from_wall(wall, off0):
            return None  # not on a first pass: nothing earlier is still to come
        change = _transition(self._zone, after, _utc_from_wall(wall, off1))
        fold_start = _wall_of(change, off1)  # first repeated wall time
        fold_end = _wall_of(change, off0)  # first wall time after the repeated ones
        # The second pass of wall time x is at x - off1; it is after `after` iff x > threshold.
        threshold = _wall_of(after, off1)
        start = max(fold_start - _SECOND, threshold)
        for c in self._walls(start):
            if c >= fold_end:
                return None
            if c > threshold:
                return _utc_from_wall(c, off1)
        return None  # pragma: no cover - _walls never ends


# --------------------------------------------------------------------------------------------
# Fixed rate / fixed delay
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Dynamic
# --------------------------------------------------------------------------------------------


def _qualified_name(fn: object) -> str:
    module = getattr(fn, "__module__", None) or type(fn).__module__
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}.{name}"


@dataclass(frozen=True)
class Dynamic(Schedule):
    """Let a function decide: ``fn(ctx) -> datetime`` (aware) after every execution.

    ``fn(None)`` gives the first run at registration; after each execution ``fn`` gets that
    execution's :class:`~dbscheduler.TaskContext`. A naive or non-datetime return value
    raises ``ValueError`` naming the function. :meth:`describe` is the function's module and
    qualified name, so replacing one lambda by another in the same module is not detected as
    a schedule change.

    >>> from datetime import datetime, timedelta, timezone
    >>> def tomorrow_9am(ctx):
    ...     now = datetime.now(timezone.utc)
    ...     return (now + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
    >>> Dynamic(tomorrow_9am).describe().endswith(".tomorrow_9am")
    True
    """

    fn: Callable[[TaskContext | None], datetime]
    """Computes the next due time from the finished execution's context (``None`` at first)."""

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ValueError(f"Dynamic.fn must be callable, got {self.fn!r}")

    def describe(self) -> str:
        """``"dynamic <module>.<qualname>"``.

        >>> import time
        >>> Dynamic(time.time).describe()
        'dynamic time.time'
        """
        return f"dynamic {_qualified_name(self.fn)}"

    def _call(self, ctx: TaskContext | None) -> datetime:
        result = self.fn(ctx)
        if not isinstance(result, datetime):
            raise ValueError(
                f"Dynamic.fn {_qualified_name(self.fn)} must return an aware datetime, "
                f"got {result!r}"
            )
        if result.tzinfo is None or result.utcoffset() is None:
            raise ValueError(
                f"Dynamic.fn {_qualified_name(self.fn)} returned a naive datetime "
                f"({result.isoformat()}); return an aware one, e.g. with tzinfo=timezone.utc"
            )
        return _require_aware(result, f"Dynamic.fn {_qualified_name(self.fn)} result")

    def first_run(self, now: datetime) -> datetime:
        """``fn(None)``.

        >>> from datetime import datetime, timezone
        >>> t = datetime(2030, 1, 1, tzinfo=timezone.utc)
        >>> Dynamic(lambda ctx: t).first_run(t) == t
        True
        """
        return self._call(None)

    def next_run(
        self,
        *,
        scheduled_at: datetime,
        started_at: datetime,
        finished_at: datetime,
        ctx: TaskContext | None,
    ) -> datetime:
        """``fn(ctx)``.

        >>> from datetime import datetime, timezone
        >>> t = datetime(2030, 1, 1, tzinfo=timezone.utc)
        >>> Dynamic(lambda ctx: t).next_run(scheduled_at=t, started_at=t, finished_at=t,
        ...                                 ctx=None) == t
        True
        """
        return self._call(ctx)
