"""Every statement of keyed delayed batches, on SQL Server and Oracle, checked without a
server (the recorder of ``test_dialect_sql.py``): pushes, a delivery's read and removal, the
finish that keeps a key for items pushed meanwhile, drop, and the listing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from dbscheduler._store import FinishWrite
from dbscheduler._store.batches import read_items, remove_delivered
from dbscheduler.batches import build_push, drop, list_batches, push
from dbscheduler.migrate import offline_sql
from dbscheduler.table import COLUMNS, ITEM_COLUMNS
from tests.unit.test_dialect_sql import (
    NODE,
    NOW,
    Reply,
    Rig,
    _executed,
    _param_values,
    _rig,
    row,
)

pytestmark = pytest.mark.filterwarnings("error::sqlalchemy.exc.SAWarning")

KEY = "ann@Example.com"
ONTIME = datetime(2031, 7, 15, 8, 0, tzinfo=timezone.utc)


@pytest.fixture(params=["mssql", "oracle"])
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    r = _rig(str(request.param))
    yield r
    r.engine.dispose()


def _items_reply(r: Rig) -> None:
    r.db.on(r"^SELECT \S+\.id, \S+\.item\s+FROM scheduled_tasks_items",
            Reply(["id", "item"], [(3, '{"n": 1}'), (5, None)]))


def _workout(r: Rig) -> None:
    s = r.store
    push(s, KEY, {"n": 2031}, handler="digest", ontime=ONTIME, update="once")
    push(s, "-solo", "boom", handler="digest")
    r.db.on(r"^UPDATE scheduled_tasks SET next_process_at=CASE", Reply(rowcount=0))
    push(s, KEY, {"n": 2032}, handler="digest", ontime=ONTIME.timestamp())
    _items_reply(r)
    assert read_items(s, "digest/" + KEY, ONTIME) == [(3, '{"n": 1}'), (5, None)]
    assert remove_delivered(s, "digest/" + KEY, 12, NODE, ONTIME, [3, 5]) == 1
    s.finish(NODE, lambda now: [FinishWrite(9, 12, "success", now, 0, now, delete=True,
                                            keyed=True)])
    r.db.on(r"^SELECT DISTINCT", Reply(["task_name"], [("digest/-solo#0011223344556677",)]))
    drop(s, KEY, handler="digest")
    drop(s, "-solo", handler="digest")
    r.db.on(r"GROUP BY", Reply(
        ["task_name", "handler", "batch_key", "n", "first_pushed", "last_pushed",
         *COLUMNS],
        [("digest/" + KEY, "digest", KEY, 2, NOW, NOW,
          *row("digest/" + KEY, handler="digest", data='{"url": "x"}', attempt=1))],
    ))
    (info,) = list_batches(s, "digest")
    assert (info.key, info.items, info.attempt, info.data) == (KEY, 2, 1, {"url": "x"})
    assert info.due_at == NOW.replace(tzinfo=timezone.utc)


def test_every_batch_statement_binds_its_values(rig: Rig) -> None:
    _workout(rig)
    calls = _executed(rig.db)
    for call in calls:
        for literal in (KEY, "2031", "2032", NODE, "digest", "boom", "solo"):
            assert literal not in call.sql, f"{literal!r} was written into the SQL: {call.sql}"
    sent = [v for call in calls for v in _param_values(call)]
    for value in ("digest/" + KEY, KEY, '{"n": 2031}', '"boom"', NODE):
        assert value in sent, value


def test_no_batch_statement_uses_syntax_of_other_databases(rig: Rig) -> None:
    _workout(rig)
    for text in rig.db.sql():
        assert not re.search(r"\bLIMIT\b|\bON CONFLICT\b|\bON DUPLICATE\b", text), text
        assert not re.search(r"\b(true|false)\b", text, re.I), text
        if rig.backend == "mssql":
            assert not re.search(r"\bRETURNING\b|\bDUAL\b", text), text
        else:
            assert not re.search(r"\bOUTPUT\b|\bTOP\b", text), text


def test_a_push_writes_the_item_then_updates_or_creates_the_key(rig: Rig) -> None:
    rig.db.on(r"^UPDATE scheduled_tasks SET next_process_at=CASE", Reply(rowcount=0))
    push(rig.store, KEY, {"n": 1}, handler="digest", ontime=ONTIME, update="once")
    sql = [c.sql for c in _executed(rig.db) if c.sql.startswith(("INSERT", "UPDATE"))]
    kinds = [" ".join(s.split()[:3]) for s in sql]
    assert kinds == ["INSERT INTO scheduled_tasks_items", "UPDATE scheduled_tasks SET",
                     "INSERT INTO scheduled_tasks", "UPDATE scheduled_tasks SET"], sql
    update = " ".join(sql[1].split())
    # Idle: "once" moves the time only after a failed delivery or for a new batch (this
    # push's item is the key's only one); running: only the mark.
    assert re.search(r"next_process_at=CASE WHEN \(scheduled_tasks.locked_by IS NULL AND "
                     r"\(scheduled_tasks.attempt > \S+ OR \(SELECT min\(lowest.id\) .*\) = "
                     r"\(SELECT max\(highest.id\) .*\)\)\) THEN \S+ ELSE "
                     r"scheduled_tasks.next_process_at END, payload=CASE WHEN "
                     r"\(?scheduled_tasks.locked_by IS NULL\)? THEN scheduled_tasks.payload "
                     r"ELSE \S+ END, attempt=CASE", update), update
    assert "lowest.task_name = scheduled_tasks.queue_name" in update
    # The key's row is inserted only where its name is absent.
    assert "NOT (EXISTS (SELECT" in " ".join(sql[2].split())


def test_a_keyed_finish_deletes_only_when_nothing_is_queued_and_else_keeps_the_key(
    rig: Rig,
) -> None:
    rig.db.on(r"^DELETE FROM scheduled_tasks ", Reply(rowcount=0))
    landed = rig.store.finish(NODE, lambda now: [
        FinishWrite(9, 12, "success", now, 0, now, delete=True, keyed=True)])
    assert landed[1] == []
    delete = " ".join(rig.db.one(r"^DELETE FROM scheduled_tasks ").sql.split())
    assert "scheduled_tasks.payload IS NULL AND NOT (EXISTS (SELECT" in delete, delete
    assert "scheduled_tasks_items.task_name = scheduled_tasks.queue_name" in delete
    keep = " ".join(rig.db.one(r"^UPDATE scheduled_tasks SET .*next_process_at=coalesce"
                               ).sql.split())
    # Fenced like every finish; due when the queued items say (first item, moved by every
    # "always" push), the database's now when none is left.
    assert re.search(r"WHERE scheduled_tasks.id = \S+ AND scheduled_tasks.total_attempt = "
                     r"\S+ AND scheduled_tasks.locked_by = \S+$", keep), keep
    assert re.search(r"next_process_at=coalesce\(\(SELECT due_item.due_at", keep), keep
    assert "max(mover.id)" in keep and "min(first_item.id)" in keep
    # Every subquery reads the items of this row's key, never the tasks table again.
    assert len(re.findall(r"FROM scheduled_tasks_items (AS )?\w+ WHERE", keep)) == 3, keep
    assert not re.search(r"mover, scheduled_tasks", keep), keep
    assert "payload=NULL" in keep or re.search(r"payload=[?:]", keep), keep
    # A one-off job that is not a batch key is deleted without the guards.
    rig.db.on(r"^DELETE FROM scheduled_tasks ", Reply(rowcount=1))
    rig.store.finish(NODE, lambda now: [FinishWrite(10, 3, "success", now, 0, now,
                                                    delete=True)])
    plain = " ".join(rig.db.find(r"^DELETE FROM scheduled_tasks ")[-1].sql.split())
    assert "payload" not in plain and "EXISTS" not in plain


def test_a_delivery_removes_exactly_its_items_fenced_by_its_token(rig: Rig) -> None:
    ids = list(range(1, 1203))
    remove_delivered(rig.store, "digest/k", 12, NODE, ONTIME, ids)
    calls = rig.db.find(r"^DELETE FROM scheduled_tasks_items")
    assert len(calls) == 3, "chunks below SQL Server's and Oracle's parameter limits"
    for call in calls:
        sql = " ".join(call.sql.split())
        assert "EXISTS (SELECT scheduled_tasks.id FROM scheduled_tasks WHERE " \
               "scheduled_tasks.queue_name = " in sql
        assert "scheduled_tasks.total_attempt = " in sql and "locked_by = " in sql
        assert "scheduled_tasks.last_started_at = " in sql
    sent = [v for c in calls for v in _param_values(c)]
    assert all(i in sent for i in ids) and NODE in sent and 12 in sent


def test_a_dash_key_gets_a_row_of_its_own_per_push() -> None:
    first = build_push("digest", "-alert", 1)
    second = build_push("digest", "-alert", 1)
    assert first.name != second.name
    assert re.fullmatch(r"digest/-alert#[0-9a-f]{16}", first.name)
    assert build_push("digest", "k", 1).name == "digest/k"


@pytest.mark.parametrize("backend", ["mssql", "oracle"])
def test_the_items_table_ddl(backend: str) -> None:
    sql = offline_sql(backend)
    body = re.search(r"CREATE TABLE scheduled_tasks_items \((.*?)\n\)", sql, re.S)
    assert body, sql
    text = body.group(1)
    assert [c for c in ITEM_COLUMNS if re.search(rf"\b{c}\b", text)] == list(ITEM_COLUMNS)
    if backend == "mssql":
        assert "task_name NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL" in text
        assert "item NVARCHAR(max) NULL" in text and "moves BIT NOT NULL DEFAULT 0" in text
        assert "due_at DATETIME2(6) NOT NULL" in text
    else:
        assert "task_name VARCHAR2(255 CHAR) NOT NULL" in text and "item CLOB" in text
        assert "moves INTEGER DEFAULT 0 NOT NULL" in text
        assert "due_at TIMESTAMP WITH TIME ZONE NOT NULL" in text
    assert ("CREATE INDEX scheduled_tasks_items_task_idx ON scheduled_tasks_items "
            "(task_name, id)") in sql
    assert ("CREATE INDEX scheduled_tasks_items_key_idx ON scheduled_tasks_items "
            "(handler, batch_key)") in sql


def test_ontime_in_unix_seconds_is_the_same_instant() -> None:
    at = ONTIME + timedelta(microseconds=250_000)
    assert build_push("d", "k", 1, ontime=at.timestamp()).ontime == at
    assert build_push("d", "k", 1, ontime=at.astimezone(
        timezone(timedelta(hours=-5)))).ontime == at
    assert build_push("d", "k", 1).ontime is None  # the database's now


def test_the_compiled_definition_of_the_items_table() -> None:
    from sqlalchemy.dialects import mssql, oracle
    from sqlalchemy.schema import CreateTable

    from dbscheduler.table import make_items_table

    for d in (mssql.dialect(), oracle.dialect()):
        ddl = str(CreateTable(make_items_table("ops.jobs")).compile(dialect=d))
        assert "CREATE TABLE ops.jobs_items" in ddl, ddl
    assert sa.inspect(make_items_table()).primary_key.columns.keys() == ["id"]
