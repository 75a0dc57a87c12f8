"""The pick and the poll take the node's handler names (up to ``UNION_LIMIT``) or the names it
lacks (past it) as one bound parameter: names with quotes, percent signs, backslashes, braces
and parameter-like text must reach the database as themselves, or their rows never run."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from dbscheduler import Client, Dynamic, Scheduler, TaskContext
from dbscheduler._store.runtime import UNION_LIMIT
from tests.helpers import polled, running


def now_then_hourly(ctx: Any) -> datetime:
    """Due at registration, then an hour after each run."""
    now = datetime.now(timezone.utc)
    return now if ctx is None else now + timedelta(hours=1)


ODD = ["it's", "50%", "x%(y)s", "back\\slash", "back\\'quote", "ünï", "a:b", "$1", "?",
       'dq"uote', "{br,ace}", "NULL", "sp ace"]


@pytest.mark.parametrize("past_the_limit", [False, True], ids=["by-name", "by-lacked"])
def test_tasks_with_odd_names_run(migrated: tuple[str, str], past_the_limit: bool) -> None:
    url, table = migrated
    names = ODD + ([f"plain-{i}" for i in range(UNION_LIMIT + 10 - len(ODD))]
                   if past_the_limit else [])
    assert (len(names) > UNION_LIMIT) == past_the_limit
    ran: set[str] = set()
    lock = threading.Lock()
    scheduler = Scheduler(url, table=table, node_id="many", poll_interval=0.2, max_workers=8)
    for name in names:
        def task(name: str = name) -> None:
            with lock:
                ran.add(name)
        scheduler.add(name, task, schedule=Dynamic(now_then_hourly))
    with running(scheduler):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                if ran >= set(names):
                    break
            time.sleep(0.05)
    assert sorted(set(names) - ran) == [], "these never ran"


def test_a_node_with_many_handlers_leaves_rows_of_handlers_it_lacks(
    migrated: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Past the limit a node filters by the handlers it lacks, learned from the first pick
    that takes one of their rows: such a row is given back at most once per node, never run
    there, and a node with the handler runs it."""
    url, table = migrated
    mine = [f"mine-{i}" for i in range(UNION_LIMIT + 6)]
    ran: list[str] = []
    lock = threading.Lock()

    def record(ctx: TaskContext) -> None:
        with lock:
            ran.append(f"{ctx.node_id}:{ctx.name}")

    many = Scheduler(url, table=table, node_id="many", poll_interval=0.2, max_workers=8)
    for name in mine:
        many.add(name, record, schedule=Dynamic(now_then_hourly))
    other = Scheduler(url, table=table, node_id="other", poll_interval=0.2, max_workers=4)
    for handler in ODD:
        other.handler(handler)(record)
    caplog.set_level(logging.INFO, logger="dbscheduler.store")
    with running(many):
        client = Client(url, table=table)
        soon = datetime.now(timezone.utc)
        for i, handler in enumerate(ODD):
            client.schedule_once(f"theirs-{i}", handler, soon)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                if {f"many:{n}" for n in mine} <= set(ran):
                    break
            time.sleep(0.05)
        polled(many, 5)  # picks and polls go on past the stranger rows
        theirs = {t.name: t for t in client.tasks() if t.name.startswith("theirs-")}
    assert sorted(set(mine) - {r.split(":", 1)[1] for r in ran if r.startswith("many:")}) == []
    assert not [r for r in ran if ":theirs-" in r], "a node ran a handler it lacks"
    assert len(theirs) == len(ODD)
    learned = " ".join(r.getMessage() for r in caplog.records
                       if "which this node does not have" in r.getMessage())
    assert all(h in learned for h in ODD), f"not learned: {learned!r}"
    assert all(t.locked_by is None and t.total_attempt <= 1 for t in theirs.values()), (
        "each row of a handler the node lacks is taken (and given back) at most once: "
        + ", ".join(f"{n} token {t.total_attempt} held by {t.locked_by}"
                    for n, t in theirs.items()))
    with running(other):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                if sum(":theirs-" in r for r in ran) >= len(ODD):
                    break
            time.sleep(0.05)
    assert sorted(r for r in ran if ":theirs-" in r) == sorted(
        f"other:theirs-{i}" for i in range(len(ODD)))
