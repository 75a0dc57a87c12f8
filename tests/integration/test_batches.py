"""Keyed delayed batches on SQLite, PostgreSQL and MariaDB: every rule of the queue, through a
real node and real time (short intervals).

Multi-process guarantees (a node killed mid-delivery, two nodes pushing and delivering at
once) are in ``test_batches_cluster.py``; the HTTP service in ``tests/web/test_queue.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import (
    Client,
    GeometricBackoff,
    LinearBackoff,
    NoRetry,
    Result,
    Scheduler,
    TaskContext,
)
from dbscheduler.table import make_items_table
from tests.helpers import no_keys, polled, wait_until

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])


@dataclass
class Delivery:
    name: str
    attempt: int
    items: list[Any]
    started_at: datetime
    scheduled_at: datetime
    at: float = field(default_factory=time.monotonic)


class Receiver:
    """A batch handler that records every call; ``fail`` and ``gate`` steer it."""

    def __init__(self) -> None:
        self.calls: list[Delivery] = []
        self.lock = threading.Condition()
        self.fail: Callable[[Delivery], bool] = lambda d: False
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def __call__(self, ctx: TaskContext, items: list[Any]) -> Result | None:
        d = Delivery(ctx.name, ctx.attempt, list(items), ctx.started_at, ctx.scheduled_at)
        with self.lock:
            self.calls.append(d)
            self.lock.notify_all()
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(20), "the test never opened the gate"
        if self.fail(d):
            raise RuntimeError("receiver down")
        return None

    def wait(self, n: int, timeout: float = 15) -> list[Delivery]:
        with self.lock:
            assert self.lock.wait_for(lambda: len(self.calls) >= n, timeout), (
                f"expected {n} deliveries, got {self.calls}")
            return list(self.calls)

    def of(self, name: str) -> list[Delivery]:
        with self.lock:
            return [c for c in self.calls if c.name == name]


@pytest.fixture
def node(migrated: tuple[str, str]) -> Iterator[tuple[Scheduler, Receiver]]:
    url, table = migrated
    scheduler = Scheduler(url, table=table, lease=3, poll_interval=0.2, node_id="batch-node")
    receiver = Receiver()
    scheduler.batch_handler("digest", on_failure=LinearBackoff(0.3))(receiver)
    scheduler.start()
    yield scheduler, receiver
    if receiver.gate is not None:
        receiver.gate.set()
    scheduler.shutdown(timeout=5)


def due_of(client: Client, key: str, handler: str = "digest") -> datetime | None:
    found = [b for b in client.batches(handler) if b.key == key]
    return found[0].due_at if found else None


def soon(seconds: float) -> datetime:
    return datetime.now(timezone.utc) + timedelta(seconds=seconds)


def test_items_are_delivered_together_in_push_order(node: tuple[Scheduler, Receiver]) -> None:
    scheduler, receiver = node
    # Due once all 26 pushes are in, with room for a loaded machine (pushes of 50 ms each
    # were seen with the whole suite running).
    at = soon(2.0)
    for i in range(25):
        scheduler.push("ann@example.com", {"n": i}, handler="digest", ontime=at, update="once")
    scheduler.push("bob@example.com", "only one", handler="digest", ontime=at)
    (info,) = [b for b in scheduler.batches("digest") if b.key == "ann@example.com"]
    assert (info.items, info.name, info.running) == (25, "digest/ann@example.com", False)
    calls = receiver.wait(2)
    wait_until(lambda: no_keys(scheduler), what="the delivered keys' rows to go")
    polled(scheduler)  # nothing else comes
    assert sorted((c.name, c.items) for c in receiver.calls) == [
        ("digest/ann@example.com", [{"n": i} for i in range(25)]),
        ("digest/bob@example.com", ["only one"]),
    ]
    assert all(c.attempt == 1 and c.started_at >= at - timedelta(milliseconds=5) for c in calls)
    assert scheduler.batches() == []


def test_a_dash_key_is_never_merged(node: tuple[Scheduler, Receiver]) -> None:
    scheduler, receiver = node
    at = soon(0.5)
    for i in range(3):
        scheduler.push("-alert", i, handler="digest", ontime=at, update="once")
    assert sorted(b.items for b in scheduler.batches()) == [1, 1, 1]
    receiver.wait(3)
    wait_until(lambda: no_keys(scheduler), what="the delivered keys' rows to go")
    assert sorted(c.items for c in receiver.calls) == [[0], [1], [2]]
    names = {c.name for c in receiver.calls}
    assert len(names) == 3 and all(n.startswith("digest/-alert#") for n in names)


def test_update_always_moves_the_due_time_and_once_keeps_it(
    node: tuple[Scheduler, Receiver],
) -> None:
    scheduler, receiver = node
    first, later, earlier = soon(30), soon(60), soon(45)
    scheduler.push("a", 1, handler="digest", ontime=first, update="once")
    scheduler.push("a", 2, handler="digest", ontime=later, update="once")
    assert due_of(scheduler.client, "a") == first  # once: the batch keeps its first time
    scheduler.push("a", 3, handler="digest", ontime=later, update="always")
    assert due_of(scheduler.client, "a") == later
    scheduler.push("a", 4, handler="digest", ontime=earlier.timestamp())  # always, Unix s
    assert abs(due_of(scheduler.client, "a") - earlier) < timedelta(milliseconds=1)
    scheduler.push("a", 5, handler="digest", ontime=first, update="once")
    assert abs(due_of(scheduler.client, "a") - earlier) < timedelta(milliseconds=1)
    # Due now: delivered at once, all five in push order.
    scheduler.push("a", 6, handler="digest")
    (call,) = receiver.wait(1)
    assert call.items == [1, 2, 3, 4, 5, 6]
    # A new batch after a delivery: "once" gives it its own time again.
    wait_until(lambda: no_keys(scheduler), what="the delivered key's row to go")
    scheduler.push("a", 7, handler="digest", ontime=later, update="once")
    assert due_of(scheduler.client, "a") == later


def test_drop_removes_the_pending_items(node: tuple[Scheduler, Receiver]) -> None:
    scheduler, receiver = node
    for i in range(4):
        scheduler.push("k", i, handler="digest", ontime=soon(1.0), update="once")
    for i in range(2):
        scheduler.push("-d", i, handler="digest", ontime=soon(1.0))
    scheduler.push("other", "kept", handler="digest", ontime=soon(1.0))
    assert scheduler.drop("k", handler="digest") == 4
    assert scheduler.drop("-d", handler="digest") == 2
    assert scheduler.drop("k", handler="digest") == 0
    assert [b.key for b in scheduler.batches()] == ["other"]
    (call,) = receiver.wait(1)
    # The dropped keys' rows go by their empty deliveries, calling nothing.
    wait_until(lambda: no_keys(scheduler), what="the dropped keys' rows to go")
    polled(scheduler)
    assert [c.items for c in receiver.calls] == [["kept"]] and call.name == "digest/other"


def test_a_failed_delivery_is_retried_with_the_same_items(
    node: tuple[Scheduler, Receiver],
) -> None:
    scheduler, receiver = node
    receiver.fail = lambda d: d.attempt < 3
    at = soon(0.3)
    scheduler.client.push_many([{"key": "k", "item": i, "handler": "digest", "ontime": at}
                                for i in ("x", "y")])
    calls = receiver.wait(3)
    wait_until(lambda: no_keys(scheduler), what="the key's row to go")  # delivered: no more
    assert [(c.attempt, c.items) for c in receiver.calls] == [
        (1, ["x", "y"]), (2, ["x", "y"]), (3, ["x", "y"])]
    assert calls[1].at - calls[0].at >= 0.25  # LinearBackoff(0.3), not at once


def test_after_a_failed_delivery_the_next_push_sets_the_time_whatever_update_says(
    migrated: tuple[str, str],
) -> None:
    url, table = migrated
    scheduler = Scheduler(url, table=table, lease=3, poll_interval=0.2)
    receiver = Receiver()
    receiver.fail = lambda d: True
    # A long retry: the overwrite, not the retry, decides the next time.
    scheduler.batch_handler("digest", on_failure=LinearBackoff(3600))(receiver)
    with scheduler:
        scheduler.push("k", 1, handler="digest")
        receiver.wait(1)
        wait_until(lambda: scheduler.batches()[0].last_status == "error",
                   what="the failure recorded")
        retry = due_of(scheduler.client, "k")
        assert retry is not None and retry > soon(3000)
        target = soon(120)
        scheduler.push("k", 2, handler="digest", ontime=target, update="once")
        assert due_of(scheduler.client, "k") == target, "the overwrite rule"
        info = scheduler.batches()[0]
        assert (info.attempt, info.items) == (0, 2)
        # The failure is answered: the next "once" push joins without moving the time.
        scheduler.push("k", 3, handler="digest", ontime=soon(10), update="once")
        assert due_of(scheduler.client, "k") == target
        scheduler.drop("k", handler="digest")


def test_items_pushed_during_a_delivery_wait_for_the_next_one(
    node: tuple[Scheduler, Receiver],
) -> None:
    scheduler, receiver = node
    receiver.gate = threading.Event()
    # One write for both: two pushes let a loaded machine's pick come between them.
    scheduler.client.push_many([("k", "before-1", "digest"), ("k", "before-2", "digest")])
    assert receiver.entered.wait(10)
    (info,) = scheduler.batches()
    assert info.running and info.due_at is None
    later = soon(1.5)
    scheduler.push("k", "during-1", handler="digest", ontime=later, update="once")
    scheduler.push("k", "during-2", handler="digest", ontime=soon(0.2), update="once")
    receiver.gate.set()
    wait_until(lambda: not scheduler.batches()[0].running, what="the first delivery to end")
    (info,) = scheduler.batches()
    # The key stays for the items pushed meanwhile, due when their pushes said ("once":
    # the first of them), not at once.
    assert (info.items, info.due_at) == (2, later)
    calls = receiver.wait(2)
    assert [c.items for c in calls] == [["before-1", "before-2"], ["during-1", "during-2"]]
    assert calls[1].started_at >= later - timedelta(milliseconds=5)
    wait_until(lambda: no_keys(scheduler), what="the key's row to go")


def test_always_pushes_during_a_delivery_move_the_next_due_time(
    node: tuple[Scheduler, Receiver],
) -> None:
    scheduler, receiver = node
    receiver.gate = threading.Event()
    scheduler.push("k", 0, handler="digest")
    assert receiver.entered.wait(10)
    scheduler.push("k", 1, handler="digest", ontime=soon(0.1), update="once")
    moved = soon(1.2)
    scheduler.push("k", 2, handler="digest", ontime=moved, update="always")
    scheduler.push("k", 3, handler="digest", ontime=soon(0.1), update="once")
    # Another key's pushes, later in push order, have no say in this key's time.
    scheduler.push("other", "x", handler="digest", ontime=soon(600), update="always")
    receiver.gate.set()
    wait_until(lambda: due_of(scheduler.client, "k") is not None,
               what="the first delivery to end")
    assert due_of(scheduler.client, "k") == moved
    assert [c.items for c in receiver.wait(2)] == [[0], [1, 2, 3]]
    scheduler.drop("other", handler="digest")


def test_bad_input_is_refused_and_nothing_is_written(migrated: tuple[str, str]) -> None:
    url, table = migrated
    with Client(url, table=table) as client:
        naive = datetime(2030, 1, 1)
        cases: list[tuple[dict[str, Any], str]] = [
            ({"key": ""}, "key"),
            ({"key": " padded"}, "key"),
            ({"key": "new\nline"}, "key"),
            ({"key": 42}, "key must be a string"),
            ({"key": "k" * 300}, "UTF-16"),
            ({"handler": "a/b"}, "'/'"),
            ({"handler": ""}, "batch handler"),
            ({"update": "sometimes"}, "update must be 'always' or 'once'"),
            ({"ontime": naive}, "naive"),
            ({"ontime": float("nan")}, "ontime"),
            ({"ontime": -1}, "ontime"),
            ({"ontime": True}, "ontime"),
            ({"ontime": "tomorrow"}, "ontime"),
            ({"item": {1, 2}}, "item"),
            ({"item": float("inf")}, "item"),
        ]
        for change, message in cases:
            args: dict[str, Any] = {"key": "k", "item": 1, "handler": "digest", **change}
            key, item = args.pop("key"), args.pop("item")
            with pytest.raises(ValueError, match=message):
                client.push(key, item, **args)
        with pytest.raises(ValueError, match="'/'"):
            client.drop("k", handler="a/b")
        assert client.batches() == [] and no_keys(client)
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(
                make_items_table(table))).scalar_one() == 0
        engine.dispose()


def test_batch_handlers_that_would_lose_items_are_refused(migrated: tuple[str, str]) -> None:
    url, table = migrated
    scheduler = Scheduler(url, table=table)
    for bad in (NoRetry(), LinearBackoff(1, max_attempts=3),
                GeometricBackoff(1, max_attempts=10)):
        with pytest.raises(ValueError, match="lose its items"):
            scheduler.batch_handler("digest", on_failure=bad)(lambda ctx, items: None)
    with pytest.raises(ValueError, match="two arguments"):
        scheduler.batch_handler("digest")(lambda ctx: None)
    with pytest.raises(ValueError, match="reserved"):
        scheduler.batch_handler("dbscheduler.mine")(lambda ctx, items: None)
    with pytest.raises(ValueError, match="'/'"):
        scheduler.batch_handler("a/b")(lambda ctx, items: None)
    scheduler.batch_handler("digest")(lambda ctx, items: None)
    with pytest.raises(ValueError, match="already registered"):
        scheduler.batch_handler("digest")(lambda ctx, items: None)
    scheduler.engine.dispose()


def test_a_coroutine_batch_handler_is_awaited(migrated: tuple[str, str]) -> None:
    url, table = migrated
    scheduler = Scheduler(url, table=table, poll_interval=0.2)
    got: list[list[Any]] = []
    done = threading.Event()

    @scheduler.batch_handler("digest")
    async def digest(ctx: TaskContext, items: list[Any]) -> None:
        got.append(items)
        done.set()

    with scheduler:
        scheduler.client.push_many([
            {"key": "k", "item": {"a": 1}, "handler": "digest", "ontime": soon(0.3)},
            {"key": "k", "item": None, "handler": "digest", "update": "once"}])
        assert done.wait(10)
        wait_until(lambda: no_keys(scheduler), what="the key's row to go")
    assert got == [[{"a": 1}, None]]
