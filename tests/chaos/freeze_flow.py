"""What every freeze test does after the takeover, and how it survives a restart of the
shared database server that is not part of the test.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa

from tests.chaos.checks import NodeHistory, Report, analyse
from tests.chaos.freeze_db import (
    changed_rows,
    pause_all,
    restarted_since,
    server_started,
    snapshot,
    stable_snapshot,
)
from tests.chaos.freezing import LEASE, Events, Nodes, running
from tests.chaos.parallel import _MIGRATING as MIGRATING
from tests.chaos.parallel import Env, Runner, drop_table, unique_table

NOT_RUN = ("took longer than the lease", "lease ran out before the execution could start")
"""What a node logs when it finds, after a freeze, that a lease it was given ran out before
it could start the function (the pick's answer came late, or the start did)."""


# -- the part every leased path shares ---------------------------------------------------------
def fenced_out(report: Report, nodes: Nodes, env: Env, *, frozen: str, taker: str,
               frozen_at: float, tasks: Sequence[str], long: Sequence[str],
               not_started: bool, kills: dict[str, list[float]] | None = None) -> None:
    """After the takeover: pause the tasks, kill the taker, read the table, thaw the frozen
    node, wait until it saw its lease lost, stop it, and compare the table.

    ``long``: tasks whose function would still be working after the thaw; the node must
    have asked them to stop. A short one may simply have returned (its time is up).
    """
    held = running(nodes.events(), frozen, frozen_at)
    pause_all(env.url, env.table, tasks)
    killed = nodes.kill9(taker)
    before = stable_snapshot(env.url, env.table)
    resumed = nodes.sigcont(frozen)

    def mine(events: Events, kind: str) -> dict[tuple[str, int], dict[str, Any]]:
        return {(e["task"], e["token"]): e for e in events
                if e["node"] == frozen and e["event"] == kind}

    def reacted(events: Events) -> bool:
        finished, lost = mine(events, "finished"), mine(events, "lease_lost")
        if not all(k in finished for k in held.items()):
            return False
        if not all(k in lost for k in held.items() if k[0] in long):
            return False
        return not not_started or any(m in nodes.stderr(frozen) for m in NOT_RUN)

    nodes.wait_for(reacted, 2 * LEASE + 5, f"{frozen} sees its lease lost after SIGCONT "
                   f"(running at the freeze: {held})")
    code = nodes.terminate(frozen)
    exited = time.time()
    after = snapshot(env.url, env.table)
    writes = changed_rows(before, after)
    report.extra["writes_after_thaw"] = len(writes)
    for line in writes:
        report.problem("written after the thaw", line)
    if code != 0:
        report.problem("exit", f"{frozen} exited with {code} after its thaw")

    events = nodes.events()
    ends, finished = mine(events, "end"), mine(events, "finished")
    for key in held.items():
        if finished[key]["written"]:
            report.problem("finish landed", f"{key} on {frozen} after another node took it")
        if key[0] in long and not (key in ends and ends[key]["stop_requested"]):
            report.problem("stop not requested", f"{key} on {frozen}: {ends.get(key)}")
    late = [e for e in events if e["node"] == frozen and e["event"] == "start"
            and e["t"] >= resumed]
    for e in late:
        report.problem("started after the thaw", f"{e['task']} token {e['token']}")
    history = NodeHistory(kills={**(kills or {}), taker: [killed]},
                          freezes={frozen: [(frozen_at, resumed)]},
                          exits={frozen: [exited]})
    analyse(report, events, history, tasks=[], fault_end=frozen_at, gap_limit=None)


def takeover_figures(report: Report, took: dict[str, float]) -> None:
    report.extra["takeover_seconds"] = round(max(took.values()), 2)
    report.faults["freeze"] += 1


RETRIES = 2
"""Runs of a scenario (or trial) voided by a restart of the shared database server (another
test suite restarting it) are run again, this many times at most."""


def fresh_table(env: Env) -> Env:
    """``env`` with a new migrated table of its own (dropped by :func:`drop_table`)."""
    from dbscheduler.migrate import upgrade

    table = unique_table()
    engine = sa.create_engine(env.url, poolclass=sa.pool.NullPool)
    try:
        with MIGRATING:
            upgrade(engine, table)
    finally:
        engine.dispose()
    return replace(env, table=table, workdir=env.workdir.with_name(f"{env.workdir.name}-{table}"))


def restartable(scenario: Callable[[Env], Report]) -> Callable[[Env], Report]:
    """Run ``scenario``; if it failed while the database server restarted, run it again on a
    fresh table: the restart is not the fault under test."""

    def run(env: Env) -> Report:
        made: list[str] = []
        try:
            for voided in range(RETRIES + 1):
                started = server_started(env.url, env.backend)
                began = time.monotonic()
                try:
                    report = scenario(env)
                    report.seconds = time.monotonic() - began
                except Exception:
                    if voided == RETRIES or not restarted_since(env.url, env.backend, started):
                        raise
                else:
                    if (not any(report.problems.values()) or voided == RETRIES
                            or not restarted_since(env.url, env.backend, started)):
                        report.extra["voided_by_server_restart"] = voided
                        return report
                env = fresh_table(env)
                made.append(env.table)
            raise AssertionError("unreachable")
        finally:
            for table in made:
                drop_table(env.url, table)

    run.__name__ = scenario.__name__
    run.__doc__ = scenario.__doc__
    return run




def freeze_test(scenario: Callable[[Env], Report], backend: str | None = None
                ) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a test as the one of ``scenario`` (on its ``backend`` parameter, or ``backend``)
    so that :func:`start_all` can start it early."""

    def mark(test: Callable[..., None]) -> Callable[..., None]:
        test.freeze_scenario = (scenario, backend)  # type: ignore[attr-defined]
        return test

    return mark


def start_all(request: pytest.FixtureRequest, runner: Runner) -> None:
    """Start every freeze scenario of this test's file selected in this session at once (a
    few at a time, in the runner's threads): each mostly waits for leases, so together they
    take far less time than one after another.

    Only this file's: under pytest-xdist every worker collects the whole session but runs only
    the files it is given, so a scenario of another file would run here for nothing, and would
    still be running (sockets and all) while this worker goes on to other files."""
    for item in request.session.items:
        if item.path != request.node.path:
            continue
        job = getattr(getattr(item, "function", None), "freeze_scenario", None)
        if job is None:
            continue
        scenario, backend = job
        params = getattr(getattr(item, "callspec", None), "params", {})
        runner.prefetch(scenario, backend or params["backend"])
