"""The poller: sleep until the earliest due time, pick a batch, hand it to the executor."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ._clock import Clock
from ._execution import Execution, TaskDef
from ._executor import Executor
from ._faults import FaultLog
from ._heartbeat import Heartbeat, safety_margin
from ._wakeup import Wakeup
from .context import TaskContext, TaskInfo
from .listeners import Listeners
from .planning import plan_next
from .store import FinishWrite, Store, decode_state

log = logging.getLogger("dbscheduler.poller")

CONTENDED_RETRY = 0.005
"""A row was due but another node took it first: look again this soon."""


class Poller:
    """One thread per node. Idle, it costs one small query per ``poll_interval``."""

    def __init__(
        self,
        *,
        store: Store,
        node_id: str,
        lease: timedelta,
        poll_interval: timedelta,
        tasks: Mapping[str, TaskDef],
        executor: Executor,
        heartbeat: Heartbeat,
        listeners: Listeners,
        wakeup: Wakeup,
        clock: Clock,
        unwritten: Callable[[], list[Execution]],
    ) -> None:
        self._finisher_unwritten = unwritten
        self._store = store
        self._node_id = node_id
        self._lease = lease
        self._poll_interval = poll_interval.total_seconds()
        self._tasks = tasks
        self._executor = executor
        self._heartbeat = heartbeat
        self._listeners = listeners
        self._wakeup = wakeup
        self._clock = clock
        self._stop = threading.Event()
        self._faults = FaultLog(log, "polling")
        self._clock_faults = FaultLog(log, "measuring the database clock offset")
        self._last_poll = float("-inf")
        self._next_due: datetime | None = None
        self._next_due_known = False
        self._margin = safety_margin(lease)
        self._thread = threading.Thread(target=self._run, name="dbscheduler-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wakeup.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        backoff = self._poll_interval
        while not self._stop.is_set():
            try:
                timeout = self._step()
                self._faults.ok()
                backoff = self._poll_interval
            except Exception as exc:
                self._faults.failed(exc)
                self._listeners.emit("on_poll_error", exc)
                timeout = backoff
                backoff = min(backoff * 2, max(self._poll_interval, 10.0))
            if timeout > 0 and not self._stop.is_set():
                self._wakeup.wait(timeout)

    def _poll(self) -> datetime:
        """The full poll: next due time, table shape, clock offset. Returns db now."""
        before = time.monotonic()
        state = self._store.poll(self._tasks.keys())
        self._last_poll = time.monotonic()
        self._next_due, self._next_due_known = state.next_due, True
        try:
            self._clock.observe(state.db_now, before, self._last_poll)
        except Exception as exc:  # only informs sleeping and display: never worth a pick
            self._clock_faults.failed(exc)
        else:
            self._clock_faults.ok()
        return state.db_now

    def _step(self) -> float:
        """Find the next due time (from a poll, or from what this node knows), pick if due;
        return how long to sleep.

        A full poll runs after anything only a poll can tell (a trigger, a NOTIFY, a
        contended pick) and at least every ``poll_interval``; in between, the next due time
        comes from the pick itself (PostgreSQL) and from the finishes this node wrote.
        """
        stale, hint = self._wakeup.take()
        if hint is not None and self._next_due_known:
            self._next_due = hint if self._next_due is None else min(self._next_due, hint)
        since_poll = time.monotonic() - self._last_poll
        if stale or not self._next_due_known or since_poll >= self._poll_interval:
            now = self._poll()
            since_poll = 0.0
        else:
            now = self._clock.db_now()
        until_poll = self._poll_interval - since_poll
        free = self._executor.free
        if free <= 0:
            return until_poll  # a worker that becomes free wakes us
        if self._next_due is None:
            return until_poll
        wait = (self._next_due - now).total_seconds()
        if wait > 0:
            return min(wait, until_poll)
        if self._stop.is_set():
            return 0
        known = self._tasks.keys()
        sent = time.monotonic()
        picked = self._store.pick(self._node_id, free, self._lease, known, self._in_flight(sent))
        rows = picked.rows
        self._next_due, self._next_due_known = picked.next_due, picked.next_due_known
        if rows and time.monotonic() - sent >= self._lease.total_seconds() - self._margin:
            # The answer came so late that the leases it granted may already have expired
            # and been taken by another node: running them could overlap. Give them back.
            log.warning("a pick took longer than the lease (%.1f s); releasing its %d row(s)",
                        time.monotonic() - sent, len(rows))
            self._store.release(self._node_id, {int(r["id"]): int(r["total_attempt"])
                                                for r in rows})
            return 0
        for row in rows:
            self._dispatch(row, sent)
        # Picked none although a row was due: another node won it; poll again very soon
        # rather than spinning. Otherwise go round at once: the next due time is known, or
        # the next step polls for it.
        if not rows:
            self._next_due_known = False
            return CONTENDED_RETRY
        return 0

    def _in_flight(self, now: float) -> set[int]:
        """Rows whose execution is still here (running, or its finish not yet written) and
        whose lease may have run out: this node must not pick them again — after an outage
        its own finish is on the way. Other nodes may (that is a real takeover). Usually
        empty, so the pick statement usually carries no extra condition."""
        held = [*self._executor.running(), *self._finisher_unwritten()]
        return {ex.id for ex in held if ex.lease_lost or now >= ex.lease_until - ex.margin}

    def _dispatch(self, row: Mapping[str, Any], sent: float) -> None:
        task = self._tasks[row["queue_name"]]
        now: datetime = row["last_started_at"]
        scheduled_at: datetime = row["prev_next_process_at"]
        attempt = int(row["attempt"])
        if row["prev_locked_by"] is not None:
            decision = self._handle_lost(task, row)
            if decision is None:
                return
            scheduled_at, attempt = decision
        ctx = TaskContext(
            name=task.name,
            node_id=self._node_id,
            attempt=attempt,
            reenqueue_attempt=int(row["reenqueue_attempt"]),
            total_attempt=int(row["total_attempt"]),
            scheduled_at=min(scheduled_at, now),
            started_at=now,
            created_at=row["created_at"],
            state=decode_state(row["payload"]),
        )
        execution = Execution(task, ctx, int(row["id"]), int(row["total_attempt"]))
        # The database set the lease after the pick was sent: it surely ends after this.
        execution.lease_until = sent + self._lease.total_seconds()
        execution.margin = self._margin
        self._heartbeat.track(execution)
        self._executor.submit(execution)

    def _handle_lost(
        self, task: TaskDef, row: Mapping[str, Any]
    ) -> tuple[datetime, int] | None:
        """The row was held by a node that vanished: report it, apply the failure settings.

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
        log.warning("task %r: execution on node %s was lost; %s", task.name, lost_node,
                    "recovering")
        info = TaskInfo(
            id=int(row["id"]), name=task.name, state=decode_state(row["payload"]),
            created_at=row["created_at"], next_process_at=row["prev_next_process_at"],
            attempt=lost_attempt, reenqueue_attempt=int(row["reenqueue_attempt"]),
            total_attempt=int(row["total_attempt"]) - 1, paused=bool(row["paused"]),
            locked_by=lost_node, heartbeat_at=row["heartbeat_at"],
            last_started_at=lost_started, last_finished_at=row["last_finished_at"],
            last_status=row["last_status"], last_error=row["last_error"],
            schedule=row["schedule"],
        )
        self._listeners.emit("on_lost_execution", info)
        lost_ctx = TaskContext(
            name=task.name, node_id=lost_node, attempt=lost_attempt,
            reenqueue_attempt=int(row["reenqueue_attempt"]),
            total_attempt=int(row["total_attempt"]) - 1, scheduled_at=lost_started,
            started_at=lost_started, created_at=row["created_at"],
            state=decode_state(row["payload"]),
        )
        try:
            plan = plan_next(task.schedule, task.on_failure, status="lost",
                             attempt=max(lost_attempt, 1), scheduled_at=lost_started,
                             started_at=lost_started, finished_at=now, ctx=lost_ctx)
        except Exception as exc:
            log.error("task %r: schedule failed after a lost execution: %r; running it now",
                      task.name, exc)
            return now, int(row["attempt"])
        token = int(row["total_attempt"])
        if plan.next_at <= now:
            run_attempt = plan.attempt + 1
            self._store.record_lost(self._node_id, int(row["id"]), token, run_attempt, error)
            return plan.next_at, run_attempt
        self._store.finish(self._node_id, lambda finished: [FinishWrite(
            int(row["id"]), token, status="lost", next_at=plan.next_at, attempt=plan.attempt,
            finished_at=finished, error=error)])
        self._wakeup.hint(plan.next_at)  # a due time this node just wrote
        return None
