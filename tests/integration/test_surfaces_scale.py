"""The surfaces that show the table (the tasks page and its live refresh, ``/api/tasks``,
``/api/health``, ``Scheduler.health()``, ``dbscheduler list``) do the same work whatever the
table's size.

Each surface is asked the same question of a table of :data:`SMALL` and of :data:`LARGE` rows
(of the same make-up: the same share paused, failing, late …), and the statements it sends and
the rows the database sends back are counted at the driver's cursor. Both must be the same at
both sizes: a surface that read the table to filter, page or count it in Python fetched every
row. (How long each takes at 1,000 to 100,000 rows is ``bench/probes/surfaces.py``'s business.)
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from dbscheduler import Client, FixedRate, Scheduler
from dbscheduler.web import create_app
from dbscheduler.web.views import STATES, states_of
from tests.unit.test_cli import invoke

SMALL, LARGE = 400, 4_000
PAGE = 50
"""Every query below fills its page at both sizes (400 rows have 57 failing, 66 late of one
handler …), so that the same rows come back."""


@dataclass
class Tally:
    statements: int = 0
    rows: int = 0


class _CountingCursor:
    """The driver's cursor, counting the rows fetched through it."""

    def __init__(self, cursor: Any, tally: Tally, lock: threading.Lock) -> None:
        self._cursor, self._tally, self._lock = cursor, tally, lock

    def _add(self, n: int) -> None:
        with self._lock:
            self._tally.rows += n

    def fetchone(self) -> Any:
        row = self._cursor.fetchone()
        self._add(row is not None)
        return row

    def fetchmany(self, size: int | None = None) -> Any:
        rows = self._cursor.fetchmany() if size is None else self._cursor.fetchmany(size)
        self._add(len(rows))
        return rows

    def fetchall(self) -> Any:
        rows = self._cursor.fetchall()
        self._add(len(rows))
        return rows

    def __iter__(self) -> Iterator[Any]:
        for row in self._cursor:
            self._add(1)
            yield row

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


@contextmanager
def counted() -> Iterator[Tally]:
    """Count the statements and fetched rows of every engine while the block runs (the CLI
    makes its own; the health probe runs in a thread of its own)."""
    tally, lock = Tally(), threading.Lock()

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        with lock:
            tally.statements += 1

    def after(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
              executemany: bool) -> None:
        # The result reads the context's cursor after this event: wrap it.
        if context is not None and cursor.description is not None:
            context.cursor = _CountingCursor(cursor, tally, lock)

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", before)
    sa.event.listen(sa.engine.Engine, "after_cursor_execute", after)
    try:
        yield tally
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", before)
        sa.event.remove(sa.engine.Engine, "after_cursor_execute", after)


def fill(client: Client, n: int) -> None:
    """``n`` runtime tasks of two handlers; a fifth paused, a seventh failing, a third late by
    an hour; and two batch keys (pushed items), whatever ``n``."""
    client.schedule_many([(f"r-{i:06d}", "mail" if i % 2 else "sms", FixedRate(3600))
                          for i in range(n)])
    t = client._store.table
    with client.engine.begin() as conn:
        number = sa.cast(sa.func.substr(t.c.queue_name, 3), sa.Integer())
        conn.execute(sa.update(t).where(number % 5 == 0).values(paused=True))
        conn.execute(sa.update(t).where(number % 7 == 0).values(last_status="error",
                                                                  last_error="boom"))
        late = client.db_now() - timedelta(hours=1)
        conn.execute(sa.update(t).where(number % 3 == 0).values(next_process_at=late))
    client.push("ann@example.com", {"n": 1}, handler="digest")
    client.push("bob@example.com", {"n": 2}, handler="digest")


@pytest.fixture
def sized(backend: str, db_url: str) -> Iterator[Callable[[int], tuple[Client, str]]]:
    """Make a migrated table of ``n`` rows; ``(client, table)``."""
    from dbscheduler.migrate import upgrade
    from tests.databases import drop_table, unique_table

    made: list[tuple[Client, str]] = []

    def make(n: int) -> tuple[Client, str]:
        table = unique_table()
        engine = sa.create_engine(db_url)
        upgrade(engine, table)
        engine.dispose()
        client = Client(db_url, table=table)
        made.append((client, table))
        fill(client, n)
        return client, table

    yield make
    for client, table in made:
        client.close()
        drop_table(db_url, table)


SURFACES: dict[str, Callable[[TestClient, Scheduler, str, str], Any]] = {
    "tasks page": lambda http, s, url, table: http.get("/"),
    "live refresh": lambda http, s, url, table: http.get("/partials/tasks"),
    "filtered page": lambda http, s, url, table: http.get("/?state=paused&q=r-0"),
    "page 3 with batch keys": lambda http, s, url, table: http.get("/?kind=all&page=3"),
    "/api/tasks?limit=1": lambda http, s, url, table: http.get("/api/tasks?limit=1"),
    "/api/tasks filtered": lambda http, s, url, table: http.get(
        f"/api/tasks?state=failing&q=R-&limit={PAGE}&offset=5"),
    "/api/health": lambda http, s, url, table: http.get("/api/health"),
    "Scheduler.health()": lambda http, s, url, table: s.health(),
    "list --json --limit": lambda http, s, url, table: invoke(
        "list", "--json", "--limit", str(PAGE), "--url", url, "--table", table),
    "list (a page)": lambda http, s, url, table: invoke(
        "list", "--state", "overdue", "--handler", "mail", "--limit", "30", "--url", url,
        "--table", table),
}


def _work(client: Client, table: str, url: str) -> dict[str, tuple[int, int]]:
    scheduler = Scheduler(url, table=table)  # not started: its health() pings the database
    found: dict[str, tuple[int, int]] = {}
    with TestClient(create_app(client)) as http:
        for name, surface in SURFACES.items():
            surface(http, scheduler, url, table)  # warm: engines, reflection, templates
            with counted() as tally:
                answer = surface(http, scheduler, url, table)
            ok = getattr(answer, "status_code", None) in (None, 200) and getattr(
                answer, "exit_code", 0) in (0, 1)
            assert ok, (name, answer)
            found[name] = (tally.statements, tally.rows)
    scheduler.engine.dispose()
    return found


def test_each_surface_does_the_same_work_at_ten_times_the_rows(
    sized: Callable[[int], tuple[Client, str]], db_url: str
) -> None:
    small_client, small_table = sized(SMALL)
    large_client, large_table = sized(LARGE)
    small = _work(small_client, small_table, db_url)
    large = _work(large_client, large_table, db_url)
    assert large == small, {k: (small[k], large[k]) for k in small if small[k] != large[k]}
    # The pages send back a page: the whole table would be hundreds of rows.
    for name, (_, rows) in small.items():
        assert rows <= PAGE + 60, (name, rows)


def test_the_databases_filters_are_the_pages_states(
    sized: Callable[[int], tuple[Client, str]], db_url: str
) -> None:
    """What each state filter lists in SQL is what the dashboard's Python rule says of every
    row, and the counts are those of the rows themselves."""
    client, _ = sized(SMALL)
    every = client.tasks()
    now = client.db_now()
    with TestClient(create_app(client)) as http:
        listed = http.get("/api/tasks", params={"limit": 1000, "kind": "all"}).json()
        assert [t["name"] for t in listed["tasks"]] == [i.name for i in every]
        tasks_only = http.get("/api/tasks", params={"limit": 1000}).json()
        assert tasks_only["batch_keys"] == 2
        assert [t["name"] for t in tasks_only["tasks"]] == [
            i.name for i in every if not i.name.startswith("digest/")]
        shown = [i for i in every if not i.name.startswith("digest/")]
        for state in STATES:
            body = http.get("/api/tasks", params={"state": state, "limit": 1000}).json()
            expected = [i.name for i in shown if state in states_of(i, now)]
            assert [t["name"] for t in body["tasks"]] == expected, state
            assert body["total"] == len(expected)
            assert body["counts"][state] == len(expected)
        assert body["counts"]["all"] == len(shown) == SMALL
        searched = http.get("/api/tasks", params={"q": "R-00001", "limit": 1000}).json()
        assert [t["name"] for t in searched["tasks"]] == [f"r-00001{d}" for d in range(10)]
        # The counts by state are what a click on each shows: the search narrows the list.
        assert searched["total"] == 10 and searched["counts"]["all"] == SMALL
        # LIKE's own characters are text to find, not patterns.
        for text in ("%", "_", "!"):
            assert http.get("/api/tasks", params={"q": text}).json()["total"] == 0
    assert [i.name for i in client.tasks(limit=3, offset=5, batch_keys=False)] == [
        f"r-00000{d}" for d in (5, 6, 7)]
    assert [i.name for i in client.tasks(limit=2, after="r-000009")] == ["r-000010",
                                                                         "r-000011"]
    streamed = [i.name for i in client.iter_tasks(handler="sms", chunk=7)]
    assert streamed == [i.name for i in every if i.handler == "sms"]
    assert client.task_totals(handler="sms").matching == SMALL // 2


@pytest.mark.parametrize("args, fragment", [
    (("--limit", "-1"), "--limit"),
    (("--offset", "x"), "--offset"),
    (("--state", "sleeping"), "--state"),
    (("--handler", " "), "--handler"),
    (("--overdue", "--state", "paused"), "--overdue"),
    (("--match", "x" * 300), "--match"),
])
def test_bad_list_options_are_usage_errors(args: tuple[str, ...], fragment: str,
                                           tmp_path: Any) -> None:
    result = invoke("list", *args, "--url", f"sqlite:///{tmp_path}/none.db")
    assert result.exit_code == 2, result.output
    assert fragment in result.stderr and result.stdout == ""


def test_list_shows_a_page_and_says_how_to_see_the_rest(
    sized: Callable[[int], tuple[Client, str]], db_url: str
) -> None:
    _, table = sized(SMALL)
    first = invoke("list", "--limit", "10", "--url", db_url, "--table", table)
    assert first.exit_code == 0, first.output
    assert f"tasks 1-10 of {SMALL + 2} in {table}" in first.stdout
    assert f"{SMALL + 2 - 10} more task(s): --offset 10 for the next 10" in first.stdout
    names = [line.split()[0] for line in first.stdout.splitlines() if line.startswith(" r-")]
    assert names == [f"r-{i:06d}" for i in range(8)]  # after the two batch keys
    data = invoke("list", "--json", "--limit", "0", "--handler", "mail", "--url", db_url,
                  "--table", table)
    assert [t["name"] for t in json.loads(data.stdout)] == [
        f"r-{i:06d}" for i in range(SMALL) if i % 2]
    assert data.stderr == ""  # every matching task was shown: no hint
    last = invoke("list", "--json", "--offset", str(SMALL), "--url", db_url, "--table", table)
    assert len(json.loads(last.stdout)) == 2 and "more" not in last.stderr


def test_counts_past_a_cap_are_lower_bounds_with_the_tables_estimate(
    sized: Callable[[int], tuple[Client, str]], db_url: str, backend: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A capped count reads ``cap + 1`` rows at most; past it the numbers are those of the
    rows read (never more than the truth) and the page says so ("50+", "≈ 400")."""
    import dbscheduler.web.api as api_module
    import dbscheduler.web.pages as pages_module

    client, table = sized(SMALL)
    if backend in ("postgresql", "mysql"):  # the estimate comes from the statistics
        with client.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.exec_driver_sql(("ANALYZE " if backend == "postgresql" else "ANALYZE TABLE ")
                              + table)
    exact = client.task_totals(batch_keys=False)
    assert exact.exact and exact.estimate is None and exact.matching == SMALL
    just_enough = client.task_totals(batch_keys=False, cap=SMALL + 2)
    assert (just_enough.exact, just_enough.states) == (True, exact.states)
    capped = client.task_totals(batch_keys=False, cap=50)
    assert not capped.exact
    assert capped.states["all"] + capped.batch_keys == 51
    assert all(capped.states[s] <= exact.states[s] for s in exact.states)
    if backend in ("postgresql", "mysql"):
        assert capped.estimate is not None and SMALL / 2 <= capped.estimate <= SMALL * 2
    else:
        assert capped.estimate is None
    monkeypatch.setattr(pages_module, "COUNT_CAP", 50)
    monkeypatch.setattr(api_module, "COUNT_CAP", 50)
    with TestClient(create_app(client)) as http:
        page = http.get("/")
        assert page.status_code == 200
        assert re.search(r"Showing 1–50 of (\d+\+|≈ \d+)\.", page.text), page.text[-2000:]
        if capped.estimate is not None:
            assert "≈ " in page.text
        assert "Next" in page.text  # a full page, more rows: a next page
        body = http.get("/api/tasks", params={"limit": 5}).json()
        assert body["exact"] is False and body["total"] <= SMALL
        whole = http.get("/api/tasks", params={"limit": 5, "exact": "true"}).json()
        assert whole["exact"] is True and whole["total"] == SMALL and whole["estimate"] is None
        health = http.get("/api/health").json()
        assert (health["tasks"], health["tasks_exact"]) == (51, False)
        with pytest.raises(ValueError, match="cap"):
            client.task_totals(cap=0)
    every = client.count_tasks()
    assert client.count_tasks(cap=every) == every  # exactly at the cap: all of them
    assert client.count_tasks(cap=50) == 51
    assert client.count_tasks(state="paused", cap=5) == 6
    with pytest.raises(ValueError, match="cap"):
        client.count_tasks(cap=True)
