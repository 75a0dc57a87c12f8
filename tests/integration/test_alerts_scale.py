"""Lateness alerts at the size real tables reach, on every real database: thousands of late
rows of one handler are read and claimed a bounded page per check, in a bounded number of
statements, raise one aggregated call per handler instead of one per row, are claimed exactly
once by two nodes checking at the same time, and one-off jobs stay out unless asked."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from dbscheduler import Listener, TaskInfo
from dbscheduler._engine.alerts import AlertWatch
from dbscheduler._store import Store
from dbscheduler.listeners import Listeners

if TYPE_CHECKING:
    from dbscheduler import AlertGroup

LATE = 1200
"""Late recurring rows of the handler no running node has: more than two pages."""
ONE_OFFS = 300
OVERDUE_AFTER = timedelta(seconds=60)
MAX_STATEMENTS = 12
"""Per check, whatever the number of late rows: the read, a claim (and its read-back) per
kind, the changed rows read in pages, one look for an open episode per aggregated handler."""


class Recorder(Listener):
    """Every alert hook call, per node."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, timedelta]] = []
        self.groups: list[AlertGroup] = []
        self.lock = threading.Lock()

    def on_overdue(self, info: TaskInfo, late_by: timedelta) -> None:
        with self.lock:
            self.rows.append((info.name, late_by))

    def on_overdue_group(self, group: AlertGroup) -> None:
        with self.lock:
            self.groups.append(group)


class Pager(Listener):
    """An existing user's listener: it knows only ``on_overdue``."""

    def __init__(self) -> None:
        self.pages: list[str] = []

    def on_overdue(self, info: TaskInfo, late_by: timedelta) -> None:
        self.pages.append(info.handler or info.name)


@contextmanager
def node(url: str, table: str, *listeners: object,
         **options: Any) -> Iterator[tuple[AlertWatch, list[int]]]:
    """An alert watch on its own engine (checks run by the test, no thread), and the number
    of statements each check sent."""
    engine = sa.create_engine(url)
    counted = [0]

    @sa.event.listens_for(engine, "before_cursor_execute")
    def count(*_: object) -> None:
        counted[0] += 1

    all_listeners = Listeners()
    for listener in listeners:
        all_listeners.add(listener)
    watch = AlertWatch(Store(engine, table), all_listeners, OVERDUE_AFTER,
                       timedelta(seconds=30), **options)
    per_check: list[int] = []
    original = watch.check

    def check() -> int:
        before = counted[0]
        try:
            return original()
        finally:
            per_check.append(counted[0] - before)

    watch.check = check  # type: ignore[method-assign]
    try:
        yield watch, per_check
    finally:
        engine.dispose()


def fill(url: str, table: str) -> None:
    """Late rows: ``LATE`` recurring ones of ``gone``, ``ONE_OFFS`` one-off jobs of
    ``jobs``, one of ``solo``; all due ten minutes ago, none picked."""
    engine = sa.create_engine(url)
    try:
        t = Store(engine, table).table
        now = Store(engine, table).db_now()
        due = now - timedelta(minutes=10)

        def row(name: str, handler: str, schedule: str) -> dict[str, Any]:
            return {"queue_name": name, "handler": handler, "payload": None,
                    "created_at": now, "next_process_at": due, "attempt": 0,
                    "reenqueue_attempt": 0, "total_attempt": 0, "paused": False,
                    "schedule": schedule, "stop_requested": False, "priority": 0}

        rows = [row(f"gone-{i:05}", "gone", "FixedRate(3600)") for i in range(LATE)]
        rows += [row(f"job-{i:05}", "jobs", f"once {due.isoformat()}") for i in range(ONE_OFFS)]
        rows.append(row("solo", "solo", "FixedRate(3600)"))
        with engine.begin() as conn:
            conn.execute(sa.insert(t), rows)
    finally:
        engine.dispose()


def check_together(*watches: AlertWatch) -> list[int]:
    """One check on each watch, started at the same instant from threads of their own."""
    start = threading.Barrier(len(watches))
    changed = [0] * len(watches)
    errors: list[BaseException] = []

    def run(i: int, watch: AlertWatch) -> None:
        try:
            start.wait(10)
            changed[i] = watch.check()
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate(watches)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    return changed


def test_thousands_of_late_rows_of_one_handler_raise_one_alert_per_handler(
    migrated: tuple[str, str]
) -> None:
    url, table = migrated
    fill(url, table)
    a, b, pager = Recorder(), Recorder(), Pager()
    with node(url, table, a, pager) as (one, one_checks), node(url, table, b) as (two,
                                                                                   two_checks):
        rounds = 0
        while True:
            rounds += 1
            assert rounds <= 10, "the backlog was never claimed"
            if sum(check_together(one, two)) == 0:
                break
        # Every late recurring row was claimed exactly once, by one of the two nodes.
        groups = [g for g in a.groups + b.groups if g.handler == "gone"]
        assert sum(g.count for g in groups) == LATE, [g.count for g in groups]
        assert all(g.kind == "overdue" and g.count <= 500 for g in groups)
        # A page per check: the first group opens the episode, the later ones continue it.
        assert [g.continued for g in groups].count(False) == 1, groups
        opening = next(g for g in groups if not g.continued)
        assert opening.more and opening.first.name == opening.names[0]
        assert opening.late_by is not None and opening.late_by >= timedelta(minutes=9)
        assert opening.one_offs == 0
        # The single late row of another handler is told about on its own.
        assert [name for name, _ in a.rows + b.rows] == ["solo"]
        # One-off jobs in a backlog are no late task by default.
        assert not [g for g in a.groups + b.groups if g.handler == "jobs"]
        # Bounded work per check, whatever the backlog.
        assert max(one_checks + two_checks) <= MAX_STATEMENTS, (one_checks, two_checks)
        assert len(a.groups) + len(a.rows) <= 2 * len(one_checks)
        assert len(b.groups) + len(b.rows) <= 2 * len(two_checks)
    # A listener that knows only on_overdue is paged once for the episode (if its node
    # opened it), never once per row.
    assert Counter(pager.pages)["gone"] <= 1 and len(pager.pages) <= 2, pager.pages
    assert Counter(pager.pages)["gone"] == (0 if opening in b.groups else 1)
    engine = sa.create_engine(url)
    try:
        t = Store(engine, table).table
        with engine.connect() as conn:
            alerted = dict(conn.execute(
                sa.select(t.c.handler, sa.func.count()).where(t.c.alerted_at.is_not(None))
                .group_by(t.c.handler)).all())
    finally:
        engine.dispose()
    assert alerted == {"gone": LATE, "solo": 1}


def test_one_off_jobs_are_alerted_only_when_asked(migrated: tuple[str, str]) -> None:
    url, table = migrated
    fill(url, table)
    seen = Recorder()
    with node(url, table, seen, one_offs=True) as (watch, checks):
        while watch.check():
            pass
    jobs = [g for g in seen.groups if g.handler == "jobs"]
    assert sum(g.count for g in jobs) == ONE_OFFS
    assert all(g.one_offs == g.count for g in jobs)
    assert sum(g.count for g in seen.groups if g.handler == "gone") == LATE
    assert max(checks) <= MAX_STATEMENTS, checks
