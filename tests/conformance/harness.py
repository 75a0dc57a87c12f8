"""Running real node processes (tests/node.py) and reading what they did."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Cluster:
    """Node processes sharing one table, each logging to its own file."""

    url: str
    table: str
    workdir: Path
    nodes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, node: str, *args: str) -> subprocess.Popen[bytes]:
        log = self.workdir / f"{node}.jsonl"
        err = open(self.workdir / f"{node}.stderr", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.node", "--url", self.url, "--table", self.table,
             "--node", node, "--log", str(log), *args],
            cwd=ROOT, stdout=err, stderr=err, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.nodes[node] = proc
        return proc

    def signal(self, node: str, sig: int) -> None:
        self.nodes[node].send_signal(sig)

    def stop(self, node: str, timeout: float = 20) -> int:
        proc = self.nodes[node]
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout)

    def stop_all(self) -> None:
        for node in list(self.nodes):
            try:
                self.stop(node)
            except subprocess.TimeoutExpired:
                self.nodes[node].kill()
                self.nodes[node].wait()

    def events(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for path in sorted(self.workdir.glob("*.jsonl")):
            for line in path.read_text().splitlines():
                if line.strip():
                    out.append(json.loads(line))
        return sorted(out, key=lambda e: e["t"])

    def stderr(self, node: str) -> str:
        return (self.workdir / f"{node}.stderr").read_text(errors="replace")

    def wait_for(self, what: Callable[[list[dict[str, Any]]], bool], timeout: float,
                 message: str) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events = self.events()
            if what(events):
                return events
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout} s waiting for: {message}")


@contextmanager
def cluster(url: str, table: str, workdir: Path) -> Iterator[Cluster]:
    c = Cluster(url, table, workdir)
    try:
        yield c
    finally:
        c.stop_all()


@dataclass(frozen=True)
class Run:
    task: str
    node: str
    token: int
    start: float
    end: float | None


def executions(events: list[dict[str, Any]]) -> list[Run]:
    """Pair ``start``/``end`` events by (node, task, token); ``end`` None if it never ended."""
    ends = {(e["node"], e["task"], e["token"]): e["t"] for e in events if e["event"] == "end"}
    return [
        Run(e["task"], e["node"], e["token"], e["t"], ends.get((e["node"], e["task"], e["token"])))
        for e in events
        if e["event"] == "start"
    ]


def assert_no_overlap(runs: list[Run], grace_end: float | None = None) -> None:
    """No two executions of one task overlap in time; fencing tokens never repeat."""
    by_task: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_task[run.task].append(run)
    for task, items in by_task.items():
        tokens = [r.token for r in items]
        assert len(tokens) == len(set(tokens)), f"{task}: a fencing token repeats: {sorted(tokens)}"
        items.sort(key=lambda r: r.start)
        for a, b in itertools.pairwise(items):
            assert a.token < b.token, f"{task}: token {b.token} started after {a.token}"
            a_end = a.end if a.end is not None else (grace_end or float("inf"))
            assert a_end <= b.start, (
                f"{task}: executions overlap: token {a.token} on {a.node} "
                f"[{a.start:.3f}, {a_end:.3f}] and token {b.token} on {b.node} from {b.start:.3f}"
            )
