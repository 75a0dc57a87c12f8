"""Finished one-off jobs are deleted a batch per statement, fenced: on every real database a
batch deletes each row its executions still hold, with exactly one run row each (history
on), and never a row another node took over after this node's lease was lost."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler._store import FinishWrite, Registration, RunRecord, Store
from dbscheduler.dialects import create_engine
from tests.helpers import take_over

LEASE = timedelta(seconds=30)


@pytest.fixture(params=[True, False], ids=["history", "no-history"])
def store(migrated: tuple[str, str], request: pytest.FixtureRequest) -> Iterator[Store]:
    url, table = migrated
    made = Store(create_engine(url, lease=LEASE), table, history=request.param)
    yield made
    made.engine.dispose()


def _deletes(store: Store) -> tuple[list[int], Any]:
    """A counter of the DELETE statements sent to the tasks table, and its listener."""
    sent = [0]
    name = store.table.name.lower()

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        text = " ".join(statement.lower().split())
        if f"delete from {name} " in text or f"delete from {name}\n" in text:
            sent[0] += 1

    sa.event.listen(store.engine, "before_cursor_execute", count)
    return sent, count


@pytest.mark.parametrize("size", [2, 11, 300])
def test_a_batch_of_finished_one_offs_is_deleted_fenced_in_few_statements(
    store: Store, size: int
) -> None:
    names = [f"job-{i:03d}" for i in range(size)]
    store.register([Registration(n, "FixedRate(3600)", lambda now: now - timedelta(seconds=1))
                    for n in names])
    picked: list[dict[str, Any]] = []
    while len(picked) < size:
        rows = store.pick("A", size, LEASE, names).rows
        assert rows, "every registered row is due"
        picked += rows
    # This node's lease on the last row was lost and another node took the row over: the
    # batch must leave it, and its run, alone.
    stolen = picked[-1]
    take_over(store, stolen["id"])
    t = store.table

    def writes(now: object) -> list[FinishWrite]:
        return [
            FinishWrite(int(r["id"]), int(r["total_attempt"]), "success",
                        r["last_started_at"], 1, r["last_started_at"], delete=True,
                        run=RunRecord(r["queue_name"], int(r["total_attempt"]), 1, "A",
                                      r["last_started_at"], r["last_started_at"]))
            for r in picked
        ]

    sent, listener = _deletes(store)
    try:
        _, stale = store.finish("A", writes)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", listener)
    assert [w.id for w in stale] == [stolen["id"]]
    with store.engine.connect() as conn:
        left = conn.execute(sa.select(t.c.queue_name, t.c.locked_by)).all()
        runs = conn.execute(sa.select(store.runs_table.c.task_name,
                                      store.runs_table.c.status)).all()
    assert left == [(names[-1], "B")], "every held row deleted, the stolen one kept"
    if store.history:
        assert sorted(runs) == [(n, "success") for n in names[:-1]], \
            "one run row per deleted job, none for the stolen one"
    else:
        assert runs == []
    # One statement per batch (in parts of the dialect's joined size where it joins rows),
    # not one per job.
    per_statement = (size if store.finishing.run_row_shared
                     else store.finishing.deletes_most)
    assert sent[0] == -(-size // per_statement)
