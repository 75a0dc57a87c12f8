"""The web examples' task output reaches the terminal: the app configures logging."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FASTAPI = """
    import time
    from fastapi.testclient import TestClient
    from examples.fastapi_app import app, rates
    with TestClient(app) as client:
        client.post("/tasks/refresh-rates/trigger")
        deadline = time.monotonic() + 10
        while not rates and time.monotonic() < deadline:
            time.sleep(0.05)
"""

FLASK = """
    import time
    from examples.flask_app import create_app
    app = create_app()
    scheduler = app.extensions["dbscheduler"]
    app.test_client().post("/tasks/send-reminders/trigger")
    deadline = time.monotonic() + 10
    while scheduler.info("send-reminders").last_status is None and time.monotonic() < deadline:
        time.sleep(0.05)
    scheduler.shutdown(10)
"""


@pytest.mark.parametrize(
    ("framework", "code", "line"),
    [("fastapi", FASTAPI, "INFO    fastapi_app: rates refreshed (run #1)"),
     ("flask", FLASK, "INFO    flask_app: reminders sent (run #1")],
)
def test_task_output_of_the_web_examples_is_shown(
    framework: str, code: str, line: str, tmp_path: Path
) -> None:
    pytest.importorskip(framework, reason=f"{framework} is not installed (not a dependency)")
    if framework == "fastapi":
        pytest.importorskip("httpx", reason="httpx (FastAPI's TestClient) is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBSCHEDULER_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert line in proc.stderr, proc.stderr
    assert "dbscheduler: [node=" in proc.stderr  # the library's own INFO lines too
