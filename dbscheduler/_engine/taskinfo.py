"""A tasks row as a :class:`~dbscheduler.TaskInfo`: decoding its state and data, and whether
it is overdue on the database clock."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from .._store import decode_state, decode_state_safe
from ..context import TaskInfo
from .options import TaskOptions

__all__ = ["task_info"]


def task_info(
    row: Mapping[str, Any], *, now: datetime | None = None,
    overdue_after: timedelta = timedelta(seconds=60),
) -> TaskInfo:
    """A table row (its columns by name) as a :class:`TaskInfo`; the one place that maps a
    row to one. Never raises on a stored state that is not JSON: ``state_error`` says why and
    ``raw_state`` keeps the text. ``overdue`` is computed on the database clock ``now`` (the
    same rule as the lateness check's SQL); without it, False."""
    payload = row["payload"]
    limit = row.get("alert_after")
    state: Any = None
    state_error: str | None = None
    try:
        state = decode_state(payload)
    except Exception as exc:  # not JSON, or nested too deep (RecursionError)
        state_error = f"{type(exc).__name__}: {exc}"[:500]
    return TaskInfo(
        id=int(row["id"]),
        name=row["queue_name"],
        state=state,
        state_error=state_error,
        raw_state=payload if state_error is not None else None,
        created_at=row["created_at"],
        next_process_at=row["next_process_at"],
        attempt=int(row["attempt"]),
        reenqueue_attempt=int(row["reenqueue_attempt"]),
        total_attempt=int(row["total_attempt"]),
        paused=bool(row["paused"]),
        locked_by=row["locked_by"],
        heartbeat_at=row["heartbeat_at"],
        last_started_at=row["last_started_at"],
        last_finished_at=row["last_finished_at"],
        last_status=row["last_status"],
        last_error=row["last_error"],
        schedule=row["schedule"],
        stop_requested=bool(row["stop_requested"]),
        handler=row.get("handler"),
        data=decode_state_safe(row.get("data"))[0],
        options=TaskOptions.from_json(row.get("options")).to_dict(),
        last_success_at=row.get("last_success_at"),
        alert_after=None if limit is None else timedelta(seconds=float(limit)),
        alerted_at=row.get("alerted_at"),
        overdue=False if now is None else _overdue(row, now, overdue_after),
    )


def _overdue(row: Mapping[str, Any], now: datetime, overdue_after: timedelta) -> bool:
    """Python's side of :func:`dbscheduler._store.alerts.overdue_where` and ``dead_where``."""
    if row["paused"]:
        return False
    if row["locked_by"] is None and row["next_process_at"] < now - overdue_after:
        return True
    limit = row.get("alert_after")
    since = row.get("last_success_at") or row["created_at"]
    return limit is not None and since < now - timedelta(seconds=float(limit))
