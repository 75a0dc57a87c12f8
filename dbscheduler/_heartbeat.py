"""One thread per node extends the leases of all its running executions in one statement,
and a watchdog that never touches the database stops executions whose lease ran out."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import timedelta

from ._execution import Execution
from ._faults import FaultLog
from .store import Store

log = logging.getLogger("dbscheduler.heartbeat")


def safety_margin(lease: timedelta) -> float:
    """Seconds before the lease's end at which this node already counts it lost.

    Another node may pick the row as soon as the database clock passes the lease; stopping a
    little earlier absorbs thread wake-up latency and clock-rate differences.
    """
    return min(2.0, max(0.05, lease.total_seconds() * 0.1))


class Heartbeat:
    """Keeps leases alive every ``lease / 3`` and tells executions that lost theirs.

    ``untrack`` and the heartbeat statement share one lock: once ``untrack`` returns, no
    heartbeat of that execution is in flight or will ever be sent, so the finish that follows
    is the last write of the execution.

    Each execution carries ``lease_until``, on the monotonic clock: when its pick or its last
    successful heartbeat was *sent*, plus the lease. The database cannot have extended the
    lease further than that. A watchdog thread, which never waits on the database, declares
    the lease lost when that moment (minus :func:`safety_margin`) passes — so a node cut off
    from the database (a hung connection, a partition) stops its tasks before another node may
    pick them.
    """

    def __init__(
        self,
        store: Store,
        node_id: str,
        lease: timedelta,
        on_lost: Callable[[Execution], None],
        on_cancel: Callable[[Execution], None],
    ) -> None:
        self._store = store
        self._node_id = node_id
        self._lease = lease
        self._interval = lease.total_seconds() / 3
        self._margin = safety_margin(lease)
        self._on_lost = on_lost
        self._on_cancel = on_cancel
        self._lock = threading.Lock()
        self._lost_lock = threading.Lock()
        self._tracked: dict[tuple[int, int], Execution] = {}
        self._stop = threading.Event()
        self._faults = FaultLog(log, "heartbeat")
        self._thread = threading.Thread(target=self._run, name="dbscheduler-heartbeat", daemon=True)
        self._watchdog = threading.Thread(
            target=self._watch, name="dbscheduler-watchdog", daemon=True
        )

    def start(self) -> None:
        self._thread.start()
        self._watchdog.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self._interval + 5)
        self._watchdog.join(timeout=5)

    def track(self, execution: Execution) -> None:
        with self._lock:
            self._tracked[(execution.id, execution.token)] = execution

    def untrack(self, executions: Iterable[Execution]) -> None:
        with self._lock:
            for ex in executions:
                self._tracked.pop((ex.id, ex.token), None)

    def tracked(self) -> list[Execution]:
        with self._lock:
            return list(self._tracked.values())

    def lose(self, ex: Execution) -> None:
        """Declare ``ex``'s lease lost, once, and tell it."""
        with self._lost_lock:
            if ex.lease_lost:
                return
            ex.lease_lost = True
        self._on_lost(ex)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.beat()

    def _watch(self) -> None:
        step = min(0.5, max(0.02, self._margin / 2))
        while not self._stop.wait(step):
            # A copy without the lock: the heartbeat may be holding it, stuck in the database.
            now = time.monotonic()
            for ex in list(dict(self._tracked).values()):
                if not ex.lease_lost and now >= ex.lease_until - self._margin:
                    log.warning("task %r: no heartbeat reached the database within the lease; "
                                "counting the lease as lost", ex.task.name)
                    self.lose(ex)

    def beat(self) -> None:
        """Send one heartbeat now (the thread calls this every ``lease / 3``)."""
        lost: list[Execution] = []
        cancelled: list[Execution] = []
        with self._lock:
            live = [ex for ex in self._tracked.values() if not ex.lease_lost]
            if not live:
                return
            tokens: dict[int, int] = {}
            for ex in live:  # a row runs here twice only when the older one is a zombie
                tokens[ex.id] = max(ex.token, tokens.get(ex.id, 0))
            sent = time.monotonic()
            try:
                alive, stop = self._store.heartbeat(self._node_id, self._lease, tokens)
            except Exception as exc:
                # The watchdog stops the executions if this lasts until their leases end.
                self._faults.failed(exc)
                return
            self._faults.ok()
            for ex in live:
                if ex.id in alive and tokens[ex.id] == ex.token:
                    ex.lease_until = sent + self._lease.total_seconds()
                    if ex.id in stop and not ex.cancel_requested:
                        cancelled.append(ex)
                else:
                    lost.append(ex)
        for ex in lost:
            self.lose(ex)
        for ex in cancelled:
            self._on_cancel(ex)
