"""The run history with real node processes on every real database: one run row per
execution a node logs, with its token, node, status and error; a ``lost`` row for an
execution whose node was killed, written by the node that took over; no row for a finish
that was fenced off; and a crash between a run row and its finish (where they are two
statements) settled by the takeover."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.harness import cluster

pytestmark = pytest.mark.slow

LEASE = 2.0


def run_rows(url: str, table: str) -> list[dict[str, Any]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.text(
                f"SELECT task_name, token, attempt, node_id, status, error, scheduled_at, "
                f"started_at, finished_at FROM {table}_runs ORDER BY id")).mappings()]
    finally:
        engine.dispose()


def by_execution(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    keys = Counter((r["task_name"], int(r["token"])) for r in rows)
    doubled = [k for k, n in keys.items() if n > 1]
    assert not doubled, f"executions with more than one run row: {doubled}"
    return {(r["task_name"], int(r["token"])): r for r in rows}


def test_every_logged_execution_has_exactly_one_run_row_and_a_killed_one_a_lost_row(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    failing = tmp_path / "failing"
    args = ("--tasks", "3", "--rate", "0.4", "--work", "0.05", "--lease", str(LEASE),
            "--poll", "0.2", "--fail-while", str(failing), "--group", "long:1:30")
    with cluster(url, table, tmp_path) as c:
        c.start("node-a", *args)
        c.start("node-b", *args)
        events = c.wait_for(lambda ev: any(e["event"] == "start" and e["task"] == "long-0"
                                           for e in ev), 20, "a node starts the long task")
        victim = next(e["node"] for e in events
                      if e["event"] == "start" and e["task"] == "long-0")
        heir = "node-b" if victim == "node-a" else "node-a"
        before = len(c.events())
        failing.touch()  # a stretch of failing runs: error rows with their text
        c.wait_for(lambda ev: sum(e["event"] == "finished" and e["status"] == "error"
                                  for e in ev[before:]) >= 3, 60, "three failing runs")
        killed_at = c.kill(victim)
        failing.unlink()
        events = c.wait_for(lambda ev: any(e["event"] == "lost_execution" and e["node"] == heir
                                           for e in ev), 60,
                            f"{heir} finds the killed execution lost")
        found = len(events)
        # The heir goes on past the takeover: its rows after it are checked too, and at
        # least ten landed finishes in all (a loaded machine runs fewer in the same time).
        c.wait_for(lambda ev: sum(e["event"] == "finished" and e["node"] == heir
                                  for e in ev[found:]) >= 3
                   and sum(e["event"] == "finished" and bool(e.get("written"))
                           for e in ev) >= 10, 60, f"{heir} runs on")
        assert c.stop(heir) == 0, c.stderr(heir)
        events = c.events()
    rows = by_execution(run_rows(url, table))
    started = {(e["task"], int(e["token"])): e["node"] for e in events if e["event"] == "start"}
    finished = {(e["task"], int(e["token"])): e for e in events if e["event"] == "finished"}

    finders = {(e["task"], int(e["token"])) for e in events
               if e["event"] == "lost_execution" and e["node"] == heir}
    # No orphan: every run row belongs to an execution some node started, on that node — or
    # to one the victim had picked but not yet started when it was killed (found lost).
    for key, row in rows.items():
        picked_only = key in finders and row["status"] == "lost" and key not in started
        assert picked_only or started.get(key) == row["node_id"], (key, row, started.get(key))
    # Every finish that landed has its row, with the status and error the node reported.
    landed = {k: e for k, e in finished.items() if e["written"]}
    assert len(landed) >= 10, len(landed)
    for key, event in landed.items():
        row = rows[key]
        assert row["status"] == event["status"], (key, row, event)
        if event["status"] == "error":
            assert row["error"] == f"RuntimeError: failing on purpose (token {key[1]})", row
        else:
            assert row["error"] is None, row
        assert row["started_at"] <= row["finished_at"] and row["scheduled_at"] <= row[
            "started_at"], row
    assert {"success", "error"} <= {e["status"] for e in landed.values()}
    # The killed node's running execution: one lost row, for its token, naming it.
    (lost_key,) = [k for k, node in started.items()
                   if node == victim and k not in finished and k[0] == "long-0"]
    lost = rows[lost_key]
    assert lost["status"] == "lost" and lost["node_id"] == victim, lost
    assert f"node {victim} vanished" in lost["error"], lost
    # Each lost row was written by the node that found the execution lost (the heir), one
    # per execution it found: long-0's, and any short one the kill interrupted.
    assert lost_key in finders
    assert finders == {k for k, r in rows.items() if r["status"] == "lost"}
    assert all(rows[k]["node_id"] == victim and started.get(k, victim) == victim
               for k in finders)
    assert all(e["t"] > killed_at for e in events
               if e["event"] == "lost_execution"), "found lost only after the kill"
    # Every execution started has its row: a graceful stop ends them all.
    missing = [k for k in started if k not in rows]
    assert not missing, missing


def test_a_fenced_off_finish_writes_no_run_row(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    lease = 1.5
    args = ("--tasks", "1", "--rate", "0.5", "--work", "4", "--lease", str(lease),
            "--poll", "0.2")
    with cluster(url, table, tmp_path) as c:
        c.start("zombie", *args)
        c.wait_for(lambda ev: any(e["event"] == "start" for e in ev), 20, "zombie starts")
        c.freeze("zombie")
        c.start("heir", *args)
        c.wait_for(lambda ev: any(e["event"] == "lost_execution" for e in ev), 20,
                   "heir takes the task over")
        c.thaw("zombie")
        events = c.wait_for(
            lambda ev: any(e["event"] == "finished" and e["node"] == "zombie" for e in ev), 20,
            "the zombie's finish is refused")
        c.stop_all()
    zombie = next(e for e in events if e["event"] == "finished" and e["node"] == "zombie")
    assert zombie["written"] is False
    rows = [r for r in run_rows(url, table) if int(r["token"]) == zombie["token"]]
    # Only the lost row the heir wrote: the zombie's refused finish added nothing.
    assert [(r["node_id"], r["status"]) for r in rows] == [("zombie", "lost")], rows


def test_a_crash_between_the_run_row_and_its_finish_leaves_one_lost_row(
    migrated: tuple[str, str], backend: str, tmp_path: Path
) -> None:
    if backend == "postgresql":
        pytest.skip("PostgreSQL writes the run row in the finish's own statement: there is "
                    "no moment between them to crash in")
    url, table = migrated
    args = ("--tasks", "1", "--rate", "0.5", "--work", "0.05", "--lease", str(LEASE),
            "--poll", "0.2")
    with cluster(url, table, tmp_path) as c:
        # The victim stops itself right after its first run row, before that finish.
        c.start("victim", *args, env={"DBSCHEDULER_FREEZE_AT": "finish_history"})
        c.wait_for(lambda ev: any(e["event"] == "end" for e in ev), 20, "the victim runs")
        deadline = time.monotonic() + 10
        while not run_rows(url, table):
            assert time.monotonic() < deadline, "no run row written before the finish"
            time.sleep(0.05)
        (written_first,) = run_rows(url, table)
        assert written_first["status"] == "success"  # what the victim was about to land
        c.kill("victim")
        c.start("heir", *args)
        c.wait_for(lambda ev: any(e["event"] == "lost_execution" for e in ev), 20,
                   "the heir finds the execution lost")
        c.stop_all()
    rows = [r for r in run_rows(url, table) if int(r["token"]) == int(written_first["token"])]
    assert [(r["node_id"], r["status"]) for r in rows] == [("victim", "lost")], rows
