"""``shutdown(timeout)`` never gives away an execution that still runs (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness.node import read_events
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _events(path: Path) -> list[dict[str, Any]]:
    return read_events(path)


def _first(events: list[dict[str, Any]], node: str, event: str) -> dict[str, Any] | None:
    return next((e for e in events if e["node"] == node and e["event"] == event), None)


def test_a_running_execution_keeps_its_lease_after_shutdown(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    log = tmp_path / "events.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    a_err, b_err = tmp_path / "a.err", tmp_path / "b.err"
    with a_err.open("wb") as a_out, b_err.open("wb") as b_out:
        a = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.shutdown_node", url, table, str(log)],
            cwd=ROOT, env=env, stdout=a_out, stderr=a_out,
        )
        b = None
        try:
            wait_until(lambda: _first(_events(log), "A", "start"), timeout=30,
                       what="A's execution to start")
            # B is eager: same task, short lease, fast polls.
            b = subprocess.Popen(
                [sys.executable, "-m", "tests.harness.node", "--url", url, "--table", table,
                 "--node", "B", "--log", str(log), "--prefix", "long", "--tasks", "1",
                 "--delay", "1", "--work", "0.1", "--lease", "2", "--poll", "0.1",
                 "--watchdog", "40"],
                cwd=ROOT, env=env, stdout=b_out, stderr=b_out,
            )
            wait_until(lambda: _first(_events(log), "B", "start"), timeout=30,
                       what="B to run the task after A's execution ended")
            assert a.wait(timeout=30) == 0
        finally:
            for proc in (a, b):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(timeout=30)

    events = _events(log)
    returned = _first(events, "A", "shutdown_returned")
    a_start, a_end = _first(events, "A", "start"), _first(events, "A", "end")
    a_finished, b_start = _first(events, "A", "finished"), _first(events, "B", "start")
    assert returned and a_start and a_end and b_start, events
    assert b_start["t"] > a_end["t"], "B started the task while A's execution still ran"
    assert a_finished, events
    # That it did not wait for the execution is the ordering below; this bound only catches
    # a shutdown that hangs, and holds on a machine ten times slower.
    assert returned["took"] < 10, "shutdown(0.2) must return quickly"
    # A's process lived on after shutdown; its execution ran to its end, and only then B.
    assert returned["t"] < a_end["t"]
    assert a_finished["written"] is True and a_finished["status"] == "success"
    assert b_start["token"] == a_start["token"] + 1
    stderr = a_err.read_text()
    assert "keep their lease" in stderr and "'long-0'" in stderr
