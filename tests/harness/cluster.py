"""Real node processes (:mod:`tests.harness.node`, forked by :mod:`tests.harness.zygote`)
sharing one table.

:class:`Cluster` is the only place that starts, signals and reaps them; the conformance tests
use it directly, the chaos suite through :class:`tests.chaos.cluster.ChaosRun`, which adds
the bookkeeping of the faults it injects.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness.node import read_events
from tests.harness.zygote import READ_AT_IMPORT, ForkedNode, zygote

ROOT = Path(__file__).resolve().parents[2]


NodeProcess = subprocess.Popen[bytes] | ForkedNode
"""A node: forked by the zygote, or started as its own program."""

MIN_WAIT = 60.0
"""The shortest bound :meth:`Cluster.wait_for` waits for an event, in seconds."""


@dataclass(frozen=True)
class Exit:
    """How a node ended in :meth:`Cluster.stop_all`: its exit code, or None when it did not
    exit in time and was killed; ``at`` is when that was seen."""

    code: int | None
    at: float


@dataclass
class Cluster:
    """Node processes sharing one table, each logging to its own file in ``workdir``.

    Every node is started with ``--watchdog``: it shuts itself down after that many seconds
    or as soon as this process is gone, so a test run that dies leaves no orphans.
    """

    url: str
    table: str
    workdir: Path
    watchdog: float = 900.0
    nodes: dict[str, NodeProcess] = field(default_factory=dict)

    # -- processes -----------------------------------------------------------------------------
    def start(self, node: str, *args: str,
              env: dict[str, str] | None = None) -> NodeProcess:
        """Start ``node`` (a restart reuses the name and appends to its log); ``env``: extra
        environment variables (``DBSCHEDULER_FREEZE_AT``). Forked from this process's zygote
        (:mod:`tests.harness.zygote`) unless the environment arms a fault point."""
        log = self.workdir / f"{node}.jsonl"
        output = self.workdir / f"{node}.stderr"
        argv = ["--url", self.url, "--table", self.table, "--node", node, "--log", str(log),
                *args, "--watchdog", str(self.watchdog)]
        environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        proc: NodeProcess
        if not any(name in environment for name in READ_AT_IMPORT):
            proc = zygote().spawn(argv, environment, output)
        else:  # read when the node imports: a fork of the zygote would not see it
            with output.open("ab") as err:
                proc = subprocess.Popen([sys.executable, "-m", "tests.harness.node", *argv],
                                        cwd=ROOT, stdout=err, stderr=err, env=environment)
        self.nodes[node] = proc
        return proc

    def alive(self, node: str) -> bool:
        return self.nodes[node].poll() is None

    def signal(self, node: str, sig: int) -> None:
        self.nodes[node].send_signal(sig)

    def kill(self, node: str, timeout: float = 30.0) -> float:
        """kill -9 and reap; returns the instant after which the node can have done nothing."""
        proc = self.nodes[node]
        proc.kill()
        proc.wait(timeout=timeout)
        return time.time()

    def freeze(self, node: str) -> float:
        """SIGSTOP; returns the instant it was sent (the node ran until then)."""
        self.nodes[node].send_signal(signal.SIGSTOP)
        return time.time()

    def thaw(self, node: str) -> float:
        """SIGCONT; returns the instant taken just before it (the node may run and log before
        the signal call returns)."""
        resumed = time.time()
        self.nodes[node].send_signal(signal.SIGCONT)
        return resumed

    def stop(self, node: str, timeout: float = 20.0) -> int:
        """Graceful stop (SIGCONT in case it is frozen, then SIGTERM); returns the exit code."""
        proc = self.nodes[node]
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout)

    def stop_all(self, timeout: float = 20.0) -> dict[str, Exit]:
        """Gracefully stop every node still running, all at once; a node that has not exited
        within ``timeout`` is killed (its :class:`Exit` has ``code=None``)."""
        procs = {n: p for n, p in self.nodes.items() if p.poll() is None}
        for proc in procs.values():
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        exits: dict[str, Exit] = {}
        for node, proc in procs.items():
            try:
                code: int | None = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = None
            exits[node] = Exit(code, time.time())
        return exits

    def close(self) -> None:
        """Kill every process still running, whatever state it is in."""
        for proc in self.nodes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()

    # -- what they did -------------------------------------------------------------------------
    def events(self) -> list[dict[str, Any]]:
        """Every node's events, ordered by time."""
        out: list[dict[str, Any]] = []
        for path in sorted(self.workdir.glob("*.jsonl")):
            out += read_events(path)
        return sorted(out, key=lambda e: e["t"])

    def stderr(self, node: str) -> str:
        return (self.workdir / f"{node}.stderr").read_text(errors="replace")

    def wait_for(self, what: Callable[[list[dict[str, Any]]], bool], timeout: float,
                 message: str) -> list[dict[str, Any]]:
        """Poll the events until ``what(events)``; returns them. AssertionError on timeout.

        ``timeout`` is taken as at least :data:`MIN_WAIT`: node processes that import, start
        and pick on a machine busy with other work took longer than 15 s, and only a failing
        test waits the bound out."""
        deadline = time.monotonic() + max(timeout, MIN_WAIT)
        while time.monotonic() < deadline:
            events = self.events()
            if what(events):
                return events
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout} s waiting for: {message}")


@contextmanager
def cluster(url: str, table: str, workdir: Path) -> Iterator[Cluster]:
    """A :class:`Cluster` whose nodes are stopped (gracefully, else killed) on the way out."""
    c = Cluster(url, table, workdir)
    try:
        yield c
    finally:
        c.stop_all()
        c.close()
