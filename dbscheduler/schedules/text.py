"""Reading a schedule from the text it stores in the ``schedule`` column, or that a person
typed (the CLI's ``schedule``, the REST API's ``PUT /api/tasks/{name}``).

:meth:`Schedule.describe` writes ``cron <expr> <tz>``, ``fixed-rate <seconds>s``,
``fixed-delay <seconds>s`` or ``once <ISO 8601 UTC>``; :func:`parse` turns that text into an
equal schedule, so a process that has none of the task's code (the web app, the CLI) can still
compute fire times. People write less: the cron's time zone may be left out (UTC), and
durations take units (``30s``, ``5m``, ``1h``, ``1d``, ``1h30m``) or a bare number of seconds.
``dynamic <module>.<function>`` names code and cannot be read back.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dbscheduler.schedules.base import Schedule
from dbscheduler.schedules.cron import Cron
from dbscheduler.schedules.intervals import FixedDelay, FixedRate
from dbscheduler.schedules.once import Once

__all__ = ["parse"]

_NUMBER = r"\d+(?:\.\d{1,6})?"
_BARE_SECONDS = re.compile(rf"^{_NUMBER}$")
_WITH_UNITS = re.compile(rf"^(?:{_NUMBER}[dhms])+$")
_PART = re.compile(rf"({_NUMBER})([dhms])")
_UNIT_MICROS = {"d": 86_400_000_000, "h": 3_600_000_000, "m": 60_000_000, "s": 1_000_000}

# Words a cron field may hold: month and weekday names, and croniter's L and W.
_CRON_WORDS = frozenset((
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    "sun", "mon", "tue", "wed", "thu", "fri", "sat", "l", "w",
))
_ZONE_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*$")

_KINDS = (
    "'cron <expression> [<time zone>]', 'fixed-rate <duration>', 'fixed-delay <duration>' "
    "(durations like 30s, 5m, 1h, 1d or a number of seconds) or 'once <ISO 8601 UTC>'"
)


def parse(text: str) -> Schedule:
    """The schedule that ``text`` describes: what :meth:`~Schedule.describe` wrote, or the
    shorter forms people type.

    >>> parse("cron 0 3 * * * Europe/Berlin") == Cron("0 3 * * *", tz="Europe/Berlin")
    True
    >>> parse("cron 0 8 * * mon") == Cron("0 8 * * mon")  # no zone: UTC
    True
    >>> parse("fixed-rate 1.5s")
    FixedRate(period=datetime.timedelta(seconds=1, microseconds=500000))
    >>> parse("fixed-delay 5m") == FixedDelay(300) == parse("fixed-delay 300")
    True

    Raises ``ValueError`` naming what is wrong: an unknown kind, a malformed duration, the
    cron field that is out of range, an unknown time zone, or a ``dynamic`` schedule (code,
    not data).
    """
    if not isinstance(text, str):
        raise ValueError(f"schedule text must be a string, got {type(text).__name__}")
    kind, _, rest = " ".join(text.split()).partition(" ")
    if kind == "cron":
        expr, tz = _cron_parts(rest)
        if not expr:
            raise ValueError(
                f"schedule {text!r}: expected 'cron <expression> [<time zone>]', "
                "e.g. 'cron 0 3 * * *' (UTC) or 'cron 0 3 * * * Europe/Berlin'"
            )
        return Cron(expr, tz=tz)
    if kind in ("fixed-rate", "fixed-delay"):
        seconds = _duration(rest, text)
        return FixedRate(seconds) if kind == "fixed-rate" else FixedDelay(seconds)
    if kind == "once":
        return Once(_instant(rest, text))
    if kind == "dynamic":
        raise ValueError(
            f"schedule {text!r} is a Dynamic schedule: it is code and cannot be read back "
            "from text; use Cron, FixedRate, FixedDelay or Once"
        )
    raise ValueError(f"schedule {text!r}: unknown kind {kind!r}; expected {_KINDS}")


def _cron_parts(rest: str) -> tuple[str, str]:
    """``(expression, zone)``: the last word is the zone when it is one, or looks like one (a
    name such as ``Europe/Berlin``, not a cron field such as ``mon-fri``) after a whole
    expression; else the zone is UTC and every word is the expression's, so that a wrong
    field is named as such (``0 8 * * moon``), not taken for an unknown zone."""
    words = rest.split()
    if not words:
        return "", "UTC"
    last, before = words[-1], words[:-1]
    whole = len(before) in (5, 6) or (len(before) == 1 and before[0].startswith("@"))
    if _is_zone(last) or (_is_zone_like(last) and (whole or not before)):
        return " ".join(before), last
    return " ".join(words), "UTC"


def _is_zone(word: str) -> bool:
    try:
        ZoneInfo(word)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return _is_zone_like(word)


def _is_zone_like(word: str) -> bool:
    if not _ZONE_LIKE.match(word) or word.startswith("@"):
        return False
    return not all(part.lower() in _CRON_WORDS for part in re.findall(r"[A-Za-z]+", word))


def _instant(value: str, text: str) -> datetime:
    """``"2026-05-01T08:30:00+00:00"`` as an aware datetime; a naive one is refused."""
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"schedule {text!r}: {value!r} is not an ISO 8601 instant like "
            "'2026-05-01T08:30:00+00:00'"
        ) from None
    if at.tzinfo is None:
        raise ValueError(f"schedule {text!r}: {value!r} has no UTC offset")
    return at


def _duration(value: str, text: str) -> timedelta:
    """``"1.5s"``, ``"5m"``, ``"1h30m"`` or ``"30"`` (seconds) as an exact timedelta (to the
    microsecond, as describe() wrote it)."""
    compact = value.replace(" ", "")
    if _BARE_SECONDS.match(compact):
        return timedelta(microseconds=int(Decimal(compact) * 1_000_000))
    if not _WITH_UNITS.match(compact):
        raise ValueError(
            f"schedule {text!r}: {value!r} is not a duration like '30s', '5m', '1h', '1d', "
            "'1h30m' or '300' (seconds)"
        )
    micros = sum(int(Decimal(number) * _UNIT_MICROS[unit])
                 for number, unit in _PART.findall(compact))
    return timedelta(microseconds=micros)
