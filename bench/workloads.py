"""The systems under test, their settings and the shared workloads: rate sessions (start lag
and throughput ramps) and idle cost. dbscheduler's own wake-up and failover are in
:mod:`bench.dbs_only`, burst in :mod:`bench.burst`, memory in :mod:`bench.memory`."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.cpu import server_cpu
from bench.infra import (
    MAIN_PYTHON,
    PEER_ENVS,
    Backend,
    Databases,
    Node,
    ensure_env,
    log,
    nodes_cleanup,
)
from bench.memory import rss_mb
from bench.stats import Grid, Sample, window_figures

TABLE = "bench_tasks"
LAG_BUDGET_MS = 100.0
"""Throughput counts a step as sustained while lag p99 stays under this …"""
TRANSACTION_CONTROL = frozenset({"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"})
"""Not counted as statements (psycopg sends its own BEGIN/COMMIT outside the cursor; SQLite's
are explicit): the idle figure compares the same thing on every backend."""
MISSED_BUDGET = 0.01
"""… and at most this share of the due fire times is missed."""


@dataclass(frozen=True)
class System:
    key: str
    label: str
    module: str
    env: str | None  # a peer venv, or None for dbscheduler's own
    backend: str  # postgresql | sqlite | mysql
    max_nodes: int = 3
    shared_activation: bool = True  # activate once (shared store) or on every node
    period: float = 0.1  # FixedRate / interval period of the throughput ramp
    cron_seconds: bool = False  # one-second cron resolution (Procrastinate)
    note: str = ""

    @property
    def is_dbs(self) -> bool:
        return self.env is None


SYSTEMS: dict[str, System] = {
    s.key: s
    for s in (
        System("dbs-pg", "dbscheduler · PostgreSQL", "bench.nodes.dbs", None, "postgresql"),
        System("dbs-sqlite", "dbscheduler · SQLite", "bench.nodes.dbs", None, "sqlite"),
        System("dbs-mariadb", "dbscheduler · MariaDB", "bench.nodes.dbs", None, "mysql"),
        System("aps3", "APScheduler 3.11 · PostgreSQL", "bench.nodes.aps3", "aps3",
               "postgresql", max_nodes=1,
               note="one process only: SQLAlchemyJobStore has no locking, a second process "
                    "runs every job again; burst: one-off DateTrigger jobs at the instant, "
                    "added while paused"),
        System("aps4", "APScheduler 4.0.0a6 · PostgreSQL", "bench.nodes.aps4", "aps4",
               "postgresql",
               note="burst: DateTrigger schedules at the instant (added again each burst)"),
        System("procrastinate", "Procrastinate 3.10 · PostgreSQL",
               "bench.nodes.procrastinate_node", "procrastinate", "postgresql",
               shared_activation=False, period=1.0, cron_seconds=True,
               note="periodic tasks are cron, 1 s resolution (no sub-second phases); the "
                    "deferrer wakes 0.5 s after each due second by design; burst: periodic "
                    "tasks whose cron names one whole second, deferred one by one at that "
                    "second + 0.5 s"),
    )
}


@dataclass
class Settings:
    """Knobs of a session; ``quick`` and ``full`` differ only here."""

    workers: int = 32
    lease: float = 30.0
    poll: float = 1.0
    windows: int = 3
    window: float = 1.0
    proc_runs: int = 1
    lag_rates: tuple[int, ...] = (20, 1000)
    ramp: tuple[int, ...] = (100, 500, 1000, 2000, 3000, 4000, 6000, 8000, 12000)
    """Offered rates of the throughput ramp (3,000/s: the step whose CPU per execution the
    table shows)."""
    ramp3: tuple[int, ...] = ()
    """The three-node ramp (default: ``ramp``)."""
    dbs_min_rate: int = 0
    """dbscheduler's ramps skip the rates below this one (``--quick`` saves the time)."""
    dbs_min_rate3: int = 0
    """… and its three-node ramps below this one."""
    idle_tasks: int = 10_000
    idle_windows: int = 3
    idle_window: float = 3.0
    idle_settle: float = 2.0
    wake_runs: int = 3
    wake_triggers: int = 10
    wake_triggers_polling: int = 2
    wake_poll: float = 5.0
    failover_runs: int = 3
    failover_lease: float = 3.0
    burst_sizes: tuple[int, ...] = (1000, 5000)
    """Tasks due at one instant, per burst session (one node each)."""
    burst_rounds: tuple[int, ...] = (3, 3)
    """Bursts of each size (the same node, one after the other)."""
    burst_lead: float = 1.0
    """Seconds from the burst command to the due instant (a node adds its own set-up time)."""
    burst_missed_after: float = 10.0
    """A task not started this long after the due instant counts as missed."""
    soak_rate: int = 2000
    """Executions/s offered during the soak (memory growth under load)."""
    soak_warmup: float = 30.0
    soak_seconds: float = 600.0
    """Length of the soak after its warm-up: RSS growth is measured over it."""
    soak_sample: float = 5.0
    """Seconds between two RSS samples of the soak."""
    extra: dict[str, Any] = field(default_factory=dict)


class Context:
    """Databases, result directory and the set-up of one run of one system."""

    def __init__(self, dbs: Databases, results: Path) -> None:
        self.dbs = dbs
        self.results = results
        self.tmp = results / "tmp"
        self.tmp.mkdir(parents=True, exist_ok=True)
        for old in self.tmp.glob("*"):
            old.unlink()  # node logs of the previous run
        self._pg: dict[str, Backend] = {}
        self._runs = 0

    def python(self, system: System) -> Path:
        return MAIN_PYTHON if system.env is None else ensure_env(PEER_ENVS[system.env])

    def backend(self, system: System) -> Backend | None:
        """A fresh, empty database (or schema, or file) for one run of ``system``."""
        self._runs += 1
        if system.backend == "postgresql":
            name = system.key.replace("-", "_")
            if name not in self._pg:
                self._pg[name] = self.dbs.postgresql(name)
            else:
                self.dbs.reset_postgresql(self._pg[name])
            return self._pg[name]
        if system.backend == "mysql":
            return self.dbs.mariadb()
        return self.dbs.sqlite(f"{system.key}-{self._runs}")

    def node(self, system: System, backend: Backend, name: str, **config: Any) -> Node:
        cfg: dict[str, Any] = {"url": backend.url, "dsn": backend.dsn, "table": TABLE,
                               "node_id": name, "max_seconds": 600}
        if system.module == "bench.nodes.aps4":
            cfg["url"] = backend.url  # create_async_engine with psycopg (async) works as is
        cfg.update(config)
        return Node(self.python(system), system.module, cfg, self.tmp, f"{system.key}-{name}")


# -- dbscheduler's table --------------------------------------------------------------------
def create_dbs_table(backend: Backend, rows: int = 0, period: float = 1.0) -> None:
    """Create dbscheduler's table (Alembic, as ``dbscheduler migrate`` does) and seed ``rows``
    tasks ``b0…`` with ``FixedRate(period)``, due far in the future until activated."""
    from dbscheduler import FixedRate
    from dbscheduler.migrate import upgrade
    from dbscheduler.table import make_table

    engine = sa.create_engine(backend.url, poolclass=sa.NullPool)
    try:
        upgrade(engine, TABLE)
        if rows:
            table = make_table(TABLE)
            now = datetime.now(timezone.utc)
            far = datetime(2099, 1, 1, tzinfo=timezone.utc)
            text = FixedRate(period).describe()
            values = [
                # A declared task's handler is its own name: a row without one is run by
                # no node (revision 3 added the column).
                {"queue_name": f"b{i}", "handler": f"b{i}", "payload": None, "created_at": now,
                 "next_process_at": far, "attempt": 0, "reenqueue_attempt": 0,
                 "total_attempt": 0, "paused": False, "schedule": text,
                 "stop_requested": False}
                for i in range(rows)
            ]
            with engine.begin() as conn:
                conn.execute(sa.insert(table), values)
    finally:
        engine.dispose()


def start_nodes(ctx: Context, system: System, backend: Backend, count: int,
                nodes: list[Node], **config: Any) -> list[Node]:
    """Start ``count`` nodes; the first alone (it may create the schema), then the others."""
    started: list[Node] = []
    for i in range(count):
        extra = dict(config)
        if system.key == "procrastinate" and i == 0:
            extra["apply_schema"] = True
        node = ctx.node(system, backend, f"n{i}", **extra)
        nodes.append(node)
        started.append(node)
        if i == 0:
            node.wait_ready(300)
    for node in started[1:]:
        node.wait_ready(300)
    return started


# -- rate sessions: start lag and throughput ------------------------------------------------
def rate_session(ctx: Context, system: System, settings: Settings, *, nodes_count: int,
                 period: float, rates: tuple[int, ...], stop_on_fail: bool,
                 label: str, node_config: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Start nodes, then for each rate make enough tasks due every ``period`` s to offer it,
    measure ``settings.windows`` windows, and move on (stopping at the first rate most
    windows fail, when ``stop_on_fail``). Returns one dict per step."""
    if system.cron_seconds:
        period = 1.0
    if stop_on_fail and system.is_dbs:
        low = settings.dbs_min_rate3 if nodes_count > 1 else settings.dbs_min_rate
        rates = tuple(r for r in rates if r >= low) or rates
    backend = ctx.backend(system)
    assert backend is not None
    n_max = max(math.ceil(r * period) for r in rates)
    if system.is_dbs:
        create_dbs_table(backend, rows=n_max, period=period)
    steps: list[dict[str, Any]] = []
    with nodes_cleanup() as nodes:
        start_nodes(ctx, system, backend, nodes_count, nodes, mode="rate", n=n_max,
                    period=period, workers=settings.workers, lease=settings.lease,
                    poll=settings.poll, **(node_config or {}))
        targets = nodes[:1] if system.shared_activation else nodes
        phases: dict[int, float] = {}
        active = 0
        for rate in rates:
            n = max(1, round(rate * period))
            t0 = time.time()
            if n > active:
                began = time.time()
                reply: dict[str, Any] = {}
                for node in targets:
                    reply = node.call("activate", {"start": active, "stop": n, "period": period,
                                                   "lead": 0.5}, timeout=120)
                backend.analyze()  # the new rows' statistics, before the window opens
                t0 = float(reply["t0"])
                for i in range(active, n):
                    phases[i] = (t0 + (i - active) * period / (n - active)
                                 if reply.get("spread", True) else t0)
                active = n
                activated = time.time() - began
            else:
                activated = 0.0
            grid = Grid(period, dict(phases))
            # Windows span whole periods (cron peers fire on whole seconds); the samples are
            # collected a grace after the last window: later starts count as missed.
            window = (float(max(1, math.ceil(settings.window))) if system.cron_seconds
                      else settings.window)
            grace = 0.9 if system.cron_seconds else 0.4
            w0 = max(t0 + min(period, 0.3) + 0.2, time.time() + 0.4)
            w_end = w0 + settings.windows * window
            time.sleep(max(0.0, w0 - time.time()))
            cpu_before = _cpu(nodes)
            time.sleep(max(0.0, w_end - time.time()))
            cpu_after = _cpu(nodes)
            time.sleep(max(0.0, w_end + grace - time.time()))
            samples: list[Sample] = []
            per_node: list[int] = []  # executions each node ran: is the work shared?
            for node in nodes:
                ran = node.dump(ctx.tmp)
                per_node.append(len(ran))
                samples.extend(ran)
            figures = [
                window_figures(samples, grid, w0 + j * window, w0 + (j + 1) * window)
                for j in range(settings.windows)
            ]
            passed = [f["due"] > 0 and f["lag_p99_ms"] < LAG_BUDGET_MS
                      and f["missed"] <= MISSED_BUDGET * f["due"] for f in figures]
            executions = sum(f["executions_per_s"] for f in figures) * window
            steps.append({"rate": rate, "tasks": n, "period": period, "windows": figures,
                          "passed": passed, "activation_seconds": activated,
                          "per_node": per_node,
                          **_cpu_per_execution(cpu_before, cpu_after, executions)})
            p99 = sorted(f["lag_p99_ms"] for f in figures)[len(figures) // 2]
            done = sorted(f["executions_per_s"] for f in figures)[len(figures) // 2]
            log(f"  {system.key} {label} {nodes_count} node(s) {rate}/s ({n} tasks): "
                f"{done:,.0f} exec/s, lag p99 {p99:,.1f} ms, "
                f"missed {sum(int(f['missed']) for f in figures)}, "
                f"dup {sum(int(f['duplicates']) for f in figures)}"
                + (f", per node {' / '.join(f'{k:,}' for k in per_node)}" if len(nodes) > 1
                   else "")
                + f" {'ok' if sum(passed) * 2 > len(passed) else 'NOT sustained'}")
            if stop_on_fail and sum(passed) * 2 <= len(passed):
                break
    return steps


def _cpu(nodes: list[Node]) -> tuple[float, float]:
    """CPU seconds used so far by the nodes (each one's own count) and the database servers."""
    return sum(float(node.call("stats")["cpu"]) for node in nodes), server_cpu()


def _cpu_per_execution(before: tuple[float, float], after: tuple[float, float],
                       executions: float) -> dict[str, float]:
    """The nodes' and the servers' CPU µs per execution started in a step's windows (the
    servers' 0 where the database runs inside the node: SQLite)."""
    if executions <= 0:
        return {}
    return {"node_cpu_us": 1e6 * (after[0] - before[0]) / executions,
            "server_cpu_us": 1e6 * (after[1] - before[1]) / executions}


def sustained(steps: list[dict[str, Any]]) -> list[float]:
    """Per window index (one "run"), the highest rate of the ramp that window sustained.

    The ramp itself stops at the first rate most windows fail, so a higher rate is never
    reported past a clear failure; one window's passing spike at a lower rate (a WAL
    checkpoint, a neighbour's burst of CPU) does not hide what that run sustained later.
    """
    if not steps:
        return []
    runs = len(steps[0]["passed"])
    return [max((float(step["rate"]) for step in steps if step["passed"][j]), default=0.0)
            for j in range(runs)]


# -- idle cost ------------------------------------------------------------------------------
def idle_session(ctx: Context, system: System, settings: Settings) -> dict[str, Any]:
    backend = ctx.backend(system)
    assert backend is not None
    if system.is_dbs:
        create_dbs_table(backend)
    with nodes_cleanup() as nodes:
        (node,) = start_nodes(ctx, system, backend, 1, nodes, mode="idle",
                              n=settings.idle_tasks, workers=8, lease=settings.lease,
                              poll=settings.poll)
        time.sleep(settings.idle_settle)
        rss = rss_mb(node.proc.pid)  # every task registered, nothing due: the resting size
        windows = []
        server = backend.kind == "postgresql"
        before = node.call("stats")
        server_before = ctx.dbs.server_statements(backend) if server else None
        for _ in range(settings.idle_windows):
            time.sleep(settings.idle_window)
            after = node.call("stats")
            server_after = ctx.dbs.server_statements(backend) if server else None
            span = after["time"] - before["time"]
            counts = {k: after["statements"].get(k, 0) - before["statements"].get(k, 0)
                      for k in after["statements"]}
            counts = {k: v for k, v in counts.items() if v}
            statements = sum(v for k, v in counts.items() if k not in TRANSACTION_CONTROL)
            windows.append({"statements_per_s": statements / span,
                            "cpu_percent": 100 * (after["cpu"] - before["cpu"]) / span,
                            "by_keyword": counts, "seconds": span})
            if server_before is not None and server_after is not None:
                windows[-1]["server_statements_per_s"] = (server_after - server_before) / span
            before, server_before = after, server_after
    result = {"start_seconds": node.ready.get("start_seconds"), "rss_mb": rss,
              "windows": windows}
    log(f"  {system.key} idle with {settings.idle_tasks:,} tasks: start "
        f"{result['start_seconds']:.1f} s, RSS {rss:.0f} MB, statements/s "
        f"{[round(w['statements_per_s'], 2) for w in windows]}, server-side "
        f"{[round(w.get('server_statements_per_s', math.nan), 2) for w in windows]}")
    return result
