"""Liveness and isolation on real databases: a node whose lease was taken over writes nowhere,
a pick or finish whose answer was lost is reconciled, the sessions the engine opens are
bounded on the server side, and one row the database refuses fails only its own execution."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import FixedDelay, Result, Scheduler, TaskContext
from dbscheduler._store import FinishWrite, Registration, RunRecord, Store
from dbscheduler.client import Client
from dbscheduler.dialects import create_engine, idle_transaction_timeout
from dbscheduler.table import MAX_STATE_BYTES
from tests.helpers import wait_until

LEASE = timedelta(seconds=30)


@pytest.fixture
def stores(migrated: tuple[str, str]) -> Iterator[Callable[[], Store]]:
    """Stores on the migrated table, each with its own engine made as a Scheduler makes it."""
    url, table = migrated
    made: list[Store] = []

    def make() -> Store:
        store = Store(create_engine(url, lease=LEASE), table)
        made.append(store)
        return store

    yield make
    for store in made:
        store.engine.dispose()


def _due_now(name: str) -> Registration:
    return Registration(name, "FixedRate(3600)", lambda now: now - timedelta(seconds=1))


def _expire(store: Store, name: str) -> None:
    """End the row's lease as if its holder had been frozen for longer than it."""
    t = store.table
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(t).where(t.c.queue_name == name).values(next_process_at=t.c.created_at))


def _row(store: Store, name: str) -> Any:
    t = store.table
    with store.engine.connect() as conn:
        return conn.execute(sa.select(t).where(t.c.queue_name == name)).one()


# -- fencing after a takeover ---------------------------------------------------------------
def test_a_thawed_nodes_heartbeat_and_finish_land_nowhere(stores: Callable[[], Store]) -> None:
    a, b = stores(), stores()
    a.register([_due_now("frozen")])
    (ra,) = a.pick("A", 4, LEASE, ["frozen"]).rows
    _expire(a, "frozen")  # A is frozen longer than its lease
    (rb,) = b.pick("B", 4, LEASE, ["frozen"]).rows
    assert rb["prev_locked_by"] == "A" and rb["total_attempt"] == ra["total_attempt"] + 1
    before = _row(b, "frozen")

    # A thaws: its heartbeat and its finish are fenced off, and it learns so.
    assert a.heartbeat("A", LEASE, {ra["id"]: ra["total_attempt"]}) == (set(), set())
    now = a.estimated_now()
    _, stale = a.finish("A", lambda at: [FinishWrite(
        ra["id"], ra["total_attempt"], "success", at + timedelta(hours=1), 0, at,
        payload='{"from": "A"}')])
    assert [w.id for w in stale] == [ra["id"]]
    assert a.release("A", {ra["id"]: ra["total_attempt"]}) == 0
    assert not a.record_lost("A", ra["id"], ra["total_attempt"], 1, "late")
    after = _row(b, "frozen")
    assert after._mapping == before._mapping, "a write of the thawed node landed"
    assert after.locked_by == "B" and after.payload is None and now is not None


# -- answers lost with the connection ---------------------------------------------------------
def _lose_the_answer_once(store: Store, statement: str) -> list[bool]:
    """After the next statement starting with ``statement`` has run (and committed: engine
    writes are autocommit), raise the driver's connection error instead of its answer."""
    fired: list[bool] = []
    dbapi = store.engine.dialect.loaded_dbapi

    @sa.event.listens_for(store.engine, "after_cursor_execute")
    def _cut(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        if not fired and sql.lstrip().upper().startswith(statement):
            fired.append(True)
            raise dbapi.OperationalError("connection lost after the statement ran")

    return fired


def test_a_pick_whose_answer_was_lost_hands_its_rows_over(stores: Callable[[], Store]) -> None:
    a = stores()
    names = ["lost-1", "lost-2"]
    a.register([_due_now(n) for n in names])
    # MariaDB's claiming UPDATE carries its own lock-wait bound: SET STATEMENT … FOR UPDATE.
    first = ("WITH" if a.dialect.name in ("postgresql", "mssql")
             else "SET STATEMENT" if getattr(a.engine.dialect, "is_mariadb", False)
             else "UPDATE")
    fired = _lose_the_answer_once(a, first)
    rows = a.pick("A", 4, LEASE, names).rows
    assert fired, "the fault was not injected"
    assert sorted(r["queue_name"] for r in rows) == names, "claimed rows were not read back"
    for r in rows:
        assert r["attempt"] == 1 and r["prev_locked_by"] is None
    assert {Client(engine=a.engine, table=a.table_name).info(n).locked_by for n in names} == {"A"}
    assert a.pick("A", 4, LEASE, names).rows == []


def test_a_finish_whose_answer_was_lost_is_not_called_refused(
    stores: Callable[[], Store],
) -> None:
    a = stores()
    a.register([_due_now("done")])
    (ra,) = a.pick("A", 4, LEASE, ["done"]).rows

    run = RunRecord("done", ra["total_attempt"], 1, "A", ra["last_started_at"],
                    ra["last_started_at"])

    def writes(at: Any) -> list[FinishWrite]:
        return [FinishWrite(ra["id"], ra["total_attempt"], "success",
                            at + timedelta(hours=1), 0, at, payload='{"n": 1}', run=run)]

    # The finish statement: on PostgreSQL one statement with its run row (WITH … UPDATE …
    # INSERT); elsewhere the run row goes first and the finish is the UPDATE after it.
    finish = "WITH" if a.dialect.name == "postgresql" else "UPDATE"
    fired = _lose_the_answer_once(a, finish)
    with pytest.raises(sa.exc.DBAPIError):
        a.finish("A", writes)
    assert fired
    # The finisher tries again: the row shows the write landed, so it is not "refused".
    _, stale = a.finish("A", writes)
    assert stale == []
    row = _row(a, "done")
    assert row.locked_by is None and row.last_status == "success" and row.payload == '{"n": 1}'
    # Its run row is there, once.
    assert [(r.token, r.status) for r in Client(engine=a.engine, table=a.table_name).runs()] == [
        (ra["total_attempt"], "success")]


# -- server-side bounds ----------------------------------------------------------------------
def test_scheduler_engines_bound_idle_transactions_on_the_server(
    migrated: tuple[str, str], backend: str
) -> None:
    if backend not in ("postgresql", "mysql"):
        pytest.skip(f"{backend}: no server-side idle-transaction setting to check")
    url, table = migrated
    lease = timedelta(seconds=30)
    s = Scheduler(url, table=table, lease=lease)
    try:
        with s._store.engine.connect() as conn:
            if backend == "postgresql":
                shown = conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar()
                assert shown == "5s"
                keep = conn.exec_driver_sql("SHOW tcp_keepalives_idle").scalar()
                assert keep == "5"
            else:
                if "mariadb" not in str(conn.exec_driver_sql("SELECT VERSION()").scalar()).lower():
                    pytest.skip("MySQL has no idle_transaction_timeout (docs/guides/databases.md)")
                value = conn.exec_driver_sql("SELECT @@idle_transaction_timeout").scalar()
                assert int(value) == 5
    finally:
        s.shutdown(timeout=1)
    assert idle_transaction_timeout(lease) == timedelta(seconds=5)
    assert idle_transaction_timeout(timedelta(seconds=3)) == timedelta(seconds=2)  # the floor


def test_a_frozen_open_transaction_is_ended_by_the_server(
    migrated: tuple[str, str], backend: str
) -> None:
    """A session that stops talking inside a transaction loses it, and its row locks, within
    the idle-transaction bound: another session can then update the row."""
    if backend not in ("postgresql", "mysql"):
        pytest.skip(f"{backend}: no server-side idle-transaction bound")
    url, table = migrated
    lease = timedelta(seconds=3)  # bound: the 2 s floor
    frozen = Store(create_engine(url, lease=lease), table)
    other = Store(create_engine(url, lease=lease), table)
    try:
        with other.engine.connect() as conn:
            version = str(conn.exec_driver_sql("SELECT VERSION()").scalar()).lower()
        if backend == "mysql" and "mariadb" not in version:
            pytest.skip("MySQL has no idle_transaction_timeout")
        frozen.register([_due_now("held")])
        t = frozen.table
        transaction = frozen.begin()  # as registration and operations open one
        conn = transaction.__enter__()
        conn.execute(sa.update(t).where(t.c.queue_name == "held").values(attempt=7))
        # ... and this client says nothing more (frozen): the server must end it.
        done = threading.Event()

        def update() -> None:
            with other.engine.begin() as c:
                c.execute(sa.update(t).where(t.c.queue_name == "held").values(attempt=1))
            done.set()

        threading.Thread(target=update, daemon=True).start()
        assert done.wait(timeout=10), "the idle transaction kept its lock"
        with pytest.raises(sa.exc.DBAPIError):
            transaction.__exit__(None, None, None)  # the commit finds the session gone
        assert _row(other, "held").attempt == 1
    finally:
        frozen.engine.dispose()
        other.engine.dispose()


# -- one row never poisons a batch -----------------------------------------------------------
def test_a_write_the_database_refuses_fails_only_its_own_row(
    stores: Callable[[], Store],
) -> None:
    a = stores()
    names = ["ok-1", "poison", "ok-2"]
    a.register([_due_now(n) for n in names])
    rows = {r["queue_name"]: r for r in a.pick("A", 4, LEASE, names).rows}
    replaced: list[FinishWrite] = []

    def writes(at: Any) -> list[FinishWrite]:
        return [
            FinishWrite(r["id"], r["total_attempt"], "success", at + timedelta(hours=1), 0, at,
                        # A lone surrogate: no driver can encode it, every database refuses.
                        payload='"\ud800"' if name == "poison" else f'"{name}"')
            for name, r in rows.items()
        ]

    _, stale = a.finish("A", writes, on_replaced=replaced.append)
    assert stale == []
    assert [w.id for w in replaced] == [rows["poison"]["id"]]
    for name in ("ok-1", "ok-2"):
        row = _row(a, name)
        assert (row.locked_by, row.last_status, row.payload) == (None, "success", f'"{name}"')
    poison = _row(a, "poison")
    assert poison.locked_by is None and poison.last_status == "error"
    assert "refused" in poison.last_error and poison.payload is None


def test_poison_results_fail_only_their_own_execution(
    migrated: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """End to end on one node: a state over the limit, a deeply nested state and an error text
    with NUL and a lone surrogate, finishing together with healthy tasks."""
    # The error line carries the lone surrogate, which pytest-xdist cannot send back in the
    # test's report: this test reads the table, not the log.
    caplog.set_level(logging.CRITICAL, logger="dbscheduler")
    url, table = migrated
    s = Scheduler(url, table=table, lease=timedelta(seconds=5),
                  poll_interval=timedelta(seconds=0.2))
    runs: dict[str, int] = {}
    gate = threading.Barrier(5, timeout=10)

    def task(name: str, result: Callable[[], Any]) -> None:
        @s.task(name, schedule=FixedDelay(0))
        def run(ctx: TaskContext) -> Any:
            runs[name] = runs.get(name, 0) + 1
            if runs[name] == 1:
                with contextlib.suppress(threading.BrokenBarrierError):
                    gate.wait()  # the first runs end together: one finish batch
            return result()

    nested: Any = []
    for _ in range(100_000):
        nested = [nested]

    def raise_odd() -> Any:
        raise RuntimeError("bad \x00 text \ud800 here")

    task("healthy-1", lambda: Result.success(state={"ok": 1}))
    task("healthy-2", lambda: None)
    task("too-big", lambda: Result.success(state="x" * (MAX_STATE_BYTES + 1)))
    task("too-deep", lambda: Result.success(state=nested))
    task("odd-error", raise_odd)
    s.start()
    try:
        wait_until(lambda: all(runs.get(n, 0) >= 3 for n in ("healthy-1", "healthy-2")),
                   timeout=20, what="healthy tasks keep running")
        client = Client(url, table=table)
        try:
            big = client.info("too-big")
            deep = client.info("too-deep")
            odd = client.info("odd-error")
            ok = client.info("healthy-1")
        finally:
            client.close()
        assert ok.state == {"ok": 1} and ok.reenqueue_attempt >= 2
        assert big.last_status == "error" and big.state is None
        assert f"the limit is {MAX_STATE_BYTES:,} bytes" in (big.last_error or "")
        assert deep.last_status == "error" and "nested too deeply" in (deep.last_error or "")
        assert odd.last_status == "error"
        assert "\\x00" in (odd.last_error or "") and "\\ud800" in (odd.last_error or "")
    finally:
        s.shutdown(timeout=5)


def test_info_and_tasks_survive_a_payload_that_is_not_json(stores: Callable[[], Store]) -> None:
    a = stores()
    a.register([_due_now("garbled"), _due_now("fine")])
    t = a.table
    with a.engine.begin() as conn:
        conn.execute(sa.update(t).where(t.c.queue_name == "garbled").values(payload="{nope"))
    client = Client(engine=a.engine, table=a.table_name)
    assert client.info("garbled").state is None
    assert {i.name for i in client.tasks()} == {"garbled", "fine"}
