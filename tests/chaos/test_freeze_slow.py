"""Freezes at random moments, and SQLite.

Per server backend, a database trigger makes one node's statements sleep on the server, and
the test freezes that node from outside while one of them runs (PostgreSQL
``pg_stat_activity`` / MariaDB ``processlist`` say when); another node must take over within
lease + 2 s and the thawed node must write nothing (:func:`~tests.chaos.freeze_flow.fenced_out`).
A few trials by default, 25 per backend with ``--chaos-long`` (figures in docs/benchmarks.md,
the suite in docs/reliability.md).

SQLite: a node frozen between statements holds nothing (tested); one frozen inside a write
holds the file lock, which docs/reliability.md says (tested).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.chaos.checks import Report
from tests.chaos.freeze_db import (
    admin_engine,
    drop_slow_trigger,
    install_slow_trigger,
    median,
    restarted_since,
    server_started,
    sleeping_sessions,
)
from tests.chaos.freeze_flow import (
    RETRIES,
    fenced_out,
    freeze_test,
    start_all,
    takeover_figures,
)
from tests.chaos.freezing import Nodes, node_args, ran_all, task_names, wait_takeover
from tests.chaos.parallel import SERVER_BACKENDS, Env, Runner, check
from tests.helpers import sqlite_write_lock_free

pytestmark = pytest.mark.chaos

Record = Callable[[Report], None]
ROOT = Path(__file__).resolve().parents[2]


# -- random moments inside slow statements -----------------------------------------------------
SLOW_SECONDS = 0.25
"""How long the trigger makes each row of the slowed node's UPDATEs take."""


def wait_in_slow_statement(probe: sa.Engine, env: Env, node: str) -> None:
    """Until a statement of the slowed node sleeps on the server (only it is slowed)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            # Autocommit: PostgreSQL keeps one snapshot of pg_stat_activity per transaction.
            with probe.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                while time.monotonic() < deadline:
                    if sleeping_sessions(conn, env.backend, env.table):
                        return
                    time.sleep(0.01)
        except sa.exc.DBAPIError:
            time.sleep(0.2)  # the connection was cut (a shared server restarting): again
    raise AssertionError(f"{node} ran no slowed statement in 10 s")


def slow_trial(env: Env, label: str, rng: random.Random,
               probe: sa.Engine) -> tuple[float, Report]:
    """One trial: the takeover time (the slowest task) and the trial's own report."""
    # Own task names per trial: the rows of earlier trials stay, held by dead nodes, and
    # nobody else knows them.
    names = task_names(prefix=f"r{label}", long_prefix=f"rl{label}")
    args = node_args(prefix=f"r{label}", long_prefix=f"rl{label}")
    nodes = Nodes(env.url, env.table, env.workdir / f"trial-{label}")
    frozen, taker = f"slow-{label}", f"fast-{label}"
    try:
        nodes.start(frozen, *args)
        nodes.start(taker, *args, gated=True)
        nodes.wait_for(ran_all(names), 30, f"{frozen} runs its tasks")
        time.sleep(rng.uniform(0.0, 1.0))  # a random moment to freeze at, on purpose
        wait_in_slow_statement(probe, env, frozen)
        frozen_at = nodes.sigstop(frozen)
        nodes.open_gate(taker)
        took = wait_takeover(nodes, names, frozen_at, by=[taker], url=env.url,
                             table=env.table, backend=env.backend)
        trial = Report("trial", env.backend)
        fenced_out(trial, nodes, env, frozen=frozen, taker=taker, frozen_at=frozen_at,
                   tasks=names, long=[f"rl{label}-0"], not_started=False)
        return max(took.values()), trial
    finally:
        nodes.close()


def slow_statement_freezes(env: Env) -> Report:
    """Trials: a node whose every UPDATE sleeps on the server is frozen from outside while
    one of them runs; a fresh node takes over, the thawed node writes nothing."""
    report = Report("freeze in slow statements", env.backend)
    began = time.monotonic()
    trials = env.profile.count(short=3, long=25)
    rng = random.Random()
    install_slow_trigger(env.url, env.backend, env.table, "slow", SLOW_SECONDS)
    took_all: list[float] = []
    writes = voided = 0
    probe = admin_engine(env.url)
    try:
        for i in range(trials):
            for attempt in range(RETRIES + 1):
                started = server_started(env.url, env.backend)
                try:
                    took, trial = slow_trial(env, f"{i}" if not attempt else f"{i}v{attempt}",
                                             rng, probe)
                except Exception:
                    if attempt == RETRIES or not restarted_since(env.url, env.backend, started):
                        raise
                else:
                    if (not any(trial.problems.values()) or attempt == RETRIES
                            or not restarted_since(env.url, env.backend, started)):
                        break
                voided += 1  # the shared server restarted meanwhile: not this test's fault
            took_all.append(took)
            writes += trial.extra.get("writes_after_thaw", 0)
            report.executions += trial.executions
            report.overlaps += trial.overlaps
            report.fencing_violations += trial.fencing_violations
            for kind, lines in trial.problems.items():
                for line in lines:
                    report.problem(kind, f"trial {i}: {line}")
            report.faults["freeze"] += 1
    finally:
        probe.dispose()
        drop_slow_trigger(env.url, env.backend, env.table)
    report.seconds = time.monotonic() - began
    report.extra.update({
        "trials": trials,
        "takeover_max_seconds": round(max(took_all, default=0.0), 2),
        "takeover_median_seconds": round(median(took_all), 2),
        "takeover_seconds_all": [round(t, 2) for t in took_all],
        "writes_after_thaw": writes,
        "voided_by_server_restart": voided,
    })
    return report


@pytest.mark.parametrize("backend", SERVER_BACKENDS)
@freeze_test(slow_statement_freezes)
def test_freeze_at_random_moments_in_slow_statements(
    backend: str, chaos_runner: Runner, request: pytest.FixtureRequest, record: Record
) -> None:
    start_all(request, chaos_runner)
    check(request, chaos_runner, record, slow_statement_freezes, backend, SERVER_BACKENDS)


# -- SQLite -------------------------------------------------------------------------------------
def sqlite_between_statements(env: Env) -> Report:
    """An SQLite node frozen between two statements (its write lock free) blocks nobody."""
    report = Report("freeze between statements", env.backend)
    began = time.monotonic()
    names = task_names()
    args = node_args()
    path = sa.make_url(env.url).database
    assert path is not None
    nodes = Nodes(env.url, env.table, env.workdir)
    try:
        nodes.start("frozen", *args)
        nodes.start("taker", *args, gated=True)
        nodes.wait_for(ran_all(names), 30, "the node runs its tasks")
        for _ in range(50):
            frozen_at = nodes.sigstop("frozen")
            if sqlite_write_lock_free(path):
                break
            nodes.sigcont("frozen")  # frozen inside a write: that one holds the file lock
            time.sleep(random.uniform(0.01, 0.2))
        else:
            raise AssertionError("never froze the node outside a write in 50 tries")
        nodes.open_gate("taker")
        took = wait_takeover(nodes, names, frozen_at, by=["taker"], url=env.url,
                             table=env.table, backend=env.backend)
        takeover_figures(report, took)
        fenced_out(report, nodes, env, frozen="frozen", taker="taker", frozen_at=frozen_at,
                   tasks=names, long=task_names(tasks=0), not_started=False)
        report.seconds = time.monotonic() - began
    finally:
        nodes.close()
    return report


@freeze_test(sqlite_between_statements, "sqlite")
def test_freeze_sqlite_between_statements(chaos_runner: Runner,
                                          request: pytest.FixtureRequest,
                                          record: Record) -> None:
    start_all(request, chaos_runner)
    check(request, chaos_runner, record, sqlite_between_statements, "sqlite", ("sqlite",))


def test_freeze_docs_say_sqlite_file_lock() -> None:
    """SQLite has one lock for the whole file: a node frozen inside a write holds it, and
    the documentation's Reliability page must tell users so (SQLite is for one machine)."""
    section = (ROOT / "docs" / "reliability.md").read_text()
    assert re.search(r"SQLite.{0,400}frozen.{0,200}inside a write.{0,200}file lock", section,
                     re.S), "docs/reliability.md must say a frozen SQLite writer holds " \
                            "the file lock"
