"""What the dashboard and the API say about tasks: states, filters, schedules in words, and
upcoming fire times. Pure functions of :class:`~dbscheduler.TaskInfo` and the database clock,
shared by the HTML pages and the JSON routes so that both always agree.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, get_args

from ..context import TaskInfo
from ..schedules import Cron, Dynamic, FixedDelay, FixedRate, Schedule, parse
from ..schedules.once import NEVER

__all__ = [
    "FAILING_STATUSES",
    "OVERDUE_AFTER",
    "STATES",
    "Page",
    "State",
    "Upcoming",
    "count_states",
    "describe_schedule",
    "filter_tasks",
    "is_batch_key",
    "paginate",
    "parse_schedule",
    "preview",
    "states_of",
    "upcoming",
]

State = Literal["running", "paused", "failing", "overdue", "idle"]
STATES: tuple[State, ...] = get_args(State)
FAILING_STATUSES = frozenset({"error", "lost", "timeout"})
OVERDUE_AFTER = timedelta(seconds=60)
"""A task due longer ago than this, not paused and not running, is overdue: no node picks it."""


def states_of(info: TaskInfo, now: datetime) -> set[State]:
    """Every state filter ``info`` matches, on the database clock ``now``.

    ``running`` and ``paused`` follow the row; ``failing``: the last run ended in error, was
    lost or timed out; ``overdue``: unpaused, not running and due more than
    :data:`OVERDUE_AFTER` ago, or past its ``alert_after`` without a success
    (:attr:`TaskInfo.overdue`); ``idle``: none of these (waiting for its next time).
    """
    out: set[State] = set()
    if info.running:
        out.add("running")
    if info.paused:
        out.add("paused")
    if info.last_status in FAILING_STATUSES:
        out.add("failing")
    if info.overdue or (not info.paused and not info.running
                        and info.next_process_at < now - OVERDUE_AFTER):
        out.add("overdue")
    if not out:
        out.add("idle")
    return out


def count_states(infos: Iterable[TaskInfo], now: datetime) -> dict[str, int]:
    """``{"all": n, "running": n, ...}``: how many tasks each filter would show."""
    counts: dict[str, int] = {"all": 0}
    counts.update(dict.fromkeys(STATES, 0))
    for info in infos:
        counts["all"] += 1
        for state in states_of(info, now):
            counts[state] += 1
    return counts


def filter_tasks(
    infos: Iterable[TaskInfo], now: datetime, state: str | None = None, q: str | None = None
) -> list[TaskInfo]:
    """The tasks in ``state`` (any, when None) whose name or schedule contains ``q``
    (case-insensitive)."""
    needle = (q or "").strip().casefold()
    out = []
    for info in infos:
        if state and state not in states_of(info, now):
            continue
        if needle and needle not in info.name.casefold() and needle not in (
            info.schedule or ""
        ).casefold():
            continue
        out.append(info)
    return out


def is_batch_key(info: TaskInfo, pending: Collection[str] = ()) -> bool:
    """Whether ``info`` is a batch key's row (``<handler>/<key>``, delivered once by its
    batch handler) rather than a task: a row with items ``pending``, or one named and
    scheduled as a push makes them (its items delivered a moment ago).

    >>> is_batch_key(client.info("digest/ann@example.com"))   # doctest: +SKIP
    True
    """
    if info.name in pending:
        return True
    handler = info.handler
    return bool(handler and handler != info.name and info.name.startswith(f"{handler}/")
                and (info.schedule or "").startswith("once "))


COUNT_CAP = 10_000
"""The tasks page and ``/api/tasks`` count this many rows at most (a cost that does not
grow with the table); past it the numbers are lower bounds ("10,000+") and the page shows the
table's estimated size."""


@dataclass(frozen=True)
class Page:
    """One page of a filtered listing, with the total for pagination."""

    items: list[TaskInfo]
    total: int
    limit: int
    offset: int


def paginate(items: Sequence[TaskInfo], limit: int, offset: int) -> Page:
    """``items[offset:offset + limit]`` with the total."""
    return Page(list(items[offset : offset + limit]), len(items), limit, offset)


# -- schedules ----------------------------------------------------------------------------


def parse_schedule(text: str | None) -> Schedule | None:
    """The :class:`Schedule` a stored ``schedule`` text describes, or None when it cannot be
    rebuilt here (``dynamic``: its function lives in the nodes' code, not in the web app)."""
    if not text:
        return None
    try:
        return parse(text)
    except ValueError:
        return None


_DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_UNITS = ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second"))


def _every(seconds: float) -> str:
    """``"every 5 minutes"``, ``"every hour"``, ``"every 1.5 seconds"``."""
    for size, unit in _UNITS:
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"every {unit}" if n == 1 else f"every {n} {unit}s"
    return f"every {seconds:g} seconds"


def _duration(seconds: float) -> str:
    for size, unit in _UNITS:
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}" if n == 1 else f"{n} {unit}s"
    return f"{seconds:g} seconds"


def _num(field: str, low: int, high: int) -> int | None:
    return int(field) if field.isdigit() and low <= int(field) <= high else None


def _step(field: str) -> int | None:
    if field.startswith("*/") and field[2:].isdigit() and int(field[2:]) > 0:
        return int(field[2:])
    return None


def _cron_words(expr: str, tz: str) -> str | None:
    """Plain words for the common cron shapes; None for the others (shown as cron)."""
    fields = expr.split()
    seconds = "0"
    if len(fields) == 6:
        seconds, fields = fields[0], fields[1:]
    if len(fields) != 5:
        return None
    minute, hour, dom, month, dow = fields
    where = f" {tz}"  # a time of day means nothing without its zone, UTC included
    every_day = dom == "*" and month == "*" and dow == "*"
    if every_day and minute == hour == "*":
        if seconds == "*":
            return "every second"
        if (n := _step(seconds)) is not None:
            return _every(n)
        return "every minute" if seconds == "0" else None
    if seconds != "0":
        return None
    if every_day and hour == "*":
        if (n := _step(minute)) is not None:
            return _every(n * 60)
        if (m := _num(minute, 0, 59)) is not None:
            return f"every hour at :{m:02d}"
        return None
    m, h = _num(minute, 0, 59), _num(hour, 0, 23)
    if m is None:
        return None
    if h is None and (n := _step(hour)) is not None and every_day:
        return f"every {n} hours at :{m:02d}{where}" if n > 1 else f"every hour at :{m:02d}"
    if h is None:
        return None
    at = f"at {h:02d}:{m:02d}{where}"
    if every_day:
        return f"every day {at}"
    if dom == "*" and month == "*":
        if (d := _num(dow, 0, 7)) is not None:
            return f"every {_DAYS[d % 7]} {at}"
        if dow in ("1-5", "MON-FRI", "mon-fri"):
            return f"every weekday {at}"
        return None
    if month == "*" and dow == "*" and (d := _num(dom, 1, 31)) is not None:
        return f"on day {d} of every month {at}"
    return None


def describe_schedule(text: str | None) -> str:
    """A stored ``schedule`` text in words: ``"every day at 03:00 Europe/Berlin"``,
    ``"every 5 minutes"``, ``"5 minutes after each run"``; unusual crons stay as written.

    >>> describe_schedule("cron 0 3 * * * Europe/Berlin")
    'every day at 03:00 Europe/Berlin'
    >>> describe_schedule("fixed-rate 300s")
    'every 5 minutes'
    """
    if not text:
        return "no schedule recorded"
    kind, _, rest = text.strip().partition(" ")
    if kind == "cron":
        expr, _, tz = rest.rpartition(" ")
        words = _cron_words(expr, tz)
        if words is not None:
            return words
        return f"cron {expr}" + ("" if tz == "UTC" else f" ({tz})")
    schedule = parse_schedule(text)
    if isinstance(schedule, FixedRate):
        return _every(schedule.period.total_seconds())
    if isinstance(schedule, FixedDelay):
        seconds = schedule.delay.total_seconds()
        if seconds == 0:
            return "again as soon as each run ends"
        return f"{_duration(seconds)} after each run ends"
    if kind == "dynamic":
        return f"decided by {rest} after each run"
    return text


# -- upcoming fire times ------------------------------------------------------------------


@dataclass(frozen=True)
class Upcoming:
    """The next fire times of a task, and what they assume."""

    times: list[datetime]
    note: str | None


def upcoming(info: TaskInfo, now: datetime, n: int = 10) -> Upcoming:
    """The next ``n`` due times of ``info``: its stored next time, then the schedule's.

    While it runs, the stored time is its lease, so the list starts from the schedule's next
    occurrence after now. Fixed delays assume runs that take no time; dynamic schedules are
    decided by the nodes' code, so only the stored time is known.
    """
    schedule = parse_schedule(info.schedule)
    times: list[datetime] = []
    note = None
    if info.running:
        note = "running now: the next time is decided when this run ends"
        if not isinstance(schedule, Cron):
            return Upcoming(times, note)
        t = schedule.next_after(now)
        times.append(t)
    else:
        t = info.next_process_at
        times.append(t)
        if info.paused:
            note = "paused: none of these runs happen until it is resumed"
    if schedule is None:
        return Upcoming(times, note or "later times are decided by the task's code after each run")
    if isinstance(schedule, FixedDelay):
        note = note or "assuming each run takes no time (the delay counts from its end)"
    while len(times) < n:
        # A past due time (overdue, or a paused task) runs once at once; the schedule goes on
        # from there, as the engine's own next_run does.
        start = max(t, now)
        t = schedule.next_run(scheduled_at=t, started_at=start, finished_at=start, ctx=None)
        times.append(t)
    return Upcoming(times[:n], note)


def preview(text: str, now: datetime, n: int = 5) -> Upcoming:
    """The first ``n`` due times of a task created now with the schedule ``text``;
    ``ValueError`` naming what is wrong with the text.

    >>> start = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    >>> [t.isoformat() for t in preview("fixed-rate 60s", start, 2).times]
    ['2026-01-01T00:00:00+00:00', '2026-01-01T00:01:00+00:00']
    """
    schedule = parse(text)
    if isinstance(schedule, Dynamic):
        raise ValueError("a dynamic schedule is decided by a function in the nodes' code; "
                         "a runtime task takes cron, fixed-rate, fixed-delay or once")
    t = schedule.first_run(now)
    times = [t]
    note = None
    if isinstance(schedule, FixedDelay):
        note = "assuming each run takes no time (the delay counts from its end)"
    while len(times) < n:
        start = max(t, now)
        t = schedule.next_run(scheduled_at=t, started_at=start, finished_at=start, ctx=None)
        if t >= NEVER or t <= times[-1]:
            note = note or "runs once, then the task is deleted"
            break
        times.append(t)
    return Upcoming(times, note)
