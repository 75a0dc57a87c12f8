"""Running task functions (a thread pool, plus one event loop for coroutines) and writing
their finishes in batches."""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ._execution import Execution
from ._faults import FaultLog
from ._heartbeat import Heartbeat
from .context import UNSET, Result, Status, _Unset
from .listeners import Listeners, Outcome
from .planning import plan_next
from .store import FinishWrite, Store
from .table import MAX_ERROR_LENGTH

log = logging.getLogger("dbscheduler.executor")

SCHEDULE_FAILURE_RETRY = timedelta(minutes=1)
"""When a schedule cannot say when to run next (a Dynamic function raised), try again then."""


def describe_error(exc: BaseException) -> str:
    """``"Type: message"``, one line, truncated to fit ``last_error``."""
    text = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    return truncate(text)


ERROR_TEXT_LIMIT = MAX_ERROR_LENGTH // 2
"""Characters kept of an error: half the column, so that even four-byte characters fit
Oracle's 4,000-byte VARCHAR2 and SQL Server's UTF-16 NVARCHAR(2000)."""


def truncate(text: str) -> str:
    return text if len(text) <= ERROR_TEXT_LIMIT else text[: ERROR_TEXT_LIMIT - 1] + "…"


class _LeaseExpired(Exception):
    """Raised inside the executor only: the execution's lease ended before it started."""


@dataclass(frozen=True)
class Ended:
    """A task function's return, waiting for its finish to be written."""

    execution: Execution
    status: Status
    error: str | None
    state: Any
    next_at: datetime | None
    finished_mono: float


class Executor:
    """``max_workers`` threads; coroutine functions run on one event loop thread of its own.

    The workers are daemon threads started once, not a ``ThreadPoolExecutor``: the standard
    pool joins its threads at interpreter exit, so one task that never returns would keep a
    node process alive forever after its shutdown.
    """

    def __init__(self, max_workers: int, on_ended: Callable[[Ended], None],
                 listeners: Listeners) -> None:
        self.max_workers = max_workers
        self._on_ended = on_ended
        self._listeners = listeners
        self._lock = threading.Lock()
        self._running: dict[tuple[int, int], Execution] = {}
        self._queue: queue.SimpleQueue[Execution | None] = queue.SimpleQueue()
        self._workers = [
            threading.Thread(target=self._work, name=f"dbscheduler-worker-{i}", daemon=True)
            for i in range(max_workers)
        ]
        for worker in self._workers:
            worker.start()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def free(self) -> int:
        with self._lock:
            return self.max_workers - len(self._running)

    def running(self) -> list[Execution]:
        with self._lock:
            return list(self._running.values())

    def submit(self, ex: Execution) -> None:
        with self._lock:
            self._running[(ex.id, ex.token)] = ex
        self._queue.put(ex)

    def _work(self) -> None:
        while (ex := self._queue.get()) is not None:
            self._run(ex)

    def wait(self, timeout: float) -> bool:
        """Wait for running functions up to ``timeout`` s; True when none is left."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                pending = list(self._running.values())
            if not pending:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            pending[0].done.wait(min(remaining, 0.1))

    def shutdown(self) -> None:
        # A thread stuck in a task that never returns cannot be killed: it is abandoned here
        # (its lease was released, its finish would be fenced out) and dies with the process.
        for _ in self._workers:
            self._queue.put(None)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    # -- running one function ------------------------------------------------------------
    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="dbscheduler-asyncio", daemon=True
                )
                thread.start()
                self._loop = loop
            return self._loop

    def _run(self, ex: Execution) -> None:
        task = ex.task
        status: Status = "success"
        error: str | None = None
        state: Any = UNSET
        next_at: datetime | None = None
        try:
            if ex.lease_lost or time.monotonic() >= ex.lease_until - ex.margin:
                # The node was frozen (or starved) between the pick and now: the lease may
                # already belong to another node. Never start a function without a lease.
                ex.ctx.stop_requested.set()
                raise _LeaseExpired("the lease ran out before the execution could start")
            self._listeners.emit("on_started", ex.ctx)
            log.debug("task %r started (attempt %d, token %d)", task.name, ex.ctx.attempt,
                      ex.token)
            args = (ex.ctx,) if task.takes_context else ()
            if task.is_coroutine:
                coro: Coroutine[Any, Any, Any] = task.fn(*args)
                value = asyncio.run_coroutine_threadsafe(coro, self._event_loop()).result()
            else:
                value = task.fn(*args)
            if isinstance(value, Result):
                state, next_at = value.state, value.next_at
                if value.status == "error":
                    status, error = "error", truncate(value.message or "error")
            elif value is not None:
                log.debug("task %r returned %r; ignored (return a Result to store state)",
                          task.name, value)
        except _LeaseExpired as exc:
            status, error = "lost", str(exc)
            log.warning("task %r (token %d): %s; not run", task.name, ex.token, exc)
        except BaseException as exc:  # a task must never kill its worker
            # SystemExit and KeyboardInterrupt too: re-raised, they would end this worker
            # thread, and a node that loses all its workers holds leases it never runs.
            status, error = "error", describe_error(exc)
            log.error("task %r failed: %s", task.name, error, exc_info=exc)
        finally:
            if ex.cancel_requested and status == "success":
                status = "cancelled"
            ended = Ended(ex, status, error, state, next_at, time.monotonic())
            with self._lock:
                self._running.pop((ex.id, ex.token), None)
            ex.done.set()
            self._on_ended(ended)


class Finisher:
    """A thread that writes finished executions, all that ended together in one transaction.

    Each execution's heartbeat is stopped right before its write. A write the database refuses
    (its token moved on) is logged; a database error is retried while the lease may still hold.
    """

    def __init__(self, store: Store, node_id: str, heartbeat: Heartbeat, listeners: Listeners,
                 after_write: Callable[[datetime | None], None],
                 poll_interval: timedelta) -> None:
        self._poll_interval = poll_interval
        self._store = store
        self._node_id = node_id
        self._heartbeat = heartbeat
        self._listeners = listeners
        self._after_write = after_write
        self._queue: queue.Queue[Ended | None] = queue.Queue()
        self._pending = 0
        self._unwritten: dict[tuple[int, int], Execution] = {}
        self._idle = threading.Condition()
        self._faults = FaultLog(log, "writing finished executions")
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dbscheduler-finish", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, ended: Ended) -> None:
        with self._idle:
            self._pending += 1
            self._unwritten[(ended.execution.id, ended.execution.token)] = ended.execution
        self._queue.put(ended)

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

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)
                    break
                batch.append(item)
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
                _, stale = self._store.finish(
                    self._node_id,
                    lambda now: [self._write_for(e, now, written) for e in batch],  # noqa: B023
                    self._poll_interval,
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
                log.warning(
                    "task %r: finish refused, another node owns the row now (token %d is "
                    "stale)", e.execution.task.name, e.execution.token)
                self._emit(e, None)
            else:
                self._emit(e, written[key])
        landed = [w.next_at for key, w in written.items() if key not in refused]
        self._after_write(min(landed, default=None))

    def _write_for(
        self, e: Ended, now: datetime, written: dict[tuple[int, int], FinishWrite]
    ) -> FinishWrite:
        ex = e.execution
        status, error = e.status, e.error
        payload: str | _Unset | None = UNSET
        if e.state is not UNSET:
            try:
                payload = None if e.state is None else json.dumps(e.state, allow_nan=False)
            except (TypeError, ValueError) as exc:
                status = "error"
                error = truncate(f"state is not JSON-serialisable: {exc}")
                log.error("task %r: %s; state not stored", ex.task.name, error)
        try:
            plan = plan_next(
                ex.task.schedule,
                ex.task.on_failure,
                status=status,
                attempt=ex.ctx.attempt,
                scheduled_at=ex.ctx.scheduled_at,
                started_at=ex.ctx.started_at,
                finished_at=now,
                ctx=ex.ctx,
                next_at_override=e.next_at,
            )
            next_at, attempt = plan.next_at, plan.attempt
        except Exception as exc:
            status = "error"
            error = truncate(f"schedule failed: {describe_error(exc)}")
            log.error("task %r: %s; next try in %s", ex.task.name, error, SCHEDULE_FAILURE_RETRY)
            next_at, attempt = now + SCHEDULE_FAILURE_RETRY, ex.ctx.attempt
        write = FinishWrite(ex.id, ex.token, status=status, next_at=next_at, attempt=attempt,
                            finished_at=now, error=error, payload=payload)
        written[(ex.id, ex.token)] = write
        return write

    def _emit(self, e: Ended, write: FinishWrite | None) -> None:
        """Tell listeners: what was written, or (``next_at`` None) that nothing was."""
        ex = e.execution
        duration = timedelta(seconds=e.finished_mono - ex.started_mono)
        if write is None:
            outcome = Outcome(e.status, duration, e.error, None)
        else:
            outcome = Outcome(write.status, duration, write.error, write.next_at)
        next_at = outcome.next_at
        log.debug("task %r finished: %s in %.3f s, next %s", ex.task.name, e.status,
                  duration.total_seconds(), next_at)
        self._listeners.emit("on_finished", ex.ctx, outcome)
