"""Fixtures of the web tests: a running node with tasks of every kind, on a real database."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from dbscheduler import Cron, FixedDelay, FixedRate, Scheduler, TaskContext

HOUR = FixedRate(3600)
ODD_NAMES = (
    "reports/daily/eu",           # slashes
    "with space",                 # a space
    "ünïcødé ✓ 任务",              # non-ASCII
    "<script>alert(1)</script>",  # markup
    "100% done?#frag",            # characters that mean something in URLs
    "pause",                      # the name of a bulk route
)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """The web tests run on SQLite and PostgreSQL; those where MariaDB differs (names and
    their collation, writes) add it with :data:`WITH_MARIADB`. The dashboard's SQL is the
    Client's, whose dialects the engine's own tests cover."""
    return str(request.param)


WITH_MARIADB = pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])


@dataclass
class Node:
    """A started Scheduler with tasks in known states; ``slow`` runs until stopped."""

    scheduler: Scheduler
    url: str
    table: str
    slow_started: threading.Event = field(default_factory=threading.Event)
    slow_stopped: threading.Event = field(default_factory=threading.Event)
    echoed: list[tuple[str, object]] = field(default_factory=list)

    def start_slow(self) -> None:
        """Make ``slow`` run now and wait until it runs."""
        self.scheduler.trigger("slow")
        assert self.slow_started.wait(10), "the node did not start the triggered task"

    def run_failing(self) -> None:
        """Run ``broken`` once and wait for its error to be recorded."""
        self.scheduler.trigger("broken")
        wait_for(lambda: self.scheduler.info("broken").last_status == "error",
                 what="broken to fail")


def wait_for(condition: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
    """Poll ``condition`` until it is truthy; fail after ``timeout`` seconds."""
    # The default waits long enough for a machine ten times slower: it costs nothing when the
    # event comes, and only a failing test waits it out.
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what or condition}")
        time.sleep(0.05)


def make_node(url: str, table: str) -> Node:
    scheduler = Scheduler(url, table=table, lease=3, poll_interval=0.2, node_id="web-test-node")
    node = Node(scheduler, url, table)

    def slow(ctx: TaskContext) -> None:
        node.slow_started.set()
        if ctx.stop_requested.wait(30):
            node.slow_stopped.set()

    def broken(ctx: TaskContext) -> None:
        raise RuntimeError("upstream answered 503")

    @scheduler.handler("echo")
    def echo(ctx: TaskContext) -> None:
        node.echoed.append((ctx.name, ctx.data))

    scheduler.add("nightly-report", lambda ctx: None,
                  schedule=Cron("0 3 * * *", tz="Europe/Berlin"))
    scheduler.add("every-5-minutes", lambda ctx: None, schedule=Cron("*/5 * * * *"))
    scheduler.add("cleanup", lambda ctx: None, schedule=FixedDelay(300))
    scheduler.add("slow", slow, schedule=HOUR)
    scheduler.add("broken", broken, schedule=HOUR)
    for name in ODD_NAMES:
        scheduler.add(name, lambda ctx: None, schedule=HOUR)
    return node


@pytest.fixture
def node(migrated: tuple[str, str]) -> Iterator[Node]:
    """A started node on a fresh table; shut down (running tasks told to stop) afterwards."""
    url, table = migrated
    node = make_node(url, table)
    node.scheduler.start()
    yield node
    node.scheduler.shutdown(timeout=5)
