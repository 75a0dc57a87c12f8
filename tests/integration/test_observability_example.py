"""examples/observability and ``dbscheduler run --metrics-port``, as real processes on real
databases: the dashboard parses and every metric its queries use is in a real scrape."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import wait_until
from tests.integration.scrape import parse, scrape_text, value

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "observability"


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBSCHEDULER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@contextmanager
def _process(args: list[str], cwd: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(args, cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _scrape_or_none(port: int) -> str | None:
    try:
        return scrape_text(port, timeout=2)
    except (urllib.error.URLError, ConnectionError):
        return None


def _wait_for_scrape(proc: subprocess.Popen[str], port: int, ready: re.Pattern[str]) -> str:
    found: list[str] = []

    def check() -> bool:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        text = _scrape_or_none(port)
        if text is not None and ready.search(text):
            found.append(text)
            return True
        return False

    wait_until(check, timeout=60, what=f"a scrape on port {port} matching {ready.pattern}")
    return found[-1]


def _dashboard_metrics() -> set[str]:
    dashboard = json.loads((EXAMPLE / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for needed in ("lag", "status", "running", "overdue"):
        assert needed in titles
    return {m for e in exprs for m in re.findall(r"\bdbscheduler_[a-z_]+", e)}


def test_the_example_node_serves_every_metric_the_dashboard_uses(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    port, health_port = _free_port(), _free_port()
    args = [sys.executable, "-m", "examples.observability.node", "--url", url, "--table", table,
            "--port", str(port), "--health-port", str(health_port), "--console-spans"]
    with _process(args, tmp_path) as proc:
        # Wait until every task ran and one failed, so that every series exists.
        text = _wait_for_scrape(proc, port, re.compile(
            r'dbscheduler_executions_total\{status="error",task="flaky-import"\}'))
        for task in ("sync-orders", "refresh-cache"):
            text = _wait_for_scrape(proc, port, re.compile(
                rf'dbscheduler_executions_total\{{status="success",task="{task}"\}}'))
        names = {name for name, _ in parse(text)}
        used = _dashboard_metrics()
        assert used and used <= names, used - names
        assert value(parse(text), "dbscheduler_overdue_tasks") == 0
        with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/healthz", timeout=10) as r:
            assert r.status == 200
            health = json.loads(r.read())
        assert health["ok"] is True and health["db_reachable"] is True
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-3000:]
    # The console exporter printed the spans: executions, and the tasks' own spans under them.
    assert '"name": "dbscheduler.run sync-orders"' in out
    assert '"name": "fetch-orders"' in out and '"name": "load-cache"' in out


def test_prometheus_config_scrapes_the_example_port() -> None:
    text = (EXAMPLE / "prometheus.yml").read_text()
    assert re.search(r"^scrape_configs:\s*$", text, re.M)
    assert re.search(r"job_name:\s*dbscheduler\b", text)
    assert re.search(r'targets:\s*\["localhost:9100"\]', text)


@pytest.mark.parametrize("own_listener", [False, True], ids=["added", "already-there"])
def test_cli_run_with_metrics_port(migrated: tuple[str, str], tmp_path: Path,
                                   own_listener: bool) -> None:
    url, table = migrated
    own = ("from dbscheduler.metrics import PrometheusMetrics\n"
           "scheduler.add_listener(PrometheusMetrics(per_task=False))\n") if own_listener else ""
    (tmp_path / "clinode.py").write_text(
        "from dbscheduler import FixedDelay, Scheduler\n"
        f"scheduler = Scheduler({url!r}, table={table!r}, poll_interval=0.2)\n"
        "scheduler.add('tick', lambda: None, schedule=FixedDelay(0.05))\n" + own
    )
    port = _free_port()
    args = [sys.executable, "-m", "dbscheduler", "run", "clinode:scheduler",
            "--metrics-port", str(port)]
    ready = (r'dbscheduler_executions_total\{status="success"\} [1-9]' if own_listener
             else r'dbscheduler_executions_total\{status="success",task="tick"\} [1-9]')
    with _process(args, tmp_path) as proc:
        samples = parse(_wait_for_scrape(proc, port, re.compile(ready)))
        if own_listener:
            # The node's own listener is served; no second one was added next to it.
            assert value(samples, "dbscheduler_overdue_tasks") is None
        else:
            # The CLI added one, with the cluster-wide gauges of the scheduler's table.
            assert value(samples, "dbscheduler_tasks", state="idle") is not None
            assert value(samples, "dbscheduler_overdue_tasks") == 0
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - started < 30
    assert proc.returncode == 0, err[-3000:]
