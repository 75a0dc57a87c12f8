"""Execution controls inside one node, on every real database: priority on a saturated node,
misfire, jitter, timeouts, group limits changed at run time, fenced transactions."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import (
    Client,
    FixedDelay,
    FixedRate,
    LeaseLost,
    Outcome,
    Scheduler,
    TaskContext,
)
from tests.helpers import polled


@dataclass
class Recorder:
    """Finished executions, in order, as the node's listener saw them."""

    outcomes: list[tuple[str, str]] = field(default_factory=list)
    done: threading.Condition = field(default_factory=threading.Condition)

    def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
        with self.done:
            self.outcomes.append((ctx.name, outcome.status))
            self.done.notify_all()

    def wait(self, count: int, timeout: float = 15) -> list[tuple[str, str]]:
        with self.done:
            assert self.done.wait_for(lambda: len(self.outcomes) >= count, timeout), (
                self.outcomes)
            return list(self.outcomes)


@pytest.fixture
def node(migrated: tuple[str, str]) -> Iterator[tuple[Scheduler, Client, Recorder]]:
    url, table = migrated
    scheduler = Scheduler(url, table=table, max_workers=1, poll_interval=0.2, lease=5)
    recorder = Recorder()
    scheduler.add_listener(recorder)
    client = Client(url, table=table)
    yield scheduler, client, recorder
    scheduler.shutdown(timeout=5)
    client.close()


def test_a_saturated_node_takes_higher_priority_first_then_earliest_due(
    node: tuple[Scheduler, Client, Recorder],
) -> None:
    scheduler, client, recorder = node
    ran: list[str] = []

    @scheduler.handler("rec")
    def rec(ctx: TaskContext) -> None:
        ran.append(ctx.name)

    now = client.db_now()
    # Due order is the reverse of the priority order: only the priority can explain the runs.
    for name, priority, ago in [("low-1", 0, 50), ("low-2", 0, 40), ("mid", 2, 30),
                                ("high-1", 5, 20), ("high-2", 5, 10)]:
        client.schedule_once(name, "rec", now - timedelta(seconds=ago), priority=priority)
    assert client.info("high-1").options == {"priority": 5}
    scheduler.start()  # one worker: it picks one row at a time
    recorder.wait(5)
    assert ran == ["high-1", "high-2", "mid", "low-1", "low-2"]


def test_misfire_skip_runs_nothing_late_and_run_runs_once(
    node: tuple[Scheduler, Client, Recorder],
) -> None:
    scheduler, client, recorder = node
    ran: list[str] = []
    scheduler.handler("rec")(lambda ctx: ran.append(ctx.name))
    now = client.db_now()
    client.schedule("late-skip", "rec", FixedRate(3600), misfire="skip", grace=5)
    client.schedule("late-run", "rec", FixedRate(3600))
    client.schedule("timely-skip", "rec", FixedRate(3600), misfire="skip", grace=5)
    client.reschedule("late-skip", now - timedelta(seconds=30))
    client.reschedule("late-run", now - timedelta(seconds=30))
    client.reschedule("timely-skip", now - timedelta(seconds=1))
    scheduler.start()
    assert sorted(recorder.wait(3)) == [
        ("late-run", "success"), ("late-skip", "skipped"), ("timely-skip", "success")]
    assert sorted(ran) == ["late-run", "timely-skip"]  # the skipped one never ran
    skipped = client.info("late-skip")
    assert skipped.last_status == "skipped" and not skipped.running
    assert skipped.next_process_at > now + timedelta(seconds=3000)  # moved on, once


def test_jitter_delays_every_next_time_within_its_bounds(
    node: tuple[Scheduler, Client, Recorder],
) -> None:
    scheduler, client, recorder = node
    for i in range(12):
        client.schedule(f"j-{i}", "rec", FixedRate(60), jitter=30)
    first = [client.info(f"j-{i}") for i in range(12)]
    delays = [(t.next_process_at - t.created_at - timedelta(seconds=60)).total_seconds()
              for t in first]
    assert all(0 <= d < 30 for d in delays), delays
    assert max(delays) - min(delays) > 5, "the first times are spread"
    # ... and after each run.
    for i in range(8):
        scheduler.add(f"d-{i}", lambda: None, schedule=FixedDelay(100), jitter=50)
    scheduler.start()
    for i in range(8):
        client.trigger(f"d-{i}")
    recorder.wait(8)
    after = [client.info(f"d-{i}") for i in range(8)]
    gaps = []
    for t in after:
        assert t.last_finished_at is not None
        gaps.append((t.next_process_at - t.last_finished_at).total_seconds() - 100)
    # FixedDelay counts from the execution's end, last_finished_at is when its finish was
    # written: a loaded machine wrote one 0.7 s later. A negative jitter would show as much
    # as 50 s early.
    assert all(-5 <= g < 50.5 for g in gaps), gaps
    assert max(gaps) - min(gaps) > 5, gaps


def test_a_thread_task_is_asked_to_stop_at_its_timeout_and_recorded_timeout(
    node: tuple[Scheduler, Client, Recorder],
) -> None:
    scheduler, client, recorder = node
    saw_stop: list[float] = []

    def slow(ctx: TaskContext) -> None:
        began = time.monotonic()
        if ctx.stop_requested.wait(10):
            saw_stop.append(time.monotonic() - began)

    scheduler.add("slow", slow, schedule=FixedRate(3600), timeout=0.5)
    scheduler.start()
    client.trigger("slow")
    assert recorder.wait(1) == [("slow", "timeout")]
    # At its 0.5 s timeout, not at the end of the 5 s lease: a bound a busy machine meets.
    assert len(saw_stop) == 1 and 0.4 <= saw_stop[0] < 4, saw_stop
    info = client.info("slow")
    assert (info.last_status, info.last_error) == ("timeout", "timed out after 0.5 s")


def test_a_group_limit_change_applies_at_the_next_pick(migrated: tuple[str, str]) -> None:
    url, table = migrated
    scheduler = Scheduler(url, table=table, max_workers=4, poll_interval=0.2, lease=5)
    running: list[int] = []
    peak: list[int] = [0]
    lock = threading.Lock()

    @scheduler.handler("work")
    def work(ctx: TaskContext) -> None:
        with lock:
            running.append(1)
            peak[0] = max(peak[0], len(running))
        time.sleep(0.2)
        with lock:
            running.pop()

    recorder = Recorder()
    scheduler.add_listener(recorder)
    with Client(url, table=table) as client:
        client.set_group_limit("batch", 0)  # held
        now = client.db_now()
        for i in range(4):
            client.schedule_once(f"b-{i}", "work", now, group="batch")
        scheduler.start()
        try:
            polled(scheduler)
            assert peak[0] == 0 and recorder.outcomes == [], "a group held at 0 runs nothing"
            assert [(g.name, g.limit, g.running, g.tasks) for g in client.groups()] == [
                ("batch", 0, 0, 4)]
            client.set_group_limit("batch", 1)
            recorder.wait(4)
            assert peak[0] == 1, "one at a time, though four workers were free"
            client.set_group_limit("batch", None)
            assert client.groups() == []  # no limit and no rows left: nothing to show
        finally:
            scheduler.shutdown(timeout=5)


# -- fenced transactions ----------------------------------------------------------------------
@pytest.fixture
def effects(migrated: tuple[str, str]) -> Iterator[tuple[sa.Engine, sa.Table]]:
    url, table = migrated
    engine = sa.create_engine(url)
    fx = sa.Table(f"{table}_fx", sa.MetaData(), sa.Column("n", sa.Integer))
    fx.create(engine)
    yield engine, fx
    fx.drop(engine)
    engine.dispose()


def test_fenced_commits_while_the_lease_holds_and_refuses_once_it_moved(
    node: tuple[Scheduler, Client, Recorder], effects: tuple[sa.Engine, sa.Table],
) -> None:
    scheduler, client, recorder = node
    engine, fx = effects
    results: dict[str, Any] = {}

    def steal(ctx: TaskContext) -> None:
        # Another node takes the row over (its pick bumps the token) while this one works.
        t = sa.table(scheduler.table, sa.column("queue_name"), sa.column("total_attempt"))
        with engine.begin() as conn:
            conn.execute(sa.update(t).where(t.c.queue_name == ctx.name)
                         .values(total_attempt=t.c.total_attempt + 1))
        try:
            with ctx.fenced(engine) as conn:
                conn.execute(fx.insert().values(n=2))
        except LeaseLost as exc:
            results["lost"] = str(exc)

    def honest(ctx: TaskContext) -> None:
        with ctx.fenced(engine) as conn:
            conn.execute(fx.insert().values(n=1))
        try:
            with ctx.fenced(engine) as conn:
                conn.execute(fx.insert().values(n=3))
                raise RuntimeError("changed my mind")
        except RuntimeError:
            pass
        with engine.connect() as busy:
            busy.execute(sa.select(fx.c.n)).all()  # autobegun: a transaction in progress
            try:
                with ctx.fenced(busy):
                    pass
            except ValueError as exc:
                results["busy"] = str(exc)

    scheduler.add("honest", honest, schedule=FixedRate(3600))
    scheduler.add("steal", steal, schedule=FixedRate(3600))
    scheduler.start()
    client.trigger("honest")
    recorder.wait(1)
    client.trigger("steal")
    recorder.wait(2)
    with engine.connect() as conn:
        assert conn.execute(sa.select(fx.c.n)).scalars().all() == [1]
    assert "no longer holds its lease" in results["lost"]
    assert "already has a transaction in progress" in results["busy"]


def test_a_takeover_during_a_fenced_transaction_refuses_its_commit(
    node: tuple[Scheduler, Client, Recorder], effects: tuple[sa.Engine, sa.Table],
) -> None:
    # The fenced block holds no lock on the task's row (so this node's heartbeat and other
    # nodes' picks never wait for it); the check at commit refuses a block whose row another
    # execution took meanwhile.
    scheduler, client, recorder = node
    engine, fx = effects
    outcome: dict[str, BaseException | None] = {}

    def takeover(name: str) -> None:
        t = sa.table(scheduler.table, sa.column("queue_name"), sa.column("total_attempt"))
        other = sa.create_engine(engine.url)
        try:
            with other.begin() as conn:
                done = conn.execute(sa.update(t).where(t.c.queue_name == name)
                                    .values(total_attempt=t.c.total_attempt + 1)).rowcount
            outcome["taken"] = None if done == 1 else AssertionError("no row taken over")
        except Exception as exc:  # seen by the test, not lost in the thread
            outcome["taken"] = exc
        finally:
            other.dispose()

    # On SQLite the block's first write takes the file's write lock, which no other writer
    # passes until the block ends (the lease running out, not a takeover, would then refuse
    # the commit): there the row is taken over before that write.
    sqlite = engine.dialect.name == "sqlite"

    def steal(name: str) -> None:
        thief = threading.Thread(target=takeover, args=(name,))
        thief.start()
        thief.join(10)
        assert not thief.is_alive(), "the takeover waited for the fenced block"
        taken[name] = True

    taken: dict[str, bool] = {}

    def hold(ctx: TaskContext) -> None:
        try:
            with ctx.fenced(engine) as conn:
                if sqlite:
                    steal(ctx.name)
                conn.execute(fx.insert().values(n=1))
                if not sqlite:
                    steal(ctx.name)
            outcome["error"] = None
        except LeaseLost as exc:
            outcome["error"] = exc

    scheduler.add("hold", hold, schedule=FixedRate(3600))
    scheduler.start()
    client.trigger("hold")
    recorder.wait(1)
    assert outcome["taken"] is None, f"the takeover failed: {outcome['taken']!r}"
    assert isinstance(outcome["error"], LeaseLost)
    with engine.connect() as conn:
        assert conn.execute(sa.select(fx.c.n)).scalars().all() == []
