"""MySQL/MariaDB through mysqlclient (``mysql+mysqldb://``, the ``mysqlclient`` extra), the C
driver, beside the default pure-Python PyMySQL: the engine runs on it, and the server's errors
are read the same way (the error number first in ``args``, as PyMySQL puts it)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from dbscheduler import Client, FixedRate, Scheduler, TaskContext
from dbscheduler.dialects import connect_problem, create_engine, dialect_for
from dbscheduler.dialects.types import UNREADABLE_TIME
from tests.helpers import wait_until

pytest.importorskip("MySQLdb", reason="mysqlclient is not installed: pip install -e "
                    "'.[mysqlclient]' (it builds against libmariadb-dev and pkg-config)")

pytestmark = pytest.mark.parametrize("backend", ["mysql"])


def mysqldb(url: str) -> str:
    return str(sa.make_url(url).set(drivername="mysql+mysqldb"))


def test_a_node_on_mysqlclient_picks_finishes_and_keeps_the_history(
        migrated: tuple[str, str]) -> None:
    url, table = mysqldb(migrated[0]), migrated[1]
    ran: list[str] = []
    lock = threading.Lock()

    def note(ctx: TaskContext) -> None:
        with lock:
            ran.append(ctx.name)

    scheduler = Scheduler(url, table=table, poll_interval=0.2, lease=5)
    for i in range(3):
        scheduler.add(f"every-{i}", note, schedule=FixedRate(0.2))
    scheduler.handler("job")(note)
    with Client(url, table=table) as client:
        soon = datetime.now(timezone.utc) + timedelta(seconds=0.3)
        assert client.schedule_once_many((f"job-{i}", "job", soon) for i in range(20)) == 20
        scheduler.start()
        try:
            wait_until(lambda: all(ran.count(f"every-{i}") >= 2 for i in range(3))
                       and sum(n.startswith("job-") for n in ran) >= 20, 30,
                       "every task twice and every job")
        finally:
            scheduler.shutdown(timeout=10)
        jobs = sorted(n for n in ran if n.startswith("job-"))
        assert jobs == sorted(f"job-{i}" for i in range(20)), "each job exactly once"
        assert [t.name for t in client.tasks() if t.name.startswith("job-")] == []
        assert not [t for t in client.tasks() if t.locked_by is not None]
        runs = client.runs(limit=1000)
        assert {r.name for r in runs} >= {"every-0", "every-1", "every-2", "job-7"}
        assert {r.status for r in runs} == {"success"}


def test_a_fenced_transaction_commits_through_mysqlclient(migrated: tuple[str, str]) -> None:
    # The final check and COMMIT is one compound statement sent as text: with mysqlclient's
    # positional placeholders its parameters go in their order, not by name.
    url, table = mysqldb(migrated[0]), migrated[1]
    side = f"{table}_side"
    engine = sa.create_engine(url)
    effects = sa.Table(side, sa.MetaData(), sa.Column("token", sa.Integer))
    effects.create(engine)
    committed = threading.Event()

    def pay(ctx: TaskContext) -> None:
        with ctx.fenced(engine) as conn:
            conn.execute(effects.insert().values(token=ctx.total_attempt))
        committed.set()

    scheduler = Scheduler(url, table=table, poll_interval=0.2, lease=5)
    scheduler.add("pay", pay, schedule=FixedRate(0.5))
    scheduler.start()
    try:
        assert committed.wait(30), "the fenced transaction committed"
    finally:
        scheduler.shutdown(timeout=10)
    try:
        with engine.connect() as conn:
            tokens = conn.execute(sa.select(effects.c.token)).scalars().all()
        assert tokens and sorted(tokens) == list(range(1, len(tokens) + 1)), tokens
    finally:
        effects.drop(engine)
        engine.dispose()


def test_a_zero_date_reads_as_unreadable_not_as_none(migrated: tuple[str, str]) -> None:
    # mysqlclient reads a zero date as None, which a NOT NULL column never holds; the row
    # must read as PyMySQL's does, unreadable, so that it fails alone.
    url, table = mysqldb(migrated[0]), migrated[1]
    with Client(url, table=table) as client:
        client.schedule("edited", "h", FixedRate(60))
        with client.engine.begin() as conn:
            conn.exec_driver_sql("SET SESSION sql_mode = ''")
            conn.execute(sa.text(f"UPDATE {table} SET next_process_at = '0000-00-00 00:00:00'"
                                 " WHERE queue_name = 'edited'"))
        assert client.info("edited").next_process_at == UNREADABLE_TIME


def test_mysqlclient_errors_read_as_the_dialect_expects(migrated: tuple[str, str]) -> None:
    url = mysqldb(migrated[0])
    engine = create_engine(url, lease=timedelta(seconds=10))
    dialect = dialect_for(engine)
    try:
        with pytest.raises(sa.exc.DBAPIError) as missing, engine.connect() as conn:
            conn.execute(sa.text("SELECT * FROM no_such_table_here"))
        assert dialect.is_missing_table(missing.value)
        assert not dialect.is_transient(missing.value)
    finally:
        engine.dispose()
    wrong = str(sa.make_url(url).set(database="no_such_database_here"))
    bad = sa.create_engine(wrong)
    try:
        with pytest.raises(sa.exc.DBAPIError) as refused, bad.connect():
            pass
    finally:
        bad.dispose()
    problem = connect_problem(wrong, refused.value)
    assert problem is not None and problem.kind == "database", problem
