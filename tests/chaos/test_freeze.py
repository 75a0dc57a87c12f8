"""A node frozen (SIGSTOP) inside every engine path never holds up the others, and once
thawed its writes land nowhere.

Per server backend (PostgreSQL, MariaDB), a real node process freezes itself right after the
statement of one path (``DBSCHEDULER_FREEZE_AT``): pick, heartbeat, finish, release (a pick
whose answer came after its lease), record_lost (a row whose node was killed), register, and
an operation run by a separate ``Client`` process. Then

* another node takes over every task within lease + 2 s of the freeze — for register and the
  operation: the other nodes keep picking and finishing every task in that time;
* for the paths that held a lease: the tasks are paused, the taking node is killed, the
  table is read, and only then the frozen node is thawed, sees its lease lost (its running
  function gets ``ctx.stop_requested``, logged in its ``end`` event), and shuts down. Not a
  column of the table changed meanwhile: whatever the thawed node tried was fenced out.

Random moments inside slowed statements, and SQLite: ``test_freeze_slow.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.chaos.checks import NodeHistory, Report, analyse
from tests.chaos.freeze_db import drop_slow_trigger, install_slow_trigger
from tests.chaos.freeze_flow import (
    fenced_out,
    freeze_test,
    restartable,
    start_all,
    takeover_figures,
)
from tests.chaos.freezing import LEASE, Nodes, node_args, ran_all, task_names, wait_takeover
from tests.chaos.parallel import SERVER_BACKENDS, Env, Runner, check

pytestmark = pytest.mark.chaos

Record = Callable[[Report], None]


# -- pick, heartbeat, finish, release, record_lost ---------------------------------------------
def leased_point(env: Env, point: str, *, tasks: int = 1, slow_pick: bool = False,
                 vanished_first: bool = False) -> Report:
    """One node alone runs a short and a long task and freezes at ``point``; a second node,
    held at its start gate until then, must take over every task."""
    report = Report(f"freeze at {point}", env.backend)
    names = task_names(tasks=tasks)
    args = node_args(tasks=tasks)
    nodes = Nodes(env.url, env.table, env.workdir)
    try:
        if slow_pick:
            # The frozen node's pick answers after its lease: it gives the rows back, and
            # freezes right after that release.
            install_slow_trigger(env.url, env.backend, env.table, "frozen", LEASE + 0.5,
                                 taking_only=True)
        kills: dict[str, list[float]] = {}
        if vanished_first:
            # A node killed mid-run: the frozen node's pick finds the row it held.
            nodes.start("vanished", *args)
            nodes.wait_for(ran_all(names), 30, "the first node runs every task")
            kills["vanished"] = [nodes.kill9("vanished")]
        nodes.start("frozen", *args, freeze_at=point)
        nodes.start("taker", *args, gated=True)
        frozen_at = nodes.wait_frozen("frozen", 40, point)
        nodes.open_gate("taker")
        took = wait_takeover(nodes, names, frozen_at, by=["taker"], url=env.url,
                             table=env.table, backend=env.backend)
        takeover_figures(report, took)
        fenced_out(report, nodes, env, frozen="frozen", taker="taker", frozen_at=frozen_at,
                   tasks=names, long=task_names(tasks=0),
                   not_started=point in ("pick", "record_lost", "release"), kills=kills)
    finally:
        nodes.close()
        if slow_pick:
            drop_slow_trigger(env.url, env.backend, env.table)
    return report


def freeze_pick(env: Env) -> Report:
    return leased_point(env, "pick")


def freeze_heartbeat(env: Env) -> Report:
    return leased_point(env, "heartbeat")


def freeze_finish(env: Env) -> Report:
    # The short task's finish comes while the long one still runs on the frozen node.
    return leased_point(env, "finish")


def freeze_release(env: Env) -> Report:
    return leased_point(env, "release", tasks=0, slow_pick=True)


def freeze_record_lost(env: Env) -> Report:
    return leased_point(env, "record_lost", tasks=0, vanished_first=True)


# -- register and operations: nobody else waits --------------------------------------------
def freeze_register(env: Env) -> Report:
    """A node frozen inside its registration (new names) blocks neither the running node nor
    a node that starts then and registers the same names."""
    report = Report("freeze at register", env.backend)
    old = task_names(tasks=2, prefix="x", long=0)
    new = task_names(tasks=0, long=2, long_prefix="y")
    running_args = node_args(tasks=2, prefix="x", long=0, rate=0.5, work=0.2)
    both_args = node_args(tasks=2, prefix="x", long=2, long_prefix="y", long_work=0.2,
                          rate=0.5, work=0.2)
    nodes = Nodes(env.url, env.table, env.workdir)
    try:
        nodes.start("worker", *running_args)
        nodes.wait_for(ran_all(old), 30, "the worker runs its tasks")
        nodes.start("frozen", *both_args, freeze_at="register")
        nodes.start("late", *both_args, gated=True)
        frozen_at = nodes.wait_frozen("frozen", 30, "register")
        nodes.open_gate("late")
        took = wait_takeover(nodes, old + new, frozen_at, by=["worker", "late"], written=True,
                             url=env.url, table=env.table, backend=env.backend, patience=8)
        takeover_figures(report, took)
        resumed = nodes.sigcont("frozen")
        # Thawed, it is an ordinary node again, or — when the server ended its idle
        # transaction meanwhile — a node whose start failed. Either way the others went on;
        # which one it was is a figure, not this test's verdict.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and nodes.procs["frozen"].poll() is None and not any(
                e["node"] == "frozen" and e["event"] == "start" for e in nodes.events()):
            time.sleep(0.05)
        code = nodes.procs["frozen"].poll()
        report.extra["thawed_node_exit_code"] = code
        if code is not None:
            report.extra["thawed_node_error"] = nodes.stderr("frozen").strip().splitlines()[-1]
        kills = {n: [nodes.kill9(n)] for n in ("worker", "late", "frozen")
                 if nodes.procs[n].poll() is None}
        analyse(report, nodes.events(), NodeHistory(kills=kills, freezes={}, exits={}),
                tasks=[], fault_end=resumed, gap_limit=None)
    finally:
        nodes.close()
    return report


def freeze_operation(env: Env) -> Report:
    """A ``Client`` process frozen inside ``resume`` (of a task that is not paused: a write
    that changes nothing) leaves every task running and finishing on the other node."""
    report = Report("freeze at operation", env.backend)
    names = task_names(tasks=2, long=0)
    nodes = Nodes(env.url, env.table, env.workdir)
    try:
        nodes.start("worker", *node_args(tasks=2, long=0, rate=0.5, work=0.2))
        nodes.wait_for(ran_all(names), 30, "the worker runs its tasks")
        nodes.run_client("client", "client.resume('task-0')", freeze_at="operation")
        frozen_at = nodes.wait_frozen("client", 30, "operation")
        took = wait_takeover(nodes, names, frozen_at, by=["worker"], written=True,
                             url=env.url, table=env.table, backend=env.backend, patience=8)
        takeover_figures(report, took)
        resumed = nodes.sigcont("client")
        code = nodes.procs["client"].wait(timeout=15)
        if code != 0:
            report.problem("client", f"exited with {code}: {nodes.stderr('client')[-2000:]}")
        killed = nodes.kill9("worker")
        analyse(report, nodes.events(), NodeHistory(kills={"worker": [killed]}, freezes={},
                                                    exits={}),
                tasks=[], fault_end=resumed, gap_limit=None)
    finally:
        nodes.close()
    return report


def _point_test(scenario: Callable[[Env], Report]) -> Callable[..., None]:
    # One test function per point, parametrized by backend alone: the runner starts a
    # scenario on both backends at once when the test ids differ only in the backend.
    run = restartable(scenario)

    @pytest.mark.parametrize("backend", SERVER_BACKENDS)
    @freeze_test(run)
    def test(backend: str, chaos_runner: Runner, request: pytest.FixtureRequest,
             record: Record) -> None:
        start_all(request, chaos_runner)
        check(request, chaos_runner, record, run, backend, SERVER_BACKENDS)

    test.__doc__ = scenario.__doc__ or leased_point.__doc__
    return test


test_freeze_at_pick = _point_test(freeze_pick)
test_freeze_at_heartbeat = _point_test(freeze_heartbeat)
test_freeze_at_finish = _point_test(freeze_finish)
test_freeze_at_release = _point_test(freeze_release)
test_freeze_at_record_lost = _point_test(freeze_record_lost)
test_freeze_at_register = _point_test(freeze_register)
test_freeze_at_operation = _point_test(freeze_operation)


