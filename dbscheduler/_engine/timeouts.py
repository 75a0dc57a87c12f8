"""Task timeouts: one thread that asks executions to stop when their ``timeout`` passes, and
says loudly when a thread task ignores it."""

from __future__ import annotations

import heapq
import itertools
import threading
import time

from ..logfields import about, engine_log
from .execution import Execution
from .isolation import KILL_AFTER

__all__ = ["Timeouts"]

log = engine_log("dbscheduler.executor")


class Timeouts:
    """Deadlines of running executions; the thread starts with the first one armed.

    At an execution's timeout its ``ctx.stop_requested`` is set and it is marked
    ``timed_out`` (its run is recorded ``timeout``). A thread cannot be killed: one still
    running :data:`~dbscheduler._engine.isolation.KILL_AFTER` seconds later is logged as an error —
    it keeps its lease until it returns. A process child is killed by its worker instead.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, bool, Execution]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, ex: Execution, seconds: float) -> None:
        """Ask ``ex`` to stop ``seconds`` from now unless it has ended by then."""
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._seq), False, ex))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dbscheduler-timeouts",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                at, _, ignored, ex = heapq.heappop(self._heap)
                if ex.returned:
                    continue
                if not ignored:
                    # Pushed before the flag is seen by the worker: its answer is "timeout".
                    heapq.heappush(self._heap, (at + KILL_AFTER, next(self._seq), True, ex))
            if ignored:
                if ex.task.options.isolation != "process":
                    log.error("the function ignores the stop requested at its timeout %.0f s "
                              "ago: a thread cannot be killed; it keeps its lease until it "
                              "returns. "
                              "Check ctx.stop_requested in the task, or use "
                              "isolation='process'", KILL_AFTER,
                              extra=about(ex.task.name, ex.token))
                continue
            ex.timed_out = True
            ex.ctx.stop_requested.set()
            timeout = ex.task.options.timeout
            log.warning("timeout of %s s reached; asking it to stop",
                        timeout.total_seconds() if timeout else "?",
                        extra=about(ex.task.name, ex.token))
