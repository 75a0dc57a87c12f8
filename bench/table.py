"""The Markdown table of a run: one column per system, one row per figure (``ROWS``)."""

from __future__ import annotations

import math
from typing import Any

from bench.stats import Figure, fmt
from bench.workloads import Settings, sustained

CPU_RATE = 3000
"""The throughput step whose CPU per execution the table shows (issue 34's yardstick)."""


def _windows(steps: Any, rate: int) -> list[dict[str, float]]:
    if not isinstance(steps, list):
        return []
    for step in steps:
        if step["rate"] == rate:
            return list(step["windows"])
    return []


def figures(result: dict[str, Any], settings: Settings) -> dict[str, Figure | str | None]:
    """The table's cells of one system, as figures (or a short text when not applicable)."""
    cells: dict[str, Figure | str | None] = {}
    lag = result.get("lag")
    for rate in settings.lag_rates:
        wins = _windows(lag, rate)
        for q in ("p50", "p95", "p99", "max"):
            cells[f"lag{rate}_{q}"] = Figure.of(w[f"lag_{q}_ms"] for w in wins)
    if isinstance(lag, list):
        wins = [w for step in lag for w in step["windows"]]
        cells["lag_dup_missed"] = (f"{sum(int(w['duplicates']) for w in wins)} / "
                                   f"{sum(int(w['missed']) for w in wins)} of "
                                   f"{sum(int(w['due']) for w in wins):,}")
    for n in (1, 3):
        steps = result.get(f"throughput_{n}")
        if isinstance(steps, list):
            cells[f"tput{n}"] = Figure.of(sustained(steps))
            wins = [w for step in steps for w in step["windows"]]
            cells[f"tput{n}_peak"] = Figure.of(
                [max((w["executions_per_s"] for w in wins), default=math.nan)])
            cells[f"tput{n}_dup"] = str(sum(int(w["duplicates"]) for w in wins))
            at = [s for s in steps if s["rate"] == CPU_RATE and "node_cpu_us" in s]
            if n == 1 and at:
                cells["tput1_cpu"] = (f"{at[0]['node_cpu_us']:,.0f} / "
                                      f"{at[0]['server_cpu_us']:,.0f}")
        elif isinstance(steps, dict) and "skipped" in steps:
            cells[f"tput{n}"] = "n/a (1 process only)"
        elif steps is not None:
            cells[f"tput{n}"] = "error"
    idle = result.get("idle")
    if isinstance(idle, dict) and "windows" in idle:
        cells["idle"] = Figure.of(w["statements_per_s"] for w in idle["windows"])
        cells["idle_cpu"] = Figure.of(w["cpu_percent"] for w in idle["windows"])
        cells["idle_start"] = Figure.of([idle["start_seconds"]])
        cells["idle_rss"] = Figure.of([idle.get("rss_mb", math.nan)])
        cells["idle_server"] = Figure.of(
            w.get("server_statements_per_s", math.nan) for w in idle["windows"])
    burst = result.get("burst")
    if isinstance(burst, dict) and "error" not in burst:
        for size, runs in burst.items():
            if isinstance(runs, dict):  # skipped
                cells[f"burst{size}_p50"] = f"not run: {runs['skipped']}"
                continue
            for q in ("p50", "p99", "max"):
                cells[f"burst{size}_{q}"] = _lag_cell([r[f"{q}_ms"] for r in runs])
            cells[f"burst{size}_dup_missed"] = (
                f"{sum(r['duplicates'] for r in runs):,} / {sum(r['missed'] for r in runs):,} "
                f"of {sum(r['tasks'] for r in runs):,}")
    elif burst is not None:
        cells["burst1000_p50"] = "error"
    soak = result.get("soak")
    if isinstance(soak, dict) and "points" in soak:
        cells["soak_start"] = Figure.of([soak["start_mb"]])
        cells["soak_end"] = Figure.of([soak["end_mb"]])
        cells["soak_growth"] = f"{soak['growth_mb']:+.1f} MB ({soak['growth_percent']:+.1f} %)"
        cells["soak_slope"] = f"{soak['slope_mb_per_min']:+.2f}"
        cells["soak_exec"] = (f"{soak['executions']:,} ({soak['executions_per_s']:,.0f}/s) / "
                              f"{soak['duplicates']} / {soak['missed']:,}")
        cells["soak_p99"] = Figure.of([soak["lag_p99_ms"]])
    elif isinstance(soak, dict) and "error" in soak:
        cells["soak_start"] = "error"
    wake = result.get("wakeup")
    if isinstance(wake, list):
        cells["wake_p50"] = Figure.of(r["p50_ms"] for r in wake)
        cells["wake_p99"] = Figure.of(r["p99_ms"] for r in wake)
    fo = result.get("failover")
    if isinstance(fo, list):
        cells["failover"] = Figure.of(r["seconds"] for r in fo)
        cells["failover_lease"] = str(fo[0]["lease"]) if fo else None
    obs = result.get("observability")
    if isinstance(obs, dict) and "windows" in obs:
        for mode, wins in obs["windows"].items():
            cells[f"obs_{mode}"] = Figure.of(w["executions_per_s"] for w in wins)
            cells[f"obs_{mode}_p99"] = Figure.of(w["lag_p99_ms"] for w in wins)
            cells[f"obs_{mode}_cpu"] = Figure.of(w["cpu_us_per_execution"] for w in wins)
            if "listener_us" in obs:
                cells[f"obs_{mode}_listeners"] = Figure.of([obs["listener_us"][mode]])
            if mode != "off":
                cells[f"obs_{mode}_loss"] = (f"{-obs[f'{mode}_loss_percent']:+.1f} % exec/s, "
                                             f"{obs[f'{mode}_cpu_extra_percent']:+.0f} % CPU")
    return cells


def _lag_cell(values: list[float]) -> Figure | str | None:
    """A burst's lag over its rounds; a missed task makes a lag infinite (shown as "missed"),
    which ``fmt`` would print as "inf"."""
    figure = Figure.of(values)
    if figure is None or math.isfinite(figure.high):
        return figure

    def one(v: float) -> str:
        return "missed" if math.isinf(v) else f"{v:,.0f}"

    if figure.low == figure.high:
        return one(figure.median)
    return f"{one(figure.median)} ({one(figure.low)}–{one(figure.high)})"


ROWS: tuple[tuple[str, str, int, str], ...] = (
    ("lag20_p50", "start lag, 20 tasks × 1/s: p50 ms", 1, ""),
    ("lag20_p95", "… p95 ms", 1, ""),
    ("lag20_p99", "… p99 ms", 1, ""),
    ("lag20_max", "… max ms", 1, ""),
    ("lag1000_p50", "start lag, 1,000 tasks × 1/s: p50 ms", 1, ""),
    ("lag1000_p95", "… p95 ms", 1, ""),
    ("lag1000_p99", "… p99 ms (target ≤ 10)", 1, ""),
    ("lag1000_max", "… max ms", 1, ""),
    ("lag_dup_missed", "duplicates / missed fire times (lag runs)", 0, ""),
    ("tput1", "throughput, 1 node: exec/s with lag p99 < 100 ms (target ≥ 5,000)", 0, ""),
    ("tput1_peak", "… highest exec/s seen at any step", 0, ""),
    ("tput3", "throughput, 3 nodes: exec/s with lag p99 < 100 ms", 0, ""),
    ("tput3_peak", "… highest exec/s seen at any step", 0, ""),
    ("tput1_cpu", "… CPU per execution at 3,000/s offered, spread: node / server µs "
     "(goal ≤ 50 / 50)", 0, ""),
    ("tput1_dup", "duplicates (throughput, 1 node)", 0, ""),
    ("tput3_dup", "duplicates (throughput, 3 nodes)", 0, ""),
    ("idle", "idle, {idle:,} tasks: statements/s per node (target ≤ 1.5)", 2, ""),
    ("idle_server", "… as the server counts them (pg_stat_statements)", 2, ""),
    ("idle_cpu", "… node CPU %", 1, ""),
    ("idle_start", "… start-up with {idle:,} tasks, s", 1, ""),
    ("idle_rss", "memory: node RSS with {idle:,} tasks registered (idle), MB", 0, ""),
    ("burst1000_p50", "burst, 1,000 tasks due at one instant, 1 node: start lag p50 ms", 0, ""),
    ("burst1000_p99", "… p99 ms (goal ≤ 150)", 0, ""),
    ("burst1000_max", "… max ms = all started within", 0, ""),
    ("burst1000_dup_missed", "… duplicates / missed (not started within {missed:g} s)", 0, ""),
    ("burst5000_p50", "burst, 5,000 tasks due at one instant, 1 node: start lag p50 ms", 0, ""),
    ("burst5000_p99", "… p99 ms", 0, ""),
    ("burst5000_max", "… max ms = all started within (goal ≤ 1,000)", 0, ""),
    ("burst5000_dup_missed", "… duplicates / missed (not started within {missed:g} s)", 0, ""),
    ("soak_start", "soak, {soak_rate:,}/s offered for {soak_min:g} min, 1 node: RSS after "
                   "warm-up, MB", 1, ""),
    ("soak_end", "… RSS at end, MB", 1, ""),
    ("soak_growth", "… growth, start → end", 0, ""),
    ("soak_slope", "… RSS slope, MB/min (least squares over every sample)", 0, ""),
    ("soak_exec", "… executions (exec/s) / duplicates / missed", 0, ""),
    ("soak_p99", "… start lag p99 ms", 1, ""),
    ("wake_p50", "wake-up, trigger → start: p50 ms", 1, ""),
    ("wake_p99", "… p99 ms (target ≤ 50 on PostgreSQL)", 1, ""),
    ("failover", "failover, kill -9 → start on other node, s", 2, ""),
    ("failover_lease", "… lease, s (target ≤ lease + 1)", 0, ""),
    ("obs_off", "observability off, 2,000/s offered: exec/s", 0, ""),
    ("obs_off_p99", "… lag p99 ms", 1, ""),
    ("obs_off_cpu", "… node CPU µs per execution", 0, ""),
    ("obs_off_listeners", "… listeners' own CPU µs per execution (in process)", 1, ""),
    ("obs_metrics", "PrometheusMetrics: exec/s", 0, ""),
    ("obs_metrics_p99", "… lag p99 ms", 1, ""),
    ("obs_metrics_cpu", "… node CPU µs per execution", 0, ""),
    ("obs_metrics_listeners", "… listeners' own CPU µs per execution (in process)", 1, ""),
    ("obs_metrics_loss", "… vs off: executions/s (goal: ≥ −10 %), CPU per execution", 0, ""),
    ("obs_tracing", "metrics + tracing, every span recorded: exec/s", 0, ""),
    ("obs_tracing_p99", "… lag p99 ms", 1, ""),
    ("obs_tracing_cpu", "… node CPU µs per execution", 0, ""),
    ("obs_tracing_listeners", "… listeners' own CPU µs per execution (in process)", 1, ""),
    ("obs_tracing_loss", "… vs off: executions/s (goal: ≥ −10 %), CPU per execution", 0, ""),
    ("obs_sampled", "metrics + tracing, 10 % of traces sampled: exec/s", 0, ""),
    ("obs_sampled_p99", "… lag p99 ms", 1, ""),
    ("obs_sampled_cpu", "… node CPU µs per execution", 0, ""),
    ("obs_sampled_listeners", "… listeners' own CPU µs per execution (in process)", 1, ""),
    ("obs_sampled_loss", "… vs off: executions/s (goal: ≥ −10 %), CPU per execution", 0, ""),
)


def table(results: dict[str, dict[str, Any]], settings: Settings) -> str:
    keys = list(results)
    cells = {k: figures(results[k], settings) for k in keys}
    header = "| | " + " | ".join(results[k]["label"] for k in keys) + " |"
    lines = [header, "|---" * (len(keys) + 1) + "|"]
    for key, title, digits, unit in ROWS:
        row = []
        for k in keys:
            value = cells[k].get(key)
            row.append(value if isinstance(value, str) else fmt(value, digits, unit))
        if all(v == "–" for v in row):
            continue
        title = title.format(idle=settings.idle_tasks, missed=settings.burst_missed_after,
                             soak_rate=settings.soak_rate, soak_min=settings.soak_seconds / 60)
        lines.append(f"| {title} | " + " | ".join(row) + " |")
    return "\n".join(lines)
