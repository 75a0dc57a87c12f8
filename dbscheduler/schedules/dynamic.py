""":class:`Dynamic`: a function of the finished execution decides the next due time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from dbscheduler.context import TaskContext
from dbscheduler.schedules.base import Schedule, _require_aware


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
