"""Waiting for a database that is not up yet when a node starts (a service started next to its
database in Docker Compose or Kubernetes)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import sqlalchemy as sa

from ..dialects import Dialect
from ..errors import DatabaseUnreachable
from ..logfields import engine_log

__all__ = ["retry_unreachable", "run_until_signal"]

log = engine_log("dbscheduler")


def retry_unreachable(
    action: Callable[[], None],
    *,
    dialect: Dialect,
    safe_url: str,
    wait: float,
    abort: threading.Event,
) -> None:
    """Run ``action``; while the server does not answer, again with backoff (0.25 s doubling
    to 5 s) for up to ``wait`` seconds, logging one warning. Then, or at once for a problem
    waiting cannot fix (a wrong database, user or password), or when ``abort`` is set, raise
    :class:`~dbscheduler.DatabaseUnreachable` saying which problem it is."""
    deadline = time.monotonic() + wait
    pause = 0.25
    warned = False
    while True:
        try:
            action()
            if warned:
                log.info("database %s reachable; starting", safe_url)
            return
        except sa.exc.DBAPIError as exc:
            problem = dialect.connect_problem(exc)
            if problem is None:
                raise
            unreachable = DatabaseUnreachable(safe_url, problem.kind, problem.message)
            left = deadline - time.monotonic()
            if not problem.may_pass or left <= 0:
                raise unreachable from exc
            if not warned:
                log.warning("%s; retrying for up to %.0f s", unreachable, left)
                warned = True
            if abort.wait(min(pause, left)):
                raise unreachable from exc
            pause = min(pause * 2, 5.0)


def run_until_signal(start: Callable[[], None], shutdown: Callable[[float], None],
                     stopped: threading.Event, node_id: str, shutdown_timeout: float) -> None:
    """:meth:`Scheduler.run`: start, block until SIGINT or SIGTERM (or a shutdown from
    another thread), then shut down gracefully; the previous signal handlers come back."""
    previous: dict[signal.Signals, Any] = {}

    def handle(signum: int, frame: FrameType | None) -> None:
        log.info("received %s; shutting down", signal.Signals(signum).name,
                 extra={"node": node_id})
        threading.Thread(target=shutdown, args=(shutdown_timeout,),
                         name="dbscheduler-shutdown").start()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handle)
    try:
        start()
        while not stopped.wait(0.5):
            pass
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if not stopped.is_set():
            shutdown(shutdown_timeout)
