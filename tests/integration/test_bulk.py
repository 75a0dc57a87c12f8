"""Bulk creation on every real database: ``schedule_many``, ``schedule_once_many`` and
``push_many`` write the same rows as the one-by-one methods, with one statement per batch,
check every item before writing anything, change nothing when run again, and land a large
batch completely."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import Client, Cron, FixedRate
from dbscheduler._store import StoreBase
from dbscheduler.bulk import PushItem, ScheduleItem

AT = datetime(2030, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc)
KEPT = ("handler", "schedule", "data", "options", "alert_after", "paused", "attempt",
        "reenqueue_attempt", "total_attempt", "locked_by", "payload")


def rows(client: Client, prefix: str) -> dict[str, dict[str, Any]]:
    """The rows whose name starts with ``prefix``, by the rest of the name."""
    t = StoreBase(client.engine, client.table).table
    with client.engine.connect() as conn:
        found = conn.execute(sa.select(t).where(t.c.queue_name.like(prefix + "%"))).mappings()
        return {r["queue_name"][len(prefix):]: dict(r) for r in found}


def same(one: dict[str, Any], many: dict[str, Any], *, times: bool) -> None:
    for column in KEPT + (("next_process_at",) if times else ()):
        assert one[column] == many[column], (column, one[column], many[column])


def test_schedule_many_writes_what_schedule_writes(migrated: tuple[str, str]) -> None:
    url, table = migrated
    with Client(url, table=table) as client:
        specs: list[tuple[str, str, Any, Any, dict[str, Any]]] = [
            ("a", "mail", FixedRate(60), {"n": 1}, {}),
            ("b", "mail", Cron("0 3 * * *", tz="Europe/Berlin"), None, {"priority": 4}),
            ("c", "report", FixedRate(5), [1, "x"], {"group": "g", "alert_after": 90}),
        ]
        for name, handler, schedule, data, options in specs:
            client.schedule(f"one-{name}", handler, schedule, data=data, **options)
        assert client.schedule_many([
            ScheduleItem(f"many-{name}", handler, schedule, data, **options)
            for name, handler, schedule, data, options in specs]) == 3
        one, many = rows(client, "one-"), rows(client, "many-")
        assert set(one) == set(many) == {"a", "b", "c"}
        for name in one:
            same(one[name], many[name], times=name == "b")  # a cron's next time is absolute
        # One-off jobs: tuples, mappings with ISO text; exactly the same due times.
        client.schedule_once("one-j", "mail", AT, data={"to": "ann"}, priority=2)
        client.schedule_once_many([
            {"name": "many-j", "handler": "mail", "at": "2030-05-06T07:08:09.123456Z",
             "data": {"to": "ann"}, "priority": 2}])
        same(rows(client, "one-")["j"], rows(client, "many-")["j"], times=True)


def test_an_existing_row_keeps_its_counters_and_a_running_one_its_lease(
    migrated: tuple[str, str]
) -> None:
    url, table = migrated
    with Client(url, table=table) as client:
        client.schedule_many([("idle", "h", FixedRate(60)), ("busy", "h", FixedRate(60))])
        t = StoreBase(client.engine, client.table).table
        lease = datetime(2031, 1, 1, tzinfo=timezone.utc)
        with client.engine.begin() as conn:
            conn.execute(sa.update(t).values(reenqueue_attempt=7, total_attempt=9))
            conn.execute(sa.update(t).where(t.c.queue_name == "busy").values(
                locked_by="node-x", next_process_at=lease, attempt=1))
        client.schedule_many([("idle", "h2", FixedRate(3600), {"v": 2}),
                              ("busy", "h2", FixedRate(3600), {"v": 2})])
        idle, busy = client.info("idle"), client.info("busy")
        for info in (idle, busy):
            assert (info.handler, info.schedule, info.data) == ("h2", "fixed-rate 3600s",
                                                                {"v": 2})
            assert (info.reenqueue_attempt, info.total_attempt) == (7, 9)
        assert idle.next_process_at > client.db_now() + timedelta(minutes=59)
        assert busy.next_process_at == lease and busy.attempt == 1  # its lease, untouched


def test_every_item_is_checked_before_anything_is_written(migrated: tuple[str, str]) -> None:
    url, table = migrated
    with Client(url, table=table) as client:
        good = ("fine", "h", AT)
        for items, message in (
            ([good, ("late", "h", datetime(2030, 1, 1))], r"item 1 \('late'\): .*aware"),
            ([good, ("", "h", AT)], r"item 1 \(''\): name"),
            ([good, ("x", "dbscheduler.h", AT)], r"item 1 \('x'\): .*reserved"),
            ([good, ("y", "h", AT, None, "extra")], r"item 1 \('y'\): a tuple item"),
            ([good, {"name": "z", "handler": "h"}], r"item 1 \('z'\): .*missing at"),
            ([good, ("fine", "h", AT)], r"item 1 \('fine'\): the name is also item 0's"),
            ([good, {"name": "p", "handler": "h", "at": AT, "priority": "high"}],
             r"item 1 \('p'\): .*priority"),
        ):
            with pytest.raises(ValueError, match=message):
                client.schedule_once_many(items)
        with pytest.raises(ValueError, match=r"item 0 \('r'\): schedule: a datetime"):
            client.schedule_many([("r", "h", AT)])
        with pytest.raises(ValueError, match=r"item 1 \('k'\): update must be"):
            client.push_many([("k", 1, "digest"), PushItem("k", 2, "digest", update="never")])
        assert client.tasks() == []


def count_statements(engine: sa.Engine) -> list[str]:
    seen: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def record(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        words = statement.upper().split()
        seen.append("WRITE" if "INSERT" in words or words[0] in ("UPDATE", "MERGE")
                    else words[0])

    return seen


def test_a_large_batch_lands_completely_with_one_statement_per_batch_and_again_idempotent(
    migrated: tuple[str, str]
) -> None:
    url, table = migrated
    engine = sa.create_engine(url)
    try:
        with Client(engine=engine, table=table) as client:
            n = 20_000
            items = [(f"job-{i:05}", "mail", AT + timedelta(seconds=i % 600), {"i": i})
                     for i in range(n)]
            seen = count_statements(engine)
            assert client.schedule_once_many(items) == n
            batch = client._store.dialect.upsert_rows
            writes = [s for s in seen if s == "WRITE"]
            assert len(writes) == -(-n // batch), seen[:10]
            assert len(seen) <= 2 * len(writes) + 2, seen[:10]  # + the clock, the wake-ups
            assert client.counts().total == n
            before = rows(client, "job-")
            assert client.schedule_once_many(items) == n  # again: the same rows
            after = rows(client, "job-")
            assert client.counts().total == n
            for name in ("00000", "12345", "19999"):
                assert before[name]["id"] == after[name]["id"]
                same(before[name], after[name], times=True)
            assert after["12345"]["next_process_at"] == AT + timedelta(seconds=12345 % 600)
    finally:
        engine.dispose()


def test_push_many_queues_what_push_queues(migrated: tuple[str, str]) -> None:
    url, table = migrated
    soon = datetime.now(timezone.utc) + timedelta(hours=1)
    pushes: list[dict[str, Any]] = [
        {"key": "ann", "item": {"n": 1}, "ontime": soon, "update": "once"},
        {"key": "bob", "item": {"n": 2}, "ontime": soon + timedelta(minutes=5)},
        {"key": "ann", "item": {"n": 3}, "ontime": soon + timedelta(minutes=9),
         "update": "once"},
        {"key": "bob", "item": {"n": 4}, "ontime": soon + timedelta(minutes=7)},
        {"key": "-solo", "item": {"n": 5}, "ontime": soon},
        {"key": "cat", "item": None, "ontime": soon, "data": {"d": 1}},
    ]
    with Client(url, table=table) as client:
        for p in pushes:
            client.push(p["key"], p["item"], handler="one", ontime=p["ontime"],
                        update=p.get("update", "always"), data=p.get("data"))
        assert client.push_many([{**p, "handler": "many"} for p in pushes]) == len(pushes)
        one = {(b.key if not b.key.startswith("-") else "-"): b for b in client.batches("one")}
        many = {(b.key if not b.key.startswith("-") else "-"): b
                for b in client.batches("many")}
        assert set(one) == set(many) == {"ann", "bob", "-", "cat"}
        for key in one:
            assert one[key].items == many[key].items, key
            assert one[key].due_at == many[key].due_at, key
        # Idempotent in what a push means: pushing again queues the items again.
        client.push_many([("ann", {"n": 6}, "many")])
        assert {b.key: b.items for b in client.batches("many")}["ann"] == 3
        items = StoreBase(client.engine, client.table).items
        with client.engine.connect() as conn:
            order = conn.execute(sa.select(items.c.item).where(
                items.c.task_name == "many/ann").order_by(items.c.id)).scalars().all()
        assert order == ['{"n": 1}', '{"n": 3}', '{"n": 6}'] or order == [
            '{"n":1}', '{"n":3}', '{"n":6}']
        assert client.info("many/cat").data == {"d": 1}


def test_a_batch_of_pushes_is_one_insert_and_one_upsert_on_the_server(
    migrated: tuple[str, str], backend: str
) -> None:
    """Counted by the server where it counts per session (MariaDB): a driver may split what
    SQLAlchemy sends as one execution into a statement per row."""
    if backend != "mysql":
        pytest.skip("the server's own statement counters are read on MariaDB")
    url, table = migrated
    engine = sa.create_engine(url, poolclass=sa.pool.StaticPool)  # one session throughout
    try:
        with Client(engine=engine, table=table) as client:
            def inserts() -> int:
                with engine.connect() as conn:
                    found = dict(conn.execute(sa.text(
                        "SHOW SESSION STATUS LIKE 'Com_insert%'")).all())
                return sum(int(v) for v in found.values())

            before = inserts()
            client.push_many([(f"user-{i % 300}", {"i": i}, "digest") for i in range(900)])
            assert inserts() - before == 2  # the items, the keys' rows
            before = inserts()
            client.schedule_once_many([(f"job-{i}", "mail", AT) for i in range(900)])
            assert inserts() - before == 1
    finally:
        engine.dispose()
