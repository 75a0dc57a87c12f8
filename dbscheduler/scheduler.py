"""The :class:`Scheduler`: registration, start/shutdown/run, and the operations.

It is thin: it validates, wires the engine's parts together, and delegates SQL to the store.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from types import FrameType, TracebackType
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ._clock import Clock
from ._execution import Execution, TaskDef, TaskFunction
from ._executor import Ended, Executor, Finisher
from ._heartbeat import Heartbeat
from ._poller import Poller
from ._wakeup import PgListener, Wakeup
from .context import TaskInfo
from .dialects import engine_options
from .failures import FailureSettings, NoRetry
from .listeners import Listeners
from .schedules import Schedule
from .store import Registration, Store, validate_name
from .table import DEFAULT_TABLE, split_table_name

__all__ = ["DEFAULT_URL", "Scheduler"]

log = logging.getLogger("dbscheduler")

DEFAULT_URL = "sqlite:///dbscheduler.sqlite3"
"""The embedded default: a SQLite file in the working directory, created on first use."""

F = TypeVar("F", bound=TaskFunction)


def default_node_id() -> str:
    """Host name, process id and a short random suffix: unique even across restarts."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"[:255]


def _duration(value: timedelta | float | int, field: str, *, allow_zero: bool = False) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, (timedelta, int, float)):
        raise ValueError(f"{field} must be a timedelta or a number of seconds, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{field} must be a finite number of seconds, got {value!r}")
    if not isinstance(value, timedelta) and abs(value) > 86_400 * 365:
        raise ValueError(f"{field} must be at most a year, got {value!r} s")
    delta = value if isinstance(value, timedelta) else timedelta(seconds=value)
    if delta < timedelta(0) or (delta == timedelta(0) and not allow_zero):
        raise ValueError(f"{field} must be > 0, got {value!r}")
    return delta


class Scheduler:
    """Runs registered tasks on this node, coordinated with every other node through one table.

    ::

        scheduler = Scheduler("postgresql+psycopg://app@db/app")

        @scheduler.task("nightly-report", schedule=Cron("0 3 * * *", tz="Europe/Berlin"))
        def nightly_report(ctx: TaskContext) -> None:
            ...

        scheduler.start()          # background threads; returns at once
        ...
        scheduler.shutdown()

    With no URL it uses the embedded default, a SQLite file ``./dbscheduler.sqlite3`` whose
    table is created on first use. On server databases the table comes from
    ``dbscheduler migrate`` (or your own Alembic).

    Args:
        url: SQLAlchemy URL of the database (ignored when ``engine`` is given).
        engine: an existing SQLAlchemy engine to use instead of a URL.
        table: the table's name, a plain identifier with an optional ``schema.`` prefix.
        node_id: this node's name in ``locked_by``; default host-pid-random.
        max_workers: task functions running at once on this node.
        lease: how long a pick holds a task without heartbeat; heartbeats every ``lease / 3``.
        poll_interval: the safety-net poll; due tasks start on time regardless.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        engine: Engine | None = None,
        table: str = DEFAULT_TABLE,
        node_id: str | None = None,
        max_workers: int = 8,
        lease: timedelta | float = timedelta(seconds=30),
        poll_interval: timedelta | float = timedelta(seconds=1),
    ) -> None:
        split_table_name(table)
        if url is not None and engine is not None:
            raise ValueError("pass either url or engine, not both")
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers must be an integer >= 1, got {max_workers!r}")
        if node_id is not None and (not isinstance(node_id, str) or not 0 < len(node_id) <= 255):
            raise ValueError(f"node_id must be a string of 1 to 255 characters, got {node_id!r}")
        self.lease = _duration(lease, "lease")
        self.poll_interval = _duration(poll_interval, "poll_interval")
        self.max_workers = max_workers
        self.node_id = node_id or default_node_id()
        self.table = table
        self._owns_engine = engine is None
        if engine is not None and not isinstance(engine, Engine):
            raise ValueError(f"engine must be a SQLAlchemy Engine, got {type(engine).__name__}")
        if url is not None and not isinstance(url, str):
            raise ValueError(f"url must be a string, got {type(url).__name__}")
        if engine is None:
            # No pool_pre_ping: it would add a statement to every poll. A connection that died
            # fails its statement, SQLAlchemy discards it, and every loop here retries.
            try:
                parsed = sa.engine.make_url(url or DEFAULT_URL)
            except sa.exc.ArgumentError as exc:
                raise ValueError(
                    f"url {url!r} is not a database URL: {exc} (e.g. "
                    "'postgresql+psycopg://user@host/db' or 'sqlite:///file.sqlite3')"
                ) from None
            engine = sa.create_engine(
                parsed, pool_size=5, max_overflow=10,
                **engine_options(parsed.get_backend_name(), self.lease),
            )
        self.engine = engine
        self._store = Store(engine, table)
        self._store.dialect.configure_engine(engine)
        self._embedded = engine.dialect.name == "sqlite"
        self._schema_ready = False
        self._tasks: dict[str, TaskDef] = {}
        self._listeners = Listeners()
        self._lock = threading.Lock()
        self._state = "new"
        self._stopped = threading.Event()
        self._wakeup = Wakeup()
        self.clock = Clock()
        self._heartbeat: Heartbeat | None = None
        self._executor: Executor | None = None
        self._finisher: Finisher | None = None
        self._poller: Poller | None = None
        self._listener: PgListener | None = None

    def __repr__(self) -> str:
        url = self.engine.url.render_as_string(hide_password=True)
        return f"<Scheduler {self.node_id} {url} table={self.table} {self._state}>"

    # -- registration --------------------------------------------------------------------
    def task(
        self,
        name: str,
        *,
        schedule: Schedule,
        on_failure: FailureSettings | None = None,
    ) -> Callable[[F], F]:
        """Decorator registering a function as the task ``name``.

        >>> @scheduler.task("cleanup", schedule=FixedDelay(300))   # doctest: +SKIP
        ... def cleanup(ctx: TaskContext) -> None: ...
        """

        def register(fn: F) -> F:
            self.add(name, fn, schedule=schedule, on_failure=on_failure)
            return fn

        return register

    def add(
        self,
        name: str,
        fn: TaskFunction,
        *,
        schedule: Schedule,
        on_failure: FailureSettings | None = None,
    ) -> None:
        """Register ``fn`` as the task ``name`` (the function may be a coroutine function).

        Its row is inserted if absent when the scheduler starts (at once if already started);
        a changed schedule applies at once. Invalid arguments raise ``ValueError`` naming the
        task and the field, before anything is written.

        >>> scheduler.add("cleanup", cleanup, schedule=FixedDelay(300))   # doctest: +SKIP
        """
        try:
            validate_name(name)
        except ValueError as exc:
            raise ValueError(f"task {str(name)[:60]!r}: {exc}") from None
        if not isinstance(schedule, Schedule):
            raise ValueError(
                f"task {name!r}: schedule must be a Cron, FixedRate, FixedDelay or Dynamic, "
                f"got {schedule!r}"
            )
        on_failure = NoRetry() if on_failure is None else on_failure
        if not isinstance(on_failure, FailureSettings):
            raise ValueError(
                f"task {name!r}: on_failure must be NoRetry, LinearBackoff, ArithmeticBackoff "
                f"or GeometricBackoff, got {on_failure!r}"
            )
        if not callable(fn):
            raise ValueError(f"task {name!r}: the task function is not callable: {fn!r}")
        if len(schedule.describe()) > 500:
            raise ValueError(f"task {name!r}: schedule description longer than 500 characters")
        definition = TaskDef.build(name, fn, schedule, on_failure)
        with self._lock:
            if name in self._tasks:
                raise ValueError(f"task {name!r} is already registered on this scheduler")
            if self._state == "stopped":
                raise RuntimeError("this scheduler was shut down; create a new one")
            self._tasks[name] = definition
            started = self._state == "running"
        if started:
            self._register([definition])
            self._wakeup.set()

    def _register(self, defs: list[TaskDef]) -> None:
        self._store.register(
            [Registration(d.name, d.schedule.describe(), d.schedule.first_run) for d in defs]
        )

    def add_listener(self, listener: object) -> None:
        """Add an object with any of ``on_started``, ``on_finished``, ``on_lease_lost``,
        ``on_lost_execution``, ``on_poll_error`` (see :mod:`dbscheduler.listeners`)."""
        self._listeners.add(listener)

    # -- lifecycle -----------------------------------------------------------------------
    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        if self._embedded:
            self._store.create_table()
        self._store.check_schema()
        self._schema_ready = True

    def start(self) -> None:
        """Register the tasks and start the background threads; returns at once."""
        with self._lock:
            if self._state != "new":
                raise RuntimeError(
                    f"Scheduler.start() called on a scheduler that is {self._state}; "
                    "a scheduler starts once: create a new one"
                )
            self._state = "starting"
        try:
            self._ensure_schema()
            self._register(list(self._tasks.values()))
        except BaseException:
            with self._lock:
                # A shutdown() waiting for this start may proceed; a new start() may retry.
                self._state = "new"
            raise
        store, node = self._store, self.node_id
        self._heartbeat = Heartbeat(store, node, self.lease, self._lease_lost, self._cancelled)
        self._finisher = Finisher(store, node, self._heartbeat, self._listeners,
                                  self._wakeup.hint, self.poll_interval)
        self._executor = Executor(self.max_workers, self._ended, self._listeners)
        self._poller = Poller(
            store=store, node_id=node, lease=self.lease, poll_interval=self.poll_interval,
            tasks=self._tasks, executor=self._executor, heartbeat=self._heartbeat,
            listeners=self._listeners, wakeup=self._wakeup, clock=self.clock,
            unwritten=self._finisher.unwritten,
        )
        if store.dialect.supports_notify:
            self._listener = PgListener(self.engine, store.channel, self._wakeup)
            self._listener.start()
        self._heartbeat.start()
        self._finisher.start()
        self._poller.start()
        with self._lock:
            self._state = "running"
        log.info("node %s started with %d task(s) on %s", node, len(self._tasks), self)

    def shutdown(self, timeout: float = 30) -> None:
        """Stop picking, wait up to ``timeout`` s for running executions, release the rest.

        Running executions see ``ctx.stop_requested`` set at once. Whatever is still running
        after the timeout has its lease released (fenced), so another node may pick it at once.
        """
        while True:
            with self._lock:
                state = self._state
                if state in ("new", "stopped"):
                    self._state = "stopped"
                    self._stopped.set()
                    return
                if state == "running":
                    self._state = "stopping"
                    break
            if state == "stopping":  # another thread is shutting down: wait for it
                self._stopped.wait(timeout)
                return
            # "starting": a signal arrived while start() runs; let it finish, then stop.
            time.sleep(0.05)
        assert self._poller and self._executor and self._finisher and self._heartbeat
        self._poller.stop()
        for ex in self._executor.running():
            ex.ctx.stop_requested.set()
        if not self._executor.wait(timeout):
            log.warning("shutdown: %d execution(s) still running after %s s; releasing them",
                        len(self._executor.running()), timeout)
        self._finisher.stop(timeout=max(5.0, self.lease.total_seconds()))
        leftovers = self._heartbeat.tracked()
        self._heartbeat.untrack(leftovers)
        if leftovers:
            try:
                released = self._store.release(self.node_id, {e.id: e.token for e in leftovers})
                log.warning("shutdown: released %d lease(s) still held", released)
            except Exception as exc:
                log.warning("shutdown: could not release leases (they expire on their own): %s",
                            exc)
        self._heartbeat.stop()
        if self._listener is not None:
            self._listener.stop()
        self._executor.shutdown()
        if self._owns_engine:
            self.engine.dispose()
        with self._lock:
            self._state = "stopped"
        self._stopped.set()
        log.info("node %s stopped", self.node_id)

    def run(self, shutdown_timeout: float = 30) -> None:
        """Start and block until SIGINT or SIGTERM (or :meth:`shutdown` from another thread),
        then shut down gracefully."""
        previous: dict[signal.Signals, Any] = {}

        def handle(signum: int, frame: FrameType | None) -> None:
            log.info("received %s; shutting down", signal.Signals(signum).name)
            threading.Thread(
                target=self.shutdown, args=(shutdown_timeout,), name="dbscheduler-shutdown"
            ).start()

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, handle)
        try:
            self.start()
            while not self._stopped.wait(0.5):
                pass
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
            if not self._stopped.is_set():
                self.shutdown(shutdown_timeout)

    def __enter__(self) -> Scheduler:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    # -- engine callbacks ----------------------------------------------------------------
    def _ended(self, ended: Ended) -> None:
        assert self._finisher is not None
        self._finisher.put(ended)
        self._wakeup.nudge()  # a worker is free

    def _lease_lost(self, ex: Execution) -> None:
        ex.ctx.stop_requested.set()
        log.warning("task %r: lease lost (token %d); asking the execution to stop",
                    ex.task.name, ex.token)
        self._listeners.emit("on_lease_lost", ex.ctx)

    def _cancelled(self, ex: Execution) -> None:
        ex.cancel_requested = True
        ex.ctx.stop_requested.set()
        log.info("task %r: cancel requested; asking the execution to stop", ex.task.name)

    # -- operations ----------------------------------------------------------------------
    def _ops(self) -> Store:
        if self._embedded and not self._schema_ready:
            self._ensure_schema()
        return self._store

    def trigger(self, name: str) -> None:
        """Make ``name`` due now; nodes listening on PostgreSQL wake at once.

        Raises :class:`TaskNotFound` for an unknown name and :class:`TaskRunning` while it
        runs (its next time is then its lease).
        """
        self._ops().trigger(name)
        self._wakeup.set()

    def reschedule(self, name: str, at: datetime) -> None:
        """Set the next due time of ``name`` to the aware datetime ``at``."""
        if not isinstance(at, datetime):
            raise ValueError(f"reschedule {name!r}: at must be a datetime, got {at!r}")
        if at.tzinfo is None or at.utcoffset() is None:
            raise ValueError(
                f"reschedule {name!r}: at={at.isoformat()} is naive; pass an aware datetime "
                "(e.g. with tzinfo=timezone.utc)"
            )
        self._ops().reschedule(name, at)
        self._wakeup.set()

    def pause(self, name: str) -> None:
        """Never pick ``name`` again, on any node, until :meth:`resume`."""
        self._ops().set_paused(name, True)

    def resume(self, name: str) -> None:
        """Undo :meth:`pause`; the task runs at its stored next time (at once if past)."""
        self._ops().set_paused(name, False)
        self._wakeup.set()

    def cancel(self, name: str) -> bool:
        """Ask the running execution of ``name`` to stop (``ctx.stop_requested``, seen within
        one heartbeat on its node). Returns False, changing nothing, if it is not running."""
        asked = self._ops().cancel(name)
        if asked and self._heartbeat is not None:
            for ex in self._heartbeat.tracked():
                if ex.task.name == name:
                    self._cancelled(ex)
        return asked

    def delete(self, name: str, force: bool = False) -> None:
        """Delete the row of ``name``; refused while it runs unless ``force=True``.

        A task still registered on a running node is inserted again when a node starts.
        """
        self._ops().delete(name, force=force)

    def tasks(self) -> list[TaskInfo]:
        """A :class:`TaskInfo` for every row in the table, ordered by name."""
        return self._ops().tasks()

    def info(self, name: str) -> TaskInfo:
        """The :class:`TaskInfo` of ``name``."""
        return self._ops().info(name)
