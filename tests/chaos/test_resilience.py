"""The scheduler's threads never die from an exception, and a fault is logged once.

In-process, with exceptions injected where the engine calls out: listeners (every hook), the
clock offset probe (``Clock.observe``), the LISTEN connection (PostgreSQL), a task that raises
``SystemExit``; and a database that stays unreachable for seconds behind a TCP proxy, which
must produce one WARNING per activity, not one per poll.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import Dynamic, FixedDelay, FixedRate, Scheduler, TaskContext
from dbscheduler._store import Registration, Store
from tests.chaos.faults import proxy_for
from tests.helpers import running, wait_until

pytestmark = pytest.mark.chaos

HOUR = FixedDelay(3600)


class Ticks:
    """Counts executions per task name, with their times."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = {}

    def __call__(self, ctx: TaskContext) -> None:
        with self.lock:
            self.times.setdefault(ctx.name, []).append(time.monotonic())

    def count(self, name: str, since: float = 0.0) -> int:
        with self.lock:
            return sum(t >= since for t in self.times.get(name, []))




def engine_threads() -> set[str]:
    return {t.name.rsplit("-", 1)[0] if t.name.startswith("dbscheduler-worker") else t.name
            for t in threading.enumerate() if t.name.startswith("dbscheduler-")}


def assert_keeps_scheduling(ticks: Ticks, name: str, seconds: float, at_least: int) -> None:
    """``name`` runs ``at_least`` times more, in ``seconds`` on an idle machine: a bound for a
    node that stopped (0 or 1 runs). Waited for up to twenty times as long, since a fixed
    window of ``seconds`` saw 4 runs of 5 on a loaded machine (and one ten times slower must
    pass too); as soon as they ran, it returns."""
    since = time.monotonic()
    deadline = since + 20 * seconds
    while ticks.count(name, since) < at_least and time.monotonic() < deadline:
        time.sleep(0.02)
    got = ticks.count(name, since)
    assert got >= at_least, (f"{name} ran {got} times in {20 * seconds} s: the node stopped "
                             "scheduling")


# -- listeners --------------------------------------------------------------------------------
class Exploding:
    """A listener whose every hook raises."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def _boom(self, hook: str) -> None:
        self.calls[hook] = self.calls.get(hook, 0) + 1
        raise RuntimeError(f"listener {hook} exploded")

    def on_started(self, ctx: Any) -> None:
        self._boom("on_started")

    def on_finished(self, ctx: Any, outcome: Any) -> None:
        self._boom("on_finished")

    def on_lease_lost(self, ctx: Any) -> None:
        self._boom("on_lease_lost")

    def on_lost_execution(self, info: Any) -> None:
        self._boom("on_lost_execution")

    def on_poll_error(self, exc: BaseException) -> None:
        self._boom("on_poll_error")


def test_listeners_that_raise_in_every_hook_never_stop_the_node(
    migrated: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, table = migrated
    admin = sa.create_engine(url, poolclass=sa.pool.NullPool)
    # An orphan: held by a node that vanished, its lease long expired (on_lost_execution).
    # ``migrated`` made the table; registering the row first is what a node would have done.
    Store(admin, table).register([Registration("orphan", HOUR.describe(), HOUR.first_run)])
    with admin.begin() as conn:
        conn.execute(sa.text(
            f"UPDATE {table} SET locked_by = 'ghost', attempt = 1, total_attempt = 1, "
            "next_process_at = :past WHERE queue_name = 'orphan'"),
            {"past": _past(admin, table)})
    ticks = Ticks()
    stolen = threading.Event()

    def victim(ctx: TaskContext) -> None:
        ticks(ctx)
        ctx.stop_requested.wait(10)
        if ctx.stop_requested.is_set():
            stolen.set()

    s = Scheduler(url, table=table, node_id="boom", lease=1.5, poll_interval=0.1)
    s.add("tick", ticks, schedule=FixedRate(0.2))
    s.add("victim", victim, schedule=FixedRate(0.2))
    s.add("orphan", ticks, schedule=HOUR)
    listener = Exploding()
    s.add_listener(listener)
    # One poll fails (on_poll_error), the next ones work.
    real_poll = Store.poll
    failed = threading.Event()

    def flaky_poll(self: Store, known: Any) -> Any:
        if not failed.is_set():
            failed.set()
            raise sa.exc.OperationalError("SELECT 1", {}, RuntimeError("injected poll failure"))
        return real_poll(self, known)

    monkeypatch.setattr(Store, "poll", flaky_poll)
    try:
        with running(s):
            wait_until(lambda: ticks.count("victim") >= 1, 10, "the victim runs")
            threads = engine_threads()
            # Another node takes the victim's row: its heartbeat sees the lease lost.
            with admin.begin() as conn:
                conn.execute(sa.text(
                    f"UPDATE {table} SET total_attempt = total_attempt + 1, "
                    "locked_by = 'thief' WHERE queue_name = 'victim'"))
            wait_until(stolen.is_set, 10, "the victim is told its lease is lost")
            # NoRetry, FixedDelay(1 h): the lost execution is recorded and the row put back.
            wait_until(lambda: s.info("orphan").last_status == "lost"
                       and not s.info("orphan").running, 10, "the orphan is recovered")
            assert_keeps_scheduling(ticks, "tick", 1.5, at_least=3)
            assert engine_threads() == threads, "an engine thread died"
    finally:
        admin.dispose()
    for hook in ("on_started", "on_finished", "on_lease_lost", "on_lost_execution",
                 "on_poll_error"):
        assert listener.calls.get(hook), f"{hook} was never called: {listener.calls}"


def _past(engine: sa.engine.Engine, table: str) -> Any:
    return Store(engine, table).db_now() - timedelta(minutes=5)


# -- the clock offset probe -------------------------------------------------------------------
def test_a_clock_probe_that_raises_does_not_stop_scheduling(
    migrated: tuple[str, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The offset is only used to decide how long to sleep: losing it must not
    stop the node from picking."""
    import dbscheduler._engine.clock as clock

    url, table = migrated

    def broken(self: Any, *args: Any) -> None:
        raise RuntimeError("clock probe exploded")

    monkeypatch.setattr(clock.Clock, "observe", broken)
    caplog.set_level(logging.WARNING, logger="dbscheduler")
    ticks = Ticks()
    s = Scheduler(url, table=table, node_id="clockless", poll_interval=0.1)
    s.add("tick", ticks, schedule=FixedRate(0.2))
    with running(s):
        threads = engine_threads()
        # 4 s, not 2: it ran 3 times in 2 s once under a full parallel suite.
        assert_keeps_scheduling(ticks, "tick", 4.0, at_least=5)
        assert engine_threads() == threads
    warnings = [r for r in caplog.records if "clock probe exploded" in r.getMessage()]
    assert len(warnings) <= 1, f"logged {len(warnings)} times, not once"


# -- the LISTEN connection --------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_broken_listen_connection_does_not_stop_scheduling_and_recovers(
    migrated: tuple[str, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import psycopg

    url, table = migrated
    caplog.set_level(logging.INFO, logger="dbscheduler")
    broken = threading.Event()
    broken.set()
    real_notifies = psycopg.Connection.notifies

    def notifies(self: Any, *args: Any, **kwargs: Any) -> Any:
        if broken.is_set():
            raise RuntimeError("LISTEN connection exploded")
        return real_notifies(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "notifies", notifies)
    ticks = Ticks()
    # Long enough that a bound of a third of it holds on a machine ten times slower.
    poll = 30.0
    s = Scheduler(url, table=table, node_id="deaf", poll_interval=poll)
    s.add("tick", ticks, schedule=FixedRate(0.2))
    s.add("hourly", ticks, schedule=HOUR)
    ops = Scheduler(url, table=table, node_id="ops")
    try:
        with running(s):
            threads = engine_threads()
            assert_keeps_scheduling(ticks, "tick", 2.0, at_least=5)
            broken.clear()
            wait_until(lambda: any("recovered" in r.getMessage() and "LISTEN" in r.getMessage()
                                   for r in caplog.records), 60, "the LISTEN connection is back")
            # "recovered" is logged once a wait on the new LISTEN completed: it is in place.
            ops.trigger("hourly")
            triggered = time.monotonic()
            wait_until(lambda: ticks.count("hourly") >= 1, poll + 30, "the triggered task")
            latency = ticks.times["hourly"][0] - triggered
            assert latency < poll / 3, f"woken after {latency:.2f} s: not by NOTIFY"
            assert engine_threads() == threads
    finally:
        ops.engine.dispose()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING
                and "LISTEN" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


# -- a task that raises SystemExit ------------------------------------------------------------
def test_a_task_raising_system_exit_does_not_kill_the_workers(tmp_path: Any) -> None:
    """``sys.exit()`` inside a task (or a library raising ``KeyboardInterrupt``) is recorded
    as an error; the worker thread survives to run the next task."""
    ticks = Ticks()
    exits = Ticks()

    def exiting(ctx: TaskContext) -> None:
        exits(ctx)
        sys.exit(3)

    s = Scheduler(f"sqlite:///{tmp_path / 'db.sqlite3'}", node_id="exit", max_workers=2,
                  poll_interval=0.1)
    s.add("exit", exiting, schedule=FixedRate(0.1))
    s.add("tick", ticks, schedule=FixedRate(0.2))
    s.start()
    try:
        wait_until(lambda: exits.count("exit") >= 4, 40, "the exiting task runs 4 times")
        assert_keeps_scheduling(ticks, "tick", 1.5, at_least=3)
        info = s.info("exit")
        assert info.last_status == "error" and "SystemExit" in (info.last_error or ""), info
        workers = sum(t.name.startswith("dbscheduler-worker") for t in threading.enumerate())
        assert workers == 2, f"{workers} of 2 workers left"
    finally:
        s.shutdown(timeout=1)


# -- an outage is logged once -----------------------------------------------------------------
@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_long_outage_is_logged_once_per_activity(
    migrated: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    url, table = migrated
    caplog.set_level(logging.INFO, logger="dbscheduler")
    ticks = Ticks()

    def slow(ctx: TaskContext) -> None:
        ticks(ctx)
        ctx.stop_requested.wait(3)

    with proxy_for(url) as proxy:
        s = Scheduler(proxy.url_through(url), table=table, node_id="outage", lease=1.5,
                      poll_interval=0.1)
        s.add("tick", ticks, schedule=FixedRate(0.1))
        s.add("slow", slow, schedule=FixedRate(0.1))
        with running(s):
            wait_until(lambda: ticks.count("slow") >= 1 and ticks.count("tick") >= 3, 10,
                       "the tasks run")
            threads = engine_threads()
            proxy.set_mode("refuse")
            time.sleep(3.0)  # dozens of polls and heartbeats fail meanwhile
            proxy.set_mode("forward")
            restored = time.monotonic()
            wait_until(lambda: ticks.count("tick", restored) >= 3, 60,
                       "the node schedules again after the outage")
            recovered_after = time.monotonic() - restored
            assert engine_threads() == threads
    warnings: dict[str, int] = {}
    for r in caplog.records:
        if r.levelno == logging.WARNING and "failed" in r.getMessage():
            what = r.getMessage().split(" failed")[0]
            warnings[what] = warnings.get(what, 0) + 1
    assert warnings, "the outage was not logged at all"
    repeated = {k: n for k, n in warnings.items() if n > 1}
    assert not repeated, f"logged more than once per activity: {repeated}"
    # The back-off's cap (a third of the lease) is next_backoff's own doctest; here a bound
    # that a machine ten times slower meets, against a node that backed off for good.
    assert recovered_after < 30.0, f"took {recovered_after:.1f} s to schedule again"


# -- shutdown while starting ------------------------------------------------------------------
def test_shutdown_while_start_is_registering_stops_the_node(tmp_path: Any) -> None:
    """SIGTERM may arrive while ``start()`` still registers tasks (``run()`` has installed its
    handler by then): the shutdown must wait for the start and stop the node, not fail and
    leave it running for good."""
    registering = threading.Event()

    def first_run_slowly(ctx: Any) -> datetime:
        registering.set()
        time.sleep(1.0)  # registration calls this: start() takes a second
        return datetime.now(timezone.utc) + timedelta(hours=1)

    earlier = set(threading.enumerate())  # an earlier test's drain may still be ending
    s = Scheduler(f"sqlite:///{tmp_path / 'db.sqlite3'}", node_id="early", poll_interval=0.1)
    s.add("slow-to-register", lambda: None, schedule=Dynamic(first_run_slowly))
    errors: list[BaseException] = []

    def call(fn: Callable[[], object]) -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    starting = threading.Thread(target=call, args=(s.start,))
    starting.start()
    assert registering.wait(30), "start() never registered its task"
    stopping = threading.Thread(target=call, args=(lambda: s.shutdown(timeout=5),))
    stopping.start()
    starting.join(10)
    stopping.join(10)
    try:
        assert not errors, f"start/shutdown raised: {errors!r}"

        def left() -> list[str]:
            return [t.name for t in set(threading.enumerate()) - earlier
                    if t.name.startswith("dbscheduler-")]

        deadline = time.monotonic() + 10
        while left() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left(), f"engine threads still running 10 s after the shutdown: {left()}"
    finally:
        s.shutdown(timeout=1)  # if the first one failed, stop it for real
