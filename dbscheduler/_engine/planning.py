"""The one decision taken after every execution: when the task runs next, and with which
``attempt`` (the retry rule is :func:`plan_next`'s docstring).

:func:`plan_next` is pure: it reads the schedule, the failure settings and the outcome, and
returns a :class:`Plan` the engine writes to the row (``next_process_at``, ``attempt``).

>>> from datetime import datetime, timedelta, timezone
>>> from dbscheduler.schedules import FixedRate
>>> from dbscheduler.failures import LinearBackoff
>>> t = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
>>> done = t + timedelta(seconds=2)
>>> plan = plan_next(FixedRate(3600), LinearBackoff(60), status="error", attempt=1,
...                  scheduled_at=t, started_at=t, finished_at=done, ctx=None)
>>> plan.next_at.time(), plan.attempt  # the retry (12:01:02) comes before 13:00
(datetime.time(12, 1, 2), 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, get_args

from dbscheduler.context import Status, TaskContext
from dbscheduler.failures import FailureSettings
from dbscheduler.schedules.base import Schedule, _add_clamped, _require_aware

from ..logfields import about, engine_log
from ..schedules.once import NEVER
from .execution import TaskDef, describe_error, truncate
from .options import jittered

__all__ = ["SCHEDULE_FAILURE_RETRY", "Plan", "plan_next", "plan_task"]

logger = engine_log("dbscheduler.planning")

SCHEDULE_FAILURE_RETRY = timedelta(minutes=1)
"""When a schedule cannot say when to run next (a Dynamic function raised), try again then."""

_STATUSES: Final = frozenset(get_args(Status))


@dataclass(frozen=True)
class Plan:
    """What to write to the row after an execution.

    >>> from datetime import datetime, timezone
    >>> Plan(datetime(2026, 1, 1, tzinfo=timezone.utc), 0).attempt
    0
    """

    next_at: datetime
    """Aware UTC: the value to write to ``next_process_at``."""
    attempt: int
    """The value to write to the ``attempt`` column (0 = a fresh occurrence)."""


def plan_next(
    schedule: Schedule,
    on_failure: FailureSettings,
    *,
    status: Status,
    attempt: int,
    scheduled_at: datetime,
    started_at: datetime,
    finished_at: datetime,
    ctx: TaskContext | None,
    next_at_override: datetime | None = None,
) -> Plan:
    """Decide the next due time and ``attempt`` after an execution (or a lost one).

    - ``next_at_override`` (a task's ``Result(next_at=...)``) wins over everything: success
      and cancelled write ``attempt = 0``, error and lost keep ``attempt``. The schedule is
      not consulted at all then.
    - ``"success"`` / ``"cancelled"`` / ``"skipped"``: the schedule's next regular
      occurrence, ``attempt = 0``.
    - ``"error"`` / ``"lost"`` / ``"timeout"``: ``delay = on_failure.retry_delay(attempt)``.
      No retry (or budget exhausted): the regular occurrence with ``attempt = 0`` — the next
      occurrence gets a fresh budget. Otherwise the retry at ``finished_at + delay`` is used
      only if it is strictly earlier than the regular occurrence, and keeps ``attempt`` so the
      next pick makes it ``attempt + 1``; if not earlier, the regular occurrence wins
      (``attempt = 0``).

    ``attempt`` is the row's ``attempt`` after the execution (1 after a failed first try).
    A retry time past the end of ``datetime`` saturates instead of raising. Exceptions from
    a :class:`~dbscheduler.Dynamic` function propagate.

    >>> from datetime import datetime, timezone
    >>> from dbscheduler.schedules import Cron
    >>> from dbscheduler.failures import NoRetry
    >>> t = datetime(2026, 1, 1, 3, 0, 1, tzinfo=timezone.utc)
    >>> p = plan_next(Cron("0 3 * * *"), NoRetry(), status="error", attempt=1,
    ...               scheduled_at=t, started_at=t, finished_at=t, ctx=None)
    >>> p.next_at.isoformat(), p.attempt
    ('2026-01-02T03:00:00+00:00', 0)
    """
    if status not in _STATUSES:
        raise ValueError(
            f"plan_next: unknown status {status!r}, expected one of {sorted(_STATUSES)}"
        )
    failed = status in ("error", "lost", "timeout")

    if next_at_override is not None:
        override = _require_aware(next_at_override, "Result.next_at")
        return Plan(override, attempt if failed else 0)

    finished = _require_aware(finished_at, "plan_next: finished_at")
    regular = _require_aware(
        schedule.next_run(
            scheduled_at=scheduled_at, started_at=started_at, finished_at=finished_at, ctx=ctx
        ),
        f"{type(schedule).__name__}.next_run result",
    )
    if not failed:
        return Plan(regular, 0)

    delay = on_failure.retry_delay(attempt)
    if delay is None:
        logger.debug(
            "%s: no retry after attempt %d (%r), next regular occurrence %s",
            status, attempt, on_failure, regular,
        )
        return Plan(regular, 0)
    retry_at = _add_clamped(finished, delay)
    if retry_at < regular:
        return Plan(retry_at, attempt)
    logger.debug(
        "%s: retry at %s is not before the regular occurrence %s; taking the latter",
        status, retry_at, regular,
    )
    return Plan(regular, 0)


def plan_task(
    task: TaskDef,
    ctx: TaskContext,
    *,
    status: Status,
    attempt: int,
    scheduled_at: datetime,
    started_at: datetime,
    finished_at: datetime,
    next_at_override: datetime | None = None,
) -> tuple[datetime, int, str | None]:
    """:func:`plan_next` for ``task``, as the engine writes it: ``(next_at, attempt, None)``
    from its schedule and failure settings, jittered as its options say; when the schedule
    cannot say (a Dynamic function raised), a retry after :data:`SCHEDULE_FAILURE_RETRY` with
    the error text as the third item."""
    try:
        plan = plan_next(
            task.schedule, task.on_failure, status=status, attempt=attempt,
            scheduled_at=scheduled_at, started_at=started_at, finished_at=finished_at,
            ctx=ctx, next_at_override=next_at_override,
        )
    except Exception as exc:
        error = truncate(f"schedule failed: {describe_error(exc)}")
        logger.error("%s; next try in %s", error, SCHEDULE_FAILURE_RETRY, extra=about(task.name))
        return finished_at + SCHEDULE_FAILURE_RETRY, ctx.attempt, error
    if next_at_override is None:  # the task's own choice is taken as it is
        return jittered(plan.next_at, task.options, NEVER), plan.attempt, None
    return plan.next_at, plan.attempt, None
