"""How a node finds its :class:`~dbscheduler.Health`: :func:`check`, for ``scheduler.health()``.

Three questions, within the call's ``timeout``: does the database answer, did the poller
poll recently, and does the heartbeat keep the leases of what runs here alive. Errors
become a reason in the answer, never an exception.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine

from ..health import Health
from ..logfields import engine_thread
from .execution import describe_error

if TYPE_CHECKING:
    from .clock import Clock
    from .executor import Executor
    from .heartbeat import Heartbeat
    from .poller import Poller

__all__ = ["check"]

POLL_SLACK = 2.0
"""Seconds beyond three poll intervals before a silent poller counts as stopped: a poll that
fails backs off, and a loaded machine delays threads by a second now and then."""


class _Probe:
    """One database check in flight per engine: a database that hangs costs one thread, not
    one per probe request; concurrent probes wait on the same check."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: _Check | None = None

    def run(self, action: Callable[[], object], timeout: float) -> tuple[str | None, object]:
        """``(None, what action returned)`` when it succeeded within ``timeout``, else
        ``(why not, None)``."""
        with self._lock:
            check = self._current
            if check is None or check.done.is_set():
                check = self._current = _Check(action)
        if not check.done.wait(timeout):
            waited = time.monotonic() - check.since
            return f"the database did not answer a check within {waited:.1f} s", None
        if check.error is not None:
            return describe_error(check.error), None
        return None, check.result


class _Check:
    """One run of the database check, in a daemon thread."""

    def __init__(self, action: Callable[[], object]) -> None:
        self.since = time.monotonic()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.result: object = None
        self._action = action
        engine_thread(self._run, "dbscheduler-health").start()

    def _run(self) -> None:
        try:
            self.result = self._action()
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()


_probes: weakref.WeakKeyDictionary[Engine, _Probe] = weakref.WeakKeyDictionary()
_probes_lock = threading.Lock()


def _probe_for(engine: Engine) -> _Probe:
    with _probes_lock:
        probe = _probes.get(engine)
        if probe is None:
            probe = _probes[engine] = _Probe()
        return probe


def check(
    *,
    node_id: str,
    state: str,
    engine: Engine,
    ping: Callable[[], object],
    clock: Clock,
    poller: Poller | None,
    heartbeat: Heartbeat | None,
    executor: Executor | None,
    poll_interval: timedelta,
    lease: timedelta,
    timeout: float = 5.0,
) -> Health:
    """The :class:`Health` of a node from its parts; ``ping`` is one cheap check of the
    database that returns why the server refuses writes (a read-only standby), or ``None``.
    Never raises: a failure of the check itself is reported as not ok."""
    try:
        return _check(node_id, state, engine, ping, clock, poller, heartbeat, executor,
                      poll_interval, lease, timeout)
    except Exception as exc:
        return Health(False, node_id, False, None, None, 0,
                      f"the health check failed: {describe_error(exc)}")


def _check(
    node_id: str, state: str, engine: Engine, ping: Callable[[], object], clock: Clock,
    poller: Poller | None, heartbeat: Heartbeat | None, executor: Executor | None,
    poll_interval: timedelta, lease: timedelta, timeout: float,
) -> Health:
    now = time.monotonic()
    db_now = clock.db_now()

    def at(mono: float | None) -> datetime | None:
        return None if mono is None else db_now - timedelta(seconds=now - mono)

    last_poll = poller.last_poll_at if poller is not None else None
    last_beat = heartbeat.last_beat_at if heartbeat is not None else None
    running = executor.running() if executor is not None else []
    problem, refusal = _probe_for(engine).run(ping, timeout)
    reasons: list[str] = []
    if problem is not None:
        reasons.append(f"database unreachable: {problem}")
    elif isinstance(refusal, str):
        reasons.append(f"the database refuses writes: {refusal}")
    if state != "running":
        reasons.append(f"the scheduler is {state}, not running")
    else:
        limit = 3 * poll_interval.total_seconds() + POLL_SLACK
        if last_poll is None or now - last_poll > limit:
            ago = "never" if last_poll is None else f"{now - last_poll:.1f} s ago"
            reasons.append(f"the poller has not polled within {limit:.1f} s (last: {ago})")
        # While something runs a heartbeat goes out every lease / 3; none within a lease
        # (counted from the last beat, or from the start of the oldest execution if later)
        # means the leases are about to be, or were, lost.
        live = [ex for ex in (heartbeat.tracked() if heartbeat else []) if not ex.lease_lost]
        if live:
            since = min(ex.started_mono for ex in live)
            reference = since if last_beat is None else max(last_beat, since)
            if now - reference > lease.total_seconds():
                reasons.append(f"no heartbeat for {now - reference:.1f} s while {len(live)} "
                               f"execution(s) run (lease {lease.total_seconds():g} s)")
    ok = not reasons
    registry = getattr(heartbeat, "registry", None)  # None: no heartbeat, or a stand-in
    skew = registry.skew_reason() if registry is not None else None
    if skew is not None:
        reasons.append(skew)
    return Health(
        ok=ok,
        node_id=node_id,
        db_reachable=problem is None,
        last_poll_at=at(last_poll),
        last_heartbeat_at=at(last_beat),
        running=len(running),
        reason="; ".join(reasons) or None,
    )
