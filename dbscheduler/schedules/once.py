""":class:`Once`: a one-off job, due once at a given instant and never again."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final

from dbscheduler.context import TaskContext
from dbscheduler.schedules.base import _MAX_UTC, Schedule, _require_aware

NEVER: Final = _MAX_UTC
"""What :meth:`Once.next_run` answers: there is no next regular occurrence. The engine deletes
a one-off job's row when this is the time its finish would write."""


@dataclass(frozen=True)
class Once(Schedule):
    """Run once at ``at`` (an aware datetime); a failure retries by the failure settings, and
    the row is deleted when the job succeeds or its retries are exhausted.

    An ``at`` in the past runs at once.

    >>> from datetime import datetime, timezone
    >>> Once(datetime(2026, 5, 1, 8, 30, tzinfo=timezone.utc)).describe()
    'once 2026-05-01T08:30:00+00:00'
    """

    at: datetime
    """When the job is due (normalised to aware UTC)."""

    def __init__(self, at: datetime) -> None:
        object.__setattr__(self, "at", _require_aware(at, "Once.at"))

    def describe(self) -> str:
        """``"once <ISO 8601 UTC>"``, to the microsecond."""
        return f"once {self.at.astimezone(timezone.utc).isoformat()}"

    def first_run(self, now: datetime) -> datetime:
        """``at`` itself, even when it is already past (the job then runs at once)."""
        return self.at

    def next_run(
        self,
        *,
        scheduled_at: datetime,
        started_at: datetime,
        finished_at: datetime,
        ctx: TaskContext | None,
    ) -> datetime:
        """:data:`NEVER`: a one-off job has no next regular occurrence."""
        return NEVER
