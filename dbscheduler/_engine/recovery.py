"""A picked row whose previous execution was lost: its node vanished while running it.

The pick takes such a row like any due one (its lease had expired). Before it runs again, the
lost execution is reported to the listeners, gets its ``lost`` run row, and its failure
settings decide: run it now (the row is kept, marked lost, in the pick's own lease), or put it
back to its next time (a retry or occurrence still in the future, written as a finish).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from .._store import FinishWrite, RunRecord, Store
from ..context import TaskContext
from ..listeners import Listeners
from ..logfields import about, engine_log
from .execution import TaskDef
from .planning import plan_task
from .runtime import finished_for_good
from .taskinfo import task_info

__all__ = ["Recovery"]

# The finisher's logger, as before this was a room of its own: filters on it keep working.
log = engine_log("dbscheduler.finisher")


class Recovery:
    """Recovers the lost executions of rows this node picks.

    >>> recovery = Recovery(store, "node-1", listeners, wakeup.hint)  # doctest: +SKIP
    >>> recovery.recover(task, row)  # run it now: (scheduled_at, attempt)  # doctest: +SKIP
    """

    def __init__(self, store: Store, node_id: str, listeners: Listeners,
                 after_write: Callable[[datetime | None], None]) -> None:
        self._store = store
        self._node_id = node_id
        self._listeners = listeners
        self._after_write = after_write

    def recover(self, task: TaskDef, row: Mapping[str, Any]) -> tuple[datetime, int] | None:
        """A row just picked was held by a node that vanished: report the lost execution and
        apply the failure settings to it.

        Returns ``(scheduled_at, attempt)`` to run it now, or ``None`` when it was put back to
        its next time (a retry or occurrence still in the future).
        """
        now: datetime = row["last_started_at"]
        lost_attempt = int(row["attempt"]) - 1
        # The lost execution's due time was overwritten by its lease; it started within
        # moments of it, so its start stands in for it.
        lost_started = row["prev_last_started_at"] or now
        lost_node = row["prev_locked_by"]
        error = f"node {lost_node} vanished while running it (lease expired)"
        log.warning("the execution on node %s was lost; recovering", lost_node,
                    extra=about(task.name, int(row["total_attempt"]) - 1))
        info = task_info({
            # The lost execution's facts for the listeners: the whole row, read again.
            **self._store.whole_row(row),
            "next_process_at": row["prev_next_process_at"], "attempt": lost_attempt,
            "total_attempt": int(row["total_attempt"]) - 1, "locked_by": lost_node,
            "last_started_at": lost_started, "stop_requested": False,
        })
        self._listeners.on_lost_execution(info)
        lost_ctx = TaskContext(
            name=task.name, node_id=lost_node, attempt=lost_attempt,
            reenqueue_attempt=info.reenqueue_attempt, total_attempt=info.total_attempt,
            scheduled_at=lost_started, started_at=lost_started, created_at=info.created_at,
            state=info.state,
        )
        next_at, attempt, failure = plan_task(
            task, lost_ctx, status="lost", attempt=max(lost_attempt, 1),
            scheduled_at=lost_started, started_at=lost_started, finished_at=now,
        )
        id_, token = int(row["id"]), int(row["total_attempt"])
        # The lost execution's run row, written by this node with the record of its loss.
        run = RunRecord(task.name, token - 1, max(lost_attempt, 1), str(lost_node),
                        lost_started, lost_started)
        if failure is None and next_at <= now:
            self._store.record_lost(self._node_id, id_, token, attempt + 1, error, run)
            return next_at, attempt + 1
        finished = self._store.estimated_now()
        self._store.finish(self._node_id, [FinishWrite(
            id_, token, status="lost", next_at=next_at, attempt=attempt,
            finished_at=finished, error=error if failure is None else failure,
            delete=finished_for_good(task, next_at), run=run)], planned_at=finished)
        self._after_write(next_at)  # a due time this node just wrote
        return None
