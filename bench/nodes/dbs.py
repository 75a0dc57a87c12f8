"""A dbscheduler node under test (runs in dbscheduler's own virtual environment).

Modes: ``rate`` (tasks ``b0..b{n-1}``, ``FixedRate(period)``, rows seeded far in the future by
the orchestrator and made due by ``activate``), ``burst`` (the same tasks with
``FixedRate(3600)``, every one made due at one instant by ``burst``), ``idle`` (``n`` tasks
never due), ``wakeup`` (one task ``w0`` due in an hour, triggered by the orchestrator) and
``failover`` (one task ``f0``, ``FixedRate(1)``, that runs until it is told to stop).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from bench.protocol import COUNTER, SAMPLES, load_config, serve, spread_t0, watchdog
from dbscheduler import FixedRate, Scheduler, TaskContext
from dbscheduler.table import make_table


def tracer_provider(sampled: bool) -> Any:
    """An OpenTelemetry SDK provider that records every span (or, ``sampled``, 10 % of the
    traces, as busy services usually do) and batches them to an exporter that drops them:
    the cost measured is dbscheduler's and the SDK's, not a network's."""
    from collections.abc import Sequence

    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    class Drop(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.1)) if sampled else None)
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    return provider


def observe(scheduler: Scheduler, how: str) -> None:
    """Observability as a production node has it. ``metrics``: PrometheusMetrics with the
    cluster-wide gauges; ``tracing``: also OpenTelemetryTracing, every span recorded;
    ``sampled``: the same, 10 % of the traces sampled."""
    from prometheus_client import CollectorRegistry

    from dbscheduler.metrics import PrometheusMetrics
    from dbscheduler.tracing import OpenTelemetryTracing

    scheduler.add_listener(PrometheusMetrics(CollectorRegistry(), client=scheduler.client))
    if how in ("tracing", "sampled"):
        scheduler.add_listener(OpenTelemetryTracing(tracer_provider(sampled=how == "sampled")))


def main() -> None:
    cfg = load_config()
    watchdog(cfg["max_seconds"])
    if cfg["url"].startswith("postgresql"):
        COUNTER.install_psycopg()
    scheduler = Scheduler(
        cfg["url"], table=cfg["table"], node_id=cfg["node_id"], max_workers=cfg["workers"],
        lease=cfg["lease"], poll_interval=cfg["poll"],
    )
    if not cfg["url"].startswith("postgresql"):
        COUNTER.install_sqlalchemy(scheduler.engine)
    if cfg.get("observe", "off") != "off":
        observe(scheduler, cfg["observe"])
    mode = cfg["mode"]
    prefix = {"rate": "b", "burst": "b", "idle": "i", "wakeup": "w", "failover": "f"}[mode]
    period = {"rate": cfg.get("period", 1.0), "burst": 3600.0, "idle": 3600.0,
              "wakeup": 3600.0, "failover": 1.0}[mode]

    def make(idx: int) -> Any:
        if mode == "failover":
            def hold(ctx: TaskContext) -> None:
                started = time.time()
                SAMPLES.add(idx, ctx.scheduled_at.timestamp(), started)
                ctx.stop_requested.wait(120)
            return hold

        def noop(ctx: TaskContext) -> None:
            started = time.time()
            SAMPLES.add(idx, ctx.scheduled_at.timestamp(), started)
        return noop

    for idx in range(cfg["n"]):
        scheduler.add(f"{prefix}{idx}", make(idx), schedule=FixedRate(period))
    began = time.perf_counter()
    scheduler.start()
    start_seconds = time.perf_counter() - began
    table = make_table(cfg["table"])

    def activate(args: dict[str, Any]) -> dict[str, Any]:
        a, b, p = int(args["start"]), int(args["stop"]), float(args["period"])
        t0 = spread_t0(float(args["lead"]))
        step = p / (b - a)
        stmt = (
            sa.update(table)
            .where(table.c.queue_name == sa.bindparam("name"), table.c.locked_by.is_(None))
            .values(next_process_at=sa.bindparam("at"))
        )
        params = [
            {"name": f"b{i}",
             "at": datetime.fromtimestamp(t0 + (i - a) * step, timezone.utc)}
            for i in range(a, b)
        ]
        with scheduler.engine.begin() as conn:
            conn.execute(stmt, params)
            notify(conn)
        scheduler._wakeup.set()  # after the commit: a poll before it would find nothing due
        return {"t0": t0, "spread": True}

    def burst(args: dict[str, Any]) -> dict[str, Any]:
        """Every idle row due at one instant, ``lead`` s ahead, in one UPDATE: the worst
        case of a table where many tasks share a fire time (a cron on the hour)."""
        t0 = spread_t0(float(args["lead"]))
        stmt = (sa.update(table).where(table.c.locked_by.is_(None))
                .values(next_process_at=datetime.fromtimestamp(t0, timezone.utc)))
        with scheduler.engine.begin() as conn:
            made_due = conn.execute(stmt).rowcount
            notify(conn)
        scheduler._wakeup.set()
        return {"t0": t0, "made_due": made_due, "late": max(0.0, time.time() - t0)}

    def notify(conn: sa.Connection) -> None:
        """Tell the other nodes the table changed, as ``Scheduler.trigger`` does (NOTIFY on
        PostgreSQL, sent at commit; the other backends' nodes see it at their next poll).
        This node's own poller is woken by the caller, after the commit."""
        if conn.dialect.name == "postgresql":
            conn.execute(sa.select(sa.func.pg_notify(f"dbscheduler_{cfg['table']}", "")))

    serve({"activate": activate, "burst": burst}, lambda: scheduler.shutdown(timeout=10),
          {"start_seconds": start_seconds})


if __name__ == "__main__":
    main()
