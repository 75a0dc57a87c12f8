"""A node frozen (SIGSTOP) inside a ``ctx.fenced`` transaction holds up nobody, and commits
nothing once thawed.

Per backend and per engine the block runs on (the user's plain ``sa.create_engine(url)`` and
the Scheduler's own ``scheduler.engine``), four node processes each run one fenced task and
freeze themselves at one point of its block (``DBSCHEDULER_FREEZE_AT``):

* ``fenced_begin``  — the transaction begun and bounded, before the first check;
* ``fenced_check``  — after the first check;
* ``fenced_exit``   — after the business write (the block's last statement), before the
  final check;
* ``fenced_commit`` — after the final check (MariaDB: right before the one statement that
  checks and commits), right before COMMIT.

Then a fifth node, held at its start gate until all four froze, must start every fenced task
while they are still frozen (within lease + 2 s on a quiet machine; the test allows lease + 10 s
for a loaded one and reports the times), and its own plain tasks must keep running meanwhile (a
fenced transaction that made the picks wait would stall them). Once it has written its own
fenced rows, the frozen nodes are thawed: each must report ``LeaseLost`` for its execution,
and the business table must hold no row of theirs.

SQLite has no server to end a frozen client's transaction: a process frozen after its
business write holds the database's write lock (SQLite is for one machine, see the fenced
transactions guide). There only the two points before the block's first write are tested, on
the plain engine (the Scheduler's own begins with the write lock: ``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from tests.chaos.checks import Report
from tests.chaos.freeze_flow import freeze_test, restartable, start_all
from tests.chaos.freezing import LEASE, LIMIT, Events, Nodes
from tests.chaos.parallel import ALL_BACKENDS, Env, Runner, check

pytestmark = pytest.mark.chaos

Record = Callable[[Report], None]

POINTS = ("fenced_begin", "fenced_check", "fenced_exit", "fenced_commit")
SQLITE_POINTS = ("fenced_begin", "fenced_check")
PLAIN = ("plain-0", "plain-1")
"""The taking node's own tasks, with no fenced transaction."""


def _common(lease: float = LEASE) -> list[str]:
    return ["--rate", "0.5", "--work", "0.2", "--lease", str(lease), "--poll", "0.25",
            "--workers", "8", "--shutdown-timeout", "5", "--watchdog", "300",
            "--fence-only", "pay"]


def _task(point: str) -> str:
    return f"pay_{point.removeprefix('fenced_')}-0"


def fenced_freeze(env: Env, engine: str) -> Report:
    report = Report(f"freeze inside ctx.fenced ({engine} engine)", env.backend)
    points = SQLITE_POINTS if env.backend == "sqlite" else POINTS
    effects = f"{env.table}_fx"
    fx = sa.Table(effects, sa.MetaData(), sa.Column("task", sa.String(200)),
                  sa.Column("node", sa.String(200)), sa.Column("token", sa.Integer))
    db = sa.create_engine(env.url, poolclass=sa.pool.NullPool)
    fx.create(db)
    fence = ["--fence-table", effects, "--fence-engine", engine]
    nodes = Nodes(env.url, env.table, env.workdir)
    try:
        for point in points:
            prefix = _task(point).removesuffix("-0")
            nodes.start(point, *_common(), *fence, "--prefix", prefix, "--tasks", "1",
                        freeze_at=point, gated=True)
        groups = [a for p in points for a in ("--group", f"{_task(p).removesuffix('-0')}:1:0.2")]
        nodes.start("taker", *_common(), *fence, "--prefix", "plain", "--tasks", "2", *groups,
                    gated=True)
        for point in points:
            nodes.open_gate(point)
        # The taker starts once every fenced task runs on its own node (its row is that
        # node's until the lease ends), so it is up before the leases run out.
        nodes.wait_for(lambda ev: all(_first_token(ev, p) is not None for p in points), 40,
                       "every frozen-to-be node starts its fenced task")
        nodes.open_gate("taker")
        frozen = {p: nodes.wait_frozen(p, 40, p) for p in points}

        # The takeover: every fenced task started on the taker within the bound of its freeze,
        # and the taker's plain tasks kept running meanwhile.
        tasks = {_task(p): t for p, t in frozen.items()}
        # Measured from the freeze, or from when the taker was running (its first plain
        # task started) if it came up later: a machine loaded enough to start a process in
        # seconds is not a fence that holds up the others.
        events = nodes.wait_for(lambda ev: _first_start(ev, "taker", PLAIN[0], 0) is not None,
                                60, "the taker runs its plain tasks")
        ready = _first_start(events, "taker", PLAIN[0], 0) or 0.0
        report.extra["taker_ready_after_freeze_seconds"] = round(ready - max(frozen.values()), 2)
        deadline = max(*frozen.values(), ready) + LIMIT + 1  # wall clock, as the events
        while time.time() < deadline:
            events = nodes.events()
            if set(tasks) <= _started(events, "taker", min(frozen.values())):
                break
            time.sleep(0.05)
        for task, at in tasks.items():
            first = _first_start(events, "taker", task, at)
            since = max(at, ready)
            if first is None or first - since > LIMIT:
                report.problem("takeover", f"{task}: started on the taker "
                               f"{'never' if first is None else f'{first - since:.2f} s'} after "
                               f"its node froze (or the taker came up; limit {LIMIT} s)")
            else:
                report.extra.setdefault("takeover_seconds", {})[task] = round(first - at, 2)
        try:
            nodes.wait_for(lambda ev: set(tasks) <= {e["task"] for e in ev
                                                     if e["event"] == "fenced"
                                                     and e["node"] == "taker"},
                           15, "the taker's own fenced writes")
        except AssertionError as exc:
            report.problem("taker", str(exc))  # the thaw still shows what the zombies do
        thaw = time.time()
        events = nodes.events()
        for task in PLAIN:
            # Due every 0.5 s: a gap of a whole bound is a pick that waited.
            since = max(min(frozen.values()), ready)
            starts = [since, *(e["t"] for e in events if e["node"] == "taker"
                               and e.get("task") == task and e["event"] == "start"
                               and since <= e["t"] <= thaw), thaw]
            gap = max(b - a for a, b in itertools.pairwise(starts))
            report.extra.setdefault("plain_max_gap_seconds", {})[task] = round(gap, 2)
            if gap > LIMIT:
                report.problem("stalled", f"the taker's plain {task} did not start for "
                               f"{gap:.2f} s while the others were frozen")
        report.faults["freeze"] += len(points)

        # The thaw: every zombie is refused, and nothing of theirs is in the business table.
        # The execution each node froze in is its last start before the freeze (on a loaded
        # machine a first one may have lost its lease, and been refused, before it).
        zombie = {p: _token_at(events, p, frozen[p]) for p in points}
        for point in points:
            nodes.sigcont(point)
        try:
            nodes.wait_for(lambda ev: all(_ended(ev, p, zombie[p]) for p in points),
                           2 * LEASE + 10,
                           "every thawed node's fenced transaction ends")
        except AssertionError as exc:
            report.problem("thaw", str(exc))
        events = nodes.events()
        for point in points:
            outcome = _ended(events, point, zombie[point])
            if outcome is None or outcome["event"] != "fence_refused":
                report.problem("not refused", f"{point}: {outcome} "
                               f"{nodes.stderr(point)[-1500:]}")
        zombies = {(p, _task(p), zombie[p]) for p in points}
        with db.connect() as conn:
            written = set(conn.execute(sa.select(fx.c.node, fx.c.task, fx.c.token)).all())
        for row in sorted(zombies & {tuple(r) for r in written}):
            report.problem("zombie committed", f"{row}")
        report.executions = sum(e["event"] == "start" for e in events)
    finally:
        nodes.close()
        fx.drop(db)
        db.dispose()
    return report


def _started(events: Events, node: str, since: float) -> set[str]:
    return {e["task"] for e in events if e["node"] == node and e["event"] == "start"
            and e["t"] >= since}


def _first_start(events: Events, node: str, task: str, since: float) -> float | None:
    return next((e["t"] for e in events if e["node"] == node and e.get("task") == task
                 and e["event"] == "start" and e["t"] >= since), None)


def _first_token(events: Events, node: str) -> int | None:
    return next((int(e["token"]) for e in events if e["node"] == node
                 and e["event"] == "start"), None)


def _token_at(events: Events, node: str, at: float) -> int | None:
    starts = [int(e["token"]) for e in events if e["node"] == node and e["event"] == "start"
              and e["t"] <= at]
    return starts[-1] if starts else None


def _ended(events: Events, node: str, token: int | None) -> dict[str, object] | None:
    """The fenced outcome of ``node``'s execution ``token``: refused, written, or an error."""
    return next((e for e in events if e["node"] == node and e.get("token") == token
                 and e["event"] in ("fence_refused", "fenced", "fence_error")), None)


def fenced_freeze_plain(env: Env) -> Report:
    return fenced_freeze(env, "plain")


def fenced_freeze_scheduler(env: Env) -> Report:
    return fenced_freeze(env, "scheduler")


_plain = restartable(fenced_freeze_plain)
_scheduler = restartable(fenced_freeze_scheduler)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@freeze_test(_plain)
def test_a_node_frozen_inside_a_fenced_transaction_on_a_plain_engine(
        backend: str, chaos_runner: Runner, request: pytest.FixtureRequest,
        record: Record) -> None:
    """``ctx.fenced(sa.create_engine(url))``: see the module docstring."""
    start_all(request, chaos_runner)
    check(request, chaos_runner, record, _plain, backend, ALL_BACKENDS)


@pytest.mark.parametrize("backend", ("postgresql", "mysql"))
@freeze_test(_scheduler)
def test_a_node_frozen_inside_a_fenced_transaction_on_the_schedulers_engine(
        backend: str, chaos_runner: Runner, request: pytest.FixtureRequest,
        record: Record) -> None:
    """``ctx.fenced(scheduler.engine)``: see the module docstring."""
    start_all(request, chaos_runner)
    check(request, chaos_runner, record, _scheduler, backend, ("postgresql", "mysql"))
