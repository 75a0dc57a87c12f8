"""Scenarios 3 and 4, and a network partition: faults on the database side.

3. the server cuts every scheduler connection (``pg_terminate_backend`` / ``KILL``), again
   and again;
4. the server restarts while tasks run; the nodes ride it out and go on without a restart;
+ one node is cut off from the database by a network partition (a TCP proxy that stops
  moving bytes) for longer than its lease, while its peers still reach it.

These faults do not exist on SQLite (no server, no connections to cut).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from dbscheduler import FixedDelay, FixedRate, Outcome, Result, Scheduler, TaskContext, TaskInfo
from tests.chaos.checks import Report
from tests.chaos.cluster import chaos_run, node_args
from tests.chaos.faults import proxy_for
from tests.chaos.parallel import SERVER_BACKENDS, Env, Runner, Skip, check
from tests.helpers import wait_until

pytestmark = pytest.mark.chaos

Record = Callable[[Report], None]
SERVERS = pytest.mark.parametrize("backend", ["postgresql", "mysql"])


# -- 3. connections cut ----------------------------------------------------------------------
def connections_cut(env: Env) -> Report:
    assert env.server is not None
    lease, rate, poll = 1.5, 0.4, 0.25
    n_tasks = 10
    tasks = [f"task-{i}" for i in range(n_tasks)] + [f"long-{i}" for i in range(2)]
    args = node_args(tasks=n_tasks, rate=rate, work=0.2, lease=lease, poll=poll, workers=4,
                     extra=["--group", "long:2:0.9"])
    cuts = env.profile.count(short=4, long=80)
    cut_total = 0
    with chaos_run(scenario="3 connections cut", backend=env.backend,
                   url=env.server.node_url(), admin_url=env.url, table=env.table,
                   workdir=env.workdir, tasks=tasks, seed=3) as run:
        for n in range(3):
            run.start(f"n{n}", *args)
        run.warm_up()
        for _ in range(cuts):
            cut_total += env.server.cut()
            run.fault("every connection cut")
            run.sleep(run.random.uniform(0.5, 1.2))
        run.recover(timeout=30, settle=1.0)
        run.stop_all()
        run.verify(gap_limit=lease + rate + 10.0,
                   warnings_allowed=run.report.faults.total() + 1, ambiguous_ok=True)
        restarts = _node_starts(run.events())
    report = run.report
    report.extra["connections_cut"] = cut_total
    if cut_total < cuts:
        report.problem("the scenario tested nothing", f"{cut_total} connections cut")
    if any(n != 1 for n in restarts.values()):
        report.problem("a node had to restart", f"{restarts}")
    return report


@SERVERS
def test_database_cuts_every_connection_repeatedly(
    backend: str, chaos_runner: Runner, request: pytest.FixtureRequest, record: Record
) -> None:
    check(request, chaos_runner, record, connections_cut, backend, SERVER_BACKENDS)


# -- 4. the database restarts -----------------------------------------------------------------
def database_restart(env: Env) -> Report:
    assert env.server is not None
    reason = env.server.restart_unavailable()
    if reason is not None:
        raise Skip(reason)
    lease, rate, poll = 1.5, 0.4, 0.25
    n_tasks = 8
    tasks = [f"task-{i}" for i in range(n_tasks)] + [f"long-{i}" for i in range(2)]
    args = node_args(tasks=n_tasks, rate=rate, work=0.2, lease=lease, poll=poll, workers=4,
                     extra=["--group", "long:2:1.0"])
    # Short: one brief restart per server (others' tests share it). Long: several, some with
    # the server down well beyond the lease, so heartbeats give up and leases are lost.
    holds = [0.0] if not env.profile.long else [0.0, 2.0, 0.0, 3.0]
    outages: list[float] = []
    with chaos_run(scenario="4 database restart", backend=env.backend, url=env.url,
                   admin_url=env.url, table=env.table, workdir=env.workdir, tasks=tasks,
                   seed=4) as run:
        for n in range(3):
            run.start(f"n{n}", *args)
        run.warm_up()
        for i, hold in enumerate(holds):
            run.sleep(1.0 if i == 0 else 20.0)
            outages.append(env.server.restart(hold))
            run.fault("database restart")
        run.recover(timeout=40, settle=1.0)
        run.stop_all()
        run.verify(gap_limit=max(outages) + 10.0 + lease + 3.0,
                   warnings_allowed=run.report.faults.total() + 1, ambiguous_ok=True)
        restarts = _node_starts(run.events())
    report = run.report
    report.extra["outage_seconds"] = [round(o, 2) for o in outages]
    if any(n != 1 for n in restarts.values()):
        report.problem("a node had to restart", f"{restarts}")
    return report


@SERVERS
@pytest.mark.restarts_servers
def test_database_restarts_while_tasks_run(
    backend: str, chaos_runner: Runner, request: pytest.FixtureRequest, record: Record
) -> None:
    check(request, chaos_runner, record, database_restart, backend, SERVER_BACKENDS)


# -- a network partition ----------------------------------------------------------------------
def partition(env: Env) -> Report:
    """A node that cannot reach the database must stop its executions before its lease
    expires on the database (it learns it lost the lease and tells the task),
    even when its connections hang instead of failing."""
    lease, rate, poll = 1.5, 0.4, 0.25
    n_tasks = 6
    tasks = [f"task-{i}" for i in range(n_tasks)] + [f"long-{i}" for i in range(3)]
    args = node_args(tasks=n_tasks, rate=rate, work=0.2, lease=lease, poll=poll, workers=4,
                     extra=["--group", "long:3:2.0"])
    # Its long executions outlast the partition: they must be told to stop, not run on.
    cut_off_args = node_args(tasks=n_tasks, rate=rate, work=0.2, lease=lease, poll=poll,
                             workers=4, extra=["--group", "long:3:6.0"])
    cycles = env.profile.count(short=1, long=6)
    peers = ["n0", "n1"]
    with proxy_for(env.url) as proxy, chaos_run(
        scenario="partition (one node)", backend=env.backend, url=env.url, admin_url=env.url,
        table=env.table, workdir=env.workdir, tasks=tasks, seed=8,
    ) as run:
        run.start("cut-off", *cut_off_args, "--url", proxy.url_through(env.url))
        for i in range(cycles):
            # Alone, the node to be cut off takes the long tasks; then its peers join.
            run.wait_for(partial(_runs_long_tasks, since=time.time()), 30,
                         "the node to be cut off runs the long tasks")
            for peer in peers:
                run.start(peer, *args)
            run.warm_up()
            proxy.set_mode("blackhole")
            run.fault("network partition")
            run.sleep(2 * lease + 1.5)
            proxy.set_mode("forward")
            if i < cycles - 1:
                run.sleep(3.0)
                for peer in peers:
                    run.stop(peer)
        run.recover(timeout=40, settle=1.0)
        run.stop_all()
        run.verify(gap_limit=None, warnings_allowed=run.report.faults.total() + 1,
                   ambiguous_ok=True)
    return run.report


@SERVERS
def test_network_partition_of_one_node(
    backend: str, chaos_runner: Runner, request: pytest.FixtureRequest, record: Record
) -> None:
    check(request, chaos_runner, record, partition, backend, SERVER_BACKENDS)


def _runs_long_tasks(events: list[dict[str, Any]], since: float) -> bool:
    started = [e for e in events if e["event"] == "start" and e["node"] == "cut-off"
               and e["t"] > since and str(e["task"]).startswith("long-")]
    return len(started) >= 3


def _node_starts(events: list[dict[str, Any]]) -> dict[str, int]:
    starts: dict[str, int] = {}
    for e in events:
        if e["event"] == "node_start":
            starts[e["node"]] = starts.get(e["node"], 0) + 1
    return starts


@SERVERS
def test_an_execution_that_finished_during_an_outage_is_not_lost(
    migrated: tuple[str, str], backend: str
) -> None:
    """The database is unreachable (longer than the lease) when a task returns. Nobody else
    can take the row meanwhile, so once the database is back the fenced finish must land:
    the success and its state are kept, not turned into a ``lost`` execution (§1.4)."""
    url, table = migrated
    # Long enough that a loaded machine starts the task within it: a lease that ran out
    # between the pick and the start makes the node skip the run (rightly), and then the
    # test has nothing to finish.
    lease = 3.0
    started, release = threading.Event(), threading.Event()
    lost: list[TaskInfo] = []
    outcomes: list[Outcome] = []

    def task(ctx: TaskContext) -> Result:
        started.set()
        release.wait(10)
        return Result.success(state={"token": ctx.total_attempt})

    class Listener:
        def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
            outcomes.append(outcome)

        def on_lost_execution(self, info: TaskInfo) -> None:
            lost.append(info)

    with proxy_for(url) as proxy:
        node = Scheduler(proxy.url_through(url), table=table, node_id="solo", lease=lease,
                         poll_interval=0.2)
        node.add("solo", task, schedule=FixedDelay(3600))
        node.add_listener(Listener())
        ops = Scheduler(url, table=table, node_id="ops")
        node.start()
        try:
            ops.trigger("solo")
            assert started.wait(30), "the task did not start"
            proxy.set_mode("refuse")
            release.set()  # it returns while the database is away
            time.sleep(lease + 2)  # the outage outlasts the lease: its length is the point
            proxy.set_mode("forward")
            deadline = time.monotonic() + 30  # about a second, on an idle machine
            while time.monotonic() < deadline and (ops.info("solo").running or not outcomes):
                time.sleep(0.05)
            info = ops.info("solo")
        finally:
            node.shutdown(timeout=5)
            ops.engine.dispose()
    assert not info.running, info
    assert info.last_status == "success" and info.state == {"token": 1}, (info, outcomes)
    assert not lost, f"reported lost although it finished: {lost}"
    assert outcomes and outcomes[0].next_at is not None, outcomes


def test_a_pick_acknowledged_after_its_lease_expired_is_not_run(
    migrated: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pick's transaction is answered late (a slow network, a stalled commit): by the
    time the node learns it took the row, the lease it wrote has expired and another node
    may already run the task. The late node must not run it too."""
    url, table = migrated
    # Not shorter: on a loaded machine more than a second can pass between a pick and the
    # start, and the peer would (rightly) skip runs whose lease ran out meanwhile.
    lease = 3.0
    lock = threading.Lock()
    runs: list[tuple[str, int, float, float]] = []

    def work(ctx: TaskContext) -> None:
        began = time.monotonic()
        ctx.stop_requested.wait(1.5)
        with lock:
            runs.append((ctx.node_id, ctx.total_attempt, began, time.monotonic()))

    late = Scheduler(url, table=table, node_id="late", lease=lease, poll_interval=0.1)
    peer = Scheduler(url, table=table, node_id="peer", lease=lease, poll_interval=0.1)
    for node in (late, peer):
        node.add("job", work, schedule=FixedRate(0.3))
    real_pick = late._store.dialect.pick
    delayed = threading.Event()
    answered = threading.Event()

    def late_pick(*args: Any, **kwargs: Any) -> Any:
        rows = real_pick(*args, **kwargs)
        if rows and not delayed.is_set():
            delayed.set()
            time.sleep(2 * lease)  # the rows are locked and leased; the answer comes late
            answered.set()
        return rows

    def peer_ran_twice() -> bool:
        with lock:
            return sum(r[0] == "peer" for r in runs) >= 2

    monkeypatch.setattr(late._store.dialect, "pick", late_pick)
    late.start()
    try:
        assert delayed.wait(30), "the late node never picked"
        peer.start()
        # The late answer came and was dealt with; the peer ran the job meanwhile and after.
        assert answered.wait(30), "the late pick never returned"
        wait_until(peer_ran_twice, 60, "the peer to run the job twice")
    finally:
        late.shutdown(timeout=3)
        peer.shutdown(timeout=3)
    ordered = sorted(runs, key=lambda r: r[2])
    overlaps = [(a, b) for a, b in itertools.pairwise(ordered) if b[2] < a[3]]
    assert not overlaps, f"executions overlapped (node, token, start, end): {overlaps}"
