"""A cluster of real node processes (:class:`tests.harness.Cluster`) under fault injection.

:class:`ChaosRun` starts nodes, does things to them (kill -9, restart, SIGSTOP/SIGCONT)
through the harness, remembers when, samples the table for stuck rows while the nodes run,
stops everything, and hands the logs, its history and the table to :mod:`tests.chaos.checks`.
Every process it started is killed on the way out, whatever happened.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.chaos.checks import (
    NodeHistory,
    Report,
    analyse,
    check_table,
    read_table,
    repeated_warnings,
    stuck_rows,
)
from tests.harness import Cluster, Run, runs_from
from tests.harness.cluster import NodeProcess


class ChaosRun:
    """One scenario on one backend: the nodes, the faults done to them, and the report."""

    def __init__(self, *, scenario: str, backend: str, url: str, admin_url: str, table: str,
                 workdir: Path, tasks: Sequence[str], watchdog: float = 900.0,
                 seed: int | None = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.cluster = Cluster(url, table, workdir, watchdog=watchdog)
        self.admin_url = admin_url
        self.table = table
        self.tasks = list(tasks)
        self.report = Report(scenario, backend)
        self.random = random.Random(seed)
        self.specs: dict[str, tuple[str, ...]] = {}
        self.kills: dict[str, list[float]] = defaultdict(list)
        self.freezes: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.exits: dict[str, list[float]] = defaultdict(list)
        self.exit_codes: dict[str, list[int]] = defaultdict(list)
        self._frozen: dict[str, float] = {}
        self.began = time.time()
        self._phase_began = self.began
        self.fault_end = self.began
        self.stuck_samples = 0

    # -- nodes ---------------------------------------------------------------------------------
    def start(self, node: str, *args: str) -> NodeProcess:
        self.specs[node] = tuple(args)
        return self.cluster.start(node, *args)

    def restart(self, node: str, wait: bool = True) -> None:
        """Start a node again under its name; by default wait until it runs a task (a node
        still starting cannot be told apart from one that ignores SIGTERM)."""
        since = time.time()
        self.start(node, *self.specs[node])
        if wait:
            self.wait_for(lambda ev: any(e["event"] == "start" and e["node"] == node
                                         and e["t"] > since for e in ev), 30,
                          f"{node} runs again after its restart")

    def alive(self, node: str) -> bool:
        return self.cluster.alive(node)

    @property
    def nodes(self) -> list[str]:
        return sorted(self.cluster.nodes)

    def kill9(self, node: str) -> None:
        # The process is gone: nothing it ran can have gone on past this instant.
        self.kills[node].append(self.cluster.kill(node))
        self.report.faults["kill -9"] += 1

    def stop(self, node: str, timeout: float = 30.0) -> None:
        """Graceful stop (SIGTERM) of one node; not a fault."""
        code = self.cluster.stop(node, timeout=timeout)
        self.exits[node].append(time.time())
        self.exit_codes[node].append(code)
        if code != 0:
            self.report.problem("graceful stop", f"{node} exited with {code}")

    def freeze(self, node: str) -> None:
        self._frozen[node] = self.cluster.freeze(node)  # after the signal: it ran until then
        self.report.faults["SIGSTOP (zombie)"] += 1

    def thaw(self, node: str) -> None:
        stopped = self._frozen.pop(node)
        # Taken before the signal: the node may run (and log) before send_signal returns.
        resumed = self.cluster.thaw(node)
        self.freezes[node].append((stopped, resumed))

    def phase(self, name: str) -> None:
        """Note how long the phase that ends now took (figures: ``phases``)."""
        now = time.time()
        phases = self.report.extra.setdefault("phases", {})
        phases[name] = round(phases.get(name, 0.0) + now - self._phase_began, 2)
        self._phase_began = now

    def fault(self, kind: str, n: int = 1) -> None:
        self.report.faults[kind] += n

    # -- waiting -------------------------------------------------------------------------------
    def events(self) -> list[dict[str, Any]]:
        return self.cluster.events()

    def wait_for(self, what: Callable[[list[dict[str, Any]]], bool], timeout: float,
                 message: str) -> list[dict[str, Any]]:
        return self.cluster.wait_for(what, timeout, message)

    def warm_up(self, timeout: float = 45.0, tasks: Sequence[str] | None = None) -> None:
        """Wait until every node started and every task ran once."""
        want = set(self.tasks if tasks is None else tasks)
        nodes = set(self.cluster.nodes)

        def ready(events: list[dict[str, Any]]) -> bool:
            started = {e["node"] for e in events if e["event"] == "node_start"}
            ran = {e["task"] for e in events if e["event"] == "start"}
            return nodes <= started and want <= ran

        self.wait_for(ready, timeout, f"{sorted(nodes)} start and run {len(want)} tasks")
        self.phase("warm-up")

    def sleep(self, seconds: float, sample_every: float | None = None,
              margin: float = 2.5) -> None:
        """Sleep; meanwhile, if asked, look for rows held with a lease nobody renews."""
        deadline = time.monotonic() + seconds
        next_sample = time.monotonic() + (sample_every if sample_every is not None else seconds)
        while time.monotonic() < deadline:
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
            if sample_every is not None and time.monotonic() >= next_sample:
                self.sample_stuck(margin)
                next_sample = time.monotonic() + sample_every

    def recover(self, timeout: float, settle: float, margin: float = 2.5) -> float:
        """After the faults: wait until every task ran and wrote its finish again (bounded),
        then let the cluster run ``settle`` s more, sampling for stuck rows each second.
        Returns the seconds it took to recover (``timeout`` if it did not)."""
        self.phase("faults")
        self.fault_end = time.time()
        began = time.monotonic()
        want = set(self.tasks)

        def recovered(events: list[dict[str, Any]]) -> bool:
            done = {r.task for r in runs_from(events)
                    if r.start >= self.fault_end and r.written}
            return want <= done

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not recovered(self.events()):
            time.sleep(0.1)
        took = time.monotonic() - began
        self.report.extra["recovery_seconds"] = round(took, 2)
        self.sleep(settle, sample_every=1.0, margin=margin)
        self.sample_stuck(margin)
        self.phase("recovery")
        return took

    def sample_stuck(self, margin: float) -> None:
        """Rows held by someone with a lease expired ``margin`` s ago: nobody picks them."""
        self.stuck_samples += 1
        for line in stuck_rows(read_table(self.admin_url, self.table), margin):
            self.report.stuck_rows += 1
            self.report.problem("stuck row (expired lease, nobody picks it)", line)

    # -- the end -------------------------------------------------------------------------------
    def stop_all(self, timeout: float = 15.0) -> None:
        """SIGTERM every node still running (graceful shutdown), wait, record exit codes."""
        for node in list(self._frozen):
            self.thaw(node)
        for node, end in self.cluster.stop_all(timeout).items():
            if end.code is None:
                self.kills[node].append(end.at)
                self.report.problem("graceful stop", f"{node} did not exit in {timeout} s")
                continue
            self.exits[node].append(end.at)
            self.exit_codes[node].append(end.code)
            if end.code != 0:
                self.report.problem("graceful stop", f"{node} exited with {end.code}")
        self.phase("stop")

    def close(self) -> None:
        self.cluster.close()

    def history(self) -> NodeHistory:
        return NodeHistory(kills=dict(self.kills), freezes=dict(self.freezes),
                           exits=dict(self.exits))

    def stderr(self) -> dict[str, str]:
        return {n: self.cluster.stderr(n) for n in self.cluster.nodes}

    def verify(self, *, gap_limit: float | None, warnings_allowed: int,
               zombie_grace: float = 2.0,
               abandoned: frozenset[tuple[str, str]] = frozenset(),
               ambiguous_ok: bool = False, state_chain: bool = True) -> list[Run]:
        """Every check of :mod:`tests.chaos.checks`, after :meth:`stop_all`."""
        self.report.seconds = time.time() - self.began
        runs = analyse(self.report, self.events(), self.history(), tasks=self.tasks,
                       fault_end=self.fault_end, gap_limit=gap_limit,
                       zombie_grace=zombie_grace, abandoned=abandoned,
                       ambiguous_ok=ambiguous_ok)
        check_table(self.report, read_table(self.admin_url, self.table), runs,
                    tasks=self.tasks, stopped=True, state_chain=state_chain)
        repeated_warnings(self.report, self.stderr(), warnings_allowed)
        self.report.extra["stuck_samples"] = self.stuck_samples
        self.phase("checks")
        return runs


@contextmanager
def chaos_run(**kwargs: Any) -> Iterator[ChaosRun]:
    run = ChaosRun(**kwargs)
    try:
        yield run
    finally:
        run.close()


def node_args(*, tasks: int, rate: float, work: float, lease: float, poll: float,
              workers: int = 8, prefix: str = "task", extra: Sequence[str] = ()) -> list[str]:
    """The command line of a node running ``tasks`` FixedRate tasks that store their state."""
    return ["--tasks", str(tasks), "--prefix", prefix, "--rate", str(rate), "--work", str(work),
            "--lease", str(lease), "--poll", str(poll), "--workers", str(workers), "--state",
            *extra]
