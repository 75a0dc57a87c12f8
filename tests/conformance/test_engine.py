"""The engine in one process against each real database: what it writes, and when."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import (
    Cron,
    FixedDelay,
    FixedRate,
    LinearBackoff,
    Outcome,
    Result,
    Scheduler,
    SchemaMissing,
    TaskContext,
    TaskInfo,
)
from tests.helpers import polled, wait_until


@pytest.fixture
def make(migrated: tuple[str, str]) -> Iterator[Callable[..., Scheduler]]:
    url, table = migrated
    made: list[Scheduler] = []

    def factory(**kw: Any) -> Scheduler:
        kw.setdefault("lease", 2)
        kw.setdefault("poll_interval", 0.2)
        s = Scheduler(url, table=table, **kw)
        made.append(s)
        return s

    yield factory
    for s in made:
        s.shutdown(timeout=5)


def test_state_is_persisted_between_runs(make: Callable[..., Scheduler]) -> None:
    s = make()
    seen: list[Any] = []

    @s.task("counter", schedule=FixedDelay(0))
    def counter(ctx: TaskContext) -> Result:
        seen.append(ctx.state)
        return Result.success(state={"n": (ctx.state or {"n": 0})["n"] + 1, "ü": "ß"})

    s.start()
    wait_until(lambda: len(seen) >= 5, what="five runs")
    s.shutdown()
    assert seen[:3] == [None, {"n": 1, "ü": "ß"}, {"n": 2, "ü": "ß"}]
    info = s.info("counter")
    assert info.state["n"] == info.reenqueue_attempt == len(seen)
    assert info.last_status == "success" and not info.running and info.attempt == 0


def test_errors_are_recorded_and_retried_per_occurrence(make: Callable[..., Scheduler]) -> None:
    s = make()
    attempts: list[int] = []

    @s.task("flaky", schedule=FixedRate(3600),
            on_failure=LinearBackoff(timedelta(milliseconds=50), max_attempts=3))
    def flaky(ctx: TaskContext) -> None:
        attempts.append(ctx.attempt)
        raise ValueError("x" * 5000)

    s.start()
    s.trigger("flaky")
    wait_until(lambda: len(attempts) >= 3 and s.info("flaky").attempt == 0, what="3 attempts")
    polled(s)  # a fourth attempt, had one been planned, would have started by now
    info = s.info("flaky")
    assert attempts == [1, 2, 3], "three tries, then the next occurrence (an hour away)"
    assert info.last_status == "error" and info.attempt == 0
    assert info.last_error is not None and info.last_error.startswith("ValueError: xxx")
    assert len(info.last_error) <= 2000
    assert info.next_process_at > datetime.now(timezone.utc) + timedelta(minutes=50)


def test_result_error_and_unserialisable_state(make: Callable[..., Scheduler]) -> None:
    s = make()
    s.add("soft", lambda: Result.error("upstream said 503"), schedule=FixedRate(3600))
    s.add("bad-state", lambda: Result.success(state={"when": object()}), schedule=FixedRate(3600))
    s.start()
    s.trigger("soft")
    s.trigger("bad-state")
    wait_until(lambda: all(s.info(n).last_status for n in ("soft", "bad-state")))
    assert s.info("soft").last_error == "upstream said 503"
    bad = s.info("bad-state")
    assert bad.last_status == "error" and bad.state is None
    assert bad.last_error is not None and "not JSON-serialisable" in bad.last_error
    assert not bad.running


def test_changed_schedule_applies_at_once(make: Callable[..., Scheduler]) -> None:
    first = make()
    first.add("report", lambda: None, schedule=Cron("0 3 * * *"))
    first.start()
    first.shutdown()
    before = first.info("report")
    same = make()
    same.add("report", lambda: None, schedule=Cron("0 3 * * *"))
    same.start()
    same.shutdown()
    assert same.info("report") == before, "re-registering the same schedule changes nothing"
    changed = make()
    changed.add("report", lambda: None, schedule=Cron("*/5 * * * *"))
    changed.start()
    changed.shutdown()
    after = changed.info("report")
    assert after.id == before.id and after.schedule != before.schedule
    assert after.next_process_at < before.next_process_at or after.next_process_at.minute % 5 == 0
    assert after.next_process_at - datetime.now(timezone.utc) <= timedelta(minutes=5)


def test_rows_of_unknown_tasks_are_never_picked(make: Callable[..., Scheduler]) -> None:
    other = make()
    other.add("theirs", lambda: None, schedule=FixedRate(3600))
    other.start()
    other.shutdown()
    other.trigger("theirs")
    mine = make()
    ran: list[str] = []
    mine.add("mine", lambda ctx: ran.append(ctx.name), schedule=FixedDelay(0.05))
    mine.start()
    wait_until(lambda: len(ran) >= 5)
    mine.shutdown()
    theirs = mine.info("theirs")
    assert set(ran) == {"mine"}
    assert theirs.total_attempt == 0 and theirs.locked_by is None


def test_paused_tasks_are_not_picked_until_resumed(make: Callable[..., Scheduler]) -> None:
    s = make()
    ran: list[float] = []
    s.add("p", lambda: ran.append(time.time()), schedule=FixedRate(3600))
    s.start()
    s.pause("p")
    s.trigger("p")
    polled(s)
    assert ran == [] and s.info("p").paused
    resumed = time.time()
    s.resume("p")
    wait_until(lambda: len(ran) == 1, what="runs after resume")
    assert ran[0] >= resumed


def test_a_task_longer_than_its_lease_keeps_it(make: Callable[..., Scheduler]) -> None:
    # 1.5 s: a heartbeat every 0.5 s, with room for a loaded machine to send one late.
    a, b = make(node_id="a", lease=1.5), make(node_id="b", lease=1.5)
    starts: list[tuple[str, int]] = []
    release = threading.Event()

    def long(ctx: TaskContext) -> None:
        starts.append((ctx.node_id, ctx.total_attempt))
        release.wait(10)  # released by the test once the window is over

    for s in (a, b):
        s.add("long", long, schedule=FixedDelay(3600))
        s.start()
    s.trigger("long")
    wait_until(lambda: starts, what="first start")
    time.sleep(3.2)  # the window is the point: two leases go by while it runs
    polled(a)
    polled(b)  # and both nodes have looked at the row since
    assert len(starts) == 1, f"someone took over a live lease: {starts}"
    release.set()


def test_lost_execution_is_reported_and_recovered(
    make: Callable[..., Scheduler], migrated: tuple[str, str]
) -> None:
    url, table = migrated
    s = make()
    ran: list[TaskContext] = []
    lost: list[TaskInfo] = []
    s.add("orphan", lambda ctx: ran.append(ctx), schedule=FixedRate(3600))
    s.start()
    s.shutdown()
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # a node "ghost" picked it and vanished; its lease has expired
        conn.execute(sa.text(
            f"UPDATE {table} SET locked_by = 'ghost', attempt = 1, total_attempt = 7, "
            "next_process_at = created_at, last_started_at = created_at, "
            "last_error = 'an earlier failure' WHERE queue_name = 'orphan'"
        ))
    engine.dispose()
    t = make()

    class Spy:
        def on_lost_execution(self, info: TaskInfo) -> None:
            lost.append(info)

    t.add_listener(Spy())
    t.add("orphan", lambda ctx: ran.append(ctx), schedule=FixedRate(1))
    t.start()
    wait_until(lambda: lost and ran, what="lost reported and task run")
    assert lost[0].locked_by == "ghost" and lost[0].name == "orphan"
    # The whole row, although a pick returns only what running it takes.
    assert lost[0].last_error == "an earlier failure"
    # Token 8 is the recovering pick; when the lost slot's next grid point (created_at + 1 s)
    # was still ahead, that pick put the row back to it and pick 9 ran it.
    assert ran[0].total_attempt in (8, 9)
    wait_until(lambda: t.info("orphan").last_status == "success", what="finish written")
    info = t.info("orphan")
    # No longer the ghost's: free, or already this node's next run (due every second).
    assert info.locked_by in (None, t.node_id), info


def test_listeners_that_raise_do_not_break_the_scheduler(make: Callable[..., Scheduler]) -> None:
    s = make()
    finished: list[Outcome] = []

    class Broken:
        def on_started(self, ctx: TaskContext) -> None:
            raise RuntimeError("listener bug")

        def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
            raise RuntimeError("listener bug")

    class Good:
        def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
            finished.append(outcome)

    s.add_listener(Broken())
    s.add_listener(Good())
    s.add("x", lambda: None, schedule=FixedDelay(0.05))
    s.start()
    wait_until(lambda: len(finished) >= 3)
    assert finished[0].status == "success" and finished[0].next_at is not None


def test_coroutine_tasks_run_on_the_scheduler_loop(make: Callable[..., Scheduler]) -> None:
    import asyncio

    s = make()
    loops: list[int] = []

    async def job(ctx: TaskContext) -> None:
        await asyncio.sleep(0.01)
        loops.append(id(asyncio.get_running_loop()))

    s.add("async", job, schedule=FixedDelay(0))
    s.start()
    wait_until(lambda: len(loops) >= 3)
    assert len(set(loops)) == 1


def test_lifecycle_errors(make: Callable[..., Scheduler]) -> None:
    s = make()
    s.add("a", lambda: None, schedule=FixedRate(60))
    with pytest.raises(ValueError, match="already registered"):
        s.add("a", lambda: None, schedule=FixedRate(60))
    s.start()
    with pytest.raises(RuntimeError, match="starts once"):
        s.start()
    s.shutdown()
    with pytest.raises(RuntimeError, match="starts once"):
        s.start()


def test_server_database_without_table_says_run_migrate(
    db_url: str, backend: str, table_name: str
) -> None:
    if backend == "sqlite":
        pytest.skip("the embedded SQLite default creates its table")
    s = Scheduler(db_url, table=table_name)
    s.add("a", lambda: None, schedule=FixedRate(60))
    with pytest.raises(SchemaMissing, match="dbscheduler migrate"):
        s.start()
    with pytest.raises(SchemaMissing, match="dbscheduler migrate"):
        s.tasks()


def test_a_row_added_behind_the_name_cache_is_given_back(migrated: tuple[str, str]) -> None:
    from dbscheduler._store import Registration, Store
    from dbscheduler.client import Client
    from dbscheduler.dialects import prepare_engine

    def ops(store: Store) -> Client:
        return Client(engine=store.engine, table=store.table_name)

    url, table = migrated
    engine = sa.create_engine(url)
    store, other = Store(engine, table), Store(engine, table)
    prepare_engine(engine)
    later = timedelta(hours=1)
    store.register([Registration("mine", "fixed-rate 1h", lambda now: now + later)])
    assert store.pick("node", 5, timedelta(seconds=30), {"mine"}).rows == []  # caches: all known
    other.register([Registration("theirs", "fixed-rate 1h", lambda now: now)])  # due at once
    before = ops(store).info("theirs")
    assert store.pick("node", 5, timedelta(seconds=30), {"mine"}).rows == []
    after = ops(store).info("theirs")
    assert (after.locked_by, after.next_process_at, after.attempt, after.last_started_at) == (
        None, before.next_process_at, 0, None)
    assert store.pick("node", 5, timedelta(seconds=30), {"mine"}).rows == []
    assert ops(store).info("theirs").total_attempt <= 1, "filtered by name from then on"
    engine.dispose()
