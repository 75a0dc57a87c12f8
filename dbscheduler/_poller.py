"""The poller: sleep until the earliest due time, pick a batch, hand it to the executor."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ._clock import Clock
from ._execution import Ended, Execution, TaskDef, describe_error, truncate
from ._executor import Executor
from ._faults import FaultLog
from ._finisher import Finisher
from ._heartbeat import Heartbeat, safety_margin
from ._store import Store, decode_state, decode_state_safe
from ._trace_links import for_token
from ._wakeup import Wakeup
from .context import UNSET, TaskContext
from .errors import SchemaMissing
from .fencing import Fence
from .listeners import Listeners
from .logfields import about, engine_log, engine_thread
from .options import misfired
from .runtime import Handlers
from .table import RESERVED_PREFIX

log = engine_log("dbscheduler.poller")

CONTENDED_RETRY = 0.005
"""A row was due but another node took it first: look again this soon."""
GIVEN_BACK_PAUSE = 0.1
"""A pick gave its rows back (their group was over its limit): look again after a random
pause of up to this many seconds."""
FINISH_BACKLOG = 4
"""The poller picks no more while this many times ``max_workers`` ended executions wait for
their finish to be written: a node whose picks outrun its finishes (a backlog of one-off jobs,
each finish its own delete) would hold ever more leases its heartbeat must keep, until they
expire and the jobs run again elsewhere."""
GATHER_WAIT = 0.005
"""Rows are due but fewer than half of the workers are free: wait at most this long for more
to free before picking."""


class Poller:
    """One thread per node. Idle, it costs one small query per ``poll_interval``."""

    def __init__(
        self,
        *,
        store: Store,
        node_id: str,
        lease: timedelta,
        poll_interval: timedelta,
        tasks: Handlers,
        executor: Executor,
        heartbeat: Heartbeat,
        listeners: Listeners,
        wakeup: Wakeup,
        clock: Clock,
        finisher: Finisher,
        reregister: Callable[[], None] = lambda: None,
    ) -> None:
        self._finisher = finisher
        self._reregister = reregister
        self._table_missing = False
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
        self.last_poll_at: float | None = None  # monotonic time of the last poll; for health()
        self._next_due: datetime | None = None
        self._next_due_known = False
        self._margin = safety_margin(lease)
        self._gather_until: float | None = None
        self._thread = engine_thread(self._run, "dbscheduler-poller")

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
                if isinstance(exc, SchemaMissing):
                    self._table_missing = True
                self._faults.failed(exc)
                self._listeners.on_poll_error(exc)
                timeout = backoff
                backoff = min(backoff * 2, max(self._poll_interval, 10.0))
            if timeout > 0 and not self._stop.is_set():
                self._wakeup.wait(timeout)

    def _poll(self) -> datetime:
        """The full poll: next due time, table shape, clock offset. Returns db now."""
        before = time.monotonic()
        state = self._store.poll(self._tasks.names())
        self._last_poll = time.monotonic()
        self.last_poll_at = self._last_poll
        if self._table_missing or (state.shape is not None and state.shape[0] == 0
                                   and self._tasks.tasks):
            # The table is back after it was dropped, or it is empty while this node declares
            # tasks (recreated, or every row deleted): insert this node's rows again, or its
            # tasks would never run until a restart.
            log.warning("the rows of this node's tasks are missing (the table was dropped, "
                        "recreated or emptied); registering its %d task(s) again",
                        sum(1 for n in self._tasks.tasks if not n.startswith(RESERVED_PREFIX)))
            self._reregister()
            self._table_missing = False
            state = self._store.poll(self._tasks.names())
        self._next_due, self._next_due_known = state.next_due, True
        try:
            self._clock.observe(state.db_now,
                                state.sent if state.sent is not None else before,
                                state.received if state.received is not None
                                else self._last_poll)
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
        free = self._room()
        if free <= 0:
            return until_poll  # a worker that becomes free, or a finish written, wakes us
        if self._next_due is None:
            return until_poll
        wait = (self._next_due - now).total_seconds()
        if wait > 0:
            return min(wait, until_poll)
        if self._stop.is_set():
            return 0
        gather = self._gather(free)
        if gather > 0:
            return gather
        known = self._tasks.names()
        sent = time.monotonic()
        picked = self._store.pick(self._node_id, free, self._lease, known, self._in_flight(sent))
        rows = picked.rows
        self._listeners.on_pick(free, len(rows))
        self._next_due, self._next_due_known = picked.next_due, picked.next_due_known
        if rows and time.monotonic() - sent >= self._lease.total_seconds() - self._margin:
            # The answer came so late that the leases it granted may already have expired
            # and been taken by another node: running them could overlap. Give them back.
            log.warning("a pick took longer than the lease (%.1f s); releasing its %d row(s)",
                        time.monotonic() - sent, len(rows))
            self._store.release(self._node_id, {int(r["id"]): int(r["total_attempt"])
                                                for r in rows})
            return 0
        ready: list[Execution] = []
        for row in rows:
            # One row that cannot be handed over must not strand the rest of the pick: they
            # are leased already, and nobody else may run them until the leases expire.
            try:
                execution = self._dispatch(row, sent)
            except Exception as exc:
                log.error("could not start the picked execution: %s; giving its lease back",
                          describe_error(exc), exc_info=exc,
                          extra=about(row["queue_name"], int(row["total_attempt"])))
                self._give_back(row)
            else:
                if execution is not None:
                    ready.append(execution)
        # The whole pick at once: one lock for the executor's books, not one per row.
        self._executor.submit_many(ready)
        # Picked none although a row was due: another node won it; poll again very soon
        # rather than spinning. Otherwise go round at once: the next due time is known, or
        # the next step polls for it.
        if not rows:
            self._next_due_known = False
            if picked.given_back:
                # Nodes that gave back together pick again at different moments.
                return random.uniform(GIVEN_BACK_PAUSE / 2, GIVEN_BACK_PAUSE)
            return CONTENDED_RETRY
        return 0

    def _room(self) -> int:
        """How many rows a pick may take now: the free workers, fewer while the finishes not
        yet written near :data:`FINISH_BACKLOG` times ``max_workers``."""
        waiting = FINISH_BACKLOG * self._executor.max_workers - self._finisher.backlog
        return min(self._executor.free, waiting)

    def _gather(self, free: int) -> float:
        """How long to wait before picking for ``free`` workers while rows are due: 0, or
        (fewer than half free) until more free, at most :data:`GATHER_WAIT`.

        A node draining a backlog of short executions otherwise settles into pairs of picks
        (31 and 1, or 20 and 12: one for the workers that just freed, one for those that
        were still finishing), each a full round trip; gathered, one pick fills them all.
        Each freed worker wakes the poller, which looks again.
        """
        if free * 2 >= self._executor.max_workers:
            self._gather_until = None
            return 0
        now = time.monotonic()
        if self._gather_until is None:
            self._gather_until = now + GATHER_WAIT
        if now < self._gather_until:
            return self._gather_until - now
        self._gather_until = None
        return 0

    def _in_flight(self, now: float) -> set[int]:
        """Rows whose execution is still here (running, or its finish not yet written) and
        whose lease may have run out: this node must not pick them again — after an outage
        its own finish is on the way. Other nodes may (that is a real takeover). Usually
        empty, so the pick statement usually carries no extra condition."""
        held = [*self._executor.running(), *self._finisher.unwritten()]
        return {ex.id for ex in held if ex.lease_lost or now >= ex.lease_until - ex.margin}

    def _give_back(self, row: Mapping[str, Any]) -> None:
        try:
            self._store.release(self._node_id, {int(row["id"]): int(row["total_attempt"])})
        except Exception as exc:  # the lease expires on its own
            log.warning("could not give its lease back: %s", exc,
                        extra=about(row["queue_name"], int(row["total_attempt"])))

    def _dispatch(self, row: Mapping[str, Any], sent: float) -> Execution | None:
        """The execution to run for a picked row (tracked by the heartbeat already), or
        ``None`` when it ends without running (its finish is on its way)."""
        task = self._tasks.for_row(row)
        prepared = prepare(task, row, self._node_id, self._finisher, self._store.table_name)
        if prepared is None:
            return None
        execution, state_error = prepared
        # The database set the lease after the pick was sent: it surely ends after this.
        execution.lease_until = sent + self._lease.total_seconds()
        execution.margin = self._margin
        self._heartbeat.track(execution)
        if state_error is not None:
            # Only this execution fails, through the normal fenced finish (its lease is not
            # left hanging); the stored text stays as it is for someone to look at.
            self._finisher.put(undecodable(execution, state_error))
            return None
        ctx = execution.ctx
        if misfired(task.options, ctx.scheduled_at, ctx.started_at):
            self._finisher.put(skipped(execution))
            return None
        return execution


def prepare(
    task: TaskDef, row: Mapping[str, Any], node_id: str, finisher: Finisher, table: str
) -> tuple[Execution, str | None] | None:
    """The execution for a picked row, and why its stored state cannot be decoded (if so).

    ``None`` when the row was held by a vanished node and its lost execution's failure
    settings put it back to a later time.
    """
    now: datetime = row["last_started_at"]
    scheduled_at: datetime = row["prev_next_process_at"]
    attempt = int(row["attempt"])
    if row["prev_locked_by"] is not None:
        decision = finisher.recover_lost(task, row)
        if decision is None:
            return None
        scheduled_at, attempt = decision
    state_error: str | None = None
    try:
        state = decode_state(row["payload"])
    except Exception as exc:  # not JSON, or nested too deep (RecursionError)
        state = None
        state_error = truncate(f"stored state cannot be decoded: {describe_error(exc)}")
    ctx = TaskContext(
        name=task.name,
        node_id=node_id,
        attempt=attempt,
        reenqueue_attempt=int(row["reenqueue_attempt"]),
        total_attempt=int(row["total_attempt"]),
        scheduled_at=min(scheduled_at, now),
        started_at=now,
        created_at=row["created_at"],
        state=state,
        data=decode_state_safe(row.get("data"))[0],
        fence=Fence(table, int(row["id"]), int(row["total_attempt"]), node_id, task.name),
        triggered_by=for_token(row.get("trigger_link"), int(row["total_attempt"])),
    )
    return Execution(task, ctx, int(row["id"]), int(row["total_attempt"])), state_error


def skipped(execution: Execution) -> Ended:
    """How a ``misfire="skip"`` execution picked too late ends: ``skipped``, without running;
    the task moves on to its next time."""
    ctx = execution.ctx
    late = (ctx.started_at - ctx.scheduled_at).total_seconds()
    log.info("picked %.1f s after its due time, more than its grace of %s s; skipped "
             "(misfire='skip')", late, execution.task.options.grace.total_seconds(),
             extra=about(ctx.name, ctx.total_attempt))
    return Ended(execution, "skipped", None, UNSET, None, time.monotonic())


def undecodable(execution: Execution, state_error: str) -> Ended:
    """How an execution whose stored state cannot be decoded ends: an error, without running,
    keeping the stored text (``UNSET``)."""
    log.error("%s; the execution fails without running", state_error,
              extra=about(execution.task.name, execution.token))
    return Ended(execution, "error", state_error, UNSET, None, time.monotonic())
