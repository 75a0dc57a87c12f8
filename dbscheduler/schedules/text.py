"""Reading a schedule back from the text it stores in the ``schedule`` column.

:meth:`Schedule.describe` writes ``cron <expr> <tz>``, ``fixed-rate <seconds>s``,
``fixed-delay <seconds>s`` or ``once <ISO 8601 UTC>``; :func:`parse` turns that text into an
equal schedule, so a process
that has none of the task's code (the web app, the CLI) can still compute fire times.
``dynamic <module>.<function>`` names code and cannot be read back.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from dbscheduler.schedules.base import Schedule
from dbscheduler.schedules.cron import Cron
from dbscheduler.schedules.intervals import FixedDelay, FixedRate
from dbscheduler.schedules.once import Once

__all__ = ["parse"]

_SECONDS = re.compile(r"^(\d+(?:\.\d{1,6})?)s$")


def parse(text: str) -> Schedule:
    """The schedule whose :meth:`~Schedule.describe` is ``text``.

    >>> parse("cron 0 3 * * * Europe/Berlin") == Cron("0 3 * * *", tz="Europe/Berlin")
    True
    >>> parse("fixed-rate 1.5s")
    FixedRate(period=datetime.timedelta(seconds=1, microseconds=500000))

    Raises ``ValueError`` naming what is wrong: an unknown kind, a malformed duration or cron
    expression, an unknown time zone, or a ``dynamic`` schedule (code, not data).
    """
    if not isinstance(text, str):
        raise ValueError(f"schedule text must be a string, got {type(text).__name__}")
    kind, _, rest = " ".join(text.split()).partition(" ")
    if kind == "cron":
        expr, _, tz = rest.rpartition(" ")
        if not expr:
            raise ValueError(
                f"schedule {text!r}: expected 'cron <expression> <time zone>', "
                "e.g. 'cron 0 3 * * * Europe/Berlin'"
            )
        return Cron(expr, tz=tz)
    if kind in ("fixed-rate", "fixed-delay"):
        seconds = _seconds(rest, text)
        return FixedRate(seconds) if kind == "fixed-rate" else FixedDelay(seconds)
    if kind == "once":
        return Once(_instant(rest, text))
    if kind == "dynamic":
        raise ValueError(
            f"schedule {text!r} is a Dynamic schedule: it is code and cannot be read back "
            "from text; use Cron, FixedRate, FixedDelay or Once"
        )
    raise ValueError(
        f"schedule {text!r}: unknown kind {kind!r}; expected 'cron <expression> <time zone>', "
        "'fixed-rate <seconds>s', 'fixed-delay <seconds>s' or 'once <ISO 8601 UTC>'"
    )


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


def _seconds(value: str, text: str) -> timedelta:
    """``"1.5s"`` as an exact timedelta (to the microsecond, as describe() wrote it)."""
    match = _SECONDS.match(value)
    if match is None:
        raise ValueError(
            f"schedule {text!r}: {value!r} is not a duration like '300s' or '1.5s'"
        )
    try:
        micros = int(Decimal(match.group(1)) * 1_000_000)
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        raise ValueError(f"schedule {text!r}: {value!r} is not a number of seconds") from None
    return timedelta(microseconds=micros)
