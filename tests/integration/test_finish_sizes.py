"""A batch finish of any size lands every write once, with exactly one run row each, on every
real database: PostgreSQL's one statement, and the joined statements of MySQL/MariaDB and
SQLite (built for a few padded sizes, written in parts past 256 rows, 32 on SQLite)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta, timezone

import pytest
import sqlalchemy as sa

from dbscheduler._store import FinishWrite, Registration, RunRecord, Store
from dbscheduler.dialects import create_engine
from tests.helpers import take_over

LEASE = timedelta(seconds=30)


@pytest.fixture
def store(migrated: tuple[str, str]) -> Iterator[Store]:
    url, table = migrated
    made = Store(create_engine(url, lease=LEASE), table)
    yield made
    made.engine.dispose()


@pytest.mark.parametrize("size", [2, 11, 300])
def test_every_write_of_a_batch_lands_once_with_its_run_row(store: Store, size: int) -> None:
    names = [f"job-{i:03d}" for i in range(size)]
    store.register([Registration(n, "FixedRate(3600)", lambda now: now - timedelta(seconds=1))
                    for n in names])
    picked = []
    while len(picked) < size:
        rows = store.pick("A", size, LEASE, names).rows
        assert rows, "every registered row is due"
        picked += rows
    stolen = picked[-1]  # another node took this one over: its write must not land
    take_over(store, stolen["id"])
    t = store.table

    def writes(now: object) -> list[FinishWrite]:
        return [
            FinishWrite(int(r["id"]), int(r["total_attempt"]), "success",
                        r["last_started_at"] + timedelta(hours=1), 0, r["last_started_at"],
                        payload=f'"{r["queue_name"]}"',
                        run=RunRecord(r["queue_name"], int(r["total_attempt"]), 1, "A",
                                      r["last_started_at"], r["last_started_at"]))
            for r in picked
        ]

    _, stale = store.finish("A", writes)
    assert [w.id for w in stale] == [stolen["id"]]
    with store.engine.connect() as conn:
        rows = {r.queue_name: r for r in conn.execute(sa.select(t))}
        runs = conn.execute(sa.select(store.runs_table.c.task_name)).scalars().all()
    for name in names[:-1]:
        assert (rows[name].locked_by, rows[name].last_status) == (None, "success"), name
        assert rows[name].payload == f'"{name}"'
    assert rows[names[-1]].locked_by == "B"
    assert sorted(runs) == names[:-1], "one run row per landed write, none for the stolen one"


# Texts a batch must carry exactly however the dialect passes its rows (PostgreSQL's array
# literals, MySQL's JSON, parameters elsewhere): quotes, backslashes, braces and commas, a
# newline, text that looks like JSON or an array, and characters beyond the BMP.
AWKWARD = ['say "hi"\\n', "back\\slash, {brace}", "line\nbreak\ttab", '{"a": [1, null]}',
           "NULL", "zürich 東京 🙂", "", "'single' ; DROP"]


def test_every_value_of_a_batch_finish_arrives_as_written(store: Store) -> None:
    names = [f"odd-{i}" for i in range(len(AWKWARD))]
    store.register([Registration(n, "FixedRate(3600)", lambda now: now - timedelta(seconds=1))
                    for n in names])
    picked = store.pick("A", len(names), LEASE, names).rows
    assert len(picked) == len(names)
    texts = {r["queue_name"]: AWKWARD[names.index(r["queue_name"])] for r in picked}
    # Each row its own due time, to the microsecond (and one given in another time zone).
    east = timezone(timedelta(hours=5, minutes=30))
    nexts = {r["queue_name"]: r["last_started_at"] + timedelta(hours=1, microseconds=7 * i + 1)
             for i, r in enumerate(picked)}
    nexts[names[0]] = nexts[names[0]].astimezone(east)

    def writes(now: object) -> list[FinishWrite]:
        return [
            FinishWrite(int(r["id"]), int(r["total_attempt"]), "failure",
                        nexts[r["queue_name"]], 1, r["last_started_at"],
                        error=texts[r["queue_name"]],
                        payload=json.dumps({"text": texts[r["queue_name"]]}),
                        run=RunRecord(r["queue_name"], int(r["total_attempt"]), 1, "A",
                                      r["last_started_at"] - timedelta(microseconds=3),
                                      r["last_started_at"]))
            for r in picked
        ]

    _, stale = store.finish("A", writes)
    assert not stale
    t, runs = store.table, store.runs_table
    with store.engine.connect() as conn:
        rows = {r.queue_name: r for r in conn.execute(sa.select(t))}
        run_rows = {r.task_name: r for r in conn.execute(sa.select(runs))}
    for r in picked:
        name = r["queue_name"]
        row, run = rows[name], run_rows[name]
        assert (row.locked_by, row.last_status, row.last_error) == (None, "failure",
                                                                    texts[name]), name
        assert json.loads(row.payload) == {"text": texts[name]}, name
        assert row.next_process_at == nexts[name], name
        assert (run.status, run.error) == ("failure", texts[name]), name
        assert run.scheduled_at == r["last_started_at"] - timedelta(microseconds=3), name
        assert run.started_at == r["last_started_at"], name
