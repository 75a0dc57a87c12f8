"""Every example in ``examples/`` is really run, on SQLite in a temporary directory (and the
cluster script also on PostgreSQL when a server is reachable)."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from dbscheduler import Scheduler
from dbscheduler._engine.history import PRUNE_TASK
from tests.conftest import EXAMPLES
from tests.databases import drop_table, find
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


def example_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DBSCHEDULER_", "CLUSTER_", "NODE_ID"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


# -- quickstart --------------------------------------------------------------------------


QUICKSTART_EVENTS = [
    r"^\d\d:\d\d:\d\d\.\d{3}  heartbeat      run #2$",
    r"on-the-clock   cron fire for \d\d:\d\d:\d[02468]$",
    r"counter        count = 2 \(stored in the row\)$",
    r"flaky          attempt 1 fails$",
    r"-> flaky error \(upstream not ready\); next try at [\d:.]+$",
    r"flaky          attempt 2 succeeds$",
]


def test_quickstart_runs_every_kind_of_task_and_prints_them(tmp_path: Path) -> None:
    # Stopped with Ctrl-C once it printed every kind of run, however long that took: a fixed
    # window (counted from before the imports) was too short on a loaded machine.
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "quickstart.py")], cwd=tmp_path, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=example_env(PYTHONUNBUFFERED="1"),
    )
    lines: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()

    def printed(pattern: str) -> bool:
        return any(re.search(pattern, line.rstrip("\n")) for line in list(lines))

    try:
        wait_until(lambda: all(printed(p) for p in QUICKSTART_EVENTS), 120,
                   "every kind of run printed")
    finally:
        proc.send_signal(signal.SIGINT)
        # Not communicate(): it would read the rest of stdout (the closing table) itself,
        # racing the reader thread for it.
        proc.wait(timeout=60)
        reader.join(10)
    err = proc.stderr.read() if proc.stderr is not None else ""
    out = "".join(lines)
    assert proc.returncode == 0, err
    assert out.startswith("running 4 tasks on sqlite:///dbscheduler.sqlite3 until Ctrl-C\n")
    assert "Traceback" not in err
    # The final table, and the rows really in ./dbscheduler.sqlite3 of the working directory.
    counted = len(re.findall(r"counter        count = \d+", out))
    assert re.search(rf"^  counter +runs={counted} +last=success +state={{'count': {counted}}}$",
                     out, re.M), out
    # One column for every name, the built-in task's long one included.
    table = out.split("what the table holds now (also: dbscheduler list):\n", 1)[1]
    assert len({line.index("runs=") for line in table.splitlines() if line}) == 1, table
    db = Scheduler(f"sqlite:///{tmp_path / 'dbscheduler.sqlite3'}")
    try:
        infos = {i.name: i for i in db.tasks()}
        assert sorted(infos) == ["counter", PRUNE_TASK, "flaky", "heartbeat", "on-the-clock"]
        assert infos["counter"].state == {"count": counted}
        assert infos["flaky"].last_status == "success" and infos["flaky"].total_attempt >= 2
        assert not any(i.running for i in infos.values())
    finally:
        db.engine.dispose()


def test_quickstart_stops_by_itself_after_its_seconds(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), "--seconds", "0.5"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=example_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("running 4 tasks on sqlite:///dbscheduler.sqlite3 until 0.5 s\n")
    assert "what the table holds now" in proc.stdout, proc.stdout


# -- the cluster -------------------------------------------------------------------------


@pytest.mark.slow
def test_cluster_script_runs_three_nodes_and_kills_one(tmp_path: Path) -> None:
    # On PostgreSQL, what the example is written for; without a server, on a SQLite file in
    # the temporary directory shared by the three node processes.
    url = find("postgresql").url or f"sqlite:///{tmp_path / 'cluster.sqlite3'}"
    table = f"t_cluster_{uuid.uuid4().hex[:8]}"
    env = example_env(
        DBSCHEDULER_URL=url, DBSCHEDULER_TABLE=table, CLUSTER_SECONDS="8",
        CLUSTER_KILL_AFTER="2", CLUSTER_LIST_EVERY="1",
        DBSCHEDULER=f"{sys.executable} -m dbscheduler",
    )
    try:
        # About 20 s on an idle machine (the script runs on until the takeover is shown); on a
        # loaded one every CLI call the script makes starts a Python process, and the script
        # waits longer for its nodes (60 s timed out).
        proc = subprocess.run(["bash", str(EXAMPLES / "cluster.sh")], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300, env=env)
    finally:
        drop_table(url, table)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert f"upgraded table {table} on " in out
    for n in (1, 2, 3):
        assert re.search(rf"^\[node-{n}\] .* dbscheduler: \[node=node-{n} task=- token=-\] "
                         r"started with 3 task", out, re.M), out
    assert "=== dbscheduler list" in out
    assert re.search(r"^ rebuild-index +fixed-delay 1s .* node-\d$", out, re.M), out
    assert re.search(r"^\[node-\d\] .* cluster_app: ", out, re.M), out  # tasks log as they run
    victim = re.search(r"^=== kill -9 (node-\d) while it runs rebuild-index", out, re.M)
    assert victim, out
    assert re.search(rf"^=== node-\d took rebuild-index over from {victim.group(1)}$", out,
                     re.M), out
    survivors = {f"node-{n}" for n in (1, 2, 3)} - {victim.group(1)}
    assert "=== stopping the nodes (SIGTERM: graceful shutdown)" in out
    for node in survivors:
        assert f"dbscheduler: [node={node} task=- token=-] stopped" in out
    assert f"[node={victim.group(1)} task=- token=-] stopped" not in out


# -- web frameworks ----------------------------------------------------------------------


def test_fastapi_lifespan_starts_and_stops_the_scheduler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load_example: Callable[[str], ModuleType]
) -> None:
    pytest.importorskip("fastapi", reason="FastAPI is not installed (not a dependency)")
    pytest.importorskip("httpx", reason="httpx (FastAPI's TestClient) is not installed")
    from fastapi.testclient import TestClient  # type: ignore[import-not-found, unused-ignore]

    monkeypatch.setenv("DBSCHEDULER_URL", f"sqlite:///{tmp_path / 'api.sqlite3'}")
    module = load_example("fastapi_app")
    with TestClient(module.app) as client:  # runs the lifespan
        tasks = client.get("/tasks").json()
        assert sorted(t["name"] for t in tasks) == [PRUNE_TASK, "purge-sessions", "refresh-rates"]
        assert client.get("/rates").json() == {}
        triggered = client.post("/tasks/refresh-rates/trigger")
        assert triggered.status_code == 202 and triggered.json()["name"] == "refresh-rates"
        wait_until(lambda: client.get("/rates").json(), 60, "the coroutine task to run")
        assert client.post("/tasks/nope/trigger").status_code == 404
    info = module.scheduler.info("refresh-rates")
    assert info.last_status == "success" and not info.running
    with pytest.raises(RuntimeError):
        module.scheduler.start()  # shut down by the lifespan: a scheduler starts once


def test_flask_app_factory_runs_the_scheduler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("flask", reason="Flask is not installed (not a dependency)")
    spec = importlib.util.spec_from_file_location("example_flask_app", EXAMPLES / "flask_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    app = module.create_app(f"sqlite:///{tmp_path / 'flask.sqlite3'}")
    scheduler: Scheduler = app.extensions["dbscheduler"]
    try:
        client = app.test_client()
        names = sorted(t["name"] for t in client.get("/tasks").get_json())
        assert names == ["compact-uploads", "send-reminders"]
        response = client.post("/tasks/send-reminders/trigger")
        assert response.status_code == 202
        wait_until(lambda: scheduler.info("send-reminders").last_status == "success", 60,
                 "the triggered task to run")
        assert client.post("/tasks/nope/trigger").status_code == 404
    finally:
        scheduler.shutdown(timeout=5)


# -- the digest mail (the queue service) --------------------------------------------------


def test_digest_mail_merges_a_users_notifications_into_one_mail(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "digest_mail.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=example_env(),
    )
    out = proc.stdout
    assert proc.returncode == 0, (out, proc.stderr)
    assert "mail to ann@example.com: 3 notification(s)\n  - Bob commented on 'Dinner'\n" \
           "  - Carol is going to 'Dinner'\n  - 'Dinner' moved to 8 pm\n" in out, out
    assert "mail to bob@example.com: 1 notification(s)\n  - Ann invited you to 'Dinner'" in out
    # The '-' key went out alone, before the window of the merged ones closed.
    assert out.index("Your password reset link") < out.index("Bob commented")
    assert out.rstrip().endswith("3 mails for 5 notifications"), out
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "digest.sqlite3").exists()
