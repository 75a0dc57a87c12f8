"""Waking the poller early: in-process events, and ``LISTEN/NOTIFY`` across nodes where the
database has it."""

from __future__ import annotations

import threading
from datetime import datetime

from sqlalchemy.engine import Engine

from ..dialects import Dialect, ListenUnavailable
from ..logfields import engine_log, engine_thread
from .faults import FaultLog
from .notices import parse_due

log = engine_log("dbscheduler.wakeup")


class Wakeup:
    """What the poller sleeps on, and what woke it.

    * :meth:`set`: something changed that only a poll can tell (a trigger, a NOTIFY);
    * :meth:`hint`: this node wrote a row due at a known time (a finish): no poll needed;
    * :meth:`nudge`: a worker became free (heard only while the poller waits for one).
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._stale = False
        self._hint: datetime | None = None
        self._wants_free = True

    def set(self) -> None:
        with self._lock:
            self._stale = True
        self._event.set()

    def hint(self, due: datetime | None) -> None:
        if due is not None:
            with self._lock:
                self._hint = due if self._hint is None else min(self._hint, due)
        self._event.set()

    def nudge(self) -> None:
        if self._wants_free:
            self._event.set()

    def wants_free(self, wanted: bool) -> None:
        """Whether :meth:`nudge` wakes the poller. A busy node's workers free thousands of
        times a second; a poller sleeping until a due time, with workers free, has no use for
        one more, and waking it for each cost the node more than the pick it then skipped."""
        self._wants_free = wanted

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True when woken early. Clears the event."""
        woken = self._event.wait(max(0.0, timeout))
        self._event.clear()
        return woken

    def take(self) -> tuple[bool, datetime | None]:
        """``(stale, hint)`` gathered since the last call, and forget them."""
        with self._lock:
            stale, hint = self._stale, self._hint
            self._stale, self._hint = False, None
        return stale, hint


class NotifyListener:
    """A thread holding one connection that listens for other nodes' wake-ups on the table's
    channel (PostgreSQL ``LISTEN``), through the dialect.

    A lost connection is reopened with backoff; polling covers the gap meanwhile.
    """

    def __init__(self, engine: Engine, dialect: Dialect, channel: str, wakeup: Wakeup,
                 node_id: str | None = None) -> None:
        self._node_id = node_id
        self._engine = engine
        self._dialect = dialect
        self._channel = channel
        self._wakeup = wakeup
        self._stop = threading.Event()
        self._faults = FaultLog(log, f"LISTEN {channel}")
        self._thread = engine_thread(self._run, "dbscheduler-listen")
        self.received = 0
        self.ready = False
        """True once a ``LISTEN`` is in place (for a node's own checks and tests)."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                self._dialect.listen(
                    self._engine, self._channel, on_ready=self._ready,
                    on_wait=self._waited, stopping=self._stop,
                )
                delay = 0.5
            except ListenUnavailable as exc:
                log.info("%s", exc)
                return
            except Exception as exc:
                self._faults.failed(exc)
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)

    def _ready(self) -> None:
        self.ready = True
        # The poll may have run just before LISTEN took effect: look once more.
        self._wakeup.set()

    def _waited(self, payloads: list[str]) -> None:
        self.received += len(payloads)
        for payload in payloads:
            notice = parse_due(payload)
            if notice is None:
                self._wakeup.set()  # a trigger, a change …: only a poll tells what
            elif notice.node != self._node_id:
                # A peer's finish wrote a row due then: as good as a poll for that row, and
                # no round trip. This node's own finishes told its poller already.
                self._wakeup.hint(notice.at)
        # Recovered only once a wait completed: a connection that fails right after LISTEN
        # must not log "recovered" and "failed" on every reconnect.
        self._faults.ok()
