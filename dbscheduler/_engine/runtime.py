"""Work created at run time: handlers, runtime tasks and one-off jobs.

A *handler* is a function registered under a name (``@scheduler.handler("send-report")``)
without a row. A *runtime task* is a row created from any process (``Client.schedule``,
``schedule_once``, the command line) naming the handler that runs it, its schedule as text
(:func:`dbscheduler.schedules.parse` reads it back), its ``data`` (JSON, ``ctx.data``) and its
options. A task declared with ``@scheduler.task(name, …)`` is a handler named ``name`` plus a
row named ``name`` whose handler is ``name``.

A node picks only rows whose handler it has; a row whose handler no node has stays where it
is and ``dbscheduler list`` marks it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from .._store import RuntimeRow, refuse_reserved, validate_name
from .._store.state import encode_state
from ..failures import FailureSettings, NoRetry
from ..logfields import engine_log
from ..schedules import Dynamic, Once, Schedule, parse
from ..schedules.once import NEVER
from ..table import MAX_OPTIONS_LENGTH, MAX_SCHEDULE_LENGTH
from .durations import alert_after as checked_alert_after
from .execution import TaskDef, TaskFunction
from .options import TaskOptions, jittered, options_from
from .unreadable import UnreadableRow

__all__ = ["Handlers", "finished_for_good", "runtime_row"]

log = engine_log("dbscheduler.runtime")



def runtime_row(
    name: str,
    handler: str,
    schedule: Schedule,
    data: Any,
    options: Mapping[str, Any],
    *,
    memo: dict[Any, Any] | None = None,
) -> RuntimeRow:
    """Check everything ``schedule``/``schedule_once`` were given and build the row to write.

    Raises ``ValueError`` naming the field; nothing is written before this passes. ``memo``
    (a dict kept across the items of one bulk call) remembers the handlers, schedules and
    options already found good, which many items share.
    """
    try:
        validate_name(name)
    except ValueError as exc:
        raise ValueError(f"name: {exc}") from None
    refuse_reserved(name, "task")
    if memo is None or ("handler", handler) not in memo:
        try:
            validate_name(handler)
        except ValueError as exc:
            raise ValueError(
                f"task {name!r}: handler: {str(exc).replace('task name', 'name')}") from None
        refuse_reserved(handler, f"task {name!r}: handler")
        if memo is not None:
            memo["handler", handler] = True
    if memo is not None and type(schedule) is Once:
        # One-off jobs of a bulk call share their options, rarely their time: the options
        # are checked once per distinct set, and a Once's text, its own describe(), needs
        # no other check (Once itself refused a naive or non-datetime ``at``).
        key = _memo_key(None, options)
        if key is not None and key in memo:
            _, controls, stored_options, alert_after = memo[key]
        else:
            _, controls, stored_options, alert_after = _checked(name, schedule, options)
            if key is not None:
                memo[key] = None, controls, stored_options, alert_after
        text = schedule.describe()
    else:
        key = _memo_key(schedule, options) if memo is not None else None
        if memo is not None and key is not None and key in memo:
            text, controls, stored_options, alert_after = memo[key]
        else:
            text, controls, stored_options, alert_after = _checked(name, schedule, options)
            if memo is not None and key is not None:
                memo[key] = text, controls, stored_options, alert_after
    try:
        stored_data = encode_state(data)
    except ValueError as exc:
        raise ValueError(f"task {name!r}: data: {str(exc).replace('state', 'data')}") from None

    def first_run(now: datetime) -> datetime:
        return jittered(schedule.first_run(now), controls, NEVER)

    return RuntimeRow(name, handler, text, first_run, stored_data, stored_options,
                      controls.priority, controls.group, controls.requires, alert_after)


def _memo_key(schedule: Schedule | None, options: Mapping[str, Any]
              ) -> tuple[Any, ...] | None:
    """What makes two items' schedule and options checks the same, or ``None`` when the
    values cannot be compared (unhashable options are checked every time)."""
    try:
        key = ("schedule", type(schedule), schedule, tuple(sorted(options.items())))
        hash(key)
    except TypeError:
        return None
    return key


def _checked(name: str, schedule: Schedule, options: Mapping[str, Any]
             ) -> tuple[str, TaskOptions, str | None, float | None]:
    """The schedule's stored text, the options, their JSON and the dead-man limit, checked."""
    options = dict(options)
    alert_after = _alert_after(name, options.pop("alert_after", None))
    if isinstance(schedule, Dynamic):
        raise ValueError(
            f"task {name!r}: schedule: a Dynamic schedule is code and cannot be stored for a "
            "runtime task; use Cron, FixedRate, FixedDelay or Once (or declare the task "
            "with @scheduler.task)"
        )
    if not isinstance(schedule, Schedule):
        raise ValueError(f"task {name!r}: schedule must be a Schedule, got {schedule!r}")
    text = schedule.describe()
    if len(text) > MAX_SCHEDULE_LENGTH:
        raise ValueError(f"task {name!r}: schedule: description longer than "
                         f"{MAX_SCHEDULE_LENGTH} characters")
    try:
        if parse(text) != schedule:
            raise ValueError("its text does not read back to an equal schedule")
    except ValueError as exc:
        raise ValueError(f"task {name!r}: schedule {text!r} cannot be stored: {exc}") from None
    controls = options_from(options, f"task {name!r}")
    stored_options = controls.to_json()
    if stored_options is not None and len(stored_options) > MAX_OPTIONS_LENGTH:
        raise ValueError(f"task {name!r}: options: longer than {MAX_OPTIONS_LENGTH} characters")
    return text, controls, stored_options, alert_after


def _alert_after(name: str, value: Any) -> float | None:
    """The ``alert_after`` option in seconds, checked."""
    if value is None:
        return None
    return checked_alert_after(value, name).total_seconds()


def once_at(name: str, at: object) -> Once:
    """``Once(at)``, with the error naming the task and the field ``at``."""
    try:
        return Once(at)  # type: ignore[arg-type]  # checked by Once itself
    except ValueError as exc:
        raise ValueError(f"task {name!r}: at: {exc}") from None


def finished_for_good(task: TaskDef, next_at: datetime) -> bool:
    """Whether a finish planned for ``next_at`` ends a one-off job (its row is deleted):
    succeeded, or its retries are exhausted, so no next time is left."""
    return isinstance(task.schedule, Once) and next_at >= NEVER


class Handlers(Mapping[str, TaskDef]):
    """The handlers a node has, by name: each declared task (its handler is its own name) and
    each ``@scheduler.handler``. Its keys are what the node's pick filters by."""

    def __init__(self, tasks: Mapping[str, TaskDef]) -> None:
        self.tasks = tasks
        """The declared tasks, by name (they have rows to register)."""
        self._handlers: dict[str, TaskDef] = {}
        self._built: dict[tuple[str, str, str | None, str | None], TaskDef] = {}
        self._names: tuple[tuple[int, ...], frozenset[str]] | None = None

    def add(self, name: str, fn: TaskFunction, on_failure: FailureSettings | None) -> None:
        """Register ``fn`` as the handler ``name`` (no row)."""
        try:
            validate_name(name)
        except ValueError as exc:
            raise ValueError(f"handler {str(name)[:60]!r}: {exc}") from None
        if not callable(fn):
            raise ValueError(f"handler {name!r}: the function is not callable: {fn!r}")
        if on_failure is not None and not isinstance(on_failure, FailureSettings):
            raise ValueError(f"handler {name!r}: on_failure must be a FailureSettings, got "
                             f"{on_failure!r}")
        if name in self._handlers or name in self.tasks:
            raise ValueError(f"handler {name!r} is already registered on this scheduler")
        # The template's schedule is never used: a row's own schedule text replaces it.
        self._handlers[name] = TaskDef.build(name, fn, Once(NEVER), on_failure or NoRetry())

    def names(self) -> frozenset[str]:
        """The handler names (what the pick filters by), the same object until one is added:
        the poller asks on every pick, and the store keys its built statements on it."""
        maps = getattr(self.tasks, "maps", None) or [self.tasks]
        # Tasks and handlers are only ever added (a task declared again keeps its name), so
        # the sizes change exactly when the names do.
        stamp = (len(self._handlers), *(len(m) for m in maps))
        if self._names is None or self._names[0] != stamp:
            self._names = (stamp, frozenset(self))
        return self._names[1]

    def __getitem__(self, name: str) -> TaskDef:
        found = self._handlers.get(name)
        return found if found is not None else self.tasks[name]

    def __iter__(self) -> Iterator[str]:
        yield from self._handlers
        yield from (n for n in self.tasks if n not in self._handlers)

    def __len__(self) -> int:
        return len(set(self._handlers) | set(self.tasks))

    def _declared(self, name: str) -> TaskDef | None:
        # Map by map: a ChainMap's own get() walks its maps twice, once per picked row.
        for tasks in getattr(self.tasks, "maps", (self.tasks,)):
            found = tasks.get(name)
            if found is not None:
                return found
        return None

    def for_row(self, row: Mapping[str, Any]) -> TaskDef:
        """What runs a picked row: the declared task of that name when the row is its own,
        else the row's handler with the row's stored schedule and options. Raises ``KeyError``
        for a handler this node does not have and :class:`UnreadableRow` for schedule or
        options text that cannot be read."""
        name, handler, text = row["queue_name"], row["handler"], row["schedule"]
        declared = self._declared(name)
        if declared is not None and handler == name and name not in self._handlers:
            return declared
        stored = row.get("options")
        key = (name, handler, text, stored)
        built = self._built.get(key)
        if built is None:
            template = self[handler]
            try:
                schedule = parse(text) if text is not None else template.schedule
            except ValueError as exc:
                raise UnreadableRow("schedule", str(exc)) from None
            try:
                options = TaskOptions.read(stored)
            except ValueError as exc:
                raise UnreadableRow("options", str(exc)) from None
            built = TaskDef(name, template.fn, schedule, template.on_failure,
                            template.takes_context, template.is_coroutine, options)
            if len(self._built) > 10_000:  # rows come and go (one-off jobs): stay bounded
                self._built.clear()
            self._built[key] = built
        return built

    def stand_in(self, row: Mapping[str, Any]) -> TaskDef:
        """A definition to fail a row with that :meth:`for_row` cannot read: the row's name,
        its handler's function (or the declared task's) and no schedule of its own."""
        name, handler = row["queue_name"], row["handler"]
        declared = self._declared(name)
        template = declared if declared is not None and handler == name else self[handler]
        return TaskDef(name, template.fn, Once(NEVER), template.on_failure,
                       template.takes_context, template.is_coroutine)
