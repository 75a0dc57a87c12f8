"""A node inside the test process: a started :class:`~dbscheduler.Scheduler` with two tasks
that run on demand, and direct access to the rows (seed, database clock).

The multi-process tests use :class:`tests.harness.Cluster` instead.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timedelta

import sqlalchemy as sa

from dbscheduler import FixedRate, Scheduler, TaskContext
from dbscheduler._store import Registration, Store

HOUR = FixedRate(timedelta(hours=1))


def seed(url: str, table: str, *names: str) -> None:
    """Insert one idle row per name, due in an hour, as a node's registration does."""
    engine = sa.create_engine(url)
    try:
        Store(engine, table).register(
            [Registration(name, HOUR.describe(), HOUR.first_run) for name in names]
        )
    finally:
        engine.dispose()


def db_now(url: str, table: str) -> datetime:
    engine = sa.create_engine(url)
    try:
        return Store(engine, table).db_now()
    finally:
        engine.dispose()


class Node:
    """A started Scheduler with two tasks due in an hour, run on demand with ``trigger``.

    ``long`` waits (up to 20 s) on ``ctx.stop_requested``; ``quick`` records when it ran.
    The lease (6 s: a heartbeat every 2 s) outlasts a heartbeat thread starved of CPU on a
    busy machine: a shorter one was lost there, which also stops ``long``, but as a lost
    lease, not the operation a test asserts.
    """

    def __init__(self, url: str, table: str, *, lease: float = 6, poll: float = 0.2) -> None:
        self.node_id = f"node-{uuid.uuid4().hex[:6]}"
        self.scheduler = Scheduler(
            url, table=table, node_id=self.node_id, lease=lease, poll_interval=poll
        )
        self.long_started = threading.Event()
        self.long_saw_stop = threading.Event()
        self.quick_runs: list[float] = []
        self.scheduler.add("long", self._long, schedule=HOUR)
        self.scheduler.add("quick", self._quick, schedule=HOUR)

    def _long(self, ctx: TaskContext) -> None:
        self.long_started.set()
        if ctx.stop_requested.wait(20):
            self.long_saw_stop.set()

    def _quick(self, ctx: TaskContext) -> None:
        self.quick_runs.append(time.monotonic())

    def start_long(self) -> None:
        """Make ``long`` run now and wait until it runs."""
        self.scheduler.trigger("long")
        assert self.long_started.wait(60), "the node did not start the triggered task"
