"""Execution controls with real node processes, on every real database: a group limit held
across the cluster (never exceeded, reached, changed at run time), node tags, fenced
transactions against a zombie, and isolated children (timeouts, crashes, no orphans)."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import Client
from dbscheduler._engine.isolation import KILL_AFTER
from tests.harness import Run, cluster, runs_from

pytestmark = pytest.mark.slow


def _max_running(runs: Iterable[Run], since: float = 0.0, until: float = float("inf")) -> int:
    """The most executions running at one instant within ``[since, until]``, as the tasks
    themselves logged their start and end."""
    edges: list[tuple[float, int]] = []
    for r in runs:
        end = r.end if r.end is not None else float("inf")
        if end < since or r.start > until:
            continue
        edges += [(max(r.start, since), 1), (min(end, until), -1)]
    running = peak = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # ends before starts on a tie
        running += step
        peak = max(peak, running)
    return peak


def _options(prefix: str, **options: Any) -> list[str]:
    return ["--task-options", f"{prefix}={json.dumps(options)}"]


def test_a_group_limit_holds_across_three_nodes_is_reached_and_changes_at_run_time(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    with Client(url, table=table) as client:
        client.set_group_limit("g", 3)
    args = ["--tasks", "10", "--prefix", "g", *_options("g", group="g"), "--rate", "0.2",
            "--work", "0.4", "--workers", "8", "--lease", "3", "--poll", "0.5"]
    with cluster(url, table, tmp_path) as c:
        for n in range(3):  # at the same moment: they race for the same due rows
            c.start(f"node-{n}", *args)
        c.wait_for(lambda ev: sum(e["event"] == "start" for e in ev) >= 30, 120,
                   "30 executions of the group")
        c.wait_for(lambda ev: _max_running([r for r in runs_from(ev) if r.end is not None])
                   >= 3, 60, "the limit of 3 reached")
        with Client(url, table=table) as client:
            changed = time.time()
            client.set_group_limit("g", 5)
            assert [(g.name, g.limit, g.tasks) for g in client.groups()] == [("g", 5, 10)]
        # Then, after a second for the change to reach the nodes, the raised limit reached.
        # Ended runs only: a run still in flight counts as running for ever.
        c.wait_for(lambda ev: _max_running([r for r in runs_from(ev) if r.end is not None],
                                           since=changed + 1) >= 5, 60,
                   "five at once under the raised limit")
        for n in range(3):
            assert c.stop(f"node-{n}") == 0, c.stderr(f"node-{n}")
        runs = runs_from(c.events())
    assert _max_running(runs, until=changed) == 3  # never more, and reached
    assert _max_running(runs) <= 5
    # The raised limit applied at the next picks: 5 at once after the change.
    assert _max_running(runs, since=changed + 1) == 5
    # Which nodes ran them is not asserted: load distribution is no guarantee (a node that
    # wakes first may take every free slot of the group, as one did on a loaded SQLite run).
    assert {r.task for r in runs} == {f"g-{i}" for i in range(10)}


def test_requires_runs_a_task_only_on_nodes_carrying_its_tag(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    args = ["--tasks", "4", "--prefix", "gpu", "--group", "pin:4:0.05",
            *_options("gpu", requires="gpu"), *_options("pin", requires="cpu-node"),
            "--rate", "0.3", "--work", "0.05", "--poll", "0.3"]
    with cluster(url, table, tmp_path) as c:
        c.start("gpu-node", *args, "--tags", "gpu,eu")
        c.start("cpu-node", *args)
        c.wait_for(lambda ev: {e["task"] for e in ev if e["event"] == "start"} >= {
            *(f"gpu-{i}" for i in range(4)), *(f"pin-{i}" for i in range(4))}, 30,
            "every task ran")
        # More chances for a node without the tag to take one: every task runs again.
        c.wait_for(lambda ev: min(Counter(e["task"] for e in ev if e["event"] == "start")
                                  .values()) >= 2, 60, "every task ran twice")
        c.stop("gpu-node")
        c.stop("cpu-node")
        runs = runs_from(c.events())
    assert {r.node for r in runs if r.task.startswith("gpu")} == {"gpu-node"}
    # A node id is always one of its tags: "pinned" to one node.
    assert {r.node for r in runs if r.task.startswith("pin")} == {"cpu-node"}


def test_a_zombie_cannot_commit_through_ctx_fenced_while_the_new_owner_can(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    effects = f"{table}_fx"
    engine = sa.create_engine(url)
    fx = sa.Table(effects, sa.MetaData(), sa.Column("task", sa.String(200)),
                  sa.Column("node", sa.String(200)), sa.Column("token", sa.Integer))
    fx.create(engine)
    args = ["--tasks", "1", "--prefix", "pay", "--rate", "0.5", "--work", "2", "--ignore-stop",
            "--lease", "2", "--poll", "0.3", "--fence-table", effects]
    try:
        with cluster(url, table, tmp_path) as c:
            c.start("zombie", *args)
            events = c.wait_for(lambda ev: any(e["event"] == "start" for e in ev), 30,
                                "the first execution starts")
            c.freeze("zombie")  # frozen in the middle of its work, past its lease
            (first,) = [e for e in events if e["event"] == "start"]
            c.start("owner", *args)
            c.wait_for(lambda ev: any(e["event"] == "fenced" and e["node"] == "owner"
                                      for e in ev), 30, "the new owner's fenced write")
            c.thaw("zombie")
            events = c.wait_for(lambda ev: any(e["event"] == "fence_refused" for e in ev), 30,
                                "the zombie's fenced write is refused")
            c.stop("zombie")
            c.stop("owner")
        refused = [e for e in events if e["event"] == "fence_refused"]
        assert [(e["node"], e["token"]) for e in refused] == [("zombie", first["token"])]
        with engine.connect() as conn:
            written = conn.execute(sa.select(fx.c.node, fx.c.token)).all()
        assert ("zombie", first["token"]) not in written
        assert any(node == "owner" for node, _ in written)
    finally:
        fx.drop(engine)
        engine.dispose()


# -- isolated children ------------------------------------------------------------------------
def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].startswith("Z")  # a zombie is dead
    except FileNotFoundError:
        return True


def _wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [p for p in left if not _gone(p)]
        time.sleep(0.05)
    return left


def _trigger_when_registered(url: str, table: str, *names: str) -> None:
    """Trigger ``names`` as soon as the node that declares them has written their rows."""
    deadline = time.monotonic() + 30
    with Client(url, table=table) as client:
        while {t.name for t in client.tasks()} < set(names):
            assert time.monotonic() < deadline, "the node never registered its tasks"
            time.sleep(0.1)
        for name in names:
            client.trigger(name)


def _child_pids(events: Iterable[dict[str, Any]]) -> list[int]:
    return [int(e["pid"]) for e in events if e["event"] == "child_start"]


def test_a_hung_isolated_child_is_killed_after_its_timeout_while_the_node_runs_others(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    with cluster(url, table, tmp_path) as c:
        c.start("node", "--tasks", "2", "--prefix", "quick", "--rate", "0.3", "--work", "0.05",
                "--isolated", "hung=hang", *_options("hung", timeout=2), "--poll", "0.3",
                "--shutdown-timeout", "1")
        events = c.wait_for(
            lambda ev: any(e["event"] == "finished" and e["task"] == "hung" for e in ev), 60,
            "the hung task's run ends")
        (start,) = [e for e in events if e["event"] == "child_start"][:1]
        (finished,) = [e for e in events if e["event"] == "finished" and e["task"] == "hung"]
        assert finished["status"] == "timeout" and finished["written"]
        # Asked to stop at its timeout (the child saw the request), killed a few seconds later.
        (seen,) = [e for e in events if e["event"] == "child_stop_seen"]
        assert seen["t"] - start["t"] <= 2 + 1, "the stop came at the timeout"
        assert finished["t"] - seen["t"] <= KILL_AFTER + 3
        if seen["t"] - start["t"] >= 1.5:  # the child started well before its timeout
            assert finished["t"] - seen["t"] >= KILL_AFTER - 0.5, "killed too soon"
        assert _wait_gone([start["pid"]], 2) == []
        # The execution began its timeout earlier than its child's first line (a fork server
        # starting on a busy machine can take seconds).
        began = finished["t"] - (2 + KILL_AFTER)
        quick = [e for e in events if e["event"] == "start" and began < e["t"] < finished["t"]]
        assert len(quick) >= 4, "the node kept running its other tasks meanwhile"
        with Client(url, table=table) as client:
            assert client.info("hung").last_error == (
                "timed out after 2 s (the child process was killed by SIGKILL (9))")
        # A shutdown that cannot wait for a (new) hung child kills it.
        c.wait_for(lambda ev: len(_child_pids(ev)) >= 2, 30, "the hung task runs again")
        assert c.stop("node") == 0
        assert _wait_gone(_child_pids(c.events()), 5) == []


def test_a_crashed_child_is_an_error_with_its_signal_or_exit_code(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    with cluster(url, table, tmp_path) as c:
        c.start("node", "--tasks", "0", "--isolated", "segv=crash", "--isolated", "bye=leave",
                "--isolated", "ok=quick", "--rate", "3600", "--poll", "0.3")
        _trigger_when_registered(url, table, "segv", "bye", "ok")
        events = c.wait_for(
            lambda ev: {e["task"] for e in ev if e["event"] == "finished"} == {"segv", "bye", "ok"},
            60, "the three runs end")
        assert {e["task"]: e["status"] for e in events if e["event"] == "finished"} == {
            "segv": "error", "bye": "error", "ok": "success"}
        (node_start,) = [e for e in events if e["event"] == "node_start"]
        with Client(url, table=table) as client:
            assert client.info("segv").last_error == (
                "the child process was killed by SIGSEGV (11)")
            assert client.info("bye").last_error == (
                "the child process exited with code 3 without a result")
            # The state a child returns is stored; it ran in a process of its own.
            state = client.info("ok").state
            assert state["runs"] == 1 and state["pid"] != node_start["pid"]
        assert c.alive("node")
        c.stop("node")


def test_no_child_outlives_a_node_killed_with_sigkill(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    with cluster(url, table, tmp_path) as c:
        c.start("node", "--tasks", "0", "--isolated", "hung=hang", "--rate", "3600")
        _trigger_when_registered(url, table, "hung")
        events = c.wait_for(lambda ev: bool(_child_pids(ev)), 60, "the child starts")
        (pid,) = _child_pids(events)
        assert not _gone(pid)
        c.kill("node")
        assert _wait_gone([pid], 3) == [], "an orphan child survived its node"
    assert os.path.exists(f"/proc/{os.getpid()}")  # (the check above looked at real pids)
