"""When a task runs: :class:`Cron`, :class:`FixedRate`, :class:`FixedDelay`, :class:`Dynamic`
and :class:`Once`.

Every schedule is a :class:`Schedule` (``base``); the kinds live in ``cron``, ``intervals``
and ``dynamic`` and are imported from here; :func:`parse` (``text``) reads a stored
description back.

>>> from datetime import datetime, timezone
>>> now = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
>>> Cron("0 3 * * *", tz="Europe/Berlin").first_run(now).isoformat()
'2026-01-02T02:00:00+00:00'
>>> FixedRate(10).describe()
'fixed-rate 10s'
"""

from __future__ import annotations

from dbscheduler.schedules.base import Schedule
from dbscheduler.schedules.cron import Cron
from dbscheduler.schedules.dynamic import Dynamic
from dbscheduler.schedules.intervals import FixedDelay, FixedRate
from dbscheduler.schedules.once import Once
from dbscheduler.schedules.text import parse

__all__ = ["Cron", "Dynamic", "FixedDelay", "FixedRate", "Once", "Schedule", "parse"]
