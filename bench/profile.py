"""``python -m bench --profile``: where one dbscheduler node spends its time under workload 2.

One node on PostgreSQL is offered ``--profile-rate`` executions/s (FixedRate(0.1) no-op tasks,
spread), and py-spy (installed into ``bench/.peers/tools``, never into dbscheduler's venv)
samples every thread for ``--profile-seconds`` without pausing the process. The summary says,
per thread, how much of the time it computed, waited for the database, or idled, and which
functions the computing and waiting samples went through.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
import sys
import sysconfig
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from bench.infra import (
    PEER_ENVS,
    ROOT,
    Databases,
    ensure_env,
    kill_all,
    log,
    nodes_cleanup,
)
from bench.private_servers import PrivatePostgres
from bench.stats import Grid, window_figures
from bench.workloads import SYSTEMS, Context, Settings, create_dbs_table

FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
BLOCKING = re.compile(r"\.get\(|\.wait\(|\.acquire\(|sleep\(|select\(|sys\.stdin|readline|"
                      r"notifies\(|\.join\(|wait_for\(")
ROOTS = [ROOT, *(Path(p) for p in sys.path if p), Path(sysconfig.get_paths()["stdlib"])]


@functools.cache
def _source_line(file: str, line: int) -> str:
    for root in ROOTS:
        path = root / file
        if path.is_file():
            lines = path.read_text(errors="replace").splitlines()
            return lines[line - 1] if 0 < line <= len(lines) else ""
    return ""


def _frame(raw: str) -> tuple[str, str, int]:
    match = FRAME.match(raw.strip())
    if not match:
        return raw.strip(), "", 0
    return match["fn"], match["file"], int(match["line"] or 0)


def _kind(leaf: tuple[str, str, int], thread: str) -> str:
    """``db`` (psycopg waiting for the server), ``idle`` (blocked waiting for work: the leaf
    line is a queue get, event wait, lock acquire, sleep or stdin read) or ``cpu``."""
    fn, file, line = leaf
    if "listen" in thread:
        return "idle"
    if "psycopg" in file and "wait" in fn.rsplit(".", 1)[-1]:
        return "db"
    if BLOCKING.search(_source_line(file, line)):
        return "idle"
    return "cpu"


BREAKDOWN = (
    ("Store.poll (the poll query)", ("Store.poll ",)),
    ("Store.pick (the pick)", ("Store.pick ",)),
    ("Store.finish (the finish transaction)", ("Store.finish ",)),
    ("  … SELECT now() of the finish", ("StoreBase.now ",)),
    ("  … NOTIFY of the finish", ("notify ",)),
    ("  … the fenced UPDATEs (executemany)", ("Cursor.executemany ",)),
    ("connection checkout + pre-ping", ("_do_ping_w_event ", "Pool.connect ")),
    ("BEGIN round trip (psycopg)", ("BaseConnection._start_query ", "_start_query ")),
    ("COMMIT round trip (incl. WAL flush)", ("Connection.commit ",)),
    ("SQLAlchemy statement building / cache key / compile",
     ("_generate_cache_key ", "_compile_w_cache ", "_generative ", "ValuesBase.values ",
      "ColumnOperators.", "expect ")),
    ("result rows to dicts / mappings",
     ("RowMapping", "mappings ", "<listcomp> (dbscheduler/dialects")),
    ("dispatch (TaskContext, Execution, heartbeat track, submit)", ("Poller._dispatch ",)),
    ("plan_next (the schedule)", ("plan_next ",)),
)


def breakdown(raw_path: Path) -> dict[str, dict[str, float]]:
    """Share of each thread's samples whose stack goes through each labelled part."""
    totals: Counter[str] = Counter()
    hits: dict[str, Counter[str]] = defaultdict(Counter)
    for line in raw_path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        thread = stack.split(";", 1)[0]
        thread = thread.split(":", 1)[-1].strip() if ":" in thread else thread
        thread = re.sub(r"[-_]\d+$", "", thread)
        totals[thread] += int(count)
        for label, needles in BREAKDOWN:
            if any(needle in stack for needle in needles):
                hits[thread][label] += int(count)
    return {t: {label: hits[t][label] / totals[t] for label, _ in BREAKDOWN}
            for t in totals if t in ("dbscheduler-poller", "dbscheduler-finish")}


def summarize(raw_path: Path, top: int = 30) -> dict[str, Any]:
    """Per thread (workers merged): samples computing / waiting for the database / idle, and
    the functions (inclusive) of the computing and waiting samples."""
    threads: dict[str, Counter[str]] = defaultdict(Counter)
    inclusive: dict[str, Counter[str]] = defaultdict(Counter)
    own: dict[str, Counter[str]] = defaultdict(Counter)
    for line in raw_path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        parts = stack.split(";")
        thread = "?"
        if parts and parts[0].startswith("thread"):
            thread = parts.pop(0)
            thread = thread.split(":", 1)[-1].strip() if ":" in thread else thread
            thread = re.sub(r"[-_]\d+$", "", re.sub(r"\(.*?\)", "", thread)).strip() or "?"
        if parts and parts[0].startswith("process"):
            parts.pop(0)
        frames = [_frame(p) for p in parts if p]
        if not frames:
            continue
        kind = _kind(frames[-1], thread)
        threads[thread][kind] += n
        if kind == "idle":
            continue
        seen = set()
        for fn, file, _line in frames:
            key = f"{fn} ({file})"
            if key not in seen:
                seen.add(key)
                inclusive[thread][key] += n
        own[thread][f"{frames[-1][0]} ({frames[-1][1]}:{frames[-1][2]})"] += n
    out: dict[str, Any] = {}
    for thread, kinds in sorted(threads.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(kinds.values())
        busy = kinds["cpu"] + kinds["db"]
        out[thread] = {
            "samples": total,
            "cpu": kinds["cpu"] / total, "db_wait": kinds["db"] / total,
            "idle": kinds["idle"] / total,
            "inclusive": [(k, v / total) for k, v in inclusive[thread].most_common(top)],
            "self": [(k, v / total) for k, v in own[thread].most_common(15)],
            "busy_samples": busy,
        }
    return out


def render(summary: dict[str, Any], figures: dict[str, Any], rate: int,
           parts: dict[str, dict[str, float]] | None = None) -> str:
    lines = [f"profile: 1 dbscheduler node (max_workers {figures.get('workers')}), PostgreSQL, "
             f"offered {rate:,}/s "
             f"(FixedRate(0.1) no-op tasks): measured {figures['executions_per_s']:,.0f} exec/s, "
             f"lag p50 {figures['lag_p50_ms']:.0f} ms, p99 {figures['lag_p99_ms']:.0f} ms",
             "statements/s by first keyword (PostgreSQL pick = WITH…UPDATE, finish rows = "
             "UPDATE, polls + finish now() + NOTIFY = SELECT): "
             + ", ".join(f"{k} {v:,.0f}" for k, v in figures.get("statements_per_s", {}).items()),
             "", "thread                      samples   cpu   db-wait  idle"]
    for thread, t in summary.items():
        lines.append(f"{thread[:27]:27} {t['samples']:7} {100 * t['cpu']:5.1f}%  "
                     f"{100 * t['db_wait']:5.1f}%  {100 * t['idle']:5.1f}%")
    for thread, shares in (parts or {}).items():
        lines += ["", f"-- {thread}: share of all its samples spent in"]
        lines += [f"  {100 * v:5.1f}%  {label}" for label, v in shares.items()]
    for thread, t in summary.items():
        if t["busy_samples"] < 0.05 * t["samples"]:
            continue
        lines += ["", f"-- {thread}: inclusive share of the thread's samples (busy only)"]
        lines += [f"  {100 * v:5.1f}%  {k}" for k, v in t["inclusive"]]
        lines += [f"-- {thread}: self"]
        lines += [f"  {100 * v:5.1f}%  {k}" for k, v in t["self"]]
    return "\n".join(lines)


def profile(args: argparse.Namespace) -> int:
    pyspy = ensure_env(PEER_ENVS["tools"]).parent / "py-spy"
    system = SYSTEMS["dbs-pg"]
    settings = Settings(workers=args.workers)
    args.results.mkdir(parents=True, exist_ok=True)
    private = PrivatePostgres() if args.pg == "private" else None
    if private is not None and private.bin is None:
        private = None
    dbs: Databases | None = None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    raw = args.results / f"profile-{stamp}.raw.txt"
    try:
        dbs = Databases(private.start() if private is not None else args.pg_url)
        ctx = Context(dbs, args.results)
        backend = ctx.backend(system)
        assert backend is not None
        period = system.period
        tasks = round(args.profile_rate * period)
        create_dbs_table(backend, rows=tasks, period=period)
        with nodes_cleanup() as nodes:
            node = ctx.node(system, backend, "p0", mode="rate", n=tasks, period=period,
                            workers=settings.workers, lease=settings.lease, poll=settings.poll)
            nodes.append(node)
            node.wait_ready(120)
            reply = node.call("activate", {"start": 0, "stop": tasks, "period": period,
                                           "lead": 0.5})
            t0 = float(reply["t0"])
            time.sleep(max(0.0, t0 + 1.5 - time.time()))
            node.dump(ctx.tmp)
            log(f"py-spy: sampling node pid {node.proc.pid} for {args.profile_seconds} s at "
                f"{args.profile_rate:,}/s offered …")
            before = node.call("stats")
            w0 = time.time()
            subprocess.run(
                [str(pyspy), "record", "--pid", str(node.proc.pid), "--duration",
                 str(int(args.profile_seconds)), "--rate", "200", "--format", "raw",
                 "--threads", "--idle", "--nonblocking", "--output", str(raw)],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                timeout=args.profile_seconds + 60,
            )
            w1 = time.time()
            after = node.call("stats")
            time.sleep(0.3)
            samples = node.dump(ctx.tmp)
        grid = Grid(period, {i: t0 + i * period / tasks for i in range(tasks)})
        figures: dict[str, Any] = dict(window_figures(samples, grid, w0, w1 - 0.5))
        figures["workers"] = settings.workers
        span = after["time"] - before["time"]
        figures["statements_per_s"] = {
            k: (after["statements"].get(k, 0) - before["statements"].get(k, 0)) / span
            for k in after["statements"]}
        summary = summarize(raw)
        parts = breakdown(raw)
        text = render(summary, figures, args.profile_rate, parts)
        (args.results / f"profile-{stamp}.txt").write_text(text + "\n")
        (args.results / f"profile-{stamp}.json").write_text(json.dumps(
            {"rate": args.profile_rate, "figures": figures, "threads": summary,
             "breakdown": parts}, indent=1))
        print(text)
        log(f"wrote {args.results}/profile-{stamp}.txt (raw stacks: {raw})")
    finally:
        kill_all()
        if dbs is not None:
            dbs.drop_all()
        if private is not None:
            private.remove()
    return 0
