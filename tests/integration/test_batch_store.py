"""The statements under keyed delayed batches, one at a time, on SQLite, PostgreSQL and
MariaDB: which items a delivery reads, the fence of their removal, and the finish that
deletes a key only when nothing is queued for it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from dbscheduler._engine import faultpoints as _faultpoints
from dbscheduler._store import FinishWrite, Store
from dbscheduler._store.batches import ARRIVED, read_items, remove_delivered
from dbscheduler.batches import drop, push
from dbscheduler.dialects import create_engine

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])

NODE = "node-a"
LEASE = timedelta(seconds=30)


@pytest.fixture
def store(migrated: tuple[str, str]) -> Iterator[Store]:
    url, table = migrated
    engine = sa.create_engine(url)
    yield Store(engine, table)
    engine.dispose()


def pick(store: Store) -> dict[str, object]:
    (row,) = store.pick(NODE, 5, LEASE, ["digest"]).rows
    return dict(row)


def test_a_delivery_reads_only_the_items_pushed_before_its_pick(store: Store) -> None:
    push(store, "k", 1, handler="digest")
    push(store, "k", 2, handler="digest", update="once")
    row = pick(store)
    time.sleep(0.01)  # SQLite's clock has millisecond resolution
    push(store, "k", 3, handler="digest", update="once")  # while the delivery runs
    picked_at = row["last_started_at"]
    assert [t for _, t in read_items(store, "digest/k", picked_at)] == ["1", "2"]  # type: ignore[arg-type]
    assert len(read_items(store, "digest/k", store.db_now())) == 3


def test_the_removal_is_fenced_by_token_node_and_pick_time(store: Store) -> None:
    for i in range(3):
        push(store, "k", i, handler="digest", update="once")
    row = pick(store)
    token, picked_at = int(row["total_attempt"]), row["last_started_at"]  # type: ignore[call-overload]
    ids = [i for i, _ in read_items(store, "digest/k", picked_at)]  # type: ignore[arg-type]
    assert remove_delivered(store, "digest/k", token + 1, NODE, picked_at, ids) == 0  # type: ignore[arg-type]
    assert remove_delivered(store, "digest/k", token, "node-b", picked_at, ids) == 0  # type: ignore[arg-type]
    assert remove_delivered(store, "digest/k", token, NODE,
                            store.db_now() + timedelta(seconds=1), ids) == 0
    assert remove_delivered(store, "digest/k", token, NODE, picked_at, ids[:2]) == 2  # type: ignore[arg-type]
    assert [t for _, t in read_items(store, "digest/k", store.db_now())] == ["2"]


def _finish(store: Store, row: dict[str, object]) -> list[FinishWrite]:
    now = store.db_now()
    _, refused = store.finish(NODE, lambda _: [FinishWrite(
        int(row["id"]), int(row["total_attempt"]), "success", now, 0, now,  # type: ignore[call-overload]
        delete=True, keyed=True)])
    return refused


def test_a_finish_deletes_the_key_when_nothing_is_queued(store: Store) -> None:
    push(store, "k", 1, handler="digest")
    row = pick(store)
    ids = [i for i, _ in read_items(store, "digest/k", row["last_started_at"])]  # type: ignore[arg-type]
    remove_delivered(store, "digest/k", int(row["total_attempt"]), NODE,  # type: ignore[call-overload]
                     row["last_started_at"], ids)  # type: ignore[arg-type]
    assert _finish(store, row) == []
    with store.read() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(store.table)).scalar_one() == 0


def test_a_finish_keeps_the_key_a_push_marked_even_when_it_sees_no_item(store: Store) -> None:
    # What a push landing during the finish statement leaves: the mark on the row, its item
    # not (yet) visible to the statement. The row must stay, or the item would have no row.
    push(store, "k", 1, handler="digest")
    row = pick(store)
    t = store.table
    with store.autocommit() as conn:
        conn.execute(sa.delete(store.items))
        conn.execute(sa.update(t).values(payload=ARRIVED))
    assert _finish(store, row) == []
    with store.read() as conn:
        kept = conn.execute(sa.select(t)).one()
        now = store.now(conn)
    assert (kept.locked_by, kept.payload, kept.last_status) == (None, None, "success")
    assert kept.next_process_at <= now, "nothing queued any more: due now, removed next time"


def test_a_finish_keeps_the_key_for_items_pushed_meanwhile_due_when_they_say(
    store: Store,
) -> None:
    push(store, "k", 1, handler="digest")
    row = pick(store)
    ids = [i for i, _ in read_items(store, "digest/k", row["last_started_at"])]  # type: ignore[arg-type]
    first, moved = store.db_now() + timedelta(hours=1), store.db_now() + timedelta(hours=2)
    push(store, "k", 2, handler="digest", ontime=first, update="once")
    push(store, "k", 3, handler="digest", ontime=moved, update="always")
    push(store, "k", 4, handler="digest", ontime=first, update="once")
    push(store, "other", 5, handler="digest", ontime=moved + timedelta(hours=1))
    remove_delivered(store, "digest/k", int(row["total_attempt"]), NODE,  # type: ignore[call-overload]
                     row["last_started_at"], ids)  # type: ignore[arg-type]
    assert _finish(store, row) == []
    t = store.table
    with store.read() as conn:
        kept = conn.execute(sa.select(t).where(t.c.queue_name == "digest/k")).one()
    assert (kept.locked_by, kept.next_process_at, kept.payload) == (None, moved, None)


def test_once_starts_a_new_batch_on_a_row_that_outlived_its_items(store: Store) -> None:
    # After a drop, the key's idle row waits (due now) for its empty delivery: a "once" push
    # meanwhile is the first item of a new batch and sets the time.
    early = store.db_now() + timedelta(hours=1)
    push(store, "k", 1, handler="digest", ontime=early, update="once")
    assert drop(store, "k", handler="digest") == 1
    later = store.db_now() + timedelta(hours=2)
    push(store, "k", 2, handler="digest", ontime=later, update="once")
    t = store.table
    with store.read() as conn:
        assert conn.execute(sa.select(t.c.next_process_at)).scalar_one() == later
    push(store, "k", 3, handler="digest", ontime=early, update="once")  # joins it
    with store.read() as conn:
        assert conn.execute(sa.select(t.c.next_process_at)).scalar_one() == later


class _Deadlock(Exception):
    """Stands in for the driver's deadlock error: the dialect is told it is transient."""


@pytest.fixture
def node_store(migrated: tuple[str, str]) -> Iterator[Store]:
    """A store on an engine as a node makes it: every statement commits on its own."""
    url, table = migrated
    engine = create_engine(url, lease=LEASE)
    yield Store(engine, table)
    engine.dispose()


def test_a_finish_retried_after_a_transient_error_writes_only_what_had_not_landed(
    node_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = node_store
    # Two deliveries finish in one batch, each key its own statements. The first key's write
    # lands (kept: an item came meanwhile), its row is picked and finished again by other
    # nodes, then the batch meets a deadlock and is retried. Written again, the first write
    # would be refused by its own fence and, read back against a row two tokens on, counted
    # as never landed: its listeners told "nothing written" and, where the run row goes
    # before the finish (all but PostgreSQL), that run row deleted again.
    push(store, "k", 1, handler="digest")
    push(store, "j", 1, handler="digest")
    rows = sorted((dict(r) for r in store.pick(NODE, 5, LEASE, ["digest"]).rows),
                  key=lambda r: str(r["queue_name"]))
    assert [r["queue_name"] for r in rows] == ["digest/j", "digest/k"]
    j, k = rows
    push(store, "k", 2, handler="digest")  # during the delivery: the key stays
    for row in rows:
        ids = [i for i, _ in read_items(store, str(row["queue_name"]), row["last_started_at"])]  # type: ignore[arg-type]
        remove_delivered(store, str(row["queue_name"]), int(row["total_attempt"]), NODE,  # type: ignore[call-overload]
                         row["last_started_at"], ids)  # type: ignore[arg-type]
    t = store.table
    real_transient, real_reached = store.dialect.is_transient, _faultpoints.reached
    monkeypatch.setattr(store.dialect, "is_transient",
                        lambda exc: isinstance(exc.orig, _Deadlock) or real_transient(exc))
    finishes: list[str] = []
    deadlock = []

    def reached(point: str) -> None:
        real_reached(point)
        if point == "finish":
            finishes.append(point)
        if len(finishes) == 1 and not deadlock:
            # The first key's write landed: other nodes move its row on, and the next
            # statement of the batch meets a deadlock.
            with store.autocommit() as conn:
                conn.execute(sa.update(t).where(t.c.id == k["id"]).values(
                    locked_by="node-b", total_attempt=t.c.total_attempt + 2))
            deadlock.append("armed")

    def statement(*_: object) -> None:
        if deadlock == ["armed"]:
            deadlock.append("raised")
            raise sa.exc.OperationalError("DELETE …", None, _Deadlock("deadlock"))

    sa.event.listen(store.engine, "before_cursor_execute", statement)
    monkeypatch.setattr(_faultpoints, "reached", reached)
    now = store.db_now()
    _, refused = store.finish(NODE, lambda _: [FinishWrite(
        int(r["id"]), int(r["total_attempt"]), "success", now, 0, now,  # type: ignore[call-overload]
        delete=True, keyed=True) for r in (k, j)])
    sa.event.remove(store.engine, "before_cursor_execute", statement)
    assert deadlock == ["armed", "raised"]
    assert refused == [], "the write that landed before the deadlock is known to have landed"
    assert len(finishes) == 2, "the retry wrote only the second key"
    with store.read() as conn:
        left = {r.queue_name: r for r in conn.execute(sa.select(t))}
    assert set(left) == {"digest/k"}, "the second key's finish landed on the retry"
    assert (left["digest/k"].locked_by, left["digest/k"].total_attempt) == (
        "node-b", int(k["total_attempt"]) + 2), "the retry left the moved-on row alone"
