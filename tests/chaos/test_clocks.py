"""Scenario 5: two nodes whose wall clocks are 10 minutes ahead and behind (only the database
clock counts, so skewed node clocks must break nothing).

The nodes shift ``time.time`` for their whole process (``tests/harness/node.py --skew S
--skew-wall``) and the library's own clock seam. Nothing may change: no overlap, no early start,
start lags as on a true clock, and exactly one warning about the clock on each skewed node, and
no other warning anywhere (the cluster suffers no other fault).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.chaos.checks import Report, log_lines, percentile, start_lags
from tests.chaos.cluster import chaos_run, node_args
from tests.chaos.parallel import Env, Runner, check

pytestmark = pytest.mark.chaos

Record = Callable[[Report], None]
SKEW = 600.0


def clock_skew(env: Env) -> Report:
    # A lease of 3 s, not the 1.5 s of the other scenarios: this one allows no warning at all
    # besides the clock's, and with the whole suite in parallel on a slow hour of a 2-core
    # machine a statement took 1.4 s (a pick, a heartbeat): the lease's own warnings, not
    # the clocks'.
    lease, rate, poll = 3.0, 0.4, 0.25
    tasks = [f"task-{i}" for i in range(10)]
    args = node_args(tasks=10, rate=rate, work=0.1, lease=lease, poll=poll, workers=4)
    duration = env.profile.pick(short=4.0, long=60.0)
    with chaos_run(scenario="5 clock skew ±10 min", backend=env.backend, url=env.url,
                   admin_url=env.url, table=env.table, workdir=env.workdir, tasks=tasks,
                   seed=5) as run:
        run.start("ahead", *args, "--skew", str(SKEW), "--skew-wall")
        run.start("behind", *args, "--skew", str(-SKEW), "--skew-wall")
        run.start("true", *args)
        run.fault("clock +10 min")
        run.fault("clock -10 min")
        run.warm_up()
        run.sleep(duration, sample_every=1.0)
        run.recover(timeout=20, settle=0.0)
        run.stop_all()
        runs = run.verify(gap_limit=lease + rate + 2.0, warnings_allowed=1)
        stderr = run.stderr()
    report = run.report
    by_node = {n: [r for r in runs if r.node == n] for n in ("ahead", "behind", "true")}
    lags = {n: start_lags(rs) for n, rs in by_node.items()}
    report.extra["start_lag_p95_ms"] = {n: round(percentile(v, 95) * 1000, 1)
                                        for n, v in lags.items()}
    for node, values in lags.items():
        if len(values) < 5:
            report.problem("skewed node idle", f"{node} ran only {len(values)} executions")
            continue
        early = [v for v in values if v < -0.005]
        if early:
            report.problem("started early", f"{node}: {len(early)} executions started before "
                           f"their due time on the database clock (by {-min(early):.3f} s)")
        # A node that trusted its own clock would be ten minutes late (or idle); how precise
        # the start is belongs to the benchmark, so the bound leaves room for a slow machine.
        if percentile(values, 95) > poll + 5.0:
            report.problem("started late", f"{node}: p95 start lag {percentile(values, 95):.3f}"
                           f" s with poll {poll} s")
    for node, text in stderr.items():
        lines = log_lines(text)
        clock = [m for _, _, m in lines if "clock is" in m]
        other = [f"{lg} {lv} {m[:160]}" for lg, lv, m in lines if "clock is" not in m]
        want = 0 if node == "true" else 1
        if len(clock) != want:
            report.problem("clock warning", f"{node}: {len(clock)} clock warnings, want {want}:"
                           f" {clock}")
        for line in other:
            report.problem("warning without a fault", f"{node}: {line}")
    return report


def test_clocks_ten_minutes_ahead_and_behind(backend: str, chaos_runner: Runner,
                                             request: pytest.FixtureRequest,
                                             record: Record) -> None:
    check(request, chaos_runner, record, clock_skew, backend)
