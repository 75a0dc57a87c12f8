"""A node with Prometheus metrics and OpenTelemetry tracing.

Run it (SQLite by default; any database with ``--url`` or ``DBSCHEDULER_URL``)::

    pip install "dbscheduler[prometheus,otel]" opentelemetry-sdk
    python -m examples.observability.node --port 9100 --console-spans

then scrape http://localhost:9100/metrics (``prometheus.yml`` here does it every 15 s) and
import ``grafana-dashboard.json`` into Grafana. ``--console-spans`` prints every span; point
an OTLP exporter at your collector instead in production. ``GET /healthz`` on
``--health-port`` answers 200 or 503 with :meth:`Scheduler.health` as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

from opentelemetry import trace

from dbscheduler import FixedDelay, FixedRate, Scheduler, TaskContext
from dbscheduler.metrics import PrometheusMetrics, serve
from dbscheduler.tracing import OpenTelemetryTracing

log = logging.getLogger("observability")
tracer = trace.get_tracer("examples.observability")


def build(url: str | None, table: str) -> Scheduler:
    """The node: a thread task, a coroutine task and a task that fails now and then."""
    scheduler = Scheduler(url, table=table, poll_interval=0.5)

    @scheduler.task("sync-orders", schedule=FixedRate(1))
    def sync_orders(ctx: TaskContext) -> None:
        # Nests under the execution's span "dbscheduler.run sync-orders".
        with tracer.start_as_current_span("fetch-orders"):
            time.sleep(random.uniform(0.01, 0.05))

    @scheduler.task("refresh-cache", schedule=FixedDelay(0.5))
    async def refresh_cache(ctx: TaskContext) -> None:
        with tracer.start_as_current_span("load-cache"):
            await asyncio.sleep(random.uniform(0.005, 0.02))

    @scheduler.task("flaky-import", schedule=FixedRate(2))
    def flaky_import(ctx: TaskContext) -> None:
        # Every third run fails, the first among them, so the error series shows from the
        # start (total_attempt counts the picks of this task, this one included).
        if ctx.total_attempt % 3 == 1:
            raise ConnectionError("upstream closed the connection")

    return scheduler


def serve_health(scheduler: Scheduler, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            health = scheduler.health(timeout=2)
            body = json.dumps(health.to_dict()).encode()
            self.send_response(200 if health.ok else 503)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    Thread(target=server.serve_forever, name="healthz", daemon=True).start()
    return server


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default=os.environ.get("DBSCHEDULER_URL"))
    p.add_argument("--table", default=os.environ.get("DBSCHEDULER_TABLE", "scheduled_tasks"))
    p.add_argument("--port", type=int, default=9100, help="Prometheus metrics port")
    p.add_argument("--health-port", type=int, default=None, help="serve GET /healthz here")
    p.add_argument("--console-spans", action="store_true", help="print spans (needs the SDK)")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.console_spans:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        trace.set_tracer_provider(provider)

    scheduler = build(args.url, args.table)
    # The cluster-wide gauges (overdue, tasks by state) come from the table through the client.
    scheduler.add_listener(PrometheusMetrics(client=scheduler.client))
    scheduler.add_listener(OpenTelemetryTracing())
    server = serve(args.port)
    log.info("metrics at http://localhost:%d/metrics", server.port)
    if args.health_port is not None:
        serve_health(scheduler, args.health_port)
        log.info("health at http://localhost:%d/healthz", args.health_port)
    try:
        scheduler.run()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
