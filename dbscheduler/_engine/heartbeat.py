"""One thread per node extends the leases of all its running executions in one statement,
and a watchdog that never touches the database stops executions whose lease ran out."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from datetime import timedelta

from .._store import Store
from ..logfields import about, engine_log, engine_thread
from .execution import Execution
from .faults import FaultLog
from .nodes import NodeRegistry

log = engine_log("dbscheduler.heartbeat")


def safety_margin(lease: timedelta) -> float:
    """Seconds before the lease's end at which this node already counts it lost.

    Another node may pick the row as soon as the database clock passes the lease; stopping a
    little earlier absorbs thread wake-up latency and clock-rate differences.
    """
    return min(2.0, max(0.05, lease.total_seconds() * 0.1))


class Cadence:
    """Absolute deadlines every ``interval`` seconds, so a beat's own latency does not stretch
    the spacing: the next deadline is the previous one plus the interval, not "now" plus it.

    When a beat ends after the next deadline already passed, the next beat is due at once and
    the deadlines re-anchor on it: one late beat, never a burst of the missed ones.

    >>> c = Cadence(10.0, start=0.0)
    >>> c.wait(now=0.0)
    10.0
    >>> c.beaten(now=12.0)   # the beat due at 10 s took 2 s
    >>> c.wait(now=12.0)     # the next one is due at 20 s, not 22 s
    8.0
    """

    def __init__(self, interval: float, start: float) -> None:
        self.interval = interval
        self.deadline = start + interval

    def wait(self, now: float) -> float:
        """Seconds to sleep before the next beat."""
        return max(0.0, self.deadline - now)

    def beaten(self, now: float) -> None:
        """A beat (due at :attr:`deadline`) just ended at ``now``."""
        self.deadline += self.interval
        if self.deadline < now:
            self.deadline = now


class Heartbeat:
    """Keeps leases alive every ``lease / 3`` (on a fixed :class:`Cadence`) and tells
    executions that lost theirs.

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
        self.last_beat_at: float | None = None  # monotonic time of the last heartbeat; for health()
        self.on_error: Callable[[BaseException], None] = lambda exc: None  # set by the Scheduler
        self.registry: NodeRegistry | None = None
        """Written on this thread's cadence (set by the Scheduler): no statement of its own
        per execution, and no thread of its own."""
        self._thread = engine_thread(self._run, "dbscheduler-heartbeat")
        self._watchdog = engine_thread(self._watch, "dbscheduler-watchdog")

    def start(self) -> None:
        if self.registry is not None:
            # Before the first pick: a node whose database clock reads ahead of the others'
            # knows it (and its takeover margin) before it may take any lease over.
            self.registry.beat(0, self._interval)
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
        # Under CPU-bound threads in this process, this thread waits for the GIL after every
        # wake-up and around each round trip (``sys.getswitchinterval()``, 5 ms by default, per
        # hand-over); the cadence keeps that latency from adding up across beats, and beat()
        # does as little Python work as it can. The library leaves the process-wide switch
        # interval alone; CPU-bound tasks belong in child processes.
        cadence = Cadence(self._interval, time.monotonic())
        registry = self.registry
        if registry is not None:
            registry.beat(len(self._tracked), self._interval)
        while True:
            now = time.monotonic()
            wait = cadence.wait(now)
            if registry is not None:
                wait = min(wait, registry.wait(now))
            if self._stop.wait(wait):
                return
            if cadence.wait(time.monotonic()) <= 0:
                self.beat()
                cadence.beaten(time.monotonic())
            if registry is not None:  # after the leases: they matter more
                registry.beat(len(self._tracked), self._interval)

    def _watch(self) -> None:
        step = min(0.5, max(0.02, self._margin / 2))
        while not self._stop.wait(step):
            # A copy without the lock: the heartbeat may be holding it, stuck in the database.
            now = time.monotonic()
            for ex in list(dict(self._tracked).values()):
                if not ex.lease_lost and now >= ex.lease_until - self._margin:
                    log.warning("no heartbeat reached the database within the lease; "
                                "counting the lease as lost", extra=about(ex.task.name, ex.token))
                    self.lose(ex)

    def beat(self) -> None:
        """Send one heartbeat now (the thread calls this every ``lease / 3``)."""
        lost: list[Execution] = []
        cancelled: list[Execution] = []
        with self._lock:
            if not self._tracked:
                return
            live = [ex for ex in self._tracked.values() if not ex.lease_lost]
            if not live:
                return
            tokens: dict[int, int] = {}
            for ex in live:  # a row runs here twice only when the older one is a zombie
                if ex.token > tokens.get(ex.id, 0):
                    tokens[ex.id] = ex.token
            sent = time.monotonic()
            try:
                alive, stop = self._store.heartbeat(self._node_id, self._lease, tokens)
            except Exception as exc:
                # The watchdog stops the executions if this lasts until their leases end.
                self._faults.failed(exc)
                self.on_error(exc)
                return
            self._faults.ok()
            self.last_beat_at = sent
            until = sent + self._lease.total_seconds()
            for ex in live:
                if ex.id in alive and tokens[ex.id] == ex.token:
                    ex.lease_until = until
                    if ex.id in stop and not ex.cancel_requested:
                        cancelled.append(ex)
                else:
                    lost.append(ex)
        for ex in lost:
            self.lose(ex)
        for ex in cancelled:
            self._on_cancel(ex)
