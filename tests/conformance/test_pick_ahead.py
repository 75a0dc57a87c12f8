"""Picking ahead, on each real database: a pick also takes the rows due within its time
ahead, each starts at its due time and never before it, and a row another node holds is never
taken before its lease is over."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from dbscheduler import FixedRate, Result, Scheduler, TaskContext
from dbscheduler._store import Registration, Store
from dbscheduler.dialects import prepare_engine
from tests.helpers import wait_until

LEASE = timedelta(seconds=30)


@pytest.fixture
def store(migrated: tuple[str, str]) -> Iterator[Store]:
    url, table = migrated
    engine = sa.create_engine(url)
    prepare_engine(engine)
    yield Store(engine, table)
    engine.dispose()


def _register(store: Store, **due_in: float) -> None:
    store.register([
        Registration(name, "fixed-rate 1h",
                     lambda now, s=seconds: now + timedelta(seconds=s))
        for name, seconds in due_in.items()
    ])


def test_a_pick_takes_the_rows_due_within_its_time_ahead(store: Store) -> None:
    _register(store, due=-1.0, soon=5.0, later=60.0)
    names = {"due", "soon", "later"}
    assert [r["queue_name"] for r in store.pick("n1", 5, LEASE, names).rows] == ["due"]
    _register(store, due2=-1.0)
    rows = {r["queue_name"]: r for r in store.pick("n1", 5, LEASE, names | {"due2"},
                                                   ahead=10.0).rows}
    assert set(rows) == {"due2", "soon"}, "due within 10 s: not the one due in a minute"
    soon, due = rows["soon"], rows["due2"]
    # heartbeat_at: the database's time of the pick; last_started_at: when the execution
    # starts, the row's due time for a row picked ahead, the pick's time for one already due.
    assert soon["last_started_at"] == soon["prev_next_process_at"]
    # Still ahead of the pick however long the machine took to get there (a loaded CI run
    # took two seconds from the registration to the pick).
    assert soon["last_started_at"] > soon["heartbeat_at"]
    assert due["last_started_at"] == due["heartbeat_at"] > due["prev_next_process_at"]


def test_a_row_another_node_holds_is_never_taken_ahead_of_its_lease(store: Store) -> None:
    _register(store, held=-1.0)
    (row,) = store.pick("n1", 1, timedelta(seconds=1.5), {"held"}).rows
    assert row["queue_name"] == "held"
    # Its lease ends within the time ahead: still n1's until it does.
    assert store.pick("n2", 1, LEASE, {"held"}, ahead=10.0).rows == []
    time.sleep(1.6)
    (taken,) = store.pick("n2", 1, LEASE, {"held"}, ahead=10.0).rows
    assert (taken["queue_name"], taken["prev_locked_by"]) == ("held", "n1")
    assert taken["last_started_at"] == taken["heartbeat_at"], "over: taken as due, not ahead"


def test_executions_picked_ahead_start_at_their_due_time_never_before(
    migrated: tuple[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Forty tasks due at their own phases over a fifth of a second, as a service's many
    tasks are: picks take rows due within their time ahead, and each function starts at its
    due time by the database's clock (the local servers and SQLite share this clock)."""
    url, table = migrated
    starts: list[tuple[datetime, datetime, float]] = []
    lock = threading.Lock()
    period, count = 0.2, 40
    base = time.time()

    def make(i: int) -> Callable[[TaskContext], Result]:
        phase = base + period * i / count

        def task(ctx: TaskContext) -> Result:
            now = time.time()
            with lock:
                starts.append((ctx.scheduled_at, ctx.started_at, now))
            # Each task on its own phase of the period, from its first run on.
            ahead = max(0, math.floor((now - phase) / period) + 1)
            return Result.success(
                next_at=datetime.fromtimestamp(phase + ahead * period, timezone.utc))
        return task

    scheduler = Scheduler(url, table=table, max_workers=40, lease=5, poll_interval=0.2)
    # Ahead by 80 ms, more than a pick takes even on a loaded machine, so that rows surely are
    # picked ahead; on every database, MySQL's too (its dialect's window is 0).
    monkeypatch.setattr(type(scheduler._store.dialect), "batch_window", 0.08)
    for i in range(count):
        scheduler.add(f"t{i}", make(i), schedule=FixedRate(period))
    scheduler.start()
    try:
        wait_until(lambda: len(starts) >= count, what="the first runs")
        with lock:
            starts.clear()
        wait_until(lambda: len(starts) >= 5 * count, what="five periods of runs")
    finally:
        scheduler.shutdown(timeout=5)
    early = [(s, now) for s, _, now in starts if now < s.timestamp() - 0.0005]
    assert not early, f"{len(early)} of {len(starts)} started before their due time"
    ahead = [1 for s, started, _ in starts if started == s]
    assert ahead, "no row was picked ahead of its due time"
