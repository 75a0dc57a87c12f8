""":class:`Cron`: a cron expression in an IANA time zone, with the daylight-saving fix that
croniter alone lacks (a fixed wall-clock time runs once per local day; wildcard and stepped
hours run on real elapsed time)."""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from dbscheduler.context import TaskContext
from dbscheduler.schedules.base import _MAX_UTC, _SECOND, _UTC, Schedule, _require_aware

from ..logfields import engine_log

# The name the single-module ``dbscheduler.schedules`` used: log filters keep working.
logger = engine_log("dbscheduler.schedules")

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


def _load_zone(tz: object) -> ZoneInfo:
    """The zone ``Cron.tz`` names: an IANA name, or a ``ZoneInfo`` taken by its name, so that
    ``"Europe/Berlin"`` and ``ZoneInfo("Europe/Berlin")`` make the same schedule."""
    if isinstance(tz, ZoneInfo):
        if tz.key is None:  # ZoneInfo.from_file() without a key: nothing to store or compare
            raise ValueError(
                f"Cron.tz: {tz!r} has no IANA name; use ZoneInfo('Area/City') or the name"
            )
        tz = tz.key
    if not isinstance(tz, str) or not tz:
        raise ValueError(
            "Cron.tz must be an IANA time zone name such as 'Europe/Berlin' or a "
            f"zoneinfo.ZoneInfo, got {tz!r}"
        )
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"Cron.tz: unknown time zone {tz!r}") from None


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

    ``tz`` is the zone's name (``"Europe/Berlin"``, the default ``"UTC"``) or a
    :class:`zoneinfo.ZoneInfo`; either way ``Cron.tz`` and :meth:`describe` show the name.

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
    """IANA time zone name the expression is read in, e.g. ``"Europe/Berlin"``; a
    ``zoneinfo.ZoneInfo`` given instead is kept as its name."""

    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _template: croniter = field(init=False, repr=False, compare=False)
    _elapsed: bool = field(init=False, repr=False, compare=False)

    # An explicit __init__ (kept by @dataclass), as in FixedRate: ``tz`` also accepts a
    # ZoneInfo while the attribute stays the zone's name, so describe() and equality are the
    # same for Cron(e, tz="Europe/Berlin") and Cron(e, tz=ZoneInfo("Europe/Berlin")).
    def __init__(self, expr: str, tz: str | ZoneInfo = "UTC") -> None:
        object.__setattr__(self, "expr", expr)
        object.__setattr__(self, "tz", tz)
        self.__post_init__()

    def __post_init__(self) -> None:
        if not isinstance(self.expr, str):
            raise ValueError(f"Cron.expr must be a string, got {self.expr!r}")
        text = " ".join(self.expr.split())
        object.__setattr__(self, "expr", text)
        zone = _load_zone(self.tz)
        object.__setattr__(self, "tz", zone.key)
        object.__setattr__(self, "_zone", zone)

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
        >>> from zoneinfo import ZoneInfo
        >>> Cron("0 3 * * *", tz=ZoneInfo("Europe/Berlin")).describe()
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
        fire: the result saturates at ``datetime.max`` (UTC).

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

