"""Waking the poller early: in-process events, and PostgreSQL ``LISTEN/NOTIFY`` across nodes."""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from ._faults import FaultLog

log = logging.getLogger("dbscheduler.wakeup")


class Wakeup:
    """What the poller sleeps on, and what woke it.

    * :meth:`set`: something changed that only a poll can tell (a trigger, a NOTIFY);
    * :meth:`hint`: this node wrote a row due at a known time (a finish): no poll needed;
    * :meth:`nudge`: a worker became free.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._stale = False
        self._hint: datetime | None = None

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
        self._event.set()

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


class PgListener:
    """A thread holding one connection that ``LISTEN``s on the table's channel.

    A lost connection is reopened with backoff; polling covers the gap meanwhile.
    """

    def __init__(self, engine: Engine, channel: str, wakeup: Wakeup) -> None:
        self._engine = engine
        self._channel = channel
        self._wakeup = wakeup
        self._stop = threading.Event()
        self._faults = FaultLog(log, f"LISTEN {channel}")
        self._thread = threading.Thread(target=self._run, name="dbscheduler-listen", daemon=True)
        self.received = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                self._listen()
                delay = 0.5
            except Exception as exc:
                self._faults.failed(exc)
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)

    def _listen(self) -> None:
        raw = self._engine.raw_connection()
        try:
            conn: Any = raw.driver_connection
            conn.autocommit = True
            conn.execute(f'LISTEN "{self._channel}"')
            # The poll may have run just before LISTEN took effect: look once more.
            self._wakeup.set()
            while not self._stop.is_set():
                for _ in conn.notifies(timeout=0.5, stop_after=1):
                    self.received += 1
                    self._wakeup.set()
                # Recovered only once a wait completed: a connection that fails right after
                # LISTEN must not log "recovered" and "failed" on every reconnect.
                self._faults.ok()
        except Exception:
            raw.invalidate()
            raise
        finally:
            raw.close()
