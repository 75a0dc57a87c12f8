"""The listing's statements on SQL Server and Oracle, checked without a server (the recording
driver of ``test_dialect_sql``): a page is ordered by name and limited by the database, and
the counts come back as at most 32 grouped rows that the client adds up."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dbscheduler.client import Client
from tests.unit.test_dialect_sql import NOW, Reply, Rig, _executed, _param_values, _rig

pytestmark = pytest.mark.filterwarnings("error::sqlalchemy.exc.SAWarning")


@pytest.fixture(params=["mssql", "oracle"])
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    r = _rig(str(request.param))
    yield r
    r.engine.dispose()


def test_a_filtered_page_is_limited_and_ordered_by_the_database(rig: Rig) -> None:
    client = Client(engine=rig.engine, table=rig.store.table_name)
    rig.db.on(r"ORDER BY scheduled_tasks\.queue_name", Reply(["queue_name"], []))
    assert client.tasks(state="failing", handler="mail", match="50%_off", limit=50,
                        offset=100, batch_keys=False) == []
    (page,) = rig.db.find(r"ORDER BY scheduled_tasks\.queue_name")
    assert "OFFSET" in page.sql and "FETCH FIRST" in page.sql
    assert "scheduled_tasks_items" in page.sql  # batch keys left out by the database
    assert "ESCAPE '!'" in page.sql
    values = _param_values(page)
    assert "%50!%!_off%" in values and "mail" in values and "error" in values


def test_counts_are_grouped_rows_added_up_by_the_client(rig: Rig) -> None:
    client = Client(engine=rig.engine, table=rig.store.table_name)
    columns = ["key_", "match_", "running", "paused", "failing", "overdue", "n"]
    rig.db.on(r"GROUP BY", Reply(columns, [
        (1, 1, 0, 0, 0, 0, 2), (0, 1, 0, 1, 1, 0, 3), (0, 0, 0, 1, 0, 0, 4),
        (0, 1, 0, 0, 0, 0, 10), (0, 1, 1, 0, 0, 1, 1)]))
    totals = client.task_totals(state="paused", match="r-", batch_keys=False)
    assert (totals.matching, totals.batch_keys) == (3, 2)  # paused and found by the search
    assert totals.states == {"all": 18, "running": 1, "paused": 7, "failing": 3,
                             "overdue": 1, "idle": 10}
    assert totals.db_now == NOW or totals.db_now.tzinfo is not None
    (grouped,) = rig.db.find(r"GROUP BY")
    assert grouped.sql.count("SELECT") >= 2  # the flags of a derived table, then grouped
    assert len([c for c in _executed(rig.db) if "scheduled_tasks" in c.sql]) == 1


def test_a_capped_count_limits_the_rows_it_reads(rig: Rig) -> None:
    client = Client(engine=rig.engine, table=rig.store.table_name)
    columns = ["key_", "match_", "running", "paused", "failing", "overdue", "n"]
    rig.db.on(r"GROUP BY", Reply(columns, [(0, 1, 0, 0, 0, 0, 11)]))
    totals = client.task_totals(cap=10)
    # More rows than the cap: lower bounds, and no estimate where the dialect has none.
    assert (totals.exact, totals.matching, totals.estimate) == (False, 11, None)
    (grouped,) = rig.db.find(r"GROUP BY")
    assert ("TOP" in grouped.sql or "FETCH FIRST" in grouped.sql
            or "ROWNUM" in grouped.sql), grouped.sql
    assert 11 in _param_values(grouped) or "11" in grouped.sql


def test_a_capped_count_of_rows_limits_the_rows_it_reads(rig: Rig) -> None:
    client = Client(engine=rig.engine, table=rig.store.table_name)
    rig.db.on(r"\) (AS )?bounded", Reply(["count_1"], [(11,)]))
    assert client.count_tasks(cap=10) == 11
    (bounded,) = rig.db.find(r"\) (AS )?bounded")
    assert ("TOP" in bounded.sql or "FETCH FIRST" in bounded.sql
            or "ROWNUM" in bounded.sql), bounded.sql
    assert 11 in _param_values(bounded) or "11" in bounded.sql
