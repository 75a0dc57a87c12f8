"""Prometheus metrics: a listener that counts executions, and a scrape endpoint.

Needs the ``prometheus`` extra (``pip install "dbscheduler[prometheus]"``)::

    from dbscheduler.metrics import PrometheusMetrics, serve

    metrics = PrometheusMetrics(client=scheduler.client)   # client: the cluster-wide gauges
    scheduler.add_listener(metrics)
    server = serve(9100)                                   # http://host:9100/metrics
    ...
    server.stop()

Per node (what this node did): ``dbscheduler_executions_total{task,status}``,
``dbscheduler_execution_seconds{task}``, ``dbscheduler_start_lag_seconds`` (picked minus due),
``dbscheduler_running``, ``dbscheduler_lease_lost_total``,
``dbscheduler_lost_executions_total``, ``dbscheduler_poll_errors_total``,
``dbscheduler_heartbeat_errors_total``, ``dbscheduler_picks_total``,
``dbscheduler_picked_rows_total`` and ``dbscheduler_empty_picks_total`` (a due row was taken
by another node first: contention).

Cluster-wide (from the table, when a :class:`~dbscheduler.Client` is given; a few small queries
at most every ``refresh``, however often Prometheus scrapes): ``dbscheduler_overdue_tasks``,
``dbscheduler_tasks{state}`` with ``state`` one of running, paused, overdue, idle,
``dbscheduler_group_running{group}`` and ``dbscheduler_group_limit{group}`` (groups with a
limit), and ``dbscheduler_nodes{state}`` (alive, gone: the node registry). Every node reports
the same cluster values: aggregate them with ``max``, not ``sum``. ``dbscheduler web`` and
``dbscheduler serve`` export them on their own ``/metrics``.

Every scrape endpoint listens on 127.0.0.1 unless another address is given (``addr``;
``dbscheduler run --metrics-host``).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from .client import Client, GroupInfo, TaskCounts

if TYPE_CHECKING:
    from .scheduler import Scheduler
from .context import TaskContext, TaskInfo
from .listeners import Listener, Outcome
from .logfields import engine_log

__all__ = ["DURATION_BUCKETS", "LAG_BUCKETS", "ClusterGauges", "MetricsServer",
           "PrometheusMetrics", "cluster_registry", "expose", "reports_cluster", "serve"]

log = engine_log("dbscheduler.metrics")

LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
               30.0, 60.0, 120.0, 300.0, 600.0)
"""Start lag, 1 ms to 10 min: on time is milliseconds; a busy or missing node is minutes."""

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    120.0, 300.0, 600.0, 1800.0, 3600.0)
"""Execution time, 5 ms to an hour."""

_ON_GLOBAL_REGISTRY: weakref.WeakSet[PrometheusMetrics] = weakref.WeakSet()
"""Instances registered on prometheus_client's global registry."""


@dataclass
class _Families:
    """The metric families of one registry, shared by every instance created on it."""

    per_task: bool
    executions: Counter
    execution_seconds: Histogram
    start_lag: Histogram
    running: Gauge
    lease_lost: Counter
    lost_executions: Counter
    poll_errors: Counter
    heartbeat_errors: Counter
    picks: Counter
    picked_rows: Counter
    empty_picks: Counter
    cluster: ClusterGauges | None = None


# A registry refuses a second metric of the same name; a module imported twice (a reload, a
# test runner, Django's autoreloader) makes a second PrometheusMetrics, which shares these.
_FAMILIES: weakref.WeakKeyDictionary[CollectorRegistry, _Families] = weakref.WeakKeyDictionary()
_FAMILIES_LOCK = threading.Lock()


def _families_of(r: CollectorRegistry, per_task: bool) -> _Families:
    found = _FAMILIES.get(r)
    if found is not None:
        if found.per_task != per_task:
            raise ValueError(
                f"PrometheusMetrics(per_task={per_task}): this registry already has the "
                f"metrics of a PrometheusMetrics with per_task={found.per_task}; use the same "
                "per_task, or another registry"
            )
        return found
    task = ("task",) if per_task else ()
    made = _Families(
        per_task=per_task,
        executions=Counter("dbscheduler_executions", "Executions ended on this node",
                           (*task, "status"), registry=r),
        execution_seconds=Histogram(
            "dbscheduler_execution_seconds", "Time from pick to the function's end", task,
            buckets=DURATION_BUCKETS, registry=r),
        start_lag=Histogram(
            "dbscheduler_start_lag_seconds", "Start time minus due time, on the database clock",
            buckets=LAG_BUCKETS, registry=r),
        running=Gauge("dbscheduler_running", "Executions running on this node", registry=r),
        lease_lost=Counter("dbscheduler_lease_lost", "Leases this node lost", registry=r),
        lost_executions=Counter(
            "dbscheduler_lost_executions",
            "Executions of vanished nodes found by this node", registry=r),
        poll_errors=Counter("dbscheduler_poll_errors", "Failed polls", registry=r),
        heartbeat_errors=Counter("dbscheduler_heartbeat_errors", "Failed heartbeats",
                                 registry=r),
        picks=Counter("dbscheduler_picks", "Picks made because a row was due", registry=r),
        picked_rows=Counter("dbscheduler_picked_rows", "Rows picked", registry=r),
        empty_picks=Counter(
            "dbscheduler_empty_picks",
            "Picks that got no row although one was due (contention)", registry=r),
    )
    _FAMILIES[r] = made
    return made


class PrometheusMetrics(Listener):
    """A :class:`~dbscheduler.Listener` that keeps Prometheus metrics of this node.

    Args:
        registry: where the metrics are registered; the default is prometheus_client's global
            registry (what :func:`serve` exposes by default). Instances created on one
            registry (a module imported twice) share its metrics, so they count together.
        per_task: label executions by task. With thousands of tasks, ``False`` keeps the
            number of series bounded (``{status}`` only).
        client: a :class:`~dbscheduler.Client` on the scheduler's table (``scheduler.client``)
            for the cluster-wide gauges; without one they are not exported.
        overdue_after: how late an unpaused, idle task must be to count as overdue.
        refresh: the cluster-wide gauges are recomputed at most this often.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        per_task: bool = True,
        *,
        client: Client | None = None,
        overdue_after: timedelta = timedelta(seconds=60),
        refresh: timedelta = timedelta(seconds=15),
    ) -> None:
        self.registry = REGISTRY if registry is None else registry
        if self.registry is REGISTRY:
            _ON_GLOBAL_REGISTRY.add(self)
        self.per_task = per_task
        r = self.registry
        with _FAMILIES_LOCK:
            families = _families_of(r, per_task)
            if client is not None:
                # The newest instance's client reports: the one a re-imported module made.
                if families.cluster is not None:
                    r.unregister(families.cluster)
                families.cluster = ClusterGauges(client, overdue_after, refresh)
                r.register(families.cluster)
        self.executions = families.executions
        self.execution_seconds = families.execution_seconds
        self.start_lag = families.start_lag
        self.running = families.running
        self.lease_lost = families.lease_lost
        self.lost_executions = families.lost_executions
        self.poll_errors = families.poll_errors
        self.heartbeat_errors = families.heartbeat_errors
        self.picks = families.picks
        self.picked_rows = families.picked_rows
        self.empty_picks = families.empty_picks
        self._started: set[tuple[str, int]] = set()
        self._counters: dict[tuple[str, str], Counter] = {}
        self._histograms: dict[str, Histogram] = {}
        self._lock = threading.Lock()
        self._cluster = families.cluster if client is not None else None

    # -- listener hooks ------------------------------------------------------------------
    def on_started(self, ctx: TaskContext) -> None:
        with self._lock:
            self._started.add((ctx.name, ctx.total_attempt))
        self.running.inc()
        lag = (ctx.started_at - ctx.scheduled_at).total_seconds()
        self.start_lag.observe(max(0.0, lag))

    def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
        with self._lock:
            started = (ctx.name, ctx.total_attempt) in self._started
            self._started.discard((ctx.name, ctx.total_attempt))
        if started:  # an execution refused before its start never counted as running
            self.running.dec()
        task = ctx.name if self.per_task else ""
        # labels() validates and locks on every call: keep the children it returns.
        counter = self._counters.get((task, outcome.status))
        if counter is None:
            labels = (task, outcome.status) if self.per_task else (outcome.status,)
            counter = self._counters[(task, outcome.status)] = self.executions.labels(*labels)
        counter.inc()
        histogram = self._histograms.get(task)
        if histogram is None:
            histogram = self._histograms[task] = (
                self.execution_seconds.labels(task) if self.per_task else self.execution_seconds)
        histogram.observe(outcome.duration.total_seconds())

    def on_lease_lost(self, ctx: TaskContext) -> None:
        self.lease_lost.inc()

    def on_lost_execution(self, info: TaskInfo) -> None:
        self.lost_executions.inc()

    def on_poll_error(self, exc: BaseException) -> None:
        self.poll_errors.inc()

    def on_heartbeat_error(self, exc: BaseException) -> None:
        self.heartbeat_errors.inc()

    def on_pick(self, asked: int, got: int) -> None:
        self.picks.inc()
        self.picked_rows.inc(got)
        if got == 0:
            self.empty_picks.inc()


class ClusterGauges(Collector):
    """``dbscheduler_overdue_tasks`` and ``dbscheduler_tasks{state}`` from one aggregate
    query, cached for ``refresh`` so that scrapes never load the database."""

    def __init__(self, client: Client, overdue_after: timedelta, refresh: timedelta) -> None:
        self._client = client
        self._overdue_after = overdue_after
        self._refresh = refresh.total_seconds()
        self._lock = threading.Lock()
        self._counts: TaskCounts | None = None
        self._groups: list[GroupInfo] = []
        self._nodes: tuple[int, int] | None = None
        self._checked = float("-inf")

    def describe(self) -> Iterable[Metric]:
        # Lets the registry learn the names without a query at registration.
        return [*self._families(TaskCounts(0, 0, 0, 0, 0)), *self._cluster_families([], (0, 0))]

    def collect(self) -> Iterable[Metric]:
        counts = self.counts()
        if counts is None:
            return []
        return [*self._families(counts), *self._cluster_families(self._groups, self._nodes)]

    def counts(self) -> TaskCounts | None:
        """The cached counts, refreshed when older than ``refresh``; ``None`` while the
        database cannot be read (a stale number would look like a healthy cluster)."""
        with self._lock:
            if time.monotonic() - self._checked >= self._refresh:
                # Failures are cached too: a scrape storm against a sick database stays cheap.
                self._checked = time.monotonic()
                try:
                    self._counts = self._client.counts(self._overdue_after)
                except Exception as exc:
                    log.warning("could not count the tasks for the cluster gauges: %s", exc)
                    self._counts = None
                try:
                    self._groups = [g for g in self._client.groups() if g.limit is not None]
                except Exception:  # the task counts stand without the groups'
                    self._groups = []
                try:
                    nodes = self._client.nodes()
                    alive = sum(1 for n in nodes if n.alive)
                    self._nodes = (alive, len(nodes) - alive)
                except Exception:  # a table older than the registry: no node gauge
                    self._nodes = None
            return self._counts

    @staticmethod
    def _families(counts: TaskCounts) -> list[Metric]:
        overdue = GaugeMetricFamily(
            "dbscheduler_overdue_tasks",
            "Unpaused, idle tasks due longer ago than overdue_after (cluster-wide)",
            value=counts.overdue)
        tasks = GaugeMetricFamily("dbscheduler_tasks", "Tasks by state (cluster-wide)",
                                  labels=["state"])
        for state in ("running", "paused", "overdue", "idle"):
            tasks.add_metric([state], getattr(counts, state))
        return [overdue, tasks]

    @staticmethod
    def _cluster_families(groups: list[GroupInfo], nodes: tuple[int, int] | None
                          ) -> list[Metric]:
        running = GaugeMetricFamily("dbscheduler_group_running",
                                    "Executions running in each limited group (cluster-wide)",
                                    labels=["group"])
        limit = GaugeMetricFamily("dbscheduler_group_limit", "Each group's limit",
                                  labels=["group"])
        for g in groups:
            running.add_metric([g.name], g.running)
            limit.add_metric([g.name], float(g.limit or 0))
        out: list[Metric] = [running, limit]
        if nodes is not None:
            family = GaugeMetricFamily("dbscheduler_nodes",
                                       "Nodes of the registry: alive, or gone (not seen for "
                                       "30 s, kept 7 days)", labels=["state"])
            family.add_metric(["alive"], nodes[0])
            family.add_metric(["gone"], nodes[1])
            out.append(family)
        return out


def reports_cluster() -> bool:
    """Whether a :class:`PrometheusMetrics` with the cluster-wide gauges reports on the
    global registry (a process serving its own adds them only otherwise)."""
    return any(m._cluster is not None for m in _ON_GLOBAL_REGISTRY)


def cluster_registry(client: Client, overdue_after: timedelta = timedelta(seconds=60),
                     refresh: timedelta = timedelta(seconds=15)) -> CollectorRegistry:
    """A registry of the cluster-wide gauges of ``client``'s table alone (what
    ``dbscheduler web`` adds to its ``/metrics``).

    >>> generate_latest(cluster_registry(client))   # doctest: +SKIP
    """
    registry = CollectorRegistry()
    registry.register(ClusterGauges(client, overdue_after, refresh))
    return registry


@dataclass
class MetricsServer:
    """The running scrape endpoint returned by :func:`serve`."""

    port: int
    """The port it listens on (the actual one when 0 was asked)."""
    _server: WSGIServer
    _thread: threading.Thread

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(port: int, registry: CollectorRegistry | None = None,
          addr: str = "127.0.0.1") -> MetricsServer:
    """Serve ``/metrics`` of ``registry`` (default: the global one) on ``port`` in a daemon
    thread; ``port=0`` picks a free port (see :attr:`MetricsServer.port`). It listens on
    127.0.0.1: pass ``addr="0.0.0.0"`` (or an interface's address) for a Prometheus on
    another machine.

    >>> server = serve(9100, addr="0.0.0.0")   # doctest: +SKIP
    """
    server, thread = start_http_server(port, addr, REGISTRY if registry is None else registry)
    return MetricsServer(int(server.server_port), server, thread)


def expose(scheduler: Scheduler, port: int, addr: str = "127.0.0.1") -> MetricsServer:
    """Serve the global registry on ``port``, first adding a :class:`PrometheusMetrics`
    (with the cluster-wide gauges of the scheduler's table) to ``scheduler`` unless one
    already reports there — what ``dbscheduler run --metrics-port`` does."""
    if not _ON_GLOBAL_REGISTRY:  # asking the registry would run the cluster-wide query
        scheduler.add_listener(PrometheusMetrics(client=scheduler.client))
    return serve(port, addr=addr)
