"""Bulk creation: the items :meth:`Client.schedule_many`, :meth:`Client.schedule_once_many`
and :meth:`Client.push_many` take, and their checks.

An item is a :class:`ScheduleItem` / :class:`PushItem`, a tuple, or a mapping (a JSON object,
as the command line and the REST API read them)::

    client.schedule_once_many([
        ("mail-1", "send-mail", at),                          # (name, handler, at)
        ("mail-2", "send-mail", at, {"to": "ann"}),           # … with data
        ScheduleItem("mail-3", "send-mail", at, priority=5),  # … with options
        {"name": "mail-4", "handler": "send-mail", "at": "2030-01-01T08:00:00Z",
         "data": {"to": "bob"}, "priority": 5},
    ])

Every item is checked before anything is written: the first bad one raises ``ValueError``
naming its position and, when it has one, its name. Names must be unique within one call.

(:class:`Client` is :class:`dbscheduler.Client`.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ._engine.runtime import once_at, runtime_row
from ._store import RuntimeRow
from ._store.batches import Push
from .batches import build_push
from .schedules import Schedule, parse

__all__ = ["PushItem", "ScheduleItem", "push_rows", "runtime_rows"]


@dataclass(frozen=True, init=False)
class ScheduleItem:
    """One runtime task (or, with an aware datetime as ``when``, one one-off job) for
    :meth:`~dbscheduler.Client.schedule_many` / :meth:`~dbscheduler.Client.schedule_once_many`:
    the arguments of :meth:`~dbscheduler.Client.schedule`.

    >>> ScheduleItem("r-1", "report", Cron("0 8 * * *"),
    ...              data={"n": 1}, priority=2)  # doctest: +SKIP
    """

    name: str
    handler: str
    when: Schedule | datetime
    """A :class:`~dbscheduler.Schedule` (``schedule_many``) or an aware datetime
    (``schedule_once_many``)."""
    data: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)
    """Execution options, as the keyword arguments of ``schedule``."""

    def __init__(self, name: str, handler: str, when: Schedule | datetime, data: Any = None,
                 **options: Any) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "handler", handler)
        object.__setattr__(self, "when", when)
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "options", dict(options))


@dataclass(frozen=True)
class PushItem:
    """One push for :meth:`~dbscheduler.Client.push_many`: the arguments of
    :meth:`~dbscheduler.Client.push`.

    >>> PushItem("ann@example.com", {"event": "comment"}, "digest", update="once")  # doctest: +SKIP
    """

    key: str
    item: Any
    handler: str
    ontime: datetime | float | None = None
    update: str = "always"
    data: Any = None


def _where(index: int, item: object) -> str:
    name = None
    if isinstance(item, (ScheduleItem, PushItem)):
        name = item.name if isinstance(item, ScheduleItem) else item.key
    elif isinstance(item, Mapping):
        name = item.get("name", item.get("key"))
    elif isinstance(item, tuple) and item:
        name = item[0]
    return f"item {index}" + (f" ({str(name)[:60]!r})" if isinstance(name, str) else "")


def _schedule_item(item: object, once: bool) -> ScheduleItem:
    when_key = "at" if once else "schedule"
    if isinstance(item, ScheduleItem):
        return item
    if isinstance(item, tuple):
        if len(item) not in (3, 4):
            raise ValueError(f"a tuple item is (name, handler, {when_key}) or (name, handler, "
                             f"{when_key}, data); got {len(item)} values")
        return ScheduleItem(*item)
    if isinstance(item, Mapping):
        rest = dict(item)
        missing = [k for k in ("name", "handler", when_key) if k not in rest]
        if missing:
            raise ValueError(f"a mapping item needs the keys name, handler and {when_key}; "
                             f"missing {', '.join(missing)}")
        name, handler, when = rest.pop("name"), rest.pop("handler"), rest.pop(when_key)
        data = rest.pop("data", None)
        options = rest.pop("options", None)
        if options is not None:
            if not isinstance(options, Mapping):
                raise ValueError(f"options must be an object, got {options!r}")
            rest.update(options)
        if once and isinstance(when, str):
            when = _aware(when)
        elif not once and isinstance(when, str):
            when = parse(when)
        return ScheduleItem(name, handler, when, data, **rest)
    raise ValueError(f"an item is a ScheduleItem, a tuple or a mapping, got "
                     f"{type(item).__name__}")


def _aware(text: str, field: str = "at") -> datetime:
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{field}: {text!r} is not an ISO 8601 date-time") from None
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"{field}: {text!r} has no UTC offset; add one, e.g. {text}Z")
    return at


def runtime_rows(items: Iterable[object], *, once: bool) -> list[RuntimeRow]:
    """Check every item (:class:`ScheduleItem`, tuple or mapping) and build the rows to
    write; ``once``: the items' ``when`` is the one-off job's ``at``. Raises ``ValueError``
    naming the first bad item; nothing is written before this passes."""
    rows: list[RuntimeRow] = []
    seen: dict[str, int] = {}
    memo: dict[Any, Any] = {}
    for index, raw in enumerate(items):
        try:
            item = _schedule_item(raw, once)
            schedule = once_at(item.name, item.when) if once else item.when
            if not once and isinstance(schedule, datetime):
                raise ValueError("schedule: a datetime is a one-off job's time; use "
                                 "schedule_once_many, or give a Schedule")
            row = runtime_row(item.name, item.handler, schedule,  # type: ignore[arg-type]
                              item.data, item.options, memo=memo)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{_where(index, raw)}: {exc}") from None
        if row.name in seen:
            raise ValueError(f"{_where(index, raw)}: the name is also item {seen[row.name]}'s; "
                             "each name may appear once per call")
        seen[row.name] = index
        rows.append(row)
    return rows


def push_rows(items: Iterable[object]) -> list[Push]:
    """Check every push (:class:`PushItem`, tuple ``(key, item, handler)`` or mapping with
    ``key``, ``item``, ``handler`` and optionally ``ontime``, ``update``, ``data``) and build
    what to write, in order. Raises ``ValueError`` naming the first bad item."""
    pushes: list[Push] = []
    for index, raw in enumerate(items):
        try:
            if isinstance(raw, PushItem):
                item = raw
            elif isinstance(raw, tuple):
                if len(raw) != 3:
                    raise ValueError(f"a tuple item is (key, item, handler); got {len(raw)} "
                                     "values")
                item = PushItem(*raw)
            elif isinstance(raw, Mapping):
                unknown = sorted(set(raw) - {"key", "item", "handler", "ontime", "update",
                                             "data"})
                if unknown:
                    raise ValueError(f"unknown key {unknown[0]!r}; a push has key, item, "
                                     "handler, ontime, update, data")
                missing = [k for k in ("key", "item", "handler") if k not in raw]
                if missing:
                    raise ValueError(f"a mapping item needs the keys key, item and handler; "
                                     f"missing {', '.join(missing)}")
                ontime = raw.get("ontime")
                if isinstance(ontime, str):
                    ontime = _aware(ontime, "ontime")
                item = PushItem(raw["key"], raw["item"], raw["handler"], ontime,
                                raw.get("update", "always"), raw.get("data"))
            else:
                raise ValueError(f"an item is a PushItem, a tuple or a mapping, got "
                                 f"{type(raw).__name__}")
            if not isinstance(item.handler, str):
                raise ValueError(f"handler must be a string, got {item.handler!r}")
            pushes.append(build_push(item.handler, item.key, item.item, ontime=item.ontime,
                                     update=item.update, data=item.data))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{_where(index, raw)}: {exc}") from None
    return pushes
