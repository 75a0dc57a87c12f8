"""Execution options: how, where and when a task's executions run.

They are given on ``task``/``add`` and on ``schedule``/``schedule_once`` (as keyword
arguments), checked before anything is written, and stored with the row (the ``options`` JSON
column, plus the ``priority``, ``task_group`` and ``requires`` columns the pick filters and
orders by), so every node and every process sees the same ones::

    @scheduler.task("resize", schedule=FixedRate(5), priority=10, group="images",
                    requires="gpu", timeout=timedelta(minutes=2), isolation="process")
    def resize(ctx: TaskContext) -> None: ...

    client.schedule("report-42", "send-report", Once(at), misfire="skip", grace=60)
"""

from __future__ import annotations

import json
import math
import random
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, Literal

from ..logfields import engine_log

__all__ = ["DEFAULT_GRACE", "DEFAULT_OPTIONS", "KNOWN_OPTIONS", "TaskOptions", "options_from"]

log = engine_log("dbscheduler.options")

DEFAULT_GRACE = timedelta(seconds=1)
"""How late a ``misfire="skip"`` execution may start and still run, unless ``grace`` says."""

_INT32 = 2**31
_MAX_NAME = 255
_MAX_SECONDS = 86_400 * 365

Isolation = Literal["thread", "process"]
Misfire = Literal["run", "skip"]


@dataclass(frozen=True)
class TaskOptions:
    """A row's execution options (every field has its default when not given).

    >>> options_from({"priority": 5, "timeout": 30}, "task 'x'").timeout
    datetime.timedelta(seconds=30)
    """

    priority: int = 0
    """When more rows are due than a node has free workers: higher first, then earliest due."""
    group: str | None = None
    """The concurrency group; ``set_group_limit(group, n)`` caps its running executions
    across the cluster."""
    requires: str | None = None
    """Only nodes carrying this tag (``Scheduler(tags=…)``; a node id is always one) run it."""
    timeout: timedelta | None = None
    """At the timeout ``ctx.stop_requested`` is set and the run is recorded ``timeout``."""
    isolation: Isolation = "thread"
    """``"process"``: the function runs in a child process, killed if it outlives its
    timeout (or its lease) by a few seconds."""
    misfire: Misfire = "run"
    """``"skip"``: an execution picked later than ``grace`` after its due time does not run;
    it is recorded ``skipped`` and the task moves on to its next time."""
    grace: timedelta = DEFAULT_GRACE
    """How late a ``misfire="skip"`` execution may still start."""
    jitter: timedelta | None = None
    """Every next time gets a uniform random delay in ``[0, jitter)``."""

    def to_json(self) -> str | None:
        """The options that differ from the defaults, as the stored JSON object text
        (``None`` when all are defaults). Durations are seconds."""
        out = self.to_dict()
        return json.dumps(out, ensure_ascii=False) if out else None  # in field order

    def to_dict(self) -> dict[str, Any]:
        """The non-default options as JSON-ready values (what ``list``/``show`` print)."""
        out: dict[str, Any] = {}
        # The field list once, not per call: a listing of every row asks for each row's.
        for name, default in _FIELD_DEFAULTS:
            value = getattr(self, name)
            if value != default:
                out[name] = value.total_seconds() if isinstance(value, timedelta) else value
        return out

    @classmethod
    def from_json(cls, text: str | None) -> TaskOptions:
        """Read stored options back to show them (``list``, ``show``, ``info()``). Lenient:
        an unknown or invalid option is shown at its default (logged). A node reads a row's
        options to run it with :meth:`read`, which refuses what it cannot use."""
        if not text:
            return _DEFAULT
        cached = _PARSED.get(text)
        if cached is not None:
            return cached
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            log.warning("stored options %r cannot be read (%s); shown as the defaults",
                        text, exc)
            raw = {}
        good: dict[str, Any] = {}
        for key, value in raw.items():
            try:
                good.update(_check(key, value, "stored options"))
            except ValueError as exc:
                log.warning("%s; ignored", exc)
        options = cls(**good)
        if len(_PARSED) > 10_000:
            _PARSED.clear()
        _PARSED[text] = options
        return options

    @classmethod
    def read(cls, text: str | None) -> TaskOptions:
        """Read stored options back to run a row: ``ValueError`` naming what is wrong when the
        text is not a JSON object or a known option has a value this version refuses (the
        row must not run without the timeout or isolation it asked for). An option this
        version does not know (a newer version's) is ignored.

        >>> TaskOptions.read('{"priority": 3, "from_the_future": 1}').priority
        3
        >>> TaskOptions.read('{"timeout": "soon"}')
        Traceback (most recent call last):
        ...
        ValueError: stored options: timeout must be a timedelta or a number of seconds, got 'soon'
        """
        if not text:
            return _DEFAULT
        cached = _READ.get(text)
        if cached is not None:
            return cached
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"{text[:80]!r} is not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{text[:80]!r} is not a JSON object")
        good: dict[str, Any] = {}
        for key, value in raw.items():
            if key in KNOWN_OPTIONS:
                good.update(_check(key, value, "stored options"))
        options = cls(**good)
        if len(_READ) > 10_000:
            _READ.clear()
        _READ[text] = options
        return options


_DEFAULT = DEFAULT_OPTIONS = TaskOptions()
_PARSED: dict[str, TaskOptions] = {}

_READ: dict[str, TaskOptions] = {}
KNOWN_OPTIONS: frozenset[str] = frozenset(f.name for f in fields(TaskOptions))
_FIELD_DEFAULTS: tuple[tuple[str, Any], ...] = tuple((f.name, f.default)
                                                     for f in fields(TaskOptions))
"""Each option's name and default, in field order."""


def options_from(given: Mapping[str, Any], where: str) -> TaskOptions:
    """Check ``given`` (keyword arguments of ``task``/``add``/``schedule``) and build the
    options; ``ValueError`` naming ``where`` and the option, before anything is written.

    >>> options_from({"misfire": "later"}, "task 'x'")
    Traceback (most recent call last):
    ...
    ValueError: task 'x': misfire must be 'run' or 'skip', got 'later'
    """
    unknown = sorted(set(given) - KNOWN_OPTIONS)
    if unknown:
        raise ValueError(
            f"{where}: unknown option(s) {', '.join(unknown)}; the options are "
            f"{', '.join(sorted(KNOWN_OPTIONS))}"
        )
    checked: dict[str, Any] = {}
    for key, value in given.items():
        checked.update(_check(key, value, where))
    return TaskOptions(**checked)


def _check(key: str, value: Any, where: str) -> dict[str, Any]:
    if key not in KNOWN_OPTIONS:
        raise ValueError(f"{where}: unknown option {key!r}")
    if key == "priority":
        if isinstance(value, bool) or not isinstance(value, int) or not (
            -_INT32 <= value < _INT32
        ):
            raise ValueError(f"{where}: priority must be an integer between {-_INT32} and "
                             f"{_INT32 - 1}, got {value!r}")
        return {key: value}
    if key in ("group", "requires"):
        return {key: None if value is None else check_tag(value, key, where)}
    if key == "isolation":
        if value not in ("thread", "process"):
            raise ValueError(f"{where}: isolation must be 'thread' or 'process', got {value!r}")
        return {key: value}
    if key == "misfire":
        if value not in ("run", "skip"):
            raise ValueError(f"{where}: misfire must be 'run' or 'skip', got {value!r}")
        return {key: value}
    if key == "grace":
        if value is None:
            return {key: DEFAULT_GRACE}
        return {key: _seconds(value, key, where, allow_zero=True)}
    # timeout, jitter: None (or 0 for jitter) means none
    if value is None or (key == "jitter" and value in (0, timedelta(0))
                         and not isinstance(value, bool)):
        return {key: None}
    return {key: _seconds(value, key, where, allow_zero=False)}


def check_tag(value: Any, key: str, where: str) -> str:
    """``value`` as a group or tag name, or ``ValueError`` naming ``where`` and ``key``.

    >>> check_tag(" gpu", "requires", "task 'x'")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: task 'x': requires must be a non-empty string without leading or trailing ...
    """
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise ValueError(f"{where}: {key} must be a non-empty string without leading or "
                         f"trailing white space, got {value!r}")
    if any(unicodedata.category(c) == "Cc" for c in value):
        raise ValueError(f"{where}: {key} {value!r} contains a control character")
    if len(value.encode("utf-16-le")) // 2 > _MAX_NAME:
        raise ValueError(f"{where}: {key} is longer than {_MAX_NAME} characters")
    return value


def _seconds(value: Any, key: str, where: str, *, allow_zero: bool) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, (timedelta, int, float)):
        raise ValueError(f"{where}: {key} must be a timedelta or a number of seconds, "
                         f"got {value!r}")
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not math.isfinite(seconds) or seconds > _MAX_SECONDS:
        raise ValueError(f"{where}: {key} must be a finite duration of at most a year, "
                         f"got {value!r}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"{where}: {key} must be {'>= 0' if allow_zero else '> 0'}, "
                         f"got {value!r}")
    return timedelta(seconds=seconds)


def node_tags(tags: Iterable[str], node_id: str) -> frozenset[str]:
    """A node's tags, checked, with its own id among them.

    >>> sorted(node_tags(["gpu"], "node-1"))
    ['gpu', 'node-1']
    """
    if isinstance(tags, str):
        raise ValueError(f"tags must be a collection of strings, not the string {tags!r} "
                         f"(write tags={{{tags!r}}})")
    return frozenset({*(check_tag(t, "tag", "Scheduler(tags=…)") for t in tags), node_id})


def jittered(at: datetime, options: TaskOptions, never: datetime) -> datetime:
    """``at`` plus a uniform random delay in ``[0, jitter)`` (unless ``at`` is "never")."""
    if options.jitter is None or at >= never:
        return at
    delay = options.jitter * random.random()  # random() < 1: strictly below jitter
    return at + min(delay, never - at)


def misfired(options: TaskOptions, scheduled_at: datetime, started_at: datetime) -> bool:
    """Whether a ``misfire="skip"`` execution started too late after its due time to run."""
    return options.misfire == "skip" and started_at - scheduled_at > options.grace
