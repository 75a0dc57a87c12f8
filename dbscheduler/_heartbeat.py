"""One thread per node extends the leases of all its running executions in one statement."""

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


class Heartbeat:
    """Keeps leases alive every ``lease / 3`` and tells executions that lost theirs.

    ``untrack`` and the heartbeat statement share one lock: once ``untrack`` returns, no
    heartbeat of that execution is in flight or will ever be sent, so the finish that follows
    is the last write of the execution.
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
        self._on_lost = on_lost
        self._on_cancel = on_cancel
        self._lock = threading.Lock()
        self._tracked: dict[int, Execution] = {}
        self._stop = threading.Event()
        self._faults = FaultLog(log, "heartbeat")
        self._last_ok = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="dbscheduler-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self._interval + 5)

    def track(self, execution: Execution) -> None:
        with self._lock:
            self._tracked[execution.id] = execution

    def untrack(self, executions: Iterable[Execution]) -> None:
        with self._lock:
            for ex in executions:
                if self._tracked.get(ex.id) is ex:
                    del self._tracked[ex.id]

    def tracked(self) -> list[Execution]:
        with self._lock:
            return list(self._tracked.values())

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.beat()

    def beat(self) -> None:
        """Send one heartbeat now (the thread calls this every ``lease / 3``)."""
        lost: list[Execution] = []
        cancelled: list[Execution] = []
        with self._lock:
            if not self._tracked:
                self._last_ok = time.monotonic()
                return
            tokens = {i: ex.token for i, ex in self._tracked.items()}
            try:
                alive, stop = self._store.heartbeat(self._node_id, self._lease, tokens)
            except Exception as exc:
                self._faults.failed(exc)
                if time.monotonic() - self._last_ok > self._lease.total_seconds():
                    # The database has been out of reach longer than a lease: another node may
                    # already own these rows. Every execution must assume its lease is gone.
                    lost = list(self._tracked.values())
                    self._tracked.clear()
            else:
                self._faults.ok()
                self._last_ok = time.monotonic()
                for id_, ex in list(self._tracked.items()):
                    if id_ not in alive:
                        lost.append(ex)
                        del self._tracked[id_]
                    elif id_ in stop and not ex.cancel_requested:
                        cancelled.append(ex)
        for ex in lost:
            self._on_lost(ex)
        for ex in cancelled:
            self._on_cancel(ex)
