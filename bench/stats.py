"""Percentiles, per-window figures (lag, rate, duplicates, missed) and medians of runs."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Sample = tuple[int, float, float]
"""``(task index, scheduled epoch, started epoch)``."""


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending sequence (``q`` in 0..1)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass(frozen=True)
class Grid:
    """When the active tasks fire: task ``i`` at ``phase[i] + k * period`` for ``k >= 0``."""

    period: float
    phase: dict[int, float]

    def key(self, idx: int, scheduled: float) -> int | None:
        phase = self.phase.get(idx)
        if phase is None:
            return None
        return round((scheduled - phase) / self.period)

    def expected(self, w0: float, w1: float) -> Iterable[tuple[int, int]]:
        for idx, phase in self.phase.items():
            first = max(0, math.ceil((w0 - phase) / self.period - 1e-9))
            last = math.ceil((w1 - phase) / self.period - 1e-9)
            for k in range(first, last):
                yield idx, k


def window_figures(samples: Sequence[Sample], grid: Grid, w0: float, w1: float) -> dict[str, float]:
    """Figures of one measurement window ``[w0, w1)``.

    The fire times due in the window are those of the grid; an execution belongs to the
    window when its scheduled time is one of them (matched by grid index, not by comparing
    floats). Lag of those executions; executions/s of all *started* in the window;
    duplicates (a fire time run more than once) and missed fire times (due in the window,
    never run by the time the samples were collected).
    """
    expected = set(grid.expected(w0, w1))
    keys: Counter[tuple[int, int]] = Counter()
    lags: list[float] = []
    started = 0
    for idx, scheduled, start in samples:
        key = grid.key(idx, scheduled)
        if key is None:
            continue
        if w0 <= start < w1:
            started += 1
        if (idx, key) in expected:
            keys[(idx, key)] += 1
            lags.append((start - scheduled) * 1000)
    lags.sort()
    span = w1 - w0
    return {
        "due": len(expected),
        "offered_per_s": len(expected) / span,
        "executions_per_s": started / span,
        "lag_p50_ms": percentile(lags, 0.50),
        "lag_p95_ms": percentile(lags, 0.95),
        "lag_p99_ms": percentile(lags, 0.99),
        "lag_max_ms": lags[-1] if lags else math.nan,
        "duplicates": sum(n - 1 for n in keys.values() if n > 1),
        "missed": len(expected - set(keys)),
    }


@dataclass(frozen=True)
class Figure:
    """The median of several runs, with their min and max."""

    median: float
    low: float
    high: float
    runs: tuple[float, ...]

    @classmethod
    def of(cls, values: Iterable[float]) -> Figure | None:
        clean = [v for v in values if not math.isnan(v)]
        if not clean:
            return None
        return cls(statistics.median(clean), min(clean), max(clean), tuple(clean))

    def as_dict(self) -> dict[str, object]:
        return {"median": self.median, "min": self.low, "max": self.high, "runs": self.runs}


def fmt(figure: Figure | None, digits: int = 1, unit: str = "") -> str:
    """``median (min–max)`` for a table cell."""
    if figure is None:
        return "–"

    def one(v: float) -> str:
        if abs(v) >= 100 or digits == 0:
            return f"{v:,.0f}"
        return f"{v:.{digits}f}"

    if figure.low == figure.high:
        return f"{one(figure.median)}{unit}"
    return f"{one(figure.median)}{unit} ({one(figure.low)}–{one(figure.high)})"
