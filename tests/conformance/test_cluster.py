"""The cluster guarantees (one execution at a time, fencing, takeover after a lost lease,
release at shutdown) with several real node processes, on every real database."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import Scheduler
from dbscheduler._engine.history import PRUNE_TASK
from tests.harness import ROOT, assert_no_overlap, cluster, runs_from
from tests.helpers import wait_until

pytestmark = pytest.mark.slow


def _row(url: str, table: str, name: str) -> dict[str, object]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                sa.text(f"SELECT * FROM {table} WHERE queue_name = :n"), {"n": name}
            ).mappings().one()
            return dict(row)
    finally:
        engine.dispose()


def test_ten_processes_register_at_the_same_instant(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    go = tmp_path / "go"
    # Each process says it is ready, then waits for the go: they start together however long
    # the imports take on a busy machine.
    script = textwrap.dedent(f"""
        import pathlib, sys, time
        from dbscheduler import Scheduler, FixedRate
        s = Scheduler({url!r}, table={table!r}, poll_interval=60)
        for i in range(20):
            s.add(f"job-{{i}}", lambda: None, schedule=FixedRate(3600))
        pathlib.Path({str(tmp_path)!r}, "ready-" + sys.argv[1]).touch()
        go = pathlib.Path({str(go)!r})
        while not go.exists():
            time.sleep(0.005)
        s.start()
        s.shutdown(timeout=5)
    """)
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(n)], cwd=ROOT,
                         stderr=subprocess.PIPE)
        for n in range(10)
    ]
    wait_until(lambda: len(list(tmp_path.glob("ready-*"))) == 10 or any(
        p.poll() is not None for p in procs), 120, "the ten processes to be ready")
    go.touch()
    errors = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * 10, errors
    with sa.create_engine(url).connect() as conn:
        rows = conn.execute(
            sa.text(f"SELECT queue_name, count(*) FROM {table} GROUP BY queue_name")
        )
        counts = dict(rows.all())
    # Every node also registers dbscheduler's own pruning task: one row too.
    assert counts == {**{f"job-{i}": 1 for i in range(20)}, PRUNE_TASK: 1}


def test_three_nodes_never_overlap(migrated: tuple[str, str], tmp_path: Path) -> None:
    url, table = migrated
    with cluster(url, table, tmp_path) as c:
        for n in range(3):
            c.start(f"node-{n}", "--tasks", "12", "--rate", "0.5", "--work", "0.2",
                    "--lease", "3", "--poll", "0.5")

        def per_task(events: list[dict[str, Any]]) -> dict[str, int]:
            counts = {f"task-{i}": 0 for i in range(12)}
            for e in events:
                if e["event"] == "start":
                    counts[e["task"]] += 1
            return counts

        # ~20 slots of 0.5 s in 10 s; a starved task never gets to ten runs.
        c.wait_for(lambda ev: min(per_task(ev).values()) >= 10, 120,
                   f"every task to run ten times: {per_task(c.events())}")
        for n in range(3):
            assert c.stop(f"node-{n}") == 0, c.stderr(f"node-{n}")
        runs = runs_from(c.events())
    assert_no_overlap(runs)
    assert len({r.node for r in runs}) >= 2, "the work is shared, not pinned to one node"
    assert all(r.end is not None for r in runs), "graceful stop lets running tasks finish"


def test_kill_9_the_task_is_taken_over_after_the_lease(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    lease, period = 2.0, 1.0
    args = ("--tasks", "1", "--rate", str(period), "--work", "20", "--lease", str(lease),
            "--poll", "0.2")
    with cluster(url, table, tmp_path) as c:
        c.start("victim", *args)
        events = c.wait_for(lambda ev: any(e["event"] == "start" for e in ev), 15,
                            "the victim starts the task")
        killed_at = time.time()
        heartbeat_before = _row(url, table, "task-0")["heartbeat_at"]
        c.nodes["victim"].kill()
        c.nodes["victim"].wait()
        c.start("heir", *args)
        events = c.wait_for(
            lambda ev: any(e["event"] == "start" and e["node"] == "heir" for e in ev), 20,
            "the heir takes over")
        taken = next(e for e in events if e["event"] == "start" and e["node"] == "heir")
        lost = [e for e in events if e["event"] == "lost_execution"]
    first = next(e for e in events if e["event"] == "start" and e["node"] == "victim")
    # The heir started only after the lease had really expired (last heartbeat + lease) …
    assert heartbeat_before is not None
    assert taken["t"] >= first["t"], "ordering"
    lease_end = max(first["t"], killed_at - lease / 3) + lease
    assert taken["t"] >= lease_end - lease / 3 - 0.05, (taken, first)
    # (How soon after is the heir's start-up plus a poll: a timing, measured in bench/.)
    assert lost and lost[0]["lost_node"] == "victim"
    assert taken["token"] == first["token"] + 1


def test_zombie_writes_nothing_after_losing_its_lease(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    lease = 1.5
    with cluster(url, table, tmp_path) as c:
        # Work that lasts until the node asks it to stop (a task whose work ended while its
        # process was stopped would end the moment it resumes, before the heartbeat can tell
        # it anything); then it returns normally, and its finish is what must be refused.
        c.start("zombie", "--tasks", "1", "--rate", "0.5", "--work", "600", "--lease",
                str(lease), "--poll", "0.2")
        c.wait_for(lambda ev: any(e["event"] == "start" for e in ev), 15, "zombie starts")
        c.signal("zombie", signal.SIGSTOP)
        c.start("heir", "--tasks", "1", "--rate", "0.5", "--work", "0.1", "--lease",
                str(lease), "--poll", "0.2")
        c.wait_for(lambda ev: sum(e["event"] == "finished" and e["node"] == "heir"
                                  for e in ev) >= 2, 20, "the heir runs the task twice")
        c.signal("zombie", signal.SIGCONT)
        events = c.wait_for(
            lambda ev: any(e["event"] == "finished" and e["node"] == "zombie" for e in ev), 60,
            "the zombie's execution ends")
        heir_tokens = [e["token"] for e in events if e["event"] == "start" and e["node"] == "heir"]
    zombie_start = next(e for e in events if e["event"] == "start" and e["node"] == "zombie")
    zombie_end = [e for e in events if e["node"] == "zombie" and e["event"] in
                  ("lease_lost", "finished", "end")]
    assert any(e["event"] == "lease_lost" for e in zombie_end), zombie_end
    finished = next(e for e in zombie_end if e["event"] == "finished")
    assert finished["written"] is False, "the zombie's finish must be refused"
    end = next(e for e in zombie_end if e["event"] == "end")
    assert end["stop_requested"] is True, "the zombie's ctx.stop_requested must be set"
    assert min(heir_tokens) > zombie_start["token"]
    row = _row(url, table, "task-0")
    assert int(row["total_attempt"]) >= max(heir_tokens)  # type: ignore[call-overload]
    assert row["locked_by"] in (None, "heir")


def test_skewed_clock_never_overlaps(migrated: tuple[str, str], tmp_path: Path) -> None:
    url, table = migrated
    with cluster(url, table, tmp_path) as c:
        c.start("ahead", "--tasks", "6", "--rate", "0.4", "--work", "0.15", "--lease", "2",
                "--poll", "0.3", "--skew", "7200")
        # Which node wins the picks while both run is timing, not a promise (one may take
        # them all): each runs every task while it is alone.
        c.wait_for(lambda ev: {r.task for r in runs_from(ev) if r.node == "ahead"}
                   >= {f"task-{i}" for i in range(6)}, 40, "the node ahead runs every task")
        c.start("behind", "--tasks", "6", "--rate", "0.4", "--work", "0.15", "--lease", "2",
                "--poll", "0.3", "--skew", "-7200")
        # Two hours of skew either way stall nothing: every task keeps running (about 15
        # runs in 6 s when the machine is idle; waited for, not timed).
        c.wait_for(lambda ev: min(sum(r.task == f"task-{i}" for r in runs_from(ev))
                                  for i in range(6)) >= 8, 40, "8 runs of every task")
        assert c.stop("ahead") == 0
        c.wait_for(lambda ev: {r.task for r in runs_from(ev) if r.node == "behind"}
                   >= {f"task-{i}" for i in range(6)}, 40, "the node behind runs every task")
        assert c.stop("behind") == 0
        runs = runs_from(c.events())
    assert_no_overlap(runs)
    assert {r.node for r in runs} == {"ahead", "behind"}


def test_graceful_shutdown_never_gives_away_a_running_execution(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    lease = 3.0
    with cluster(url, table, tmp_path) as c:
        c.start("leaving", "--tasks", "1", "--rate", "0.5", "--work", "60", "--lease", str(lease),
                "--poll", "0.2", "--ignore-stop", "--shutdown-timeout", "1")
        c.wait_for(lambda ev: any(e["event"] == "start" for e in ev), 15, "task starts")
        c.start("staying", "--tasks", "1", "--rate", "0.5", "--work", "0.1", "--lease",
                str(lease), "--poll", "0.2")
        c.wait_for(lambda ev: any(e["event"] == "settled" and e["node"] == "staying"
                                  for e in ev), 60, "the other node polls")
        # The task ignores stop_requested: after the 1 s shutdown timeout it still runs, so it
        # keeps its lease until the process exits; then the lease expires.
        c.signal("leaving", signal.SIGTERM)
        assert c.nodes["leaving"].wait(timeout=20) == 0, c.stderr("leaving")
        exited = time.time()
        # Only the lease's expiry lets it go: the bound is generous for a busy machine.
        events = c.wait_for(lambda ev: any(e["event"] == "start" and e["node"] == "staying"
                                           for e in ev), lease + 60,
                            "the other node to run it once the lease expired")
    assert "keep their lease" in c.stderr("leaving")
    taken = next(e for e in events if e["event"] == "start" and e["node"] == "staying")
    assert taken["t"] > exited, "taken over while the leaving node's execution still ran"


def test_trigger_from_another_process_wakes_a_postgresql_node(
    migrated: tuple[str, str], backend: str, tmp_path: Path
) -> None:
    if backend != "postgresql":
        pytest.skip("LISTEN/NOTIFY wake-ups are PostgreSQL's; others wake on their poll")
    url, table = migrated
    # The poll is an hour away: only the NOTIFY can start the task before it.
    with cluster(url, table, tmp_path) as c:
        c.start("sleeper", "--tasks", "1", "--rate", "3600", "--work", "0", "--poll", "3600")
        ops = Scheduler(url, table=table)
        # Registered (nothing due for an hour), polled, and LISTEN is up.
        c.wait_for(lambda ev: any(e["event"] == "settled" for e in ev), 60,
                   "the node to poll and listen")
        ops.trigger("task-0")
        c.wait_for(lambda ev: any(e["event"] == "start" for e in ev), 60,
                   "the triggered task to start, woken by NOTIFY")
