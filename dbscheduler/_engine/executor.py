"""Running task functions: a pool of daemon threads, plus one event loop for coroutines."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import heapq
import itertools
import logging
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any

from ..context import UNSET, Result, Status
from ..listeners import Listeners
from ..logfields import engine_log, engine_thread, execution_context
from .execution import Ended, Execution, bounded_traceback, describe_error, truncate
from .isolation import ChildFailed, Children, run_in_child
from .timeouts import Timeouts

log = engine_log("dbscheduler.executor")

RunCoroutine = Callable[[Coroutine[Any, Any, Any], contextvars.Context], Any]
"""Runs a coroutine to its end as a task in the given context and returns its value."""


class _LeaseExpired(Exception):
    """Raised inside the executor only: the execution's lease ended before it started."""


class _ReturnWarnings:
    """Tasks already warned about returning a value that is neither ``None`` nor a
    :class:`Result`: one warning per task and process, not one per execution."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    def first(self, name: str) -> bool:
        with self._lock:
            if name in self._warned:
                return False
            self._warned.add(name)
            return True


_RETURN_WARNINGS = _ReturnWarnings()
_CHILDREN = Children()
"""Children of isolated executions run outside an :class:`Executor` (the test harness)."""


def call(ex: Execution, listeners: Listeners, run_coroutine: RunCoroutine,
         timeouts: Timeouts | None = None, children: Children | None = None) -> Ended:
    """Call ``ex``'s task function in this thread (a coroutine through ``run_coroutine``; in a
    child process with ``isolation="process"``) and say how it ended. Never raises: whatever
    the function does becomes the :class:`Ended`. ``timeouts`` enforces the task's
    ``timeout``."""
    with execution_context(ex.task.name, ex.token):
        return _call(ex, listeners, run_coroutine, timeouts, children)


def _call(ex: Execution, listeners: Listeners, run_coroutine: RunCoroutine,
          timeouts: Timeouts | None, children: Children | None) -> Ended:
    task = ex.task
    status: Status = "success"
    error: str | None = None
    state: Any = UNSET
    next_at: datetime | None = None
    exception: BaseException | None = None
    trace: str | None = None
    try:
        if ex.lease_lost or time.monotonic() >= ex.lease_until - ex.margin:
            # The node was frozen (or starved) between the pick and now: the lease may
            # already belong to another node. Never start a function without a lease.
            ex.ctx.stop_requested.set()
            raise _LeaseExpired("the lease ran out before the execution could start")
        # One context per execution: what a listener sets in on_started (a tracing span, say)
        # is current inside the function, thread or coroutine alike.
        context = contextvars.copy_context()
        context.run(listeners.on_started, ex.ctx)
        if log.isEnabledFor(logging.DEBUG):  # thousands of executions a second
            log.debug("started (attempt %d)", ex.ctx.attempt)
        options = task.options
        if options.timeout is not None and timeouts is not None:
            timeouts.arm(ex, options.timeout.total_seconds())
        args = (ex.ctx,) if task.takes_context else ()
        if options.isolation == "process":
            value = run_in_child(ex, children if children is not None else _CHILDREN)
        elif task.is_coroutine:
            value = run_coroutine(task.fn(*args), context)
        else:
            value = context.run(task.fn, *args)
        if isinstance(value, Result):
            state, next_at = value.state, value.next_at
            if value.status == "error":
                status, error = "error", truncate(value.message or "error")
        elif value is not None and _RETURN_WARNINGS.first(task.name):
            # A newcomer returning the new state would otherwise lose it without a word.
            log.warning("the function returned %s; the value is ignored and the run counts "
                        "as a success. To store state, return Result.success(state=...)",
                        _short_repr(value))
    except _LeaseExpired as exc:
        status, error = "lost", str(exc)
        log.warning("%s; not run", exc)
    except ChildFailed as exc:
        # A child killed after a cancel was cancelled, not failed.
        status, error = ("cancelled" if ex.cancel_requested else "error"), truncate(str(exc))
        log.log(logging.INFO if ex.cancel_requested else logging.ERROR, "%s: %s", status, error)
    except BaseException as exc:  # a task must never kill its worker
        # SystemExit and KeyboardInterrupt too: re-raised, they would end this worker
        # thread, and a node that loses all its workers holds leases it never runs.
        status, error, exception = "error", describe_error(exc), exc
        log.error("failed: %s", error, exc_info=exc)
        try:
            trace = bounded_traceback(exc)
        except Exception:  # an exception whose formatting fails keeps its error text
            trace = None
    if ex.timed_out and status != "lost":
        timeout = task.options.timeout
        seconds = f"{timeout.total_seconds():g}" if timeout is not None else "?"
        status, error = "timeout", truncate(
            f"timed out after {seconds} s" + (f" ({error})" if error else ""))
    elif ex.cancel_requested and status == "success":
        status = "cancelled"
    return Ended(ex, status, error, state, next_at, time.monotonic(), exception, trace)


def _short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


class Executor:
    """``max_workers`` threads; coroutine functions run on one event loop thread of its own.

    The workers are daemon threads started once, not a ``ThreadPoolExecutor``: the standard
    pool joins its threads at interpreter exit, so one task that never returns would keep a
    node process alive forever after its shutdown.

    ``on_ended`` receives each execution's :class:`Ended` while the execution is still listed
    as running, so that the node never has a moment where an execution is neither running nor
    waiting for its finish (a pick then would not exclude its row); ``on_free`` follows once
    the worker counts as free.
    """

    def __init__(self, max_workers: int, on_ended: Callable[[Ended], None],
                 listeners: Listeners, on_free: Callable[[], None] = lambda: None) -> None:
        self.max_workers = max_workers
        self._on_ended = on_ended
        self._on_free = on_free
        self._listeners = listeners
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)
        """Notified whenever executions leave ``_running`` (one condition for the node, not
        an event per execution: creating it cost the poller about a tenth of its time)."""
        self._running: dict[tuple[int, int], Execution] = {}
        self._started: set[tuple[int, int]] = set()
        self._closed = False
        self._stopping = False
        self._pending: list[tuple[float, int, Execution]] = []
        """Submitted and not yet taken by a worker: a heap by the time each may start (a row
        picked ahead of its due time waits here, not in a worker)."""
        self._submitted = itertools.count()
        self._idle: list[threading.Lock] = []
        """The wake-up locks of the workers waiting for work, the last to wait on top."""
        self._timer: threading.Lock | None = None
        """The wake-up lock of the one worker waiting for the earliest queued execution's
        start time, if one does."""
        self._timer_at = 0.0
        self._waking = 0
        """Workers woken and not yet back under the lock."""
        self._workers = [
            engine_thread(self._work, f"dbscheduler-worker-{i}", threading.Lock())
            for i in range(max_workers)
        ]
        for worker in self._workers:
            worker.start()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.timeouts = Timeouts()
        self.children = Children()
        """Child processes of isolated executions (a shutdown kills those it cannot wait
        for)."""

    @property
    def free(self) -> int:
        with self._lock:
            return self.max_workers - len(self._running)

    def running(self) -> list[Execution]:
        """Executions submitted and not yet handed to ``on_ended`` (started or queued)."""
        with self._lock:
            return list(self._running.values())

    def submit(self, ex: Execution) -> None:
        self.submit_many([ex])

    def submit_many(self, executions: list[Execution]) -> None:
        """Queue a pick's executions: one lock for all of them, at most one worker woken."""
        if not executions:
            return
        with self._lock:
            for ex in executions:
                self._running[(ex.id, ex.token)] = ex
                heapq.heappush(self._pending, (ex.not_before, next(self._submitted), ex))
            self._kick(time.monotonic())

    def _kick(self, now: float) -> None:
        """Wake the worker the queue needs next, if none is on its way already (the lock
        held): an idle one for an execution that may start now, or one to wait for the
        earliest start time, or the waiting one when an earlier start time came.

        When each execution woke a worker, and each row picked ahead waited for its time in
        a worker of its own, a load spread over time kept every worker taking turns on the
        CPU (the node's CPU per execution was 8-17 % higher). A worker woken here wakes the
        next as it takes its execution, so a function that blocks has the next one started
        by another worker moments later, while quick ones run back to back on the workers
        already awake.
        """
        if not self._pending or self._waking:
            return
        at = self._pending[0][0]
        if at <= now:
            if not self._wake_idle() and self._timer is not None:  # all others are busy
                self._release(self._timer)
        elif self._timer is None:
            self._wake_idle()
        elif at < self._timer_at:
            self._release(self._timer)

    def _wake_idle(self) -> bool:
        """Wake the worker that waited last, if one waits for work (the lock held)."""
        if not self._idle:
            return False
        self._release(self._idle.pop())
        return True

    def _release(self, wake: threading.Lock) -> None:
        self._waking += 1
        if wake is self._timer:
            self._timer = None
        wake.release()

    def close(self) -> list[Execution]:
        """Start no more functions; return the executions submitted but not started, which
        are forgotten here (their leases are the caller's to give back)."""
        with self._lock:
            self._closed = True
            withdrawn = [ex for key, ex in self._running.items() if key not in self._started]
            for ex in withdrawn:
                del self._running[(ex.id, ex.token)]
            self._pending.clear()
            self._ended.notify_all()
        return withdrawn

    def _work(self, wake: threading.Lock) -> None:
        wake.acquire()  # released by whoever wakes this worker
        while (ex := self._take(wake)) is not None:
            key = (ex.id, ex.token)
            with self._lock:
                if self._closed or key not in self._running:
                    continue  # withdrawn by close(): never started
                self._started.add(key)
            ended = call(ex, self._listeners, self._run_coroutine, self.timeouts,
                         self.children)
            self._on_ended(ended)
            with self._lock:
                self._running.pop(key, None)
                self._started.discard(key)
                ex.returned = True
                self._ended.notify_all()
            self._on_free()

    def _take(self, wake: threading.Lock) -> Execution | None:
        """The next execution that may start, waiting for one if none may yet; None once
        shut down and nothing is queued."""
        released = timed_out = False
        while True:
            with self._lock:
                if released:
                    self._waking -= 1
                elif timed_out and self._timer is wake:
                    self._timer = None
                elif timed_out:  # woken just after its wait timed out: take that wake-up
                    wake.acquire(blocking=False)
                    self._waking -= 1
                now = time.monotonic()
                if self._pending:
                    at, _, ex = self._pending[0]
                    if at <= now:
                        heapq.heappop(self._pending)
                        if at > ex.started_mono:  # picked ahead: it starts now
                            ex.started_mono = now
                        self._kick(now)
                        return ex
                    if self._timer is None or at < self._timer_at:
                        if self._timer is not None:  # it waits for a later time: idle now
                            self._release(self._timer)
                        self._timer, self._timer_at = wake, at
                        timeout = at - now
                    else:
                        self._idle.append(wake)
                        timeout = -1
                elif self._stopping:
                    self._wake_idle()  # pass the shutdown on
                    return None
                else:
                    self._idle.append(wake)
                    timeout = -1
            released = wake.acquire(timeout=timeout)
            timed_out = not released

    def wait(self, timeout: float | None) -> bool:
        """Wait for running functions up to ``timeout`` s (None: no limit); True when none is
        left."""
        with self._ended:
            return self._ended.wait_for(lambda: not self._running, timeout)

    def end_children(self) -> bool:
        """Kill the child processes of isolated executions still running (a shutdown that
        waited long enough); True when nothing runs any more a few seconds later."""
        if not self.children.kill_all():
            return False
        log.warning("shutdown: killed the child processes of isolated executions still "
                    "running")
        return self.wait(5.0)

    def shutdown(self) -> None:
        """Let the workers end once their current function returns."""
        # A thread stuck in a task that never returns cannot be killed: it is abandoned here
        # and dies with the process (its lease then expires).
        with self._lock:
            self._stopping = True
            self._wake_idle()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    # -- coroutines ----------------------------------------------------------------------
    def _run_coroutine(self, coro: Coroutine[Any, Any, Any], context: contextvars.Context) -> Any:
        """Run ``coro`` on the event loop as a task in ``context``; block for its result."""
        loop = self._event_loop()
        result: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def copy(task: asyncio.Task[Any]) -> None:
            if task.cancelled():
                result.cancel()
            elif (exc := task.exception()) is not None:
                result.set_exception(exc)
            else:
                result.set_result(task.result())

        def start() -> None:
            try:
                if sys.version_info >= (3, 11):
                    task = loop.create_task(coro, context=context)
                else:  # the task runs in a copy of the context current at its creation
                    task = context.run(loop.create_task, coro)
            except BaseException as exc:
                result.set_exception(exc)
                return
            task.add_done_callback(copy)

        loop.call_soon_threadsafe(start)
        return result.result()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = engine_thread(loop.run_forever, "dbscheduler-asyncio")
                thread.start()
                self._loop = loop
            return self._loop
