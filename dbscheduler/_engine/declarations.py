"""Checking what a :class:`~dbscheduler.Scheduler` is given before anything is written: a
task's declaration (bad input raises ``ValueError`` naming the task and the field), durations,
node ids; and the registration row of a declared task. The Scheduler's ``task``, ``add`` and
``handler`` methods call these."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from .._store import Registration, refuse_reserved, validate_name
from ..failures import FailureSettings, NoRetry
from ..logfields import engine_log
from ..schedules import FixedDelay, FixedRate, Schedule
from ..schedules.once import NEVER
from .durations import alert_after as checked_alert_after
from .durations import duration
from .execution import TaskDef, TaskFunction
from .isolation import check_importable
from .options import jittered, options_from

__all__ = ["declare_task", "default_node_id", "duration", "registration"]

log = engine_log("dbscheduler.scheduler")


def default_node_id() -> str:
    """Host name, process id and a short random suffix: unique even across restarts."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"[:255]


def _warn_if_retry_never_fires(
    name: str, schedule: Schedule, on_failure: FailureSettings
) -> None:
    """Warn when a failed run can never be retried: the next time is the earlier of the retry
    and the regular occurrence, and a retry no earlier than the period always loses."""
    if isinstance(schedule, FixedRate):
        period = schedule.period
    elif isinstance(schedule, FixedDelay):
        period = schedule.delay
    else:
        return
    first = on_failure.retry_delay(1)
    if first is None or first < period:
        return
    log.warning(
        "task %r: %r never retries: its first retry (after %s s) is not earlier than the "
        "next regular run of %s, which is taken instead; use a retry delay shorter than %s s",
        name, on_failure, first.total_seconds(), schedule.describe(), period.total_seconds(),
    )


def declare_task(
    name: str, fn: TaskFunction, schedule: Schedule, on_failure: FailureSettings | None,
    options: Mapping[str, Any] | None = None,
    alert_after: timedelta | float | None = None,
) -> TaskDef:
    """The :class:`TaskDef` of a declared task, every argument checked (the execution
    options by :func:`~dbscheduler._engine.options.options_from`)."""
    try:
        validate_name(name)
    except ValueError as exc:
        raise ValueError(f"task {str(name)[:60]!r}: {exc}") from None
    refuse_reserved(name, "task")
    limit = None if alert_after is None else checked_alert_after(alert_after, name)
    if not isinstance(schedule, Schedule):
        raise ValueError(
            f"task {name!r}: schedule must be a Cron, FixedRate, FixedDelay or Dynamic, "
            f"got {schedule!r}"
        )
    on_failure = NoRetry() if on_failure is None else on_failure
    if not isinstance(on_failure, FailureSettings):
        raise ValueError(
            f"task {name!r}: on_failure must be NoRetry, LinearBackoff, ArithmeticBackoff "
            f"or GeometricBackoff, got {on_failure!r}"
        )
    if not callable(fn):
        raise ValueError(f"task {name!r}: the task function is not callable: {fn!r}")
    if len(schedule.describe()) > 500:
        raise ValueError(f"task {name!r}: schedule description longer than 500 characters")
    controls = options_from(options or {}, f"task {name!r}")
    if controls.isolation == "process":
        check_importable(fn, f"task {name!r}")
    definition = TaskDef.build(name, fn, schedule, on_failure, controls, limit)
    _warn_if_retry_never_fires(name, schedule, on_failure)
    return definition


def registration(d: TaskDef) -> Registration:
    """What the store writes for the declared task ``d`` when it is absent."""
    options = d.options

    def first_run(now: datetime) -> datetime:
        return jittered(d.schedule.first_run(now), options, NEVER)

    return Registration(d.name, d.schedule.describe(), first_run, options.to_json(),
                        options.priority, options.group, options.requires,
                        None if d.alert_after is None else d.alert_after.total_seconds())
