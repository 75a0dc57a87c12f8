"""Running one scenario on every selected backend at once.

A scenario takes seconds of real time per backend, mostly waiting (leases expire, nodes
start, faults last). Its test is parametrized by backend, and the first of those tests to
run starts the scenario on every backend selected in this session, each in a thread with its
own table and directory; each test then waits for its own backend's report. So the suite
costs about the time of one backend per scenario, and ``-k mysql`` still runs only MariaDB.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.chaos.checks import Report
from tests.chaos.faults import Server
from tests.chaos.profile import Profile
from tests.databases import drop_table, find, required, unique_table
from tests.servers import answers


@dataclass(frozen=True)
class Env:
    """Where one scenario runs: a fresh migrated table on one backend."""

    backend: str
    url: str
    table: str
    workdir: Path
    profile: Profile
    server: Server | None


class Unavailable(Exception):
    def __init__(self, reason: str, required: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.required = required


class Skip(Exception):
    """The scenario does not apply here (e.g. the server cannot be restarted)."""


Scenario = Callable[[Env], Report]
_MIGRATING = threading.Lock()
SELECTED = pytest.StashKey[set[str]]()


RESTART_WAIT = 60.0
"""Seconds a scenario's set-up waits for a server that another worker's test restarts."""


def _migrated_table(url: str, backend: str) -> str:
    """A new table migrated for one scenario run.

    The scenarios of a module start in the background (siblings, prefetch), so one may set up
    between two tests of its worker, while another worker's test holds the servers' lock to
    restart them: the server then refuses connections for a moment. The scenario bodies that
    can meet a restart are written to void and repeat themselves; their set-up waits for the
    server to be back and migrates a new table.
    """
    from dbscheduler.migrate import upgrade

    deadline = time.monotonic() + RESTART_WAIT
    while True:
        table = unique_table()
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with _MIGRATING:  # Alembic's context is process-global: one migration at a time
                upgrade(engine, table)
            return table
        except sa.exc.OperationalError:
            if backend == "sqlite" or time.monotonic() >= deadline:
                raise
        finally:
            engine.dispose()
        with contextlib.suppress(Exception):  # a half-made table of a server that went down
            drop_table(url, table)
        while not answers(url) and time.monotonic() < deadline:
            time.sleep(0.5)


class Runner:
    def __init__(self, config: pytest.Config, root: Path, profile: Profile) -> None:
        self._config = config
        self._root = root
        self._profile = profile
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="chaos")
        self._futures: dict[tuple[str, str], Future[Report]] = {}

    def report(self, request: pytest.FixtureRequest, scenario: Scenario, backend: str,
               backends: tuple[str, ...]) -> Report:
        """Run (or join) ``scenario`` on ``backend``; siblings selected for this session
        start at the same time."""
        nodeid = request.node.nodeid
        selected = self._config.stash.get(SELECTED, set())
        with self._lock:
            for other in backends:
                key = (scenario.__name__, other)
                sibling = re.sub(r"\[[^\]]*\]$", f"[{other}]", nodeid)
                if key not in self._futures and (other == backend or sibling in selected):
                    self._futures[key] = self._pool.submit(self._job, scenario, other)
            future = self._futures[(scenario.__name__, backend)]
            siblings = [f for (name, _), f in self._futures.items() if name == scenario.__name__]
        if request.node.get_closest_marker("restarts_servers") is not None:
            # This test holds the servers' lock exclusive; a sibling restarting the other
            # server must be over before it lets go, or the other workers' tests would meet
            # that server down (their connections refused).
            wait(siblings)
        try:
            return future.result()
        except Unavailable as exc:
            if exc.required:
                pytest.fail(exc.reason)
            pytest.skip(exc.reason)
        except Skip as exc:
            pytest.skip(str(exc))

    def prefetch(self, scenario: Scenario, backend: str) -> None:
        """Start ``scenario`` on ``backend`` now, unless it was; its test joins it later.
        For modules of many short scenarios that would otherwise run one after another."""
        with self._lock:
            key = (scenario.__name__, backend)
            if key not in self._futures:
                self._futures[key] = self._pool.submit(self._job, scenario, backend)

    def _job(self, scenario: Scenario, backend: str) -> Report:
        workdir = self._root / f"{scenario.__name__}-{backend}"
        workdir.mkdir(parents=True, exist_ok=True)
        private = None
        if backend == "sqlite":
            url = f"sqlite:///{workdir / 'dbscheduler.sqlite3'}"
        else:
            found = find(backend)
            if found.url is None:
                raise Unavailable(found.reason, backend in required())
            url, private = found.url, found.server
        table = _migrated_table(url, backend)
        server = None if backend == "sqlite" else Server(backend, url, private)
        try:
            return scenario(Env(backend, url, table, workdir / "nodes", self._profile, server))
        finally:
            if server is not None:
                server.ensure_running()
                server.cleanup()
            with contextlib.suppress(Exception):  # the server may be the fault's victim
                drop_table(url, table)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


ALL_BACKENDS = ("sqlite", "postgresql", "mysql")
SERVER_BACKENDS = ("postgresql", "mysql")


def check(request: pytest.FixtureRequest, runner: Runner, record: Callable[[Report], None],
          scenario: Scenario, backend: str, backends: tuple[str, ...] = ALL_BACKENDS) -> None:
    """The body of every scenario test: run or join it, keep its figures, assert."""
    report = runner.report(request, scenario, backend, backends)
    record(report)
    report.assert_ok()
