"""Waiting for a database that is not up yet when a node starts (a service started next to its
database in Docker Compose or Kubernetes)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import sqlalchemy as sa

from .dialects import Dialect
from .errors import DatabaseUnreachable
from .logfields import engine_log

__all__ = ["retry_unreachable"]

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
