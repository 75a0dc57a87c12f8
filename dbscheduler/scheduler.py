"""The :class:`Scheduler`: declaring tasks, handlers and listeners, start/shutdown/run, the
operations and the batches.

One class, composed: it validates (the declarations' checks live in :mod:`._declarations`),
wires the engine's parts together, and delegates SQL to the store (the engine) and to its
:class:`~dbscheduler.Client` (the operations and the batches), waking its own poller where a
change may make a task due sooner.
"""

from __future__ import annotations

import threading
import time
from collections import ChainMap
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy.engine import Engine

from ._engine.alerts import AlertWatch
from ._engine.clock import Clock
from ._engine.declarations import declare_task, default_node_id, registration
from ._engine.durations import duration
from ._engine.execution import Ended, Execution, TaskDef, TaskFunction
from ._engine.executor import Executor
from ._engine.finisher import Finisher, run_record
from ._engine.health import check as check_health
from ._engine.heartbeat import Heartbeat
from ._engine.history import HistorySettings, builtin_tasks
from ._engine.isolation import warm_up
from ._engine.nodes import NodeRegistry
from ._engine.options import node_tags
from ._engine.poller import Poller
from ._engine.recovery import Recovery
from ._engine.runtime import Handlers
from ._engine.startup import retry_unreachable, run_until_signal
from ._engine.wakeup import NotifyListener, Wakeup
from ._store import Store, refuse_reserved
from .batches import BatchFunction, BatchInfo, batch_failure, check_batch_handler_name, delivery
from .client import Client
from .context import RunInfo, TaskInfo
from .dialects import create_engine, normalize_url, prepare_engine
from .errors import LifecycleError, TaskNotFound
from .failures import FailureSettings
from .health import Health
from .listeners import Listener, Listeners
from .logfields import about, engine_log, engine_thread, node_context
from .schedules import Schedule
from .table import DEFAULT_TABLE, split_table_name

__all__ = ["Scheduler"]

log = engine_log("dbscheduler")

F = TypeVar("F", bound=TaskFunction)
B = TypeVar("B", bound=BatchFunction)


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
        tags: what this node offers (``{"gpu"}``): it also runs tasks with ``requires`` one
            of them. Its node id is always one of its tags.
        history: how long finished executions are kept in ``<table>_runs`` (``runs()``);
            ``None`` writes no history (and this node prunes none).
        history_per_task: at most this many runs kept per task (``None``: no count limit).
        overdue_after: a task due longer ago than this that no node picked is late
            (listeners get ``on_overdue`` on one node of the cluster).
        overdue_check: how often this node looks for late tasks (one query); ``None``: never.
        alert_one_offs: also alert on one-off jobs (``schedule_once``, batch keys) that are
            overdue; by default a backlog of them is not a late task to a pager (their
            ``alert_after``, when they have one, still counts).
        http_delivery_hosts: run the built-in HTTP delivery of the queue service for
            targets on these hosts (``"mail.internal"``, ``"10.0.0.5:8080"``,
            ``"*.example.com"``); see :mod:`dbscheduler.http_delivery`.
        listen_url: on PostgreSQL behind a connection pooler (PgBouncer), a URL that reaches
            the server directly, used for ``LISTEN`` alone (one connection). Without it, a node
            that finds a pooler in front polls every ``poll_interval`` and says so once.
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
        tags: Iterable[str] = (),
        history: timedelta | float | None = timedelta(days=7),
        history_per_task: int | None = 1000,
        overdue_after: timedelta | float = timedelta(seconds=60),
        overdue_check: timedelta | float | None = timedelta(seconds=30),
        alert_one_offs: bool = False,
        http_delivery_hosts: Sequence[str] | None = None,
        listen_url: str | None = None,
    ) -> None:
        split_table_name(table)
        if url is not None and engine is not None:
            raise ValueError("pass either url or engine, not both")
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers must be an integer >= 1, got {max_workers!r}")
        if node_id is not None and (not isinstance(node_id, str) or not 0 < len(node_id) <= 255):
            raise ValueError(f"node_id must be a string of 1 to 255 characters, got {node_id!r}")
        self.lease = duration(lease, "lease")
        self.poll_interval = duration(poll_interval, "poll_interval")
        self.history = HistorySettings.of(history, history_per_task)
        self.overdue_after = duration(overdue_after, "overdue_after", allow_zero=True)
        self.overdue_check = (None if overdue_check is None
                              else duration(overdue_check, "overdue_check"))
        if not isinstance(alert_one_offs, bool):
            raise ValueError(f"alert_one_offs must be True or False, got {alert_one_offs!r}")
        self.alert_one_offs = alert_one_offs
        self.max_workers = max_workers
        self.node_id = node_id or default_node_id()
        self.table = table
        self._owns_engine = engine is None
        if engine is not None and not isinstance(engine, Engine):
            raise ValueError(f"engine must be a SQLAlchemy Engine, got {type(engine).__name__}")
        if engine is None:
            engine = create_engine(url, lease=self.lease)
        else:
            prepare_engine(engine)
        self.engine = engine
        self._store = Store(engine, table, history=self.history is not None)
        self.listen_url = listen_url
        """The direct URL for ``LISTEN`` (see ``listen_url`` above); read at :meth:`start`."""
        self._check_listen_url()
        self._listen_engine: Engine | None = None
        self._store.tags = node_tags(tags, self.node_id)
        self.tags = self._store.tags
        """This node's tags (its id among them): it runs rows requiring one, or none."""
        self.client = Client(engine=engine, table=table, overdue_after=self.overdue_after)
        """The :class:`Client` on this scheduler's table: every operation, also from code
        that holds the scheduler."""
        self._embedded = self._store.dialect.embedded
        self._schema_ready = False
        self._tasks: dict[str, TaskDef] = {}
        self._handlers = Handlers(ChainMap(self._tasks, builtin_tasks(self._store, self.history)))
        self._listeners = Listeners()
        self._lock = threading.Lock()
        self._state = "new"
        self._stopped = threading.Event()
        self._start_abort = threading.Event()
        self._wakeup = Wakeup()
        self.clock = Clock()
        self._heartbeat: Heartbeat | None = None
        self._executor: Executor | None = None
        self._finisher: Finisher | None = None
        self._poller: Poller | None = None
        self._listener: NotifyListener | None = None
        self._alerts: AlertWatch | None = None
        self.http_delivery_hosts: tuple[str, ...] = ()
        """The hosts this node's HTTP deliveries may call (the queue service's allow-list)."""
        if http_delivery_hosts is not None:
            self.http_delivery_hosts = self._add_http_delivery(http_delivery_hosts)

    def __repr__(self) -> str:
        url = self.engine.url.render_as_string(hide_password=True)
        return f"<Scheduler {self.node_id} {url} table={self.table} {self._state}>"

    # -- lifecycle -----------------------------------------------------------------------
    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        if self._embedded:
            self._store.create_table()
        self._store.check_schema(history=self.history is not None)
        self._schema_ready = True

    def start(self, *, wait: float | timedelta | None = None) -> None:
        """Register the tasks and start the background threads; returns at once.

        ``wait`` (seconds or a ``timedelta``): while the database server does not answer yet
        (a container starting next to it in Docker Compose or Kubernetes), retry with backoff
        for up to that long, logging one warning, before raising
        :class:`~dbscheduler.DatabaseUnreachable`. Without it a server that is down raises at
        once. A wrong database name, user or password never waits.
        """
        wait_s = 0.0 if wait is None else duration(wait, "wait", allow_zero=True).total_seconds()
        with node_context(self.node_id):  # the engine's threads and lines belong to this node
            self._start(wait_s)

    def _start(self, wait_s: float) -> None:
        with self._lock:
            if self._state != "new":
                raise LifecycleError(
                    f"Scheduler.start() called on a scheduler that is {self._state}; "
                    "a scheduler starts once: create a new one"
                )
            self._state = "starting"
            self._start_abort.clear()
        try:
            self._prepare(wait_s)
        except BaseException:
            with self._lock:
                # A shutdown() waiting for this start may proceed; a new start() may retry.
                self._state = "new"
            raise
        store, node = self._store, self.node_id
        store.statistics.ensure()  # before the first pick, which plans from them
        self._heartbeat = Heartbeat(store, node, self.lease, self._lease_lost, self._cancelled)
        self._heartbeat.on_error = self._listeners.on_heartbeat_error
        handlers = self._handlers
        self._heartbeat.registry = NodeRegistry(
            store, node, self.tags, lambda: handlers.names() - handlers.tasks.keys())
        window = store.dialect.batch_window
        self._finisher = Finisher(store, node, self._heartbeat, self._listeners,
                                  self._wakeup.hint, self.poll_interval, self._row_exists,
                                  gather=window / 2)
        self._executor = Executor(self.max_workers, self._ended, self._listeners,
                                  on_free=self._wakeup.nudge)
        self._poller = Poller(
            store=store, node_id=node, lease=self.lease, poll_interval=self.poll_interval,
            tasks=self._handlers, executor=self._executor, heartbeat=self._heartbeat,
            listeners=self._listeners, wakeup=self._wakeup, clock=self.clock,
            finisher=self._finisher,
            recovery=Recovery(store, node, self._listeners, self._wakeup.hint),
            reregister=lambda: self._register(self._declared()),
            ahead=window,
        )
        if self.overdue_check is not None:
            self._alerts = AlertWatch(store, self._listeners, self.overdue_after,
                                      self.overdue_check, one_offs=self.alert_one_offs)
        if store.dialect.supports_notify:
            self._check_listen_url()
            if self.listen_url is not None:
                self._listen_engine = create_engine(self.listen_url, lease=self.lease)
            self._listener = NotifyListener(self._listen_engine or self.engine, store.dialect,
                                            store.channel, self._wakeup, node)
            self._listener.start()
        if any(d.options.isolation == "process" for d in self._tasks.values()):
            warm_up()
        self._heartbeat.start()
        self._finisher.start()
        self._poller.start()
        if self._alerts is not None:
            self._alerts.start()
        with self._lock:
            self._state = "running"
        log.info("started with %d task(s) on %s", len(self._tasks), self)

    def _prepare(self, wait: float) -> None:
        """Create/check the table and register the tasks, waiting up to ``wait`` seconds for a
        server that does not answer yet."""
        def prepare() -> None:
            self._ensure_schema()
            self._register(self._declared())

        retry_unreachable(prepare, dialect=self._store.dialect, safe_url=self._store.safe_url(),
                          wait=wait, abort=self._start_abort)

    def shutdown(self, timeout: float = 30) -> None:
        """Stop picking, wait up to ``timeout`` s for running executions, and return.

        Running executions see ``ctx.stop_requested`` set at once. Picked executions that
        never started have their leases released at once. An execution still running after the
        timeout keeps its lease — the heartbeat goes on for it alone — until it ends (its
        finish is then written as usual) or the process exits (the lease then expires): no
        other node starts the task while it still runs here.
        """
        with node_context(self.node_id):
            self._shutdown(timeout)

    def _shutdown(self, timeout: float) -> None:
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
            self._start_abort.set()  # start(wait=...) gives up waiting for the database
            time.sleep(0.05)
        assert self._poller and self._executor
        self._poller.stop()
        if self._listener is not None:
            self._listener.stop()
        if self._alerts is not None:
            self._alerts.stop()
        self._release(self._executor.close(), "never started")
        for ex in self._executor.running():
            ex.ctx.stop_requested.set()
        if self._executor.wait(timeout) or self._executor.end_children():
            self._stop_engine()
        else:
            names = sorted({ex.task.name for ex in self._executor.running()})
            log.warning(
                "shutdown: %d execution(s) still running after %s s keep their lease until "
                "they end (or this process exits): %s",
                len(names), timeout, ", ".join(repr(n) for n in names),
            )
            engine_thread(self._drain, "dbscheduler-drain").start()
        with self._lock:
            self._state = "stopped"
        self._stopped.set()
        log.info("stopped")

    def _release(self, executions: list[Execution], why: str, ended: bool = False) -> None:
        """Give back the leases of executions that will not write a finish (of ``ended``
        ones, their run rows too, where a run row is written before its finish)."""
        if not executions:
            return
        assert self._heartbeat is not None
        self._heartbeat.untrack(executions)
        try:
            released = self._store.release(self.node_id, {e.id: e.token for e in executions})
            if ended:
                self._store.forget_runs([run_record(e, self.node_id) for e in executions])
            log.info("shutdown: released %d lease(s) (%s)", released, why)
        except Exception as exc:
            log.warning("shutdown: could not release leases (they expire on their own): %s", exc)

    def _drain(self) -> None:
        """After a shutdown that timed out: keep heartbeat and finisher for the executions
        still running until the last one ended, then stop them."""
        assert self._executor is not None
        self._executor.wait(None)
        self._stop_engine()
        log.info("the last execution still running at shutdown ended")

    def _stop_engine(self) -> None:
        assert self._executor and self._finisher and self._heartbeat
        self._finisher.stop(timeout=max(5.0, self.lease.total_seconds()))
        # Finishes the database did not take in time: nothing runs them any more.
        self._release(self._heartbeat.tracked(), "finish not written", ended=True)
        self._heartbeat.stop()
        self._executor.shutdown()
        if self._owns_engine:
            self.engine.dispose()
        if self._listen_engine is not None:
            self._listen_engine.dispose()
            self._listen_engine = None

    def _check_listen_url(self) -> None:
        url = self.listen_url
        if url is None:
            return
        if not isinstance(url, str):
            raise ValueError(f"listen_url must be a string, got {type(url).__name__}")
        if not self._store.dialect.supports_notify:
            raise ValueError(f"listen_url is for PostgreSQL's LISTEN; this scheduler's "
                             f"database is {self._store.dialect.name}")
        try:
            backend = normalize_url(url).get_backend_name()
        except Exception as exc:
            raise ValueError(f"listen_url {url!r} is not a database URL: {exc}") from None
        if backend != self.engine.dialect.name:
            raise ValueError(f"listen_url must reach the same PostgreSQL server directly; "
                             f"it names a {backend} database")

    def run(self, shutdown_timeout: float = 30) -> None:
        """Start and block until SIGINT or SIGTERM (or :meth:`shutdown` from another thread),
        then shut down gracefully."""
        run_until_signal(self.start, self.shutdown, self._stopped, self.node_id,
                         shutdown_timeout)

    def health(self, timeout: float = 5.0) -> Health:
        """This node's :class:`~dbscheduler.Health` for liveness and readiness probes: the
        database answers (one cheap query, waited for at most ``timeout`` s), the poller polls,
        the heartbeat runs while executions do. Never raises."""
        return check_health(
            node_id=self.node_id, state=self._state, engine=self.engine,
            ping=self._store.refuses_writes, clock=self.clock, poller=self._poller,
            heartbeat=self._heartbeat, executor=self._executor,
            poll_interval=self.poll_interval, lease=self.lease, timeout=timeout,
        )

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

    # -- declaring: tasks, handlers, listeners (checked by _declarations) ---------------
    def task(
        self,
        name: str,
        *,
        schedule: Schedule,
        on_failure: FailureSettings | None = None,
        alert_after: timedelta | float | None = None,
        **options: Any,
    ) -> Callable[[F], F]:
        """Decorator registering a function as the task ``name``; ``options`` are the
        execution options (:class:`~dbscheduler._engine.options.TaskOptions`: ``priority``,
        ``group``, ``requires``, ``timeout``, ``isolation``, ``misfire``, ``grace``,
        ``jitter``).

        ``alert_after`` (a timedelta or seconds): listeners get ``on_overdue`` when the task
        has not succeeded for that long (it keeps failing, or nobody runs it).

        >>> @scheduler.task("cleanup", schedule=FixedDelay(300), timeout=60)  # doctest: +SKIP
        ... def cleanup(ctx: TaskContext) -> None: ...
        """

        def register(fn: F) -> F:
            self.add(name, fn, schedule=schedule, on_failure=on_failure,
                     alert_after=alert_after, **options)
            return fn

        return register

    def add(
        self,
        name: str,
        fn: TaskFunction,
        *,
        schedule: Schedule,
        on_failure: FailureSettings | None = None,
        alert_after: timedelta | float | None = None,
        **options: Any,
    ) -> None:
        """Register ``fn`` as the task ``name`` (the function may be a coroutine function),
        with the execution ``options`` (see :meth:`task`).

        Its row is inserted if absent when the scheduler starts (at once if already started);
        a changed schedule or ``alert_after`` applies at once. Invalid arguments raise
        ``ValueError`` naming the task and the field, before anything is written; names
        starting with ``dbscheduler.`` are reserved.

        >>> scheduler.add("cleanup", cleanup, schedule=FixedDelay(300),
        ...               alert_after=timedelta(hours=1))   # doctest: +SKIP
        """
        definition = declare_task(name, fn, schedule, on_failure, options, alert_after)
        with self._lock:
            if name in self._tasks or name in self._handlers:
                raise ValueError(f"task {name!r} is already registered on this scheduler")
            if self._state == "stopped":
                raise LifecycleError("this scheduler was shut down; create a new one")
            self._tasks[name] = definition
            started = self._state == "running"
        if started:
            self._register([definition])
            self._wakeup.set()

    def handler(
        self, name: str, *, on_failure: FailureSettings | None = None
    ) -> Callable[[F], F]:
        """Decorator registering a function as the handler ``name``: no row; this node runs
        every row whose handler is ``name`` (``schedule``/``schedule_once`` from any process).

        >>> @scheduler.handler("send-report")   # doctest: +SKIP
        ... def send_report(ctx: TaskContext) -> None: mail(ctx.data["to"])
        """

        def register(fn: F) -> F:
            refuse_reserved(name, "handler")
            with self._lock:
                self._handlers.add(name, fn, on_failure)
            self._wakeup.set()
            return fn

        return register

    def sync(self) -> None:
        """Write the rows of the declared tasks (and create the table where the scheduler
        may), without starting: a deploy step before the new nodes come up."""
        self._ensure_schema()
        self._register(self._declared())

    def _declared(self) -> list[TaskDef]:
        """The tasks whose rows this node writes: the declared ones and the built-in ones."""
        return list(self._handlers.tasks.values())

    def _register(self, defs: list[TaskDef]) -> None:
        self._store.register([registration(d) for d in defs])

    def add_listener(self, listener: Listener) -> None:
        """Add a :class:`~dbscheduler.Listener` (any object with some of its hooks works too).

        >>> scheduler.add_listener(Timings())   # doctest: +SKIP
        """
        self._listeners.add(listener)

    # -- operations: the client's, waking the local poller where a task may be due sooner
    @contextmanager
    def _ops(self, name: str) -> Iterator[Client]:
        """The client, with the table made on first use (embedded default), and an unknown
        name that is registered here but not written yet explained as such."""
        if self._embedded and not self._schema_ready:
            self._ensure_schema()
        try:
            yield self.client
        except TaskNotFound as exc:
            if name in self._tasks and self._state in ("new", "starting"):
                raise TaskNotFound(
                    name, self.table,
                    "it is added to this Scheduler but its row is written by start(); "
                    "call start() first (or operate it from a started node)",
                ) from exc
            raise

    def trigger(self, name: str) -> None:
        """Make ``name`` due now; nodes listening on PostgreSQL wake at once.

        Raises :class:`TaskNotFound` for an unknown name and :class:`TaskRunning` while it
        runs (its next time is then its lease).
        """
        with self._ops(name) as client:
            client.trigger(name)
        self._wakeup.set()

    def reschedule(self, name: str, at: datetime) -> None:
        """Set the next due time of ``name`` to the aware datetime ``at``."""
        with self._ops(name) as client:
            client.reschedule(name, at)
        self._wakeup.set()

    def pause(self, name: str) -> None:
        """Never pick ``name`` again, on any node, until :meth:`resume`."""
        with self._ops(name) as client:
            client.pause(name)

    def resume(self, name: str) -> None:
        """Undo :meth:`pause`; the task runs at its stored next time (at once if past)."""
        with self._ops(name) as client:
            client.resume(name)
        self._wakeup.set()

    def cancel(self, name: str) -> bool:
        """Ask the running execution of ``name`` to stop (``ctx.stop_requested``, seen within
        one heartbeat on its node). Returns False, changing nothing, if it is not running."""
        with self._ops(name) as client:
            asked = client.cancel(name)
        if asked and self._heartbeat is not None:
            for ex in self._heartbeat.tracked():
                if ex.task.name == name:
                    self._cancelled(ex)
        return asked

    def delete(self, name: str, force: bool = False) -> None:
        """Delete the row of ``name``; refused while it runs unless ``force=True``.

        A task still registered on a running node is inserted again when a node starts.
        """
        with self._ops(name) as client:
            client.delete(name, force=force)

    def schedule(self, name: str, handler: str, schedule: Schedule, *, data: Any = None,
                 **options: Any) -> None:
        """Create or update the runtime task ``name`` (see :meth:`Client.schedule`)."""
        with self._ops(name) as client:
            client.schedule(name, handler, schedule, data=data, **options)
        self._wakeup.set()

    def schedule_once(self, name: str, handler: str, at: datetime, *, data: Any = None,
                      **options: Any) -> None:
        """A one-off job at ``at`` (see :meth:`Client.schedule_once`)."""
        with self._ops(name) as client:
            client.schedule_once(name, handler, at, data=data, **options)
        self._wakeup.set()

    def set_group_limit(self, group: str, limit: int | None) -> None:
        """At most ``limit`` executions of ``group`` at once across the cluster (see
        :meth:`Client.set_group_limit`).

        >>> scheduler.set_group_limit("reports", 2)   # doctest: +SKIP
        """
        with self._ops(group) as client:
            client.set_group_limit(group, limit)
        self._wakeup.set()

    def unschedule(self, name: str) -> bool:
        """Delete the row ``name``; False when there was none (see :meth:`Client.unschedule`)."""
        with self._ops(name) as client:
            return client.unschedule(name)

    def tasks(self) -> list[TaskInfo]:
        """A :class:`TaskInfo` for every row in the table, ordered by name."""
        with self._ops("") as client:
            return client.tasks()

    def info(self, name: str) -> TaskInfo:
        """The :class:`TaskInfo` of ``name``."""
        with self._ops(name) as client:
            return client.info(name)

    def runs(
        self,
        name: str | None = None,
        *,
        status: str | Collection[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        """Finished executions, newest first (see :meth:`Client.runs`).

        >>> scheduler.runs("nightly-report", status="error", limit=5)   # doctest: +SKIP
        """
        with self._ops("") as client:
            return client.runs(name, status=status, since=since, until=until, limit=limit)

    # -- keyed delayed batches: handlers declared here, push / drop / list by the client
    def batch_handler(
        self, name: str, *, on_failure: FailureSettings | None = None
    ) -> Callable[[B], B]:
        """Decorator registering ``fn(ctx, items)`` as the batch handler ``name``: this node
        delivers the keys pushed to it (:meth:`push`), each key's pending items in one call,
        in push order.

        A failed delivery (an exception, or ``Result.error``) keeps the items and is retried
        by ``on_failure`` — by default ``GeometricBackoff(1 s, max_delay=5 min)``; settings
        that give up (``NoRetry``, ``max_attempts``) are refused, as they would lose items.

        >>> @scheduler.batch_handler("digest")   # doctest: +SKIP
        ... def digest(ctx: TaskContext, items: list[Any]) -> None:
        ...     send_mail(ctx.name, items)
        """

        def register(fn: B) -> B:
            self._add_batch_handler(name, fn, on_failure)
            return fn

        return register

    def _add_batch_handler(self, name: str, fn: BatchFunction,
                           on_failure: FailureSettings | None, *, internal: bool = False) -> None:
        check_batch_handler_name(name, internal=internal)
        settings = batch_failure(name, on_failure)
        deliver = delivery(self._store, name, fn)
        with self._lock:
            self._handlers.add(name, deliver, settings)
        self._wakeup.set()

    def _add_http_delivery(self, hosts: Sequence[str]) -> tuple[str, ...]:
        """Register the built-in HTTP delivery handler for targets on ``hosts``; returns the
        allow-list's entries."""
        from .http_delivery import HTTP_HANDLER, AllowList, HttpDelivery

        allow = AllowList(hosts)
        self._add_batch_handler(HTTP_HANDLER, HttpDelivery(allow), None, internal=True)
        return allow.hosts

    def _batch_client(self) -> Client:
        if self._embedded and not self._schema_ready:
            self._ensure_schema()
        return self.client

    def push(self, key: str, item: Any, *, handler: str, ontime: Any = None,
             update: str = "always", data: Any = None) -> None:
        """Queue ``item`` (JSON) under ``key`` for the batch handler ``handler``, from any
        process (see :meth:`Client.push`)."""
        self._batch_client().push(key, item, handler=handler, ontime=ontime, update=update,
                                  data=data)
        self._wakeup.set()

    def drop(self, key: str, *, handler: str) -> int:
        """Remove the pending items of ``key``; returns how many (see :meth:`Client.drop`)."""
        return self._batch_client().drop(key, handler=handler)

    def batches(self, handler: str | None = None) -> list[BatchInfo]:
        """The keys with pending items (see :meth:`Client.batches`)."""
        return self._batch_client().batches(handler)

    # -- engine callbacks ----------------------------------------------------------------
    def _ended(self, ended: Ended) -> None:
        assert self._finisher is not None
        self._finisher.put(ended)

    def _row_exists(self, name: str) -> bool:
        try:
            self.client.info(name)
        except TaskNotFound:
            return False
        return True

    def _lease_lost(self, ex: Execution) -> None:
        ex.ctx.stop_requested.set()
        log.warning("lease lost; asking the execution to stop",
                    extra=about(ex.task.name, ex.token))
        self._listeners.on_lease_lost(ex.ctx)

    def _cancelled(self, ex: Execution) -> None:
        ex.cancel_requested = True
        ex.ctx.stop_requested.set()
        log.info("cancel requested; asking the execution to stop",
                 extra=about(ex.task.name, ex.token))
