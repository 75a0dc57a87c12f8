"""The pick and the poll whatever the node's shape: 1 to 10,000 handlers, a backlog of due
rows, other sessions holding rows.

* one node keeps every task's cadence with any number of handlers, on every database here;
* the statements' text is the same for one name and for ten thousand;
* on PostgreSQL the plans stay cheap on a stock server (estimated cost below the default
  ``jit_above_cost``, planning in milliseconds), and a pick reads about the rows it takes
  however many are due and whatever the table's statistics say;
* concurrent picks take disjoint rows, and a row another session holds locked (a fenced
  transaction's shared lock) is skipped, never waited for. SQLite has no row locks: a writer
  holds the whole file, see docs/guides/databases.md.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import FixedDelay, Scheduler
from dbscheduler._store import Registration, Store
from dbscheduler._store.handlers import handler_params
from dbscheduler._store.pick import _conditions
from dbscheduler._store.runtime import next_due_of
from dbscheduler.dialects import create_engine
from tests.helpers import running

SHAPES = [1, 8, 16, 40, 64, 65, 200, 1_000, 10_000]
LEASE = timedelta(seconds=3)
JIT_ABOVE_COST = 100_000
"""PostgreSQL's default ``jit_above_cost``: a plan estimated above it is compiled first."""
LIMIT = 32


def _server_or_sqlite(backend: str) -> None:
    if backend not in ("sqlite", "postgresql", "mysql"):
        pytest.skip("SQL Server and Oracle: the statements are compiled and checked in "
                    "tests/unit/test_dialect_sql.py")


@pytest.mark.parametrize("handlers", SHAPES)
def test_one_node_keeps_every_tasks_cadence_whatever_its_number_of_handlers(
    migrated: tuple[str, str], backend: str, handlers: int
) -> None:
    """Up to a dozen tasks (FixedDelay 0.1 s) on a node with ``handlers`` handlers: each runs
    five times within a bound many times the ideal half second."""
    _server_or_sqlite(backend)
    url, table = migrated
    runs: Counter[str] = Counter()
    lock = threading.Lock()
    scheduler = Scheduler(url, table=table, node_id="shapes", lease=LEASE, poll_interval=1,
                          max_workers=8, history=None, overdue_check=None)
    tasks = [f"task-{i:05d}" for i in range(min(handlers, 12))]
    for name in tasks:
        def task(name: str = name) -> None:
            with lock:
                runs[name] += 1
        scheduler.add(name, task, schedule=FixedDelay(0.1))
    for i in range(handlers - len(tasks)):
        scheduler.handler(f"other-{i:05d}")(lambda: None)
    with running(scheduler):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with lock:
                if all(runs[n] >= 5 for n in tasks):
                    break
            time.sleep(0.02)
    with lock:
        slow = {n: runs[n] for n in tasks if runs[n] < 5}
    assert not slow, f"with {handlers} handlers these ran fewer than 5 times in 20 s: {slow}"


# -- the statements ---------------------------------------------------------------------------
@pytest.fixture
def store(migrated: tuple[str, str], backend: str) -> Iterator[Store]:
    _server_or_sqlite(backend)
    url, table = migrated
    made = Store(create_engine(url, lease=LEASE), table)
    yield made
    made.engine.dispose()


def _statements(store: Store, names: list[str]) -> list[str]:
    """The texts of the statements one poll and one pick of ``names`` send."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    store._shape_checked = float("-inf")  # both polls check the table's shape too
    store.statistics.ensure()  # and not, when one is slow, the table's statistics
    sa.event.listen(store.engine, "before_cursor_execute", record)
    try:
        store.poll(names)
        store.pick("n1", LIMIT, LEASE, names)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", record)
    return sent


def test_the_statements_text_is_the_same_for_one_name_and_for_ten_thousand(
    store: Store
) -> None:
    store.register([Registration("task-00000", "FixedDelay(0.1)",
                                 lambda now: now + timedelta(hours=1))])
    one = _statements(store, ["task-00000"])
    many = _statements(store, ["task-00000", *(f"other-{i:05d}" for i in range(9_999))])
    assert one == many
    assert not any("other-" in s or "task-" in s for s in many)


def _register_due(store: Store, names: list[str]) -> None:
    store.register([Registration(n, "FixedDelay(0.1)", lambda now: now - timedelta(seconds=1))
                    for n in names])


def _explain(store: Store, run: Any, analyze: bool = False) -> dict[str, Any]:
    """PostgreSQL's plan of the statement ``run(conn)`` sends (in a transaction rolled back)."""
    options = "ANALYZE, BUFFERS, FORMAT JSON" if analyze else "FORMAT JSON"

    def explain(conn: Any, cursor: Any, statement: str, *args: Any) -> tuple[str, Any]:
        return f"EXPLAIN ({options}) {statement}", args[0]

    with store.engine.connect() as conn:
        sa.event.listen(conn, "before_cursor_execute", explain, retval=True)
        with conn.begin() as tx:
            raw = run(conn)
            tx.rollback()
    plan = json.loads(raw) if isinstance(raw, str) else raw
    return dict(plan[0])


def _pick(store: Store, names: list[str]) -> Any:
    def run(conn: Any) -> Any:
        (row,) = store.dialect.pick(
            conn, store.table, where=_conditions(store, frozenset()), limit=LIMIT, lease=LEASE,
            node_id="n1", claim=uuid.uuid4().hex, params=handler_params(store, frozenset(names)))
        (value,) = row.values()
        return value
    return run


def _poll(store: Store, names: list[str]) -> Any:
    def run(conn: Any) -> Any:
        query = sa.select(sa.cast(next_due_of(store).scalar_subquery(), sa.Text()))
        return conn.execute(query, handler_params(store, frozenset(names))).scalar_one()
    return run


@pytest.mark.parametrize("handlers", SHAPES)
def test_postgresql_pick_and_poll_plans_stay_cheap_on_a_stock_server(
    store: Store, backend: str, handlers: int
) -> None:
    if backend != "postgresql":
        pytest.skip("PostgreSQL's plans")
    names = [f"task-{i:05d}" for i in range(handlers)]
    _register_due(store, names[:1_000])
    for what, run in (("pick", _pick(store, names)), ("poll", _poll(store, names))):
        plans = [_explain(store, run) for _ in range(3)]
        cost = plans[0]["Plan"]["Total Cost"]
        assert cost < JIT_ABOVE_COST, f"{what} with {handlers} handlers: estimated {cost}"
        planning = [_explain(store, run, analyze=True)["Planning Time"] for _ in range(3)]
        # Under 5 ms on an idle machine; the bound is ten times that, for a busy one (the
        # plan's shape is held by the cost estimate above, which no load changes).
        assert min(planning) < 50, f"{what} with {handlers} handlers: planned in {planning} ms"


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


@pytest.mark.parametrize("statistics", ["never analysed", "analysed in the future", "fresh"])
def test_a_postgresql_pick_reads_the_rows_it_takes_not_the_backlog(
    store: Store, backend: str, statistics: str
) -> None:
    """20,000 due rows of one handler: the pick's plan reads about ``LIMIT`` of them, with the
    statistics a table may have (autovacuum is off for this table)."""
    if backend != "postgresql":
        pytest.skip("PostgreSQL's plan")
    t = store.table
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"ALTER TABLE {t.name} SET (autovacuum_enabled = false)")
        future = statistics == "analysed in the future"
        conn.exec_driver_sql(
            f"INSERT INTO {t.name} (queue_name, handler, created_at, next_process_at, attempt, "
            "reenqueue_attempt, total_attempt, paused, stop_requested, schedule, priority) "
            "SELECT 'job-' || i, 'jobs', now(), now() + interval "
            f"'{'1 hour' if future else '-1 minute'}' + i * interval '1 ms', 0, 0, 0, false, "
            "false, 'once', 0 FROM generate_series(1, 20000) i")
        if statistics != "never analysed":
            conn.exec_driver_sql(f"ANALYZE {t.name}")
        if future:  # due now, the statistics still say an hour from now
            conn.exec_driver_sql(f"UPDATE {t.name} SET next_process_at = next_process_at - "
                                 "interval '61 minutes'")
    plan = _explain(store, _pick(store, ["jobs"]), analyze=True)
    read = [(n["Node Type"], n.get("Alias"), n["Actual Rows"] * n["Actual Loops"])
            for n in _nodes(plan["Plan"]) if n.get("Relation Name") == t.name
            and n["Node Type"] != "ModifyTable"]
    assert plan["Plan"]["Actual Rows"] == LIMIT
    assert sum(rows for *_, rows in read) <= 3 * LIMIT, read


def test_a_node_started_on_a_never_analysed_backlog_gathers_statistics_first(
    migrated: tuple[str, str], backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """20,000 due rows behind 100,000 pending ones, never analysed: without statistics the
    server may plan the pick as a sort of every due row (and the poll as a read of every
    row), so a node gathers them when it starts; its picks then read about the rows they
    take."""
    if backend != "postgresql":
        pytest.skip("PostgreSQL's planner statistics")
    url, table = migrated
    store = Store(create_engine(url, lease=LEASE), table)
    try:
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            for prefix, n, offset in (("later", 100_000, "1 day"), ("job", 20_000, "-1 minute")):
                conn.exec_driver_sql(
                    f"INSERT INTO {table} (queue_name, handler, created_at, next_process_at, "
                    "attempt, reenqueue_attempt, total_attempt, paused, stop_requested, "
                    f"schedule, priority) SELECT '{prefix}-' || i, 'jobs', now(), "
                    f"now() + interval '{offset}' + i * interval '1 ms', 0, 0, 0, false, "
                    "false, 'once', 0 FROM generate_series(1, %(n)s) i", {"n": n})
        statistics = sa.text("SELECT count(*) FROM pg_stats WHERE tablename = :t "
                             "AND attname = 'next_process_at'")
        with store.engine.connect() as conn:
            assert conn.execute(statistics, {"t": table}).scalar_one() == 0
        # A node of other handlers: it starts, and takes none of these rows.
        node = Scheduler(url, table=table, node_id="starter", lease=LEASE, history=None,
                         overdue_check=None)
        node.handler("others")(lambda: None)
        with caplog.at_level("INFO", logger="dbscheduler.store"), running(node):
            pass
        with store.engine.connect() as conn:
            assert conn.execute(statistics, {"t": table}).scalar_one() == 1
        assert "had no planner statistics" in caplog.text
        plan = _explain(store, _pick(store, ["jobs"]), analyze=True)
        read = [(n["Node Type"], n.get("Alias"), n["Actual Rows"] * n["Actual Loops"])
                for n in _nodes(plan["Plan"]) if n.get("Relation Name") == table
                and n["Node Type"] != "ModifyTable"]
        assert plan["Plan"]["Actual Rows"] == LIMIT
        assert sum(rows for *_, rows in read) <= 3 * LIMIT, read
    finally:
        store.engine.dispose()


# -- other sessions ---------------------------------------------------------------------------
def test_concurrent_picks_take_disjoint_rows(store: Store, backend: str) -> None:
    """Rows another pick holds (its statement still running) are skipped: a pick of the same
    handler takes the next ones, as many as asked, instead of coming back empty."""
    if backend not in ("postgresql", "mysql"):
        # SQL Server and Oracle keep the portable pick, which waits for a held row.
        pytest.skip("SQLite has one writer at a time: a held row holds the whole file"
                    if backend == "sqlite" else "the portable pick waits for held rows")
    names = [f"job-{i:03d}" for i in range(40)]
    store.register([Registration(n, "FixedDelay(60)", lambda now: now - timedelta(seconds=1))
                    for n in names])
    # Every row of one handler, as a backlog of one-off jobs is.
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.update(store.table).values(handler="jobs"))
    t = store.table
    # A transaction of its own (the scheduler's engine autocommits on MariaDB).
    first = store.engine.connect().execution_options(isolation_level="READ COMMITTED")
    with first, first.begin():
        # Another pick in progress holds the first ten rows.
        held = first.execute(sa.select(t.c.id).order_by(t.c.next_process_at, t.c.id)
                             .limit(10).with_for_update()).all()
        other = store.pick("n2", 10, LEASE, ["jobs"]).rows
    assert len(held) == 10 and len(other) == 10
    assert not {r.id for r in held} & {r["id"] for r in other}


def test_a_row_held_for_share_does_not_stall_a_pick(store: Store, backend: str) -> None:
    """A fenced transaction holds its row with a shared lock; a pick of the other due rows
    skips that one and returns at once (it used to wait on MariaDB for the lock wait
    timeout, 50 s by default)."""
    if backend == "sqlite":
        pytest.skip("SQLite has no row locks: a writer holds the whole file")
    names = [f"job-{i:03d}" for i in range(5)]
    _register_due(store, names)
    t = store.table
    with store.engine.connect() as conn:
        held = conn.execute(sa.select(t.c.id).where(t.c.queue_name == names[0])).scalar_one()
    # The user's own engine, as a fenced transaction may use: no server-side bound on how
    # long its transaction may sit idle (the scheduler's sessions have one, which would end
    # this transaction, and the wait, after a few seconds).
    users = sa.create_engine(store.engine.url)
    holder = users.connect().execution_options(isolation_level="READ COMMITTED")
    try:
        with holder, holder.begin():
            # By its key, as a fence holds it (a covering read of a secondary index would
            # lock only that index's entry on MariaDB).
            holder.execute(sa.select(t).where(t.c.id == held).with_for_update(read=True)).one()
            done: list[Any] = []
            picking = threading.Thread(
                target=lambda: done.append(store.pick("n2", 10, LEASE, names).rows))
            picking.start()
            picking.join(timeout=15)
            assert not picking.is_alive(), "the pick waited for the row held FOR SHARE"
    finally:
        users.dispose()
    (rows,) = done
    assert sorted(r["queue_name"] for r in rows) == names[1:]
    assert held not in {r["id"] for r in rows}


def test_a_pick_short_of_rows_others_hold_says_to_pick_again_at_once(
    store: Store, backend: str
) -> None:
    """Rows due but held by another session's pick: a pick that comes back short because of
    them says the next row is due already, so the poller picks again at once instead of
    sleeping until the next due time (a poll interval, when nothing else is due)."""
    if backend != "postgresql":
        # Elsewhere the pick does not tell the next due time: a short pick is followed by a
        # full poll, which sees those rows due.
        pytest.skip("PostgreSQL's pick returns the next due time")
    names = [f"job-{i:03d}" for i in range(20)]
    _register_due(store, names)
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.update(store.table).values(handler="jobs"))
    t = store.table
    first = store.engine.connect()
    with first, first.begin():
        held = first.execute(sa.select(t.c.id).order_by(t.c.next_process_at, t.c.id)
                             .limit(5).with_for_update()).all()
        picked = store.pick("n2", 30, LEASE, ["jobs"])
    assert len(held) == 5 and len(picked.rows) == 15
    assert picked.next_due_known and picked.next_due is not None
    assert picked.next_due <= picked.rows[0]["last_started_at"], picked.next_due
