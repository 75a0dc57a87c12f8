"""The cluster-wide gauges of groups and nodes through a real scrape, the same on
``dbscheduler web``'s ``/metrics``, and scrape endpoints that listen on 127.0.0.1 unless told."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import urllib.request
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from dbscheduler import FixedRate, Scheduler, TaskContext
from dbscheduler.metrics import PrometheusMetrics, serve
from dbscheduler.web import create_app
from tests.helpers import running, wait_until
from tests.integration.scrape import parse, scrape_text, value

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_group_and_node_gauges(migrated: tuple[str, str]) -> None:
    url, table = migrated
    reg = CollectorRegistry()
    server = serve(0, reg)
    try:
        assert server._server.server_address[0] == "127.0.0.1"  # not every interface
        release = threading.Event()
        s = Scheduler(url, table=table, node_id="gauged", poll_interval=0.2, lease=3)

        def hold(ctx: TaskContext) -> None:
            release.wait(20)

        s.add("hold", hold, schedule=FixedRate(3600), group="exports")
        s.add("next", lambda ctx: None, schedule=FixedRate(3600), group="exports")
        s.add_listener(PrometheusMetrics(reg, client=s.client, refresh=timedelta(0)))
        try:
            with running(s):
                s.client.set_group_limit("exports", 1)
                s.trigger("hold")
                wait_until(lambda: s.info("hold").running, what="hold to run")
                wait_until(lambda: s.client.nodes(), what="the node's row")
                samples = parse(scrape_text(server.port))
                assert value(samples, "dbscheduler_group_running", group="exports") == 1
                assert value(samples, "dbscheduler_group_limit", group="exports") == 1
                assert value(samples, "dbscheduler_nodes", state="alive") == 1
                assert value(samples, "dbscheduler_nodes", state="gone") == 0

                # The dashboard's /metrics: the same cluster gauges, from its own client.
                with TestClient(create_app(url, table=table)) as http:
                    text = http.get("/metrics").text
                web = parse(text)
                assert value(web, "dbscheduler_tasks", state="running") == 1
                assert value(web, "dbscheduler_nodes", state="alive") == 1
                release.set()
        finally:
            release.set()
    finally:
        server.stop()


def test_dbscheduler_serve_exports_its_node_and_the_cluster(migrated: tuple[str, str]) -> None:
    url, table = migrated
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBSCHEDULER_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dbscheduler", "serve", "--url", url, "--table", table,
         "--port", str(port), "--allow-host", "127.0.0.1", "--node-id", "queue-1",
         "--log-level", "warning"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def scraped() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    return str(r.read().decode())
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                return None

        wait_until(lambda: scraped() and "dbscheduler_nodes" in (scraped() or ""),
                   timeout=30, what="/metrics of dbscheduler serve with the node registry")
        samples = parse(scraped() or "")
        assert value(samples, "dbscheduler_running") == 0  # the node's own gauges
        assert value(samples, "dbscheduler_nodes", state="alive") == 1
        assert value(samples, "dbscheduler_tasks", state="idle") is not None
    finally:
        proc.terminate()
        proc.wait(15)
