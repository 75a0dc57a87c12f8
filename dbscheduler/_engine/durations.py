"""Durations given by users (a ``timedelta`` or a number of seconds), checked."""

from __future__ import annotations

import math
from datetime import timedelta

__all__ = ["MAX_ALERT_AFTER", "alert_after", "duration"]

MAX_ALERT_AFTER = timedelta(days=3650)
"""The longest dead-man limit: every database computes ``now - alert_after`` in its own
date arithmetic (SQL Server adds whole seconds as an INT)."""


def duration(value: timedelta | float | int, field: str, *, allow_zero: bool = False) -> timedelta:
    """``value`` (a timedelta or seconds) as a timedelta; ``ValueError`` naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, (timedelta, int, float)):
        raise ValueError(f"{field} must be a timedelta or a number of seconds, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{field} must be a finite number of seconds, got {value!r}")
    if not isinstance(value, timedelta) and abs(value) > 86_400 * 365:
        raise ValueError(f"{field} must be at most a year, got {value!r} s")
    delta = value if isinstance(value, timedelta) else timedelta(seconds=value)
    if delta < timedelta(0) or (delta == timedelta(0) and not allow_zero):
        raise ValueError(f"{field} must be > 0, got {value!r}")
    return delta


def alert_after(value: timedelta | float | int, task: str) -> timedelta:
    """A task's ``alert_after``, checked; ``ValueError`` naming the task and the field."""
    limit = duration(value, f"task {task!r}: alert_after")
    if limit > MAX_ALERT_AFTER:
        raise ValueError(f"task {task!r}: alert_after must be at most {MAX_ALERT_AFTER.days} "
                         f"days, got {limit}")
    return limit
