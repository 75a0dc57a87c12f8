"""The batch delete of finished one-off jobs on SQL Server and Oracle, checked without a
server (the recorder of ``test_dialect_sql``): each run row first, fenced, then one fenced
``DELETE`` for the whole batch with every value bound; rows its fence refused are read back
and their run rows taken back."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from dbscheduler._store import FinishWrite, RunRecord
from tests.unit.test_dialect_sql import NODE, STARTED, Reply, Rig, _executed, _param_values, _rig

pytestmark = pytest.mark.filterwarnings("error::sqlalchemy.exc.SAWarning")

IDS = {9: 5, 10: 6, 11: 7}
"""Row id: token of the batch's executions."""


@pytest.fixture(params=["mssql", "oracle"])
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    r = _rig(str(request.param))
    yield r
    r.engine.dispose()


def _finish(r: Rig) -> list[int]:
    _, stale = r.store.finish(NODE, lambda now: [
        FinishWrite(i, token, "success", now, 0, now, delete=True,
                    run=RunRecord(f"job-{i}", token, 1, NODE, STARTED, STARTED))
        for i, token in IDS.items()
    ])
    return [w.id for w in stale]


def test_one_fenced_delete_for_the_batch_after_its_run_rows(rig: Rig) -> None:
    rig.db.on(r"^DELETE FROM scheduled_tasks WHERE", Reply(rowcount=3))
    assert _finish(rig) == []
    sql = [c.sql for c in _executed(rig.db)]
    inserts = [n for n, s in enumerate(sql) if s.startswith("INSERT INTO scheduled_tasks_runs")]
    deletes = [n for n, s in enumerate(sql) if s.startswith("DELETE FROM scheduled_tasks ")]
    assert len(inserts) == 3 and len(deletes) == 1, sql
    assert max(inserts) < deletes[0], "the run rows go first"
    delete = _executed(rig.db)[deletes[0]]
    text = " ".join(delete.sql.split())
    assert re.search(r"WHERE scheduled_tasks\.locked_by = \S+ AND \(scheduled_tasks\.id = \S+ "
                     r"AND scheduled_tasks\.total_attempt = \S+ OR ", text), text
    assert text.count("scheduled_tasks.total_attempt =") == 3
    values = _param_values(delete)
    assert NODE in values and "job-9" not in text and NODE not in text
    for i, token in IDS.items():
        assert i in values and token in values


def test_a_row_the_fence_kept_is_refused_and_its_run_row_taken_back(rig: Rig) -> None:
    # Another node took row 10 over after this node's lease was lost: the delete leaves it.
    rig.db.on(r"^DELETE FROM scheduled_tasks WHERE", Reply(rowcount=2))
    rig.db.on(r"^SELECT \S+\.id\s+FROM scheduled_tasks\s+WHERE \S+\.id IN",
              Reply(["id"], [(10,)]))
    rig.db.on(r"^SELECT \S+\.id, \S+\.total_attempt, \S+\.locked_by, \S+\.prev_locked_by",
              Reply(["id", "total_attempt", "locked_by", "prev_locked_by"],
                    [(10, 7, "node-Zz1", NODE)]))
    assert _finish(rig) == [10]
    forget = rig.db.find(r"^DELETE FROM scheduled_tasks_runs WHERE")
    assert len(forget) == 1 and "job-10" in _param_values(forget[0])
    assert "lost" in _param_values(forget[0]), "a lost run row stays"


def test_padding_binds_nothing_but_nulls(rig: Rig) -> None:
    # Past 8 rows a batch is padded to a multiple of 8 with rows that match nothing.
    rig.db.on(r"^DELETE FROM scheduled_tasks WHERE", Reply(rowcount=9))
    rig.store.finish(NODE, lambda now: [
        FinishWrite(100 + n, 1, "success", now, 0, now, delete=True) for n in range(9)])
    (delete,) = rig.db.find(r"^DELETE FROM scheduled_tasks WHERE")
    assert delete.sql.count("total_attempt =") == 16
    values = _param_values(delete)
    assert values.count(None) == 14 and sorted(v for v in values if isinstance(v, int)) == \
        sorted([*range(100, 109), *[1] * 9])
