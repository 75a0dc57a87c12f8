"""Named points right after the engine's statements where a test can freeze this process.

A node frozen between two statements (a GC or VM pause, SIGSTOP, a partition) must never keep
other nodes from taking over. The fault-injection tests prove it by stopping a node process
*inside* each engine path: they start it with ``DBSCHEDULER_FREEZE_AT=<point>`` (or
``<point>:<n>`` to freeze at the n-th time the point is reached; default the first), and the
process sends itself ``SIGSTOP`` there, with whatever the statement left open still open.

Unset, :func:`reached` is one falsy check: nothing else runs in production.
"""

from __future__ import annotations

import os
import signal
import threading

from ..logfields import engine_log

__all__ = ["POINTS", "reached"]

log = engine_log("dbscheduler.faultpoints")

POINTS = (
    "register",
    "pick",
    "heartbeat",
    "finish",
    "finish_history",
    "release",
    "record_lost",
    "operation",
    "alert",
    "push",
    "delivered",
    "fenced_begin",
    "fenced_check",
    "fenced_exit",
    "fenced_commit",
)
"""Every point the engine reports; each is reached right after the named statement returned,
before the code that follows it (a commit, the next statement, the Python that uses it).
``finish_history`` follows a run row written before its finish (databases where the two
cannot be one statement); ``alert`` follows the conditional update of a lateness alert.
The ``fenced_*`` points are inside a ``ctx.fenced`` transaction: ``fenced_begin`` after its
bounds are set, before the first check; ``fenced_check`` after that check; ``fenced_exit``
when the block has ended (after its last statement), before the final check;
``fenced_commit`` after the final check, right before COMMIT."""


def _armed() -> dict[str, int]:
    spec = os.environ.get("DBSCHEDULER_FREEZE_AT", "")
    armed: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        point, _, nth = part.partition(":")
        if point not in POINTS:
            raise ValueError(f"DBSCHEDULER_FREEZE_AT names {point!r}; known points: {POINTS}")
        armed[point] = int(nth or 1)
    return armed


_ARMED = _armed()
_lock = threading.Lock()


def reached(point: str) -> None:
    """Freeze this process here if a test armed ``point`` and this is its n-th time."""
    if not _ARMED or point not in _ARMED:
        return
    with _lock:
        _ARMED[point] -= 1
        if _ARMED[point] != 0:
            return
    log.warning("freezing at %s (DBSCHEDULER_FREEZE_AT)", point)
    # To this thread, not the process: a process-directed signal may be taken by another
    # thread while this one runs on and, say, commits the transaction it should freeze inside.
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
