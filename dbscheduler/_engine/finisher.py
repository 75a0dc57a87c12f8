"""Writing finished executions: all that ended together in one statement batch, each with
its next time planned (:func:`~dbscheduler._engine.planning.plan_task`, as the recovery of a
lost execution plans its own)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from .._store import FinishWrite, RunRecord, Store, clean_text, encode_state
from ..batches import delivers_batches
from ..context import UNSET, _Unset
from ..listeners import Listeners, Outcome
from ..logfields import about, engine_log, engine_thread
from .execution import Ended, Execution, truncate
from .faults import FaultLog
from .heartbeat import Heartbeat
from .planning import plan_task
from .runtime import finished_for_good

__all__ = ["Finisher", "run_record"]

log = engine_log("dbscheduler.finisher")

FINISH_BUSY = 0.02
"""The finisher counts as busy while its last write began less than this many seconds ago."""


class Finisher:
    """A thread that writes finished executions, all that ended together in one batch.

    Each execution's heartbeat is stopped right before its write. A write the database refuses
    (its token moved on) is logged; a database error is retried while the lease may still hold.
    """

    def __init__(self, store: Store, node_id: str, heartbeat: Heartbeat, listeners: Listeners,
                 after_write: Callable[[datetime | None], None],
                 poll_interval: timedelta,
                 row_exists: Callable[[str], bool] = lambda name: True,
                 gather: float = 0.0) -> None:
        self._poll_interval = poll_interval
        self._row_exists = row_exists
        self._store = store
        self._node_id = node_id
        self._heartbeat = heartbeat
        self._listeners = listeners
        self._after_write = after_write
        # The C queue: every execution's end passes here, and the pure-Python queue's lock
        # and condition variable were a visible part of the workers' profile.
        self._queue: queue.SimpleQueue[Ended | None] = queue.SimpleQueue()
        self._pending = 0
        self._unwritten: dict[tuple[int, int], Execution] = {}
        self._idle = threading.Condition()
        self._faults = FaultLog(log, "writing finished executions")
        self._stopping = threading.Event()
        self._gather = gather
        """Seconds a busy finisher lets a batch gather before writing it."""
        self._thread = engine_thread(self._run, "dbscheduler-finish")

    def start(self) -> None:
        self._thread.start()

    def put(self, ended: Ended) -> None:
        with self._idle:
            self._pending += 1
            self._unwritten[(ended.execution.id, ended.execution.token)] = ended.execution
        self._queue.put(ended)

    @property
    def backlog(self) -> int:
        """How many ended executions wait for their finish to be written (or given up)."""
        return self._pending

    def unwritten(self) -> list[Execution]:
        """Executions that ended and whose finish is not written (or refused) yet."""
        with self._idle:
            return list(self._unwritten.values())

    def flush(self, timeout: float) -> bool:
        """Wait until everything put so far is written (or given up); True if so in time."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def stop(self, timeout: float) -> None:
        if not self.flush(timeout):
            log.warning("shutdown: finishes not written within %s s are abandoned (their "
                        "leases expire on their own)", timeout)
        self._stopping.set()
        self._queue.put(None)
        self._thread.join(timeout=5)

    def write_now(self, batch: list[Ended]) -> None:
        """Write ``batch`` in the calling thread, without the queue (the testing harness)."""
        self._write_batch(batch)

    def _run(self) -> None:
        last_write = float("-inf")
        while True:
            first = self._queue.get()
            if first is None:
                return
            # Busy (the last write began moments ago): let the batch gather what ends within
            # a few milliseconds. Executions of a load spread over time end a few at a time,
            # and each statement's fixed cost is then shared by a few dozen; idle, a finish
            # is written at once.
            now = time.monotonic()
            until = now + self._gather if now - last_write < FINISH_BUSY else now
            batch = [first]
            while True:
                try:
                    left = until - time.monotonic()
                    item = (self._queue.get(timeout=left) if left > 0
                            else self._queue.get_nowait())
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)
                    break
                batch.append(item)
            last_write = time.monotonic()
            self._write_batch(batch)
            with self._idle:
                self._pending -= len(batch)
                for e in batch:
                    self._unwritten.pop((e.execution.id, e.execution.token), None)
                self._idle.notify_all()

    def _write_batch(self, batch: list[Ended]) -> None:
        # Every execution tries its fenced finish, even one whose lease this node counts as
        # lost: when nobody picked the row meanwhile (an outage, not a takeover), the write
        # lands and keeps the task's result; otherwise the fence refuses it.
        self._heartbeat.untrack(e.execution for e in batch)
        delay = 0.2
        while True:
            written: dict[tuple[int, int], FinishWrite] = {}
            try:
                # Planned here, with the store's estimate of the database clock, before the
                # store is asked to write: the finish never calls back into the finisher.
                now = self._store.estimated_now()
                writes = [self._write_for(e, now, written) for e in batch]
                _, stale = self._store.finish(
                    self._node_id, writes, self._poll_interval,
                    # A write the database refused was recorded as an error instead.
                    on_replaced=lambda w: written.__setitem__((w.id, w.token), w),  # noqa: B023
                    planned_at=now,
                )
            except Exception as exc:
                self._faults.failed(exc)
                if self._stopping.is_set():
                    for e in batch:
                        self._emit(e, None)
                    return
                for e in batch:  # keep the leases alive while the database is away
                    if not e.execution.lease_lost:
                        self._heartbeat.track(e.execution)
                self._stopping.wait(delay)
                delay = min(delay * 2, 5.0)
                self._heartbeat.untrack(e.execution for e in batch)
                continue
            break
        self._faults.ok()
        refused = {(w.id, w.token) for w in stale}
        for e in batch:
            key = (e.execution.id, e.execution.token)
            if key in refused:
                self._refused(e.execution)
                self._emit(e, None)
            else:
                self._emit(e, written[key])
        landed = [w.next_at for key, w in written.items() if key not in refused]
        self._write_tracebacks(batch, written, refused)
        self._after_write(min(landed, default=None))

    def _write_tracebacks(self, batch: list[Ended], written: dict[tuple[int, int], FinishWrite],
                          refused: set[tuple[int, int]]) -> None:
        """The tracebacks of the failures whose finish (and run row) landed: an extra
        statement for failures only, never for a success."""
        if not self._store.history:
            return
        items = []
        for e in batch:
            key = (e.execution.id, e.execution.token)
            write = written.get(key)
            if e.traceback and key not in refused and write is not None and write.run:
                items.append((write.run, clean_text(e.traceback) or ""))
        if not items:
            return
        try:
            self._store.write_tracebacks(items)
        except Exception as exc:  # the run and its error text are written: only this is lost
            log.warning("could not add %d failure traceback(s) to the run history: %s",
                        len(items), exc)

    def _refused(self, ex: Execution) -> None:
        try:
            exists = self._row_exists(ex.task.name)
        except Exception:  # only chooses the message
            exists = True
        if exists:
            log.warning("finish refused: another node owns the row now (this token is stale)",
                        extra=about(ex.task.name, ex.token))
        else:
            log.warning("finish refused: the task's row is gone (deleted, or the table was "
                        "recreated); this node registers its tasks again when it sees the "
                        "table empty or back", extra=about(ex.task.name, ex.token))

    def _write_for(
        self, e: Ended, now: datetime, written: dict[tuple[int, int], FinishWrite]
    ) -> FinishWrite:
        ex = e.execution
        status, error = e.status, e.error
        payload: str | _Unset | None = UNSET
        if e.state is not UNSET:
            try:
                payload = encode_state(e.state)
            except ValueError as exc:
                status = "error"
                error = truncate(str(exc))
                log.error("%s; state not stored", error, extra=about(ex.task.name, ex.token))
        next_at, attempt, failure = plan_task(
            ex.task, ex.ctx, status=status, attempt=ex.ctx.attempt,
            scheduled_at=ex.ctx.scheduled_at, started_at=ex.ctx.started_at, finished_at=now,
            next_at_override=e.next_at,
        )
        if failure is not None:
            status, error = "error", failure
        write = FinishWrite(ex.id, ex.token, status=status, next_at=next_at, attempt=attempt,
                            finished_at=now, error=error, payload=payload,
                            delete=finished_for_good(ex.task, next_at),
                            run=run_record(ex, self._node_id),
                            keyed=delivers_batches(ex.task))
        written[(ex.id, ex.token)] = write
        return write

    def _emit(self, e: Ended, write: FinishWrite | None) -> None:
        """Tell listeners: what was written, or (``next_at`` None) that nothing was."""
        ex = e.execution
        duration = timedelta(seconds=e.finished_mono - ex.started_mono)
        if write is None:
            outcome = Outcome(e.status, duration, e.error, None, e.exception)
        else:
            outcome = Outcome(write.status, duration, write.error, write.next_at, e.exception)
        next_at = outcome.next_at
        if log.isEnabledFor(logging.DEBUG):  # thousands of executions a second
            log.debug("finished: %s in %.3f s, next %s", e.status, duration.total_seconds(),
                      next_at, extra=about(ex.task.name, ex.token))
        self._listeners.on_finished(ex.ctx, outcome)


def run_record(ex: Execution, node_id: str) -> RunRecord:
    """The run history's key and facts of an execution of this node."""
    return RunRecord(ex.task.name, ex.token, ex.ctx.attempt, node_id, ex.ctx.scheduled_at,
                     ex.ctx.started_at)
