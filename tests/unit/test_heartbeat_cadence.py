"""Heartbeat deadlines are absolute: a beat's own latency does not stretch the spacing."""

from __future__ import annotations

import itertools
import statistics

from dbscheduler._engine.heartbeat import Cadence


def _simulate(interval: float, beat_cost: list[float]) -> list[float]:
    """Start times of successive beats on a fake clock, each beat taking ``beat_cost[i]``."""
    now = 0.0
    cadence = Cadence(interval, start=now)
    starts = []
    for cost in beat_cost:
        now += cadence.wait(now)  # the thread sleeps exactly as long as asked
        starts.append(now)
        now += cost
        cadence.beaten(now)
    return starts


def test_a_slow_beat_keeps_the_mean_spacing_at_the_interval() -> None:
    # Each beat takes 0.3 s of a 1 s interval (a busy process): a wait of "interval after the
    # beat returned" would space them 1.3 s apart.
    starts = _simulate(1.0, [0.3] * 50)
    spacing = [b - a for a, b in itertools.pairwise(starts)]
    assert statistics.mean(spacing) == 1.0
    assert starts[0] == 1.0 and starts[-1] == 50.0


def test_varying_latency_does_not_accumulate() -> None:
    costs = [0.05, 0.6, 0.1, 0.9, 0.0, 0.4] * 10
    starts = _simulate(1.0, costs)
    assert starts == [float(i) for i in range(1, 61)]


def test_a_beat_later_than_an_interval_re_anchors_without_a_burst() -> None:
    # The third beat takes 2.5 intervals (the database stalled): the next beat goes at once,
    # and the ones after keep the interval from there: no catch-up burst of missed beats.
    starts = _simulate(1.0, [0.1, 0.1, 2.5, 0.1, 0.1, 0.1])
    assert starts[:3] == [1.0, 2.0, 3.0]
    assert starts[3] == 5.5  # at once, when the slow beat returned
    assert starts[4:] == [6.5, 7.5]
    spacing = [b - a for a, b in itertools.pairwise(starts)]
    assert min(spacing) >= 1.0


def test_the_cadence_docstring_example_holds() -> None:
    import doctest

    import dbscheduler._engine.heartbeat

    assert doctest.testmod(dbscheduler._engine.heartbeat).failed == 0
