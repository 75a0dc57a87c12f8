"""A node's memory as the kernel sees it, and how fast it grows.

Standard library only and no import of the rest of the benchmark: both the idle workload (the
resting size with every task registered) and the soak (growth under load, :mod:`bench.soak`)
use it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def rss_mb(pid: int) -> float:
    """Resident set size of process ``pid`` in MB (``VmRSS`` of ``/proc/<pid>/status``).

    Read from outside the node so every system is measured the same way, whatever its
    language runtime reports about itself; NaN when the process is gone or the kernel has
    no ``/proc`` (the cell then shows "–").
    """
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return math.nan


def slope_per_minute(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of ``(seconds, MB)`` points, in MB per minute.

    A fit over every sample rather than end − start: one garbage-collection cycle or a pool
    growing by a connection at either end would otherwise make the whole trend.
    """
    if len(points) < 2:
        return math.nan
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_m = sum(m for _, m in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return math.nan
    cov = sum((t - mean_t) * (m - mean_m) for t, m in points)
    return 60 * cov / var


def growth(points: Sequence[tuple[float, float]]) -> dict[str, float]:
    """RSS at the first and last sample, the growth between them (MB and %) and the fitted
    slope (MB/min) of ``(seconds, MB)`` samples."""
    if not points:
        return {"start_mb": math.nan, "end_mb": math.nan, "growth_mb": math.nan,
                "growth_percent": math.nan, "slope_mb_per_min": math.nan}
    start, end = points[0][1], points[-1][1]
    return {"start_mb": start, "end_mb": end, "growth_mb": end - start,
            "growth_percent": 100 * (end - start) / start if start else math.nan,
            "slope_mb_per_min": slope_per_minute(points)}
