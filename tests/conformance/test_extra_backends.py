"""The dialect contract on a real server: SQL Server and Oracle (and, for comparison, the rest).

``tests/unit/test_dialect_sql.py`` checks every statement's text without a server; this file
runs them. Each test takes ``any_backend`` (sqlite, postgresql, mysql, mssql, oracle): SQL
Server and Oracle run when a server is found (``DBSCHEDULER_TEST_MSSQL_URL`` /
``DBSCHEDULER_TEST_ORACLE_URL``, the local port, or testcontainers with
``mcr.microsoft.com/mssql/server:2022-latest`` / ``gvenzl/oracle-free:slim`` when a Docker engine
answers) and are skipped with the reason otherwise (``pytest -rs``). Running the same checks on
SQLite, PostgreSQL and MariaDB proves the tests themselves.

The engine's multi-process suite (``test_cluster.py``) runs on SQL Server and Oracle too: its
``backend`` fixture includes them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import TaskNotFound
from dbscheduler._store import FinishWrite, Registration, Store
from dbscheduler._store.handlers import handler_params
from dbscheduler.client import Client
from dbscheduler.dialects import prepare_engine
from dbscheduler.migrate import upgrade, version_table_for
from dbscheduler.table import make_table, split_table_name
from tests.conftest import backend_url
from tests.databases import unique_table

LEASE = timedelta(seconds=30)
SLACK = timedelta(seconds=5)
"""Tolerance between two readings of the database clock in one test."""


# -- fixtures -------------------------------------------------------------------------------
@pytest.fixture
def server_url(any_backend: str, tmp_path: Path) -> str:
    """A URL for ``any_backend``; skips with the reason when no server is reachable."""
    return backend_url(any_backend, tmp_path)

def ops(store: Store) -> Client:
    """The operations on ``store``'s table, through the public client on the same engine."""
    return Client(engine=store.engine, table=store.table_name)



def _drop(engine: sa.Engine, table: str) -> None:
    # Through SQLAlchemy, not "DROP TABLE IF EXISTS", which Oracle before 23ai rejects.
    make_table(table).drop(engine, checkfirst=True)
    sa.Table(version_table_for(table), sa.MetaData(), schema=split_table_name(table)[0]).drop(
        engine, checkfirst=True
    )


@pytest.fixture
def migrated_table(server_url: str) -> Iterator[tuple[str, str]]:
    """``(url, table)``: a fresh table created by the migrations, dropped afterwards."""
    table = unique_table()
    engine = sa.create_engine(server_url)
    try:
        upgrade(engine, table)
        yield server_url, table
    finally:
        _drop(engine, table)
        engine.dispose()


def _store(url: str, table: str) -> Store:
    """A Store set up as a Scheduler sets up its own (per-connection configuration)."""
    engine = sa.create_engine(url)
    store = Store(engine, table)
    prepare_engine(engine)
    return store


@pytest.fixture
def stores(migrated_table: tuple[str, str]) -> Iterator[Callable[[], Store]]:
    """Make Stores on the table, each with its own engine, as separate nodes would have."""
    made: list[Store] = []

    def make() -> Store:
        store = _store(*migrated_table)
        made.append(store)
        return store

    yield make
    for store in made:
        store.engine.dispose()


def _due_now(name: str) -> Registration:
    return Registration(name, "FixedRate(3600)", lambda now: now - timedelta(seconds=1))


def _in_an_hour(name: str) -> Registration:
    return Registration(name, "FixedRate(3600)", lambda now: now + timedelta(hours=1))


def _make_due(store: Store, name: str) -> None:
    """Expire whatever lease the row has: what happens when its node vanishes."""
    t = store.table
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(t).where(t.c.queue_name == name).values(next_process_at=t.c.created_at))


def _aware_utc(value: object) -> datetime:
    assert isinstance(value, datetime) and value.utcoffset() == timedelta(0), value
    return value


# -- schema ---------------------------------------------------------------------------------
def test_migrated_table_is_usable_and_migrating_again_changes_nothing(
    stores: Callable[[], Store], migrated_table: tuple[str, str]
) -> None:
    store = stores()
    store.check_schema()
    upgrade(store.engine, migrated_table[1])
    store.check_schema()
    assert ops(store).tasks() == []


# -- registration ---------------------------------------------------------------------------
def test_nodes_registering_at_the_same_instant_leave_one_row_per_name(
    stores: Callable[[], Store],
) -> None:
    names = [f"job-{i}" for i in range(12)]
    nodes = [stores() for _ in range(4)]
    barrier = threading.Barrier(len(nodes))
    errors: list[BaseException] = []

    def start(store: Store) -> None:
        try:
            barrier.wait(timeout=30)
            store.register([_in_an_hour(n) for n in names])
        except BaseException as exc:  # reported below, with the backend's own message
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in nodes]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors, errors
    tasks = ops(nodes[0]).tasks()
    assert sorted(t.name for t in tasks) == sorted(names)
    assert len({t.id for t in tasks}) == len(names), "identity values are distinct"


def test_a_changed_schedule_moves_an_idle_task_and_keeps_its_state(
    stores: Callable[[], Store],
) -> None:
    store = stores()
    store.register([_in_an_hour("report")])
    before = ops(store).info("report")
    moved = store.db_now() + timedelta(days=3)
    store.register([Registration("report", "Cron(0 3 * * *)", lambda now: moved)])
    after = ops(store).info("report")
    assert after.id == before.id and after.created_at == before.created_at
    assert after.schedule == "Cron(0 3 * * *)"
    assert after.next_process_at == moved  # a datetime bound in a CASE, to the microsecond


# -- the pick -------------------------------------------------------------------------------
def test_a_second_picker_skips_rows_the_first_holds_without_waiting(
    any_backend: str, stores: Callable[[], Store]
) -> None:
    if any_backend in ("sqlite", "mysql", "oracle"):
        pytest.skip("no SKIP LOCKED in the pick: it waits for a concurrent pick statement "
                    "(never for more), then skips the rows it took")
    a, b = stores(), stores()
    names = ["p1", "p2", "p3"]
    a.register([_due_now(n) for n in names])
    t = a.table
    unpaused = t.c.paused == False  # noqa: E712

    def pick_b(out: list[Any]) -> None:
        # The dialect's pick alone, on B's own connection and transaction: on SQL Server
        # without READ_COMMITTED_SNAPSHOT a plain read (the store's name list, the poll)
        # would briefly wait for A's uncommitted update; the locked read must not.
        with b.engine.connect() as conn, conn.begin():
            out.append(b.dialect.pick(conn, t, where=unpaused, limit=5, lease=LEASE,
                                      node_id="B", claim="b" * 32,
                                      params=handler_params(b, names)))

    with a.engine.connect() as conn, conn.begin():
        held = a.dialect.pick(conn, t, where=unpaused, limit=1, lease=LEASE, node_id="A",
                              claim="a" * 32, params=handler_params(a, names))
        assert len(held) == 1
        result: list[Any] = []
        picker = threading.Thread(target=pick_b, args=(result,), daemon=True)
        picker.start()
        picker.join(timeout=20)
        assert not picker.is_alive(), (
            f"{any_backend}: the second picker waited for the row the first one holds "
            "(no SKIP LOCKED / READPAST)")
    taken_by_b = {r["queue_name"] for r in result[0]}
    assert held[0]["queue_name"] not in taken_by_b, "two pickers got the same row"
    # SQL Server may hold every due row its plan read for A's TOP (a scan + sort on a tiny
    # table), and PostgreSQL's per-handler walks lock up to the pick's limit of each name
    # before the limit over all of them applies (released when the pick's statement ends,
    # as it does in autocommit; here A keeps its transaction open): so B may get fewer, and
    # once A is done, nothing is left behind.
    rest = b.pick("B", 5, LEASE, names).rows
    assert taken_by_b | {r["queue_name"] for r in rest} | {held[0]["queue_name"]} == set(names)
    assert b.pick("C", 5, LEASE, names).rows == [], "every row is leased"


def test_pick_heartbeat_and_finish_are_fenced(stores: Callable[[], Store]) -> None:
    a, b = stores(), stores()
    a.register([_due_now("fenced")])
    now = a.db_now()
    (ra,) = a.pick("A", 4, LEASE, ["fenced"]).rows
    assert ra["prev_locked_by"] is None
    assert ra["attempt"] == 1 and ra["total_attempt"] == 1
    started = _aware_utc(ra["last_started_at"])
    assert abs(started - now) < SLACK, "the start is the database clock, in UTC"
    # What the pick wrote and does not return.
    stored = ops(a).info("fenced")
    assert (stored.locked_by, stored.total_attempt) == ("A", 1)
    assert stored.last_started_at == started
    assert abs(_aware_utc(stored.next_process_at) - (started + LEASE)) < timedelta(seconds=1)
    assert abs(_aware_utc(stored.heartbeat_at) - started) < timedelta(seconds=1)

    alive, stop = a.heartbeat("A", LEASE, {ra["id"]: 1})
    assert (alive, stop) == ({ra["id"]}, set())
    assert _aware_utc(ops(a).info("fenced").heartbeat_at) >= started

    _make_due(a, "fenced")  # A's node "vanished": its lease is over
    (rb,) = b.pick("B", 4, LEASE, ["fenced"]).rows
    assert rb["total_attempt"] == 2 and rb["attempt"] == 2
    assert rb["prev_locked_by"] == "A"
    assert rb["prev_last_started_at"] == started

    assert a.heartbeat("A", LEASE, {ra["id"]: 1}) == (set(), set()), "A learns it lost the lease"
    _, stale = a.finish("A", lambda at: [FinishWrite(ra["id"], 1, "success", at, 0, at)])
    assert len(stale) == 1, "A's finish must change nothing"
    assert ops(a).info("fenced").locked_by == "B"

    assert b.record_lost("B", rb["id"], 2, 2, "node A vanished")
    state = {"text": "é€ 😀 " * 1200, "n": 1}  # > 4000 bytes, beyond the BMP: NVARCHAR(max)/CLOB
    next_at = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc)
    _, stale = b.finish("B", lambda at: [FinishWrite(
        rb["id"], 2, "success", next_at, 0, at, payload=json.dumps(state, ensure_ascii=False))])
    assert stale == []
    done = ops(b).info("fenced")
    assert done.locked_by is None and done.last_status == "success"
    assert done.attempt == 0 and done.reenqueue_attempt == 1 and done.total_attempt == 2
    assert done.next_process_at == next_at
    assert done.state == state
    assert done.last_error == "node A vanished", "a success keeps the last failure's text"


def test_release_makes_the_row_due_at_once_and_gives_the_attempt_back(
    stores: Callable[[], Store],
) -> None:
    a, b = stores(), stores()
    a.register([_due_now("released")])
    (ra,) = a.pick("A", 1, LEASE, ["released"]).rows
    assert a.release("A", {ra["id"]: ra["total_attempt"]}) == 1
    info = ops(a).info("released")
    assert info.locked_by is None and info.attempt == 0
    assert info.next_process_at <= a.db_now()
    (rb,) = b.pick("B", 1, LEASE, ["released"]).rows
    assert rb["prev_locked_by"] is None and rb["attempt"] == 1


def test_cancel_reaches_the_running_execution_through_its_heartbeat(
    stores: Callable[[], Store],
) -> None:
    store = stores()
    store.register([_due_now("long")])
    (row,) = store.pick("A", 1, LEASE, ["long"]).rows
    assert ops(store).cancel("long") is True
    assert store.heartbeat("A", LEASE, {row["id"]: row["total_attempt"]}) == (
        {row["id"]}, {row["id"]})


# -- operations -----------------------------------------------------------------------------
def test_operations_on_case_sensitive_unicode_names(stores: Callable[[], Store]) -> None:
    store = stores()
    names = ["Report", "report", "tâche-ü"]
    store.register([_in_an_hour(n) for n in names])
    assert sorted(t.name for t in ops(store).tasks()) == sorted(names), "names are case-sensitive"

    ops(store).trigger("Report")
    assert ops(store).info("Report").next_process_at <= store.db_now()
    assert ops(store).info("report").next_process_at > store.db_now(), "only the exact name moved"

    at = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    ops(store).reschedule("tâche-ü", at)
    back = ops(store).info("tâche-ü").next_process_at
    assert back == at and back.utcoffset() == timedelta(0)

    ops(store).trigger("report")
    ops(store).pause("report")
    assert ops(store).info("report").paused is True
    # Both are due now; the paused one is never picked.
    assert [r["queue_name"] for r in store.pick("A", 5, LEASE, names).rows] == ["Report"]
    ops(store).resume("report")
    assert [r["queue_name"] for r in store.pick("A", 5, LEASE, names).rows] == ["report"]

    assert ops(store).cancel("tâche-ü") is False, "idle: nothing to cancel"
    ops(store).delete("tâche-ü")
    with pytest.raises(TaskNotFound):
        ops(store).info("tâche-ü")


def test_name_filters_longer_than_one_in_list(stores: Callable[[], Store]) -> None:
    store = stores()
    t = store.table
    now = store.db_now()
    names = [f"n{i:04d}" for i in range(1_150)]
    with store.engine.begin() as conn:
        conn.execute(sa.insert(t), [
            {"queue_name": n, "created_at": now, "next_process_at": now, "attempt": 0,
             "reenqueue_attempt": 0, "total_attempt": 0, "paused": False,
             "stop_requested": False}
            for n in names
        ])
    chosen = [*names[:1_050], "absent"]  # longer than SQL Server's and Oracle's IN lists
    count = sa.select(sa.func.count()).select_from(t)
    with store.engine.connect() as conn:
        inside = conn.execute(count.where(store.dialect.names_in(t.c.queue_name, chosen)))
        outside = conn.execute(
            count.where(sa.not_(store.dialect.names_in(t.c.queue_name, chosen))))
        assert (inside.scalar_one(), outside.scalar_one()) == (1_050, 100)
