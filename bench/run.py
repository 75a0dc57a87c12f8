"""``python -m bench``: every workload on every system, one Markdown table, one JSON file.

    .venv/bin/python -m bench --quick          # ~5 minutes (peers installed on first use)
    .venv/bin/python -m bench                  # full, ~30 minutes (10 of them the soak)
    .venv/bin/python -m bench --profile        # py-spy profile of dbscheduler under load
    .venv/bin/python -m bench --only dbs-pg,aps4 --workloads lag,throughput

Every figure is the median of at least three runs, shown as ``median (min–max)`` (``--quick``:
one burst of each size, one soak); a run of the rate workloads is one measurement window of a
node process, the others are separate processes (bursts: one after the other on one node).
Progress goes to stderr, the table to stdout, JSON to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.burst import burst_session
from bench.dbs_only import failover_session, wakeup_session
from bench.infra import (
    BENCH,
    MARIADB_ADMIN_URL,
    PEER_ENVS,
    SHARED_PG_URL,
    Databases,
    ensure_env,
    install_signal_handlers,
    kill_all,
    log,
)
from bench.private_servers import PrivateMariaDB, PrivatePostgres
from bench.soak import soak_session
from bench.table import table
from bench.workloads import (
    SYSTEMS,
    Context,
    Settings,
    System,
    idle_session,
    rate_session,
)

WORKLOADS = ("lag", "throughput1", "throughput3", "idle", "burst", "wakeup", "failover", "soak")
OPTIONAL_WORKLOADS = ("observability",)
"""Run only when named in ``--workloads`` (dbscheduler systems only)."""

QUICK = Settings(
    windows=3, window=0.4,
    ramp=(100, 1000, 2000, 2500, 3000, 4000, 5000, 6000, 8000), dbs_min_rate=1000,
    dbs_min_rate3=2000,
    idle_tasks=1_000, idle_windows=3, idle_window=1.0, idle_settle=0.5,
    wake_runs=3, wake_triggers=8, wake_triggers_polling=0,
    failover_runs=3, failover_lease=1.0,
    burst_rounds=(1, 1), burst_missed_after=5.0,
    soak_warmup=5.0, soak_seconds=30.0, soak_sample=2.0,
)
QUICK_PLAN = {
    "dbs-pg": {*WORKLOADS, *OPTIONAL_WORKLOADS},
    "dbs-sqlite": {"lag", "throughput1", "throughput3", "idle", "burst"},
    "dbs-mariadb": {"lag", "throughput1", "throughput3", "idle", "burst"},
    "aps3": {"lag", "throughput1", "throughput3", "idle", "burst"},
    "aps4": {"lag", "throughput1", "idle", "burst"},
    "procrastinate": {"lag", "throughput1", "idle", "burst"},
}
"""What ``--quick`` runs of each system: every goal's row for dbscheduler on each backend,
the peers on one node (the full run runs everything everywhere; the soak, wake-up, failover
and observability rows are dbscheduler · PostgreSQL's alone in the quick run)."""
FULL = Settings(
    windows=3, window=1.5,
    ramp=(100, 250, 500, 1000, 1500, 2000, 2500, 3000, 4000, 5000, 6000, 8000, 10000,
          12000),
    ramp3=(100, 500, 1000, 2000, 3000, 4000, 5000, 6000, 8000, 10000, 12000),
    idle_windows=3, idle_window=5.0,
    wake_runs=3, wake_triggers=20, wake_triggers_polling=2,
    failover_runs=3, failover_lease=3.0,
    burst_rounds=(3, 3), burst_missed_after=10.0,
    soak_warmup=30.0, soak_seconds=600.0, soak_sample=5.0,
)
SOAK_SYSTEM = "dbs-pg"
"""The soak's minutes go to the system the project ships first; its peers and the other
backends would each add as many."""
ALL_SYSTEMS = ("dbs-pg", "dbs-sqlite", "dbs-mariadb", "aps3", "aps4", "procrastinate")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short windows, fewer steps (~5 min)")
    p.add_argument("--only", default="", help=f"comma-separated systems: {', '.join(SYSTEMS)}")
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help=f"comma-separated: {', '.join(WORKLOADS)}; also "
                        f"{', '.join(OPTIONAL_WORKLOADS)} (metrics + tracing on vs off)")
    p.add_argument("--profile", action="store_true",
                   help="profile dbscheduler (PostgreSQL, one node) under workload 2 instead")
    p.add_argument("--profile-rate", type=int, default=4000, help="offered executions/s")
    p.add_argument("--profile-seconds", type=float, default=10.0)
    p.add_argument("--heartbeat", action="store_true",
                   help="heartbeat spacing under busy CPU-bound threads instead (bench.heartbeat)")
    p.add_argument("--heartbeat-url", default=None,
                   help="database of the heartbeat workload (default: a temporary SQLite file)")
    p.add_argument("--heartbeat-threads", default="0,4,16",
                   help="comma-separated numbers of busy threads (default 0,4,16)")
    p.add_argument("--heartbeat-lease", type=float, default=3.0,
                   help="lease of the heartbeat workload's node, s (beats every lease / 3)")
    p.add_argument("--heartbeat-seconds", type=float, default=10.0,
                   help="measurement per number of busy threads, s")
    p.add_argument("--workers", type=int, default=32,
                   help="max_workers / pool size / concurrency of every system (default 32)")
    p.add_argument("--results", type=Path, default=BENCH / "results")
    p.add_argument("--table-from", type=Path, metavar="JSON",
                   help="print the table of an earlier run's JSON file and exit")
    p.add_argument("--pg", choices=("private", "shared"), default="private",
                   help="private: a throw-away cluster on a free port of 127.0.0.1 from the local "
                        "PostgreSQL binaries, with pg_stat_statements (default when they are "
                        "installed); shared: the server at --pg-url")
    p.add_argument("--mariadb", choices=("private", "shared"), default="private",
                   help="private: a throw-away MariaDB on a free port of 127.0.0.1 from the local "
                        "binaries (default when they are installed); shared: the server at "
                        "--mariadb-url")
    p.add_argument("--mariadb-url", default=MARIADB_ADMIN_URL,
                   help="admin URL of the shared MariaDB server (the database dbsbench_dbs is "
                        "created and dropped there)")
    p.add_argument("--pg-url", default=SHARED_PG_URL,
                   help="admin URL of the shared PostgreSQL server (databases dbsbench_* are "
                        "created and dropped there)")
    return p.parse_args(argv)


def cpu_reference() -> float:
    """Milliseconds of one fixed piece of pure-Python work (median of seven): how fast this
    machine ran the interpreter at that moment. The VM's speed varies between hours by a
    factor of two or more; runs of different hours compare only through this figure."""
    times = []
    for _ in range(7):
        began = time.perf_counter()
        sum(i * i for i in range(300_000))
        times.append((time.perf_counter() - began) * 1000)
    return sorted(times)[len(times) // 2]


def machine() -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kib / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    versions = {}
    for dist in ("sqlalchemy", "psycopg", "pymysql"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "-"
    return {"cpu": cpu, "cores": os.cpu_count(), "memory": mem,
            "python": platform.python_version(), "platform": platform.platform(), **versions}


def run_system(ctx: Context, system: System, settings: Settings,
               workloads: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"label": system.label, "note": system.note}

    def guarded(name: str, fn: Callable[[], Any]) -> None:
        settled = ctx.dbs.settle()
        log(f"  {system.key} {name}: servers settled first ("
            + ", ".join(f"{db} {s:.1f} s" for db, s in settled.items()) + ")")
        out.setdefault("settle_seconds", {})[name] = settled
        began = time.time()
        try:
            out[name] = fn()
        except Exception as exc:
            log(f"  {system.key} {name} FAILED: {type(exc).__name__}: {exc}")
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
            kill_all()
        log(f"  {system.key} {name} took {time.time() - began:.1f} s")

    if "lag" in workloads:
        guarded("lag", lambda: rate_session(
            ctx, system, settings, nodes_count=1, period=1.0, rates=settings.lag_rates,
            stop_on_fail=False, label="lag"))
    if "throughput1" in workloads:
        guarded("throughput_1", lambda: rate_session(
            ctx, system, settings, nodes_count=1, period=system.period, rates=settings.ramp,
            stop_on_fail=True, label="throughput"))
    if "throughput3" in workloads:
        if system.max_nodes < 3:
            out["throughput_3"] = {"skipped": system.note}
        else:
            guarded("throughput_3", lambda: rate_session(
                ctx, system, settings, nodes_count=3, period=system.period,
                rates=settings.ramp3 or settings.ramp, stop_on_fail=True, label="throughput"))
    if "idle" in workloads:
        guarded("idle", lambda: idle_session(ctx, system, settings))
    if "burst" in workloads:
        guarded("burst", lambda: burst_session(ctx, system, settings))
    if "soak" in workloads:
        if system.key == SOAK_SYSTEM:
            guarded("soak", lambda: soak_session(ctx, system, settings))
        else:
            out["soak"] = {"skipped": f"the soak runs on {SYSTEMS[SOAK_SYSTEM].label} only"}
    if system.is_dbs and "wakeup" in workloads and (
            system.backend == "postgresql" or settings.wake_triggers_polling):
        guarded("wakeup", lambda: wakeup_session(ctx, system, settings))
    if system.is_dbs and "failover" in workloads:
        guarded("failover", lambda: failover_session(ctx, system, settings))
    if system.is_dbs and "observability" in workloads:
        from bench.observability import observability_session

        guarded("observability", lambda: observability_session(ctx, system, settings))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    install_signal_handlers()
    settings = replace(QUICK if args.quick else FULL, workers=args.workers)
    if args.table_from:
        saved = json.loads(args.table_from.read_text())
        print(table(saved["systems"], Settings(**saved["settings"])))
        return 0
    if args.heartbeat:
        from bench.heartbeat import heartbeat

        return heartbeat(args)
    if args.profile:
        from bench.profile import profile

        return profile(args)
    only = [s for s in args.only.split(",") if s] or list(
        QUICK_PLAN if args.quick else ALL_SYSTEMS)
    unknown = [s for s in only if s not in SYSTEMS]
    if unknown:
        print(f"unknown system(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    workloads = {w for w in args.workloads.split(",") if w}
    began = time.time()
    for system in only:
        env = SYSTEMS[system].env
        if env is not None:
            ensure_env(PEER_ENVS[env])
    installed = time.time() - began
    args.results.mkdir(parents=True, exist_ok=True)
    private = PrivatePostgres() if args.pg == "private" else None
    if private is not None and private.bin is None:
        log("no local PostgreSQL binaries: using the shared server")
        private = None
    private_my = PrivateMariaDB() if args.mariadb == "private" else None
    if private_my is not None and private_my.bin is None:
        log("no local MariaDB binaries: using the shared server")
        private_my = None
    results: dict[str, dict[str, Any]] = {}
    reference = [cpu_reference()]
    started = time.time()
    dbs: Databases | None = None
    try:
        dbs = Databases(private.start() if private is not None else args.pg_url,
                        private_my.start() if private_my is not None else args.mariadb_url)
        ctx = Context(dbs, args.results)
        versions = dbs.server_versions()
        for key in only:
            system = SYSTEMS[key]
            log(f"{system.label} …")
            todo = workloads & QUICK_PLAN.get(key, set(WORKLOADS)) if args.quick else workloads
            results[key] = run_system(ctx, system, settings, todo)
    finally:
        kill_all()
        if dbs is not None:
            dbs.drop_all()
        if private is not None:
            private.remove()
        if private_my is not None:
            private_my.remove()
    elapsed = time.time() - started
    reference.append(cpu_reference())
    md = table(results, settings)
    notes = [f"- {r['label']}: {r['note']}" for r in results.values() if r.get("note")]
    mode = "quick" if args.quick else "full"
    info = {**machine(), "cpu_reference_ms": reference}
    print(f"\n### dbscheduler benchmark ({mode}, {time.strftime('%Y-%m-%d %H:%M')}, "
          f"{info['cores']} cores {info['cpu']}, PostgreSQL {versions.get('postgresql')}, "
          f"MariaDB {versions.get('mariadb')}; {elapsed:.0f} s; CPU reference "
          f"{reference[0]:.0f} ms at the start, {reference[1]:.0f} ms at the end)\n")
    print(md)
    if any("skipped" in (r.get("soak") or {}) for r in results.values()):
        notes.append(f"- The soak runs on {SYSTEMS[SOAK_SYSTEM].label} only.")
    print("\nCells: median (min–max) of the runs. " + " ".join(notes))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.results / f"bench-{mode}-{stamp}.json"
    settings_dict = asdict(replace(settings))
    path.write_text(json.dumps({
        "mode": mode, "started": started, "seconds": elapsed, "install_seconds": installed,
        "machine": info, "servers": versions, "settings": settings_dict,
        "systems": results, "table": md,
    }, indent=1, default=str))
    log(f"wrote {path} ({elapsed:.0f} s, plus {installed:.0f} s checking/installing peers)")
    return 0
