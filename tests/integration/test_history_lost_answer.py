"""The run history tells the truth when the connection dies during a finish.

Two nodes share a table and run a task back to back (``FixedDelay(0)``); the server-side
session of one of their connections is killed (``pg_terminate_backend``, MariaDB ``KILL``,
SQLite's connection closed) right after a statement of the finish has committed, so its
answer is lost: the node cannot tell whether it landed, and by the time it looks, the row
may have been picked and finished again by the other node. Afterwards every execution has
exactly one run row with its true status, the listeners were told what was written, and the
task's row agrees with the history. The same for batch deliveries: items delivered means a
successful run, never an error or ``lost`` one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dbscheduler import FixedDelay, Outcome, Scheduler, TaskContext
from dbscheduler._engine import faultpoints as _faultpoints
from dbscheduler._store import FinishWrite, RunRecord, Store
from dbscheduler._store.batches import read_items, remove_delivered
from dbscheduler.batches import push
from dbscheduler.context import Status
from dbscheduler.dialects.types import to_utc
from tests.harness.inprocess import seed
from tests.helpers import wait_until

pytestmark = pytest.mark.slow

KILLS = 3
"""Connections killed at each point."""
EVERY = 4
"""Killed at every EVERY-th time a point is reached."""


class Killer:
    """Kills the connection that ran the statement a fault point follows, then uses it, so
    the engine sees the real error of a connection lost before the answer came."""

    def __init__(self, url: str, points: tuple[str, ...]) -> None:
        self.backend = sa.make_url(url).get_backend_name()
        self.admin = sa.create_engine(url, poolclass=sa.pool.NullPool)
        self.points = points
        self.seen = dict.fromkeys(points, 0)
        self.kills = dict.fromkeys(points, 0)
        self.last = threading.local()
        self.lock = threading.Lock()

    def done(self) -> bool:
        return all(n >= KILLS for n in self.kills.values())

    def executed(self, conn: Connection, *_: Any) -> None:
        self.last.conn = conn

    def reached(self, point: str) -> None:
        if point not in self.points:
            return
        with self.lock:
            self.seen[point] += 1
            if self.kills[point] >= KILLS or self.seen[point] % EVERY:
                return
            self.kills[point] += 1
        conn: Connection = self.last.conn
        self.kill(conn)
        conn.exec_driver_sql("SELECT 1")  # raises: the connection is gone
        raise AssertionError("the killed connection still answered")

    def kill(self, conn: Connection) -> None:
        if self.backend == "sqlite":
            conn.connection.dbapi_connection.close()  # type: ignore[union-attr]
            return
        if self.backend == "postgresql":
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            with self.admin.begin() as admin:
                admin.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            return
        session = conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar()
        with self.admin.begin() as admin:
            admin.exec_driver_sql(f"KILL CONNECTION {int(session)}")  # type: ignore[arg-type]


@contextmanager
def killing(url: str, points: tuple[str, ...],
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Killer]:
    killer = Killer(url, points)
    real = _faultpoints.reached

    def reached(point: str) -> None:
        real(point)
        killer.reached(point)

    sa.event.listen(Engine, "after_cursor_execute", killer.executed)
    monkeypatch.setattr(_faultpoints, "reached", reached)
    try:
        yield killer
    finally:
        monkeypatch.setattr(_faultpoints, "reached", real)
        sa.event.remove(Engine, "after_cursor_execute", killer.executed)
        killer.admin.dispose()


class Recorder:
    """What the nodes' task functions and listeners saw, by (task, token)."""

    def __init__(self) -> None:
        self.started: dict[tuple[str, int], str] = {}
        self.told: dict[tuple[str, int], list[Outcome]] = {}
        self.lease_lost: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
        with self.lock:
            self.told.setdefault((ctx.name, ctx.total_attempt), []).append(outcome)

    def on_lease_lost(self, ctx: TaskContext) -> None:
        with self.lock:
            self.lease_lost.append((ctx.name, ctx.total_attempt))


Key = tuple[str, int, datetime]
"""An execution: task name, token, start (a batch key's row deleted and pushed to again
starts over at token 1)."""


def _runs(url: str, table: str) -> dict[Key, list[tuple[str, str]]]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        runs = sa.Table(f"{table}_runs", sa.MetaData(), autoload_with=engine)
        with engine.connect() as conn:
            out: dict[Key, list[tuple[str, str]]] = {}
            for r in conn.execute(sa.select(runs.c.task_name, runs.c.token, runs.c.started_at,
                                            runs.c.status, runs.c.node_id)):
                started = to_utc(r.started_at)
                assert started is not None
                out.setdefault((r.task_name, int(r.token), started), []).append(
                    (r.status, r.node_id))
            return out
    finally:
        engine.dispose()


def _pending(url: str, table: str) -> list[Any]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(
                f"SELECT queue_name, total_attempt, locked_by, next_process_at, attempt, "
                f"payload, last_status FROM {table} WHERE queue_name LIKE 'digest/%'")).all()
            items = conn.execute(sa.text(f"SELECT task_name, id FROM {table}_items")).all()
        return [*map(tuple, rows), *map(tuple, items)]
    finally:
        engine.dispose()


def _nodes(url: str, table: str, recorder: Recorder) -> list[Scheduler]:
    nodes = []
    for n in ("a", "b"):
        s = Scheduler(url, table=table, node_id=f"node-{n}", lease=3, poll_interval=0.1,
                      max_workers=2)

        def work(ctx: TaskContext, node: str = f"node-{n}") -> None:
            with recorder.lock:
                recorder.started[(ctx.name, ctx.total_attempt)] = node

        s.add("t", work, schedule=FixedDelay(0))
        s.add_listener(recorder)
        nodes.append(s)
    return nodes


@pytest.mark.parametrize("backend", ["postgresql", "mysql", "sqlite"])
def test_every_execution_has_one_true_run_row_when_the_finish_loses_its_answer(
        migrated: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    url, table = migrated
    recorder = Recorder()
    nodes = _nodes(url, table, recorder)
    with killing(url, ("finish", "finish_history"), monkeypatch) as killer:
        if sa.make_url(url).get_backend_name() == "postgresql":
            # The run row is part of the finish's own statement: one point to kill at.
            killer.kills["finish_history"] = KILLS
        for s in nodes:
            s.start()
        try:
            wait_until(killer.done, 60, "every kill")
            count = len(recorder.started)
            wait_until(lambda: len(recorder.started) >= count + 20, 30, "executions after")
        finally:
            for s in nodes:
                s.shutdown(timeout=10)
    runs = _runs(url, table)
    started = {k: v for k, v in recorder.started.items() if k[0] == "t"}
    task_runs = {k[:2]: v for k, v in runs.items() if k[0] == "t"}
    assert len(started) > KILLS * 2
    wrong = {k: (node, task_runs.get(k), recorder.told.get(k)) for k, node in started.items()
             if task_runs.get(k) != [("success", node)]
             or [o.next_at is not None for o in recorder.told.get(k, [])] != [True]}
    assert not wrong, f"executions whose run rows or listeners do not tell the truth: {wrong}"
    assert set(task_runs) == set(started), "a run row for an execution that never started"
    assert not recorder.lease_lost, "no lease was lost, whatever the heartbeat could not tell"
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            row = conn.execute(sa.text(
                f"SELECT locked_by, reenqueue_attempt, total_attempt, last_status FROM {table} "
                "WHERE queue_name = 't'")).one()
    finally:
        engine.dispose()
    assert row.locked_by is None
    assert row.last_status == "success"
    assert row.reenqueue_attempt == len(started), "the row counts every landed success"
    assert row.total_attempt >= max(token for _, token in started)


@pytest.mark.parametrize("backend", ["postgresql", "mysql", "sqlite"])
def test_a_delivery_whose_items_were_removed_is_a_successful_run_when_answers_are_lost(
        migrated: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    url, table = migrated
    delivered: dict[Key, list[int]] = {}
    lock = threading.Lock()
    nodes = []
    for n in ("a", "b"):
        s = Scheduler(url, table=table, node_id=f"node-{n}", lease=3, poll_interval=0.1,
                      max_workers=2)

        def deliver(ctx: TaskContext, items: list[Any]) -> None:
            with lock:
                delivered[(ctx.name, ctx.total_attempt, ctx.started_at)] = [
                    int(i) for i in items]

        s.batch_handler("digest")(deliver)
        nodes.append(s)
    pushed = 0
    with killing(url, ("delivered", "finish", "finish_history"), monkeypatch) as killer:
        if sa.make_url(url).get_backend_name() == "postgresql":
            killer.kills["finish_history"] = KILLS
        for s in nodes:
            s.start()
        try:
            while not killer.done() and pushed < 2000:
                # Keys delivered one push at a time (a key starting with "-" is never merged)
                # and merged keys, pushed as fast as they are delivered.
                nodes[0].push(f"-{pushed}" if pushed % 2 else f"k{pushed % 4}", pushed,
                              handler="digest")
                pushed += 1
                if pushed % 8 == 0:
                    with lock:
                        count = sum(len(v) for v in delivered.values())
                    wait_until(lambda c=count: sum(len(v) for v in delivered.values()) > c,
                               10, "a delivery")
            assert killer.done(), f"kills: {killer.kills} after {pushed} pushes"
            deadline = time.monotonic() + 30
            while sum(len(v) for v in delivered.values()) < pushed:
                assert time.monotonic() < deadline, (
                    f"not every item was delivered within 30 s: {_pending(url, table)}")
                time.sleep(0.05)
        finally:
            for s in nodes:
                s.shutdown(timeout=10)
    runs = _runs(url, table)
    items_in: dict[int, list[Key]] = {}
    for key, items in delivered.items():
        for item in items:
            items_in.setdefault(item, []).append(key)
    assert sorted(items_in) == list(range(pushed))
    twice = {i: keys for i, keys in items_in.items() if len(keys) != 1}
    assert not twice, f"items delivered more than once: {twice}"
    wrong = {k: runs.get(k) for k in delivered if [s for s, _ in runs.get(k, [])] != ["success"]}
    assert not wrong, f"deliveries whose run row is not one success: {wrong}"


# -- the read-back itself, once the row has moved on by two picks ----------------------------
LEASE = timedelta(seconds=30)


def _due_now(store: Store, name: str) -> None:
    t = store.table
    with store.autocommit() as conn:
        conn.execute(sa.update(t).where(t.c.queue_name == name)
                     .values(next_process_at=store.db_now() - timedelta(seconds=1)))


def _pick(store: Store, node: str) -> Mapping[str, Any]:
    _due_now(store, "t")
    (row,) = store.pick(node, 1, LEASE, ["t"]).rows
    return row


def _write(store: Store, row: Mapping[str, Any], node: str,
           status: Status = "success") -> FinishWrite:
    now = store.db_now()
    return FinishWrite(int(row["id"]), int(row["total_attempt"]), status, now, 0, now,
                       run=RunRecord("t", int(row["total_attempt"]), int(row["attempt"]), node,
                                     row["last_started_at"], row["last_started_at"]))


def _finish(store: Store, node: str, write: FinishWrite) -> list[FinishWrite]:
    return store.finish(node, lambda _: [write])[1]


@pytest.mark.parametrize("backend", ["postgresql", "mysql", "sqlite"])
def test_a_landed_finish_read_back_two_picks_later_is_landed(migrated: tuple[str, str]) -> None:
    url, table = migrated
    engine = sa.create_engine(url)
    try:
        store = Store(engine, table)
        seed(url, table, "t")
        mine = _write(store, _pick(store, "node-a"), "node-a")
        assert _finish(store, "node-a", mine) == []
        # Picked and finished again by another node, and picked once more, while node-a
        # waited to reconnect: its finish is written again and refused by its fence.
        other = _write(store, _pick(store, "node-b"), "node-b")
        assert _finish(store, "node-b", other) == []
        _pick(store, "node-b")
        assert _finish(store, "node-a", mine) == [], "a landed finish is not called refused"
        key = ("t", mine.token, to_utc(mine.run.started_at))  # type: ignore[union-attr]
        assert _runs(url, table)[key] == [("success", "node-a")], "its run row stays"
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql", "mysql", "sqlite"])
def test_a_finish_that_never_landed_read_back_two_picks_later_is_refused(
        migrated: tuple[str, str]) -> None:
    url, table = migrated
    engine = sa.create_engine(url)
    try:
        store = Store(engine, table)
        seed(url, table, "t")
        row = _pick(store, "node-a")
        mine = _write(store, row, "node-a")
        # Its lease ran out before its finish could be written: node-b takes the row over,
        # records the execution lost, finishes its own and picks again.
        taken = _pick(store, "node-b")
        assert taken["prev_locked_by"] == "node-a"
        assert mine.run is not None
        assert store.record_lost("node-b", int(taken["id"]), int(taken["total_attempt"]), 1,
                                 "node node-a vanished", mine.run)
        assert _finish(store, "node-b", _write(store, taken, "node-b")) == []
        _pick(store, "node-b")
        assert _finish(store, "node-a", mine) == [mine], "a finish that never landed is refused"
        key = ("t", mine.token, to_utc(mine.run.started_at))
        assert _runs(url, table)[key] == [("lost", "node-a")], "its one run row is the lost one"
    finally:
        engine.dispose()


@pytest.mark.parametrize("lost_answer", [False, True], ids=["answered", "removal answer lost"])
@pytest.mark.parametrize("backend", ["postgresql", "mysql", "sqlite"])
def test_a_delivery_that_removed_its_items_is_a_success_though_its_finish_came_too_late(
        migrated: tuple[str, str], monkeypatch: pytest.MonkeyPatch, lost_answer: bool) -> None:
    """With ``lost_answer``, the connection of the removal dies after the delete committed:
    the removal is read back, and counted once (counted twice, the delivery was not known to
    have removed its items, and its run row stayed ``lost``)."""
    url, table = migrated
    engine = sa.create_engine(url)
    kills = ExitStack()
    if lost_answer:
        killer = kills.enter_context(killing(url, ("delivered",), monkeypatch))
        killer.seen["delivered"] = EVERY - 1  # the next one is killed
    try:
        store = Store(engine, table)
        push(store, "k", 1, handler="digest")
        t = store.table
        with store.autocommit() as conn:
            conn.execute(sa.update(t).values(
                next_process_at=store.db_now() - timedelta(seconds=1)))
        (row,) = store.pick("node-a", 1, LEASE, ["digest"]).rows
        name, token = str(row["queue_name"]), int(row["total_attempt"])
        started = row["last_started_at"]
        ids = [i for i, _ in read_items(store, name, started)]
        assert remove_delivered(store, name, token, "node-a", started, ids) == 1
        if lost_answer:
            assert killer.kills == {"delivered": 1}
        kills.close()
        # The items are delivered and removed; then node-a stalls past its lease, and node-b
        # takes the key over and records the execution lost before node-a's finish comes.
        with store.autocommit() as conn:
            conn.execute(sa.update(t).values(
                next_process_at=store.db_now() - timedelta(seconds=1)))
        (taken,) = store.pick("node-b", 1, LEASE, ["digest"]).rows
        run = RunRecord(name, token, 1, "node-a", started, started)
        assert store.record_lost("node-b", int(taken["id"]), int(taken["total_attempt"]), 1,
                                 "node node-a vanished", run)
        now = store.db_now()
        late = FinishWrite(int(row["id"]), token, "success", now, 0, now, delete=True, run=run,
                           keyed=True)
        assert _finish(store, "node-a", late) == [late], "its finish is refused"
        assert _runs(url, table)[(name, token, to_utc(started))] == [("success", "node-a")], (
            "the delivery delivered its items: its run row says success, not lost")
    finally:
        kills.close()
        engine.dispose()
