"""Every statement dbscheduler sends to SQL Server and Oracle, checked without a server.

No SQL Server or Oracle server runs where these tests run, so they drive the real
:class:`~dbscheduler._store.Store` and dialects through a real SQLAlchemy engine whose DBAPI
connection is a recorder (:class:`FakeDB`): SQLAlchemy compiles, binds, calls
``setinputsizes`` and processes results exactly as it would with pyodbc / python-oracledb,
and the recorder keeps what reached the "driver" and answers with canned rows shaped like the
driver's (naive datetimes, as both drivers return them).

What this proves: the SQL text has the clauses the pick and the guarantees depend on, values
travel as bound parameters, parameters have the types the drivers need, and result rows are
turned into what the engine expects. What it cannot prove: that the server accepts the text
and locks as documented; that is ``tests/conformance/test_extra_backends.py`` against a real
server (testcontainers or ``DBSCHEDULER_TEST_MSSQL_URL`` / ``DBSCHEDULER_TEST_ORACLE_URL``).
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import oracledb
import pytest
import sqlalchemy as sa

from dbscheduler import FixedRate
from dbscheduler._engine import trace_links as _trace_links
from dbscheduler._store import (
    FinishWrite,
    Registration,
    RunRecord,
    Store,
    prune_beyond,
    prune_older,
)
from dbscheduler._store.alerts import PAGE, claim, late_rows
from dbscheduler._store.history import settle_success
from dbscheduler.client import Client
from dbscheduler.dialects import dialect_for, prepare_engine
from dbscheduler.dialects.base import db_now, db_now_plus
from dbscheduler.dialects.common import PICKED
from dbscheduler.dialects.mssql import IN_LIST_LIMIT as MSSQL_IN_LIST_LIMIT
from dbscheduler.dialects.oracle import IN_LIST_LIMIT as ORACLE_IN_LIST_LIMIT
from dbscheduler.migrate import offline_sql
from dbscheduler.table import COLUMNS, make_runs_table, make_table

pytestmark = pytest.mark.filterwarnings("error::sqlalchemy.exc.SAWarning")

ROOT = Path(__file__).resolve().parents[2]
TABLE = "scheduled_tasks"
NODE = "node-Ab9"
OTHER_NODE = "node-Zz1"
NAMES = ("nightly-Report", "cleanup")
# A date no statement could contain by accident: if it appears in SQL text, a value was inlined.
NOW = datetime(2031, 7, 14, 12, 30, 45, 123456)
"""The database clock in the canned replies, naive UTC as both drivers return it."""
LEASE = timedelta(seconds=30.25)
STARTED = datetime(2031, 7, 14, 12, 30, 40, 5, tzinfo=timezone.utc)
"""When the executions of the workout started (a run row's key holds it)."""
RUN_COLUMNS = [c.name for c in make_runs_table(TABLE).columns]
TIMESTAMPS = ("created_at", "next_process_at", "heartbeat_at", "last_started_at",
              "last_finished_at")


# -- a DBAPI that records -------------------------------------------------------------------
@dataclass
class Reply:
    """What the fake driver answers: a result set (``columns`` + ``rows``) and a rowcount."""

    columns: Sequence[str] = ()
    rows: Sequence[Sequence[Any]] = ()
    rowcount: int = 1
    error: BaseException | None = None

def ops(store: Store) -> Client:
    """The operations on ``store``'s table, through the public client on the same engine."""
    return Client(engine=store.engine, table=store.table_name)



@dataclass
class Call:
    """One statement as it reached the driver."""

    sql: str
    params: Any
    inputsizes: dict[str, Any] | list[Any] | None
    arraysize: int
    prefetchrows: int
    fetched: int = 0


@dataclass
class FakeDB:
    """Shared state of the fake connections: the calls made and the rules that answer them."""

    calls: list[Call] = field(default_factory=list)
    rules: list[tuple[re.Pattern[str], Reply | Callable[[Call], Reply]]] = field(
        default_factory=list
    )

    def on(self, pattern: str, reply: Reply | Callable[[Call], Reply]) -> None:
        """Answer statements matching ``pattern`` (newest rule first)."""
        self.rules.insert(0, (re.compile(pattern, re.S | re.I), reply))

    def respond(self, call: Call) -> Reply:
        for pattern, reply in self.rules:
            if pattern.search(call.sql):
                return reply(call) if callable(reply) else reply
        return Reply()

    def connect(self) -> FakeConnection:
        return FakeConnection(self)

    def sql(self) -> list[str]:
        return [c.sql for c in self.calls]

    def find(self, pattern: str) -> list[Call]:
        return [c for c in self.calls if re.search(pattern, c.sql, re.S | re.I)]

    def one(self, pattern: str) -> Call:
        found = self.find(pattern)
        assert len(found) == 1, (pattern, self.sql())
        return found[0]


class FakeCursor:
    def __init__(self, db: FakeDB) -> None:
        self.db = db
        self.description: list[tuple[Any, ...]] | None = None
        self.rowcount = -1
        self.arraysize = 100  # python-oracledb's defaults
        self.prefetchrows = 2
        self._rows: list[Sequence[Any]] = []
        self._inputsizes: dict[str, Any] | list[Any] | None = None
        self._call: Call | None = None

    def setinputsizes(self, *args: Any, **kwargs: Any) -> None:
        # python-oracledb: by name; pyodbc: one positional list
        self._inputsizes = dict(kwargs) if kwargs else list(args[0] if args else ())

    def execute(self, sql: str, params: Any = None) -> None:
        call = Call(sql, params, self._inputsizes, self.arraysize, self.prefetchrows)
        self._inputsizes = None
        self.db.calls.append(call)
        self._call = call
        reply = self.db.respond(call)
        if reply.error is not None:
            raise reply.error
        self.description = [(c, None, None, None, None, None, None) for c in reply.columns] or None
        self._rows = list(reply.rows)
        self.rowcount = reply.rowcount

    def executemany(self, sql: str, seq_of_params: Sequence[Any]) -> None:
        # One recorded call for the batch; the reply's rowcount counts per parameter set.
        params = list(seq_of_params)
        call = Call(sql, params, self._inputsizes, self.arraysize, self.prefetchrows)
        self._inputsizes = None
        self.db.calls.append(call)
        reply = self.db.respond(call)
        if reply.error is not None:
            raise reply.error
        self.description = None
        self._rows = []
        self.rowcount = reply.rowcount * len(params)

    def _take(self, n: int) -> list[Sequence[Any]]:
        out, self._rows = self._rows[:n], self._rows[n:]
        if self._call is not None:
            self._call.fetched += len(out)
        return out

    def fetchone(self) -> Sequence[Any] | None:
        rows = self._take(1)
        return rows[0] if rows else None

    def fetchmany(self, size: int | None = None) -> list[Sequence[Any]]:
        return self._take(size or self.arraysize)

    def fetchall(self) -> list[Sequence[Any]]:
        return self._take(len(self._rows))

    def nextset(self) -> bool:
        return False

    def close(self) -> None:
        self._rows = []

    def __enter__(self) -> FakeCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FakeConnection:
    def __init__(self, db: FakeDB) -> None:
        self.db = db
        self.outputtypehandler: Any = None

    def cursor(self) -> FakeCursor:
        return FakeCursor(self.db)

    def commit(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        pass

    def add_output_converter(self, *args: Any) -> None:  # pyodbc
        pass


def _fake_pyodbc() -> types.ModuleType:
    """Enough of pyodbc for SQLAlchemy's mssql+pyodbc dialect (pyodbc itself needs libodbc)."""
    mod = types.ModuleType("pyodbc")
    error = type("Error", (Exception,), {})
    database_error = type("DatabaseError", (error,), {})
    errors: dict[str, Any] = {"Error": error, "DatabaseError": database_error}
    errors["Warning"] = type("Warning", (Exception,), {})
    errors["InterfaceError"] = type("InterfaceError", (error,), {})
    for name in ("DataError", "OperationalError", "IntegrityError", "InternalError",
                 "ProgrammingError", "NotSupportedError"):
        errors[name] = type(name, (database_error,), {})
    mod.__dict__.update(errors)
    mod.__dict__.update(
        paramstyle="qmark", version="5.2.0", apilevel="2.0", threadsafety=1,
        Binary=bytes, BinaryNull=None, SQL_VARCHAR=12, SQL_WVARCHAR=-9, SQL_DBMS_VER=18,
        # pyodbc's DB-API type objects are these Python types.
        STRING=str, BINARY=bytearray, NUMBER=float, DATETIME=datetime, ROWID=int,
        Cursor=type("Cursor", (), {"nextset": lambda self: False}),
    )
    return mod


FAKE_PYODBC = _fake_pyodbc()


def _engine(backend: str, db: FakeDB, oracle_version: int = 19) -> sa.Engine:
    """A real engine of ``backend`` on the recorder, initialised as the named server version."""
    if backend == "mssql":
        engine = sa.create_engine("mssql+pyodbc://", module=FAKE_PYODBC, creator=db.connect)
        d: Any = engine.dialect

        def init_mssql(connection: Any) -> None:
            d.server_version_info = (16, 0, 1000)  # SQL Server 2022
            d.default_schema_name = "dbo"
            d.default_isolation_level = "READ COMMITTED"
            d._setup_version_attributes()
            d._supports_nvarchar_max = True

        d.initialize = init_mssql
    else:
        engine = sa.create_engine("oracle+oracledb://", creator=db.connect)
        d = engine.dialect

        def init_oracle(connection: Any) -> None:
            # What OracleDialect.initialize derives from the server version.
            d.server_version_info = (oracle_version, 0, 0, 0, 0)
            d.default_schema_name = "system"
            d.default_isolation_level = "READ COMMITTED"
            d._supports_oracle_json = oracle_version >= 21
            d.supports_native_boolean = oracle_version >= 23
            d.supports_identity_columns = True
            d._supports_offset_fetch = True

        d.initialize = init_oracle
    return engine


@dataclass
class Rig:
    backend: str
    db: FakeDB
    engine: sa.Engine
    store: Store


def _rig(backend: str, oracle_version: int = 19) -> Rig:
    db = FakeDB()
    engine = _engine(backend, db, oracle_version)
    store = Store(engine, TABLE)
    prepare_engine(engine)  # as Scheduler does
    _default_replies(db, backend)
    return Rig(backend, db, engine, store)


@pytest.fixture(params=["mssql", "oracle"])
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    r = _rig(str(request.param))
    yield r
    r.engine.dispose()


@pytest.fixture
def mssql() -> Iterator[Rig]:
    r = _rig("mssql")
    yield r
    r.engine.dispose()


@pytest.fixture(params=[19, 23], ids=["oracle19", "oracle23"])
def oracle(request: pytest.FixtureRequest) -> Iterator[Rig]:
    r = _rig("oracle", int(request.param))
    yield r
    r.engine.dispose()


# -- canned rows ----------------------------------------------------------------------------
def row(name: str = NAMES[0], columns: Sequence[str] = COLUMNS, **values: Any
        ) -> tuple[Any, ...]:
    """A table row's ``columns`` (all, in table order, by default), as the driver returns them
    (naive UTC timestamps)."""
    base: dict[str, Any] = {
        "id": 7, "queue_name": name, "payload": '{"n": 1}', "created_at": NOW,
        "next_process_at": NOW, "attempt": 0, "reenqueue_attempt": 4, "total_attempt": 11,
        "paused": 0, "locked_by": None, "heartbeat_at": None, "last_started_at": None,
        "last_finished_at": None, "last_status": None, "last_error": None,
        "schedule": "FixedRate(3600)", "stop_requested": 0, "claim": None,
        "prev_locked_by": None, "prev_next_process_at": None, "prev_last_started_at": None,
        "handler": name, "data": None, "options": None, "priority": 0, "task_group": None,
        "requires": None, "last_success_at": None, "alert_after": None, "alerted_at": None,
        "trigger_link": None,
    }
    base.update(values)
    return tuple(base[c] for c in columns)


def _default_replies(db: FakeDB, backend: str) -> None:
    now_sql = r"SYSUTCDATETIME\(\)" if backend == "mssql" else r"FROM_TZ\("
    db.on(rf"^SELECT {now_sql}.* AS db_now_1( FROM DUAL)?$", Reply(["db_now_1"], [(NOW,)]))
    db.on(r"AS next_due", Reply(["now", "next_due", "n", "max_id"], [(NOW, NOW, 2, 8)]))
    db.on(r"^SELECT \S+\.queue_name, \S+\.schedule, \S+\.options, \S+\.alert_after\s+FROM",
          Reply(["queue_name", "schedule", "options", "alert_after"], []))
    db.on(r"^SELECT \S+\.queue_name, \S+\.id\s+FROM", Reply(
        ["queue_name", "id"], [(NAMES[0], 7), (NAMES[1], 8)]))
    db.on(r"^SELECT \S+\.id, \S+\.total_attempt, \S+\.locked_by, \S+\.stop_requested",
          Reply(["id", "total_attempt", "locked_by", "stop_requested"],
                [(7, 12, NODE, 0), (8, 4, OTHER_NODE, 0)]))
    db.on(r"^SELECT \S+\.id, \S+\.total_attempt, \S+\.locked_by\s+FROM",
          Reply(["id", "total_attempt", "locked_by"], []))
    picked = row(attempt=1, total_attempt=12, locked_by=NODE, claim="c" * 32,
                 prev_next_process_at=NOW)
    if backend == "mssql":
        db.on(r"^WITH dbscheduler_due AS", Reply(list(COLUMNS), [picked]))
        db.on(r"^UPDATE \S+ SET next_process_at=.*OUTPUT inserted\.id, inserted\.stop_requested",
              Reply(["id", "stop_requested"], [(7, 0)]))
    else:
        db.on(r"WHERE \S+\.claim = :c_claim", Reply(list(COLUMNS), [picked]))


def _workout(r: Rig) -> None:
    """Every Store method the engine calls and every Client operation, once."""
    s = r.store
    s.register([Registration(n, "FixedRate(3600)", lambda now: now + timedelta(hours=1))
                for n in NAMES])
    s.poll(NAMES)
    s.pick(NODE, 4, LEASE, NAMES)
    s.heartbeat(NODE, LEASE, {7: 12, 8: 3})
    s.finish(NODE, lambda now: [
        FinishWrite(7, 12, "success", now + timedelta(hours=1), 0, now, payload='{"n": 2}',
                    run=RunRecord(NAMES[0], 12, 1, NODE, STARTED, STARTED)),
        FinishWrite(8, 3, "error", now + timedelta(seconds=10), 1, now, error="boom",
                    run=RunRecord(NAMES[1], 3, 1, NODE, STARTED, STARTED)),
    ])
    s.finish(NODE, lambda now: [
        FinishWrite(9, 5, "success", now, 0, now, delete=True,  # a one-off job that is done
                    run=RunRecord(NAMES[1], 5, 1, NODE, STARTED, STARTED)),
    ])
    s.record_lost(NODE, 7, 12, 2, "node vanished",
                  RunRecord(NAMES[0], 11, 1, OTHER_NODE, STARTED, STARTED))
    s.release(NODE, {7: 12})
    r.db.on(r"WHERE \S+\.queue_name = \S+$", Reply([*COLUMNS, "db_now_"], [(*row(), NOW)]))
    c = ops(s)
    c.trigger(NAMES[0])
    c.reschedule(NAMES[0], datetime(2032, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2))))
    c.pause(NAMES[0])
    c.resume(NAMES[0])
    c.cancel(NAMES[0])
    c.delete(NAMES[0])
    c.info(NAMES[0])
    c.schedule(NAMES[1], "runtime-handler", FixedRate(30.25), data={"n": 2031})
    c.schedule_once(NAMES[1], "runtime-handler",
                    datetime(2031, 1, 2, 3, 4, 5, tzinfo=timezone.utc), data=["boom"])
    c.unschedule(NAMES[1])
    r.db.on(r"ORDER BY \S+\.queue_name$", Reply(
        [*COLUMNS, "db_now_"], [(*row(), NOW), (*row(NAMES[1], id=8), NOW)]))
    c.tasks()
    c.db_now()
    r.db.on(r"^SELECT count\(\*\)", Reply(["n", "r", "p", "o"], [(5, 1, 1, 1)]))
    assert c.counts(timedelta(seconds=60)).idle == 2
    r.db.on(r"FROM scheduled_tasks_runs\s+WHERE .*ORDER BY", Reply(RUN_COLUMNS, [
        (3, NAMES[0], 12, 1, NODE, NOW, NOW, NOW + timedelta(seconds=2), "error", "boom",
         "Traceback (most recent call last):")]))
    (run,) = c.runs(NAMES[0], status=["error", "lost"],
                    since=datetime(2031, 1, 1, tzinfo=timezone.utc), limit=7)
    assert run.duration == timedelta(seconds=2) and run.finished_at.tzinfo is not None
    # Pruning: a batch of ids, deleted by id; the count limit's crowded tasks first.
    r.db.on(r"^SELECT (TOP \S+ )?\S+\.id\s+FROM scheduled_tasks_runs", Reply(["id"], [(1,), (2,)]))
    r.db.on(r"GROUP BY", Reply(["task_name"], [(NAMES[0],)]))
    r.db.on(r"^DELETE FROM scheduled_tasks_runs WHERE \S+\.id IN", Reply(rowcount=2))
    assert next(prune_older(s, datetime(2031, 7, 7, tzinfo=timezone.utc), batch=50)) == 2
    assert next(prune_beyond(s, 1000, batch=50)) == 2
    # Lateness: one bounded query, then one conditional update per kind for its whole page.
    r.db.on(r"UNION ALL", Reply(["id", "kind"], [(7, 0), (8, 1), (9, 2)]))
    assert {x.kind for x in late_rows(s, timedelta(seconds=60.5))} == {
        "overdue", "dead", "recovered"}
    if r.backend == "mssql":
        r.db.on(r"^UPDATE scheduled_tasks SET alerted_at", Reply(["id"], [(7,)]))
    else:
        r.db.on(r"prev_last_started_at = ", Reply(["id", "ours"], [(7, 1)]))
    for kind in ("overdue", "dead", "recovered"):
        assert claim(s, kind, [7, 8], timedelta(seconds=60.5)) == [7]  # type: ignore[arg-type]


def _executed(db: FakeDB) -> list[Call]:
    """Statements, without the transaction control SQLAlchemy adds around them."""
    control = re.compile(r"^(SAVEPOINT|SAVE TRANSACTION|ROLLBACK|RELEASE)", re.I)
    return [c for c in db.calls if not control.match(c.sql)]


def _param_values(call: Call) -> list[Any]:
    """Every value sent with the call (all parameter sets of an executemany)."""
    params = call.params
    sets = params if isinstance(params, list) else [params]
    values: list[Any] = []
    for one in sets:
        values.extend(one.values() if isinstance(one, dict) else (one or ()))
    return values


# -- every statement, both dialects ---------------------------------------------------------
def test_every_statement_binds_its_values(rig: Rig) -> None:
    _workout(rig)
    calls = _executed(rig.db)
    assert len(calls) > 20
    for call in calls:
        text = call.sql
        for literal in (*NAMES, NODE, "2031", "2032", "boom", "FixedRate", "node vanished",
                        '"n"', "30.25"):
            assert literal not in text, f"{literal!r} was written into the SQL: {text}"
    # ... and the values did reach the driver, as parameters.
    sent = [v for call in calls for v in _param_values(call)]
    for value in (*NAMES, NODE, "boom", "node vanished", '{"n": 2}', 30.25):
        assert value in sent, value


def test_no_syntax_of_other_databases(rig: Rig) -> None:
    _workout(rig)
    for text in rig.db.sql():
        assert not re.search(r"\bLIMIT\b|\bFETCH NEXT\b", text), text
        if re.search(r"\bOFFSET\b|\bFETCH FIRST\b", text):
            # The servers' own row limits (SQL Server ≥ 2012, Oracle ≥ 12c): after an ORDER
            # BY, and never next to a row lock (Oracle refuses FETCH FIRST with FOR UPDATE).
            assert re.search(r"ORDER BY [^()]*?(\s+OFFSET \S+ ROWS)?\s+FETCH FIRST \S+ ROWS ONLY",
                             text), text
            assert "FOR UPDATE" not in text and "UPDLOCK" not in text, text
        assert not re.search(r"\bIF (NOT )?EXISTS\b|\bON CONFLICT\b|\bON DUPLICATE\b", text), text
        # Flags are compared with parameters, never a boolean literal (no BOOLEAN on Oracle < 23,
        # and SQL Server has no TRUE/FALSE at all).
        assert not re.search(r"\b(true|false)\b", text, re.I), text
        if rig.backend == "mssql":
            assert not re.search(r"\bRETURNING\b|\bFOR UPDATE\b|\bDUAL\b", text), text
        else:
            assert not re.search(r"\bOUTPUT\b|\bTOP\b|WITH \(", text), text


def test_flags_reach_the_driver_as_numbers(rig: Rig) -> None:
    # SQL Server BIT and Oracle INTEGER both take 0/1; neither has a boolean literal to compare.
    _workout(rig)
    paused = rig.db.find(r"^UPDATE \S+ SET paused=")
    values = [_param_values(c)[0] for c in paused]
    assert values == [1, 0] and all(type(v) is int for v in values)
    picked = rig.db.find(r"paused = [?:]")
    assert picked and all(0 in _param_values(c) for c in picked)


def test_results_come_back_as_aware_utc_datetimes_and_booleans(rig: Rig) -> None:
    _workout(rig)
    rig.db.on(r"ORDER BY \S+\.queue_name$", Reply(
        [*COLUMNS, "db_now_"], [(*row(paused=1, heartbeat_at=NOW), NOW)]))
    (info,) = ops(rig.store).tasks()
    assert info.created_at == NOW.replace(tzinfo=timezone.utc)
    assert info.heartbeat_at is not None and info.heartbeat_at.utcoffset() == timedelta(0)
    assert info.paused is True and info.stop_requested is False
    assert rig.store.db_now() == NOW.replace(tzinfo=timezone.utc)


# -- the clock ------------------------------------------------------------------------------
def _compile(engine: sa.Engine, stmt: sa.ClauseElement) -> Any:
    with engine.connect():  # runs the (patched) initialize, as a real first connect does
        pass
    return stmt.compile(dialect=engine.dialect)


def test_mssql_clock_is_sysutcdatetime_with_a_bound_lease(mssql: Rig) -> None:
    t = mssql.store.table
    assert str(_compile(mssql.engine, sa.select(db_now()))) == "SELECT SYSUTCDATETIME() AS db_now_1"
    compiled = _compile(mssql.engine, sa.update(t).values(next_process_at=db_now_plus(2400.5)))
    sql = str(compiled)
    assert "DATEADD(second, CAST(FLOOR(?) AS INT), SYSUTCDATETIME())" in sql
    assert "DATEADD(microsecond, CAST(ROUND((? - FLOOR(?)) * 1000000, 0) AS INT)" in sql
    assert "2400" not in sql
    # One parameter rendered three times: the driver gets its value at every placeholder.
    assert compiled.positiontup == ["param_1"] * 3
    assert compiled.params == {"param_1": 2400.5}


def test_oracle_clock_is_utc_at_a_numeric_offset(oracle: Rig) -> None:
    compiled = _compile(oracle.engine, sa.select(db_now_plus(30)))
    sql = str(compiled)
    assert "FROM_TZ(CAST(SYS_EXTRACT_UTC(SYSTIMESTAMP) AS TIMESTAMP), '+00:00')" in sql
    assert "NUMTODSINTERVAL(:param_1, 'SECOND')" in sql and sql.endswith("FROM DUAL")
    # A named region ('UTC') would be stored with the value and is unreadable in thin mode
    # (DPY-3022); session-dependent clocks would depend on the node's time zone.
    assert "'UTC'" not in sql
    assert not re.search(r"CURRENT_TIMESTAMP|LOCALTIMESTAMP|SYSDATE\b|SESSIONTIMEZONE", sql)


def test_oracle_binds_every_timestamp_as_timestamp_with_time_zone(oracle: Rig) -> None:
    _workout(oracle)
    tstz = oracledb.DB_TYPE_TIMESTAMP_TZ
    seen = 0
    for call in _executed(oracle.db):
        params = call.params if isinstance(call.params, dict) else {}
        sizes = call.inputsizes if isinstance(call.inputsizes, dict) else {}
        for key, value in params.items():
            if isinstance(value, datetime):
                seen += 1
                assert value.utcoffset() == timedelta(0), (key, value)
                assert sizes.get(key) == tstz, (
                    f"{key} of {call.sql!r} is bound as {sizes.get(key)}, "
                    "not TIMESTAMP WITH TIME ZONE"
                )
    # registration (created_at, first run, the CASE of a changed schedule), finish (next
    # time × 2; the finish time is the database's clock), reschedule
    assert seen >= 7


def test_oracle_engine_set_up_is_idempotent_and_needed(oracle: Rig) -> None:
    oracle.store.dialect.configure_engine(oracle.engine)  # set up twice on one engine
    _workout(oracle)
    # Finishes come in two statement shapes (with and without new state): check both.
    finishes = oracle.db.find(r"^UPDATE \S+ SET .*\bnext_process_at=:(\w+).*last_finished_at=")
    assert len(finishes) == 2
    for finish in finishes:
        key = re.search(r"\bnext_process_at=:(\w+)", finish.sql)
        assert key is not None and isinstance(finish.inputsizes, dict)
        assert finish.inputsizes[key.group(1)] == oracledb.DB_TYPE_TIMESTAMP_TZ
    # Without it, the driver would send a TIMESTAMP that the server places in the session's
    # (the node's local) time zone.
    bare = FakeDB()
    engine = _engine("oracle", bare)
    _default_replies(bare, "oracle")
    with engine.begin() as conn:
        conn.execute(sa.update(make_table(TABLE)).values(
            next_process_at=datetime(2032, 1, 2, tzinfo=timezone.utc)))
    call = bare.one(r"^UPDATE \S+ SET next_process_at=")
    assert isinstance(call.inputsizes, dict)
    assert call.inputsizes["next_process_at"] == oracledb.DB_TYPE_TIMESTAMP


def test_oracle_binds_the_clob_payload_as_a_clob(oracle: Rig) -> None:
    # SQLAlchemy would send NVARCHAR, which Oracle refuses next to the CLOB column in a CASE
    # (ORA-00932) and which becomes a LONG (usable in no expression) beyond 32,767 bytes.
    _workout(oracle)
    writes = [c for c in oracle.db.find(r"\bpayload=") if isinstance(c.inputsizes, dict)]
    assert writes
    for call in writes:
        assert isinstance(call.inputsizes, dict)
        key = re.search(r"\bpayload=(?:CASE .*? THEN )?:(\w+)", call.sql)
        assert key is not None, call.sql
        assert call.inputsizes[key.group(1)] == oracledb.DB_TYPE_CLOB, call.sql


def test_oracle_reschedule_stores_the_instant_in_utc(oracle: Rig) -> None:
    _workout(oracle)
    call = oracle.db.one(
        r"^UPDATE \S+ SET next_process_at=:next_process_at, attempt=:attempt, "
        r"trigger_link=:trigger_link WHERE")
    (at,) = [v for v in call.params.values() if isinstance(v, datetime) and v.year == 2032]
    assert at == datetime(2032, 1, 2, 1, 4, 5, tzinfo=timezone.utc)


def test_mssql_timestamps_are_bound_as_naive_utc(mssql: Rig) -> None:
    _workout(mssql)
    call = mssql.db.one(r"^UPDATE \S+ SET next_process_at=\?, attempt=\?, trigger_link=\? WHERE")
    assert datetime(2032, 1, 2, 1, 4, 5) in _param_values(call)  # DATETIME2 holds UTC


# -- registration ---------------------------------------------------------------------------
def test_mssql_registration_probes_with_a_key_range_lock(mssql: Rig) -> None:
    _workout(mssql)
    inserts = mssql.db.find(r"^INSERT INTO scheduled_tasks \(")
    assert len(inserts) == len(NAMES)
    sql = inserts[0].sql
    assert re.search(
        r"^INSERT INTO scheduled_tasks \(queue_name, handler, created_at, next_process_at, "
        r"attempt, reenqueue_attempt, total_attempt, paused, schedule, stop_requested, "
        r"priority\) SELECT \?( AS \w+)?(, \?( AS \w+)?){10}\s+"
        r"WHERE NOT \(EXISTS \(SELECT existing\.id\s+"
        r"FROM scheduled_tasks AS existing WITH \(UPDLOCK, HOLDLOCK\)\s+"
        r"WHERE existing\.queue_name = \?\)\)$", sql), sql
    assert "scope_identity" not in sql.lower()  # nothing to fetch: INSERT … SELECT is inline
    values = _param_values(inserts[0])
    assert values[0] == values[-1] == min(NAMES)  # registration goes in name order
    # The insert is wrapped in a savepoint, the schedule update follows.
    assert any(s.startswith("SAVE TRANSACTION") for s in mssql.db.sql())
    case = [c for c in mssql.db.find(
        r"^UPDATE \S+ SET next_process_at=CASE WHEN \(\S+\.locked_by IS NULL\)")
        if "handler=" not in c.sql]  # Client.schedule's update of a runtime task
    assert len(case) == 1, "one executemany checks every name's schedule"
    assert isinstance(case[0].params, list) and len(case[0].params) == len(NAMES)


def test_oracle_registration_inserts_from_dual_where_absent(oracle: Rig) -> None:
    _workout(oracle)
    sql = oracle.db.find(r"^INSERT INTO")[0].sql
    assert re.search(r"SELECT :v_queue_name AS \w+, .* FROM DUAL\s+WHERE NOT \(EXISTS \("
                     r"SELECT existing\.id\s+FROM scheduled_tasks existing\s+"
                     r"WHERE existing\.queue_name = :v_queue_name\)\)$", sql, re.S), sql
    assert "RETURNING" not in sql and "MERGE" not in sql
    # Oracle cannot parse an AS between a table and its alias, nor SQL Server hints.
    assert " AS existing" not in sql and "HOLDLOCK" not in sql


def _duplicate_error(backend: str) -> BaseException:
    if backend == "mssql":
        err: type[BaseException] = FAKE_PYODBC.IntegrityError
        return err("23000", "Violation of UNIQUE KEY constraint 'scheduled_tasks_uq'. (2627)")
    return oracledb.IntegrityError("ORA-00001: unique constraint (SYSTEM.SCHEDULED_TASKS_UQ) "
                                   "violated")


def test_a_duplicate_key_from_a_racing_node_means_the_row_is_there(rig: Rig) -> None:
    rig.db.on(r"^INSERT INTO", Reply(error=_duplicate_error(rig.backend)))
    rig.db.on(r"^SELECT \S+\.id\s+FROM \S+\s+WHERE \S+\.queue_name = \S+$",
              Reply(["id"], [(7,)]))
    rig.store.register([Registration(NAMES[0], "FixedRate(3600)", lambda now: now)])
    sql = rig.db.sql()
    rollback = "ROLLBACK TRANSACTION" if rig.backend == "mssql" else "ROLLBACK TO SAVEPOINT"
    assert any(s.startswith(rollback) for s in sql), sql
    assert rig.db.find(r"^UPDATE \S+ SET next_process_at=CASE"), "the schedule check still ran"


def test_another_integrity_error_on_registration_is_not_swallowed(rig: Rig) -> None:
    rig.db.on(r"^INSERT INTO", Reply(error=_duplicate_error(rig.backend)))
    rig.db.on(r"^SELECT \S+\.id\s+FROM \S+\s+WHERE \S+\.queue_name = \S+$", Reply(["id"], []))
    with pytest.raises(sa.exc.IntegrityError):
        rig.store.register([Registration(NAMES[0], "FixedRate(3600)", lambda now: now)])


# -- the pick -------------------------------------------------------------------------------
def test_mssql_pick_is_one_update_of_a_locked_cte_with_output(mssql: Rig) -> None:
    started = NOW + timedelta(microseconds=5)
    mssql.db.on(r"^WITH dbscheduler_due AS", Reply(
        list(PICKED),
        [row(columns=PICKED, attempt=1, total_attempt=12, last_started_at=started,
             prev_locked_by=OTHER_NODE, prev_next_process_at=NOW - timedelta(seconds=40),
             prev_last_started_at=NOW - timedelta(seconds=41))],
    ))
    (picked,) = mssql.store.pick(NODE, 5, LEASE, NAMES).rows
    call = mssql.db.one(r"^WITH dbscheduler_due AS")
    sql = " ".join(call.sql.split())
    assert sql.startswith(
        "WITH dbscheduler_due AS (SELECT TOP 5 scheduled_tasks.id AS id, "
        "scheduled_tasks.queue_name AS "
    ), sql
    assert ("FROM scheduled_tasks WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK) "
            "WHERE scheduled_tasks.paused = ? AND scheduled_tasks.requires IS NULL ") in sql
    # Rows of full groups are left alone, inside the locked read.
    assert ("AND (scheduled_tasks.task_group IS NULL OR (scheduled_tasks.task_group NOT IN "
            "(SELECT full_groups.name FROM (SELECT scheduled_tasks_groups.name AS name FROM "
            "scheduled_tasks_groups WHERE scheduled_tasks_groups.max_running <= (SELECT "
            "count(grp_running.id) AS count_1 FROM scheduled_tasks AS grp_running WHERE "
            "grp_running.task_group = scheduled_tasks_groups.name AND ") in sql
    assert ("AND (scheduled_tasks.handler IN (SELECT p_names_h.name FROM (SELECT value "
            "COLLATE Latin1_General_100_BIN2 AS name FROM OPENJSON(?)) AS p_names_h) OR ? = ? "
            "AND scheduled_tasks.handler IS NOT NULL AND (scheduled_tasks.handler NOT IN "
            "(SELECT p_lacking_h.name FROM (SELECT value COLLATE Latin1_General_100_BIN2 AS name "
            "FROM OPENJSON(?)) AS p_lacking_h))) AND "
            # Due within the time ahead; a row another node holds only once its lease is over.
            "scheduled_tasks.next_process_at <= DATEADD(microsecond, CAST(ROUND((? - FLOOR(?)) "
            "* 1000000, 0) AS INT), DATEADD(second, CAST(FLOOR(?) AS INT), SYSUTCDATETIME())) "
            "AND (scheduled_tasks.locked_by IS NULL OR "
            "scheduled_tasks.next_process_at <= SYSUTCDATETIME()) "
            "ORDER BY scheduled_tasks.priority DESC, scheduled_tasks.next_process_at) "
            "UPDATE dbscheduler_due SET ") in sql
    for assignment in ("attempt=(dbscheduler_due.attempt + ?)",
                       "total_attempt=(dbscheduler_due.total_attempt + ?)",
                       "next_process_at=DATEADD(microsecond,", "locked_by=?",
                       "heartbeat_at=SYSUTCDATETIME()",
                       # A row picked ahead starts at its due time.
                       "last_started_at=CASE WHEN (dbscheduler_due.next_process_at > "
                       "SYSUTCDATETIME()) THEN dbscheduler_due.next_process_at ELSE "
                       "SYSUTCDATETIME() END",
                       "stop_requested=?", "claim=?",
                       # SQL Server evaluates SET on the old row: these copy what is replaced
                       "prev_locked_by=dbscheduler_due.locked_by",
                       "prev_next_process_at=dbscheduler_due.next_process_at",
                       "prev_last_started_at=dbscheduler_due.last_started_at"):
        assert assignment in sql, assignment
    # Only the columns running the row takes come back.
    assert sql.endswith("OUTPUT " + ", ".join(f"inserted.{c}" for c in PICKED)), sql
    assert NODE in _param_values(call) and 30.25 in _param_values(call)
    # Result: those columns, processed (aware UTC), with the previous values.
    assert set(picked) == set(PICKED)
    assert picked["total_attempt"] == 12
    assert picked["last_started_at"] == started.replace(tzinfo=timezone.utc)
    assert picked["prev_locked_by"] == OTHER_NODE
    assert picked["prev_next_process_at"] == (NOW - timedelta(seconds=40)).replace(
        tzinfo=timezone.utc)


def test_mssql_pick_respects_the_handler_filter_inside_the_locked_read(mssql: Rig) -> None:
    # Rows of handlers this node does not have must never be locked or taken: the filter is
    # in the CTE's WHERE, and it names this node's handlers (not every row's name).
    # The names travel as one JSON parameter, so the text is the same for any number.
    mssql.store.pick(NODE, 2, LEASE, NAMES)
    sql = " ".join(mssql.db.one(r"^WITH dbscheduler_due AS").sql.split())
    cte = sql[: sql.index("UPDATE dbscheduler_due")]
    assert "scheduled_tasks.handler IN (SELECT p_names_h.name FROM (SELECT value" in cte, cte
    assert json.dumps(sorted(NAMES)) in _param_values(mssql.db.one(r"^WITH dbscheduler_due AS"))


def test_the_poll_looks_up_each_handler_by_the_handler_index(rig: Rig) -> None:
    # One lookup per name of the bound list (the text is the same for any number of names),
    # and one of the due-time index for a node that picks by the names it lacks.
    rig.store.poll(NAMES)
    call = rig.db.one(r"AS next_due")
    sql = call.sql
    assert sql.count("handler = p_names_h.name") == 1, sql
    assert "UNION ALL" in sql, sql
    assert json.dumps(sorted(NAMES)) in _param_values(call)
    assert "count(*)" not in sql, "an idle poll must not count the table"


def test_the_pick_and_the_poll_read_the_same_for_two_names_and_five_thousand(rig: Rig) -> None:
    # The names are one bound JSON parameter: the statement text (and the server's plan
    # cache entry) does not grow with the node's names, and up to UNION_LIMIT names or past
    # it only the parameters change.
    def sent(names: list[str]) -> list[str]:
        before = len(rig.db.calls)
        rig.store._shape_checked = float("-inf")  # both polls check the table's shape too
        rig.store.poll(names)
        rig.store.pick(NODE, 5, LEASE, names)
        return [c.sql for c in rig.db.calls[before:]]

    few = sent(list(NAMES))
    many = sent([*NAMES, *(f"other-{i}" for i in range(5_000))])
    assert few == many
    assert not any("other-" in s or "nightly-Report" in s for s in many)


def test_oracle_pick_is_one_update_then_a_read_of_its_claim(oracle: Rig) -> None:
    claimed = [row(f"t{i}", id=i, attempt=1, total_attempt=12, locked_by=NODE,
                   prev_locked_by=OTHER_NODE if i == 1 else None, prev_next_process_at=NOW)
               for i in range(1, 4)]
    oracle.db.on(r"WHERE \S+\.claim = :c_claim", Reply(list(COLUMNS), claimed))
    oracle.db.on(r"^SELECT \S+\.queue_name, \S+\.id\s+FROM", Reply(
        ["queue_name", "id"], [(f"t{i}", i) for i in range(1, 8)]))
    names = [f"t{i}" for i in range(1, 8)]
    picked = oracle.store.pick(NODE, 3, LEASE, names).rows
    update = oracle.db.one(r"^UPDATE scheduled_tasks SET prev_locked_by=")
    sql = " ".join(update.sql.split())
    # The copies of what the pick replaces come first, then the claim and the lease.
    assert sql.startswith(
        "UPDATE scheduled_tasks SET prev_locked_by=scheduled_tasks.locked_by, "
        "prev_next_process_at=scheduled_tasks.next_process_at, "
        "prev_last_started_at=scheduled_tasks.last_started_at, claim=:p_claim, "), sql
    # The due condition is on the updated row itself: a row another picker took while this
    # statement waited for its lock is re-evaluated (write consistency) and skipped.
    assert "WHERE scheduled_tasks.paused = :paused_1 AND scheduled_tasks.requires IS NULL" in sql
    assert ("full_groups))) AND (scheduled_tasks.handler IN (SELECT p_names_h.name FROM "
            "(SELECT name FROM JSON_TABLE(:p_names, '$[*]' COLUMNS (name VARCHAR2(1020 CHAR) "
            "PATH '$')) jt) p_names_h) OR :p_lacks = :param_1 AND ") in sql
    # Due within the time ahead; a row another node holds only once its lease is over.
    assert (") AND scheduled_tasks.next_process_at <= (FROM_TZ(CAST("
            "SYS_EXTRACT_UTC(SYSTIMESTAMP) AS TIMESTAMP), '+00:00') + NUMTODSINTERVAL("
            ":p_ahead, 'SECOND')) AND (scheduled_tasks.locked_by IS NULL OR "
            "scheduled_tasks.next_process_at <= FROM_TZ(") in sql
    # A row picked ahead starts at its due time.
    assert ("last_started_at=CASE WHEN (scheduled_tasks.next_process_at > FROM_TZ(CAST("
            "SYS_EXTRACT_UTC(SYSTIMESTAMP) AS TIMESTAMP), '+00:00')) THEN "
            "scheduled_tasks.next_process_at ELSE FROM_TZ(") in sql
    assert update.params["p_names"] == json.dumps(names) and update.params["p_lacks"] == 0
    assert update.params["p_ahead"] == 0.0
    assert re.search(r"AND scheduled_tasks\.id IN \(SELECT due\.id FROM scheduled_tasks due "
                     r"WHERE due\.paused = :paused_2 AND due\.requires IS NULL .* AND "
                     r"\(due\.handler IN \(.*\) AND due\.next_process_at <= \(FROM_TZ\(.*"
                     r"ORDER BY due\.priority DESC, due\.next_process_at FETCH FIRST 3 ROWS "
                     r"ONLY\)$", sql), sql
    assert not re.search(r"FOR UPDATE", " ".join(oracle.db.sql()))
    claim = update.params["p_claim"]
    assert isinstance(claim, str) and len(claim) == 32
    read = oracle.db.one(r"WHERE \S+\.claim = :c_claim")
    assert read.params["c_claim"] == claim and read.params["c_node"] == NODE
    assert [p["queue_name"] for p in picked] == ["t1", "t2", "t3"]
    first = picked[0]
    assert first["prev_locked_by"] == OTHER_NODE and first["locked_by"] == NODE
    assert first["attempt"] == 1 and first["total_attempt"] == 12


# -- name filters ---------------------------------------------------------------------------
def _where_sql(engine: sa.Engine, clause: sa.ColumnElement[bool]) -> str:
    t = make_table()
    with engine.connect():
        pass
    return str(
        sa.select(t.c.id).where(clause).compile(
            dialect=engine.dialect, compile_kwargs={"render_postcompile": True}
        )
    )


def test_mssql_long_name_lists_travel_as_one_json_parameter(mssql: Rig) -> None:
    col = mssql.store.table.c.queue_name
    names = [f"n{i}" for i in range(MSSQL_IN_LIST_LIMIT + 1)]
    short = _where_sql(mssql.engine, mssql.store.dialect.names_in(col, names[:-1]))
    assert short.count("?") == MSSQL_IN_LIST_LIMIT
    long = _where_sql(mssql.engine, mssql.store.dialect.names_in(col, names))
    assert long.count("?") == 1
    assert ("IN (SELECT value COLLATE Latin1_General_100_BIN2 AS value FROM OPENJSON(?))"
            in long), long


def test_oracle_long_name_lists_are_split_below_ora_01795(oracle: Rig) -> None:
    col = oracle.store.table.c.queue_name
    names = [f"n{i}" for i in range(2 * ORACLE_IN_LIST_LIMIT + 1)]
    sql = _where_sql(oracle.engine, oracle.store.dialect.names_in(col, names))
    lists = re.findall(r"IN \(([^)]*)\)", sql)
    assert [len(x.split(",")) for x in lists] == [1000, 1000, 1]


# -- the DDL --------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["mssql", "oracle"])
def test_ddl_file_is_the_migrations_offline_sql(backend: str) -> None:
    assert (ROOT / "ddl" / f"{backend}.sql").read_text() == offline_sql(backend)


def _create_table(sql: str) -> str:
    match = re.search(r"CREATE TABLE scheduled_tasks \((.*?)\n\)", sql, re.S)
    assert match, sql
    return match.group(1)


def test_mssql_ddl() -> None:
    sql = offline_sql("mssql")
    body = _create_table(sql)
    assert "id BIGINT NOT NULL IDENTITY" in body
    # Exact, case-sensitive names whatever the database's default collation.
    assert "queue_name NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL" in body
    assert "payload NVARCHAR(max) NULL" in body and "NTEXT" not in sql
    for column in TIMESTAMPS:
        assert re.search(rf"\b{column} DATETIME2\(6\) (NOT )?NULL", body), column
    assert "DATETIMEOFFSET" not in sql and re.search(r"\bDATETIME\b", sql) is None
    for flag in ("paused", "stop_requested"):
        assert f"{flag} BIT NOT NULL DEFAULT 0" in body
    assert "PRIMARY KEY (id)" in body
    assert "CONSTRAINT scheduled_tasks_uq UNIQUE (queue_name)" in body
    assert "CREATE INDEX scheduled_tasks_next_idx ON scheduled_tasks (next_process_at)" in sql
    assert "IF EXISTS" not in sql and "IF NOT EXISTS" not in sql


def test_oracle_ddl_is_valid_for_oracle_19() -> None:
    sql = offline_sql("oracle")
    body = _create_table(sql)
    assert "id NUMBER(19) GENERATED BY DEFAULT AS IDENTITY" in body  # Oracle ≥ 12c
    assert "queue_name VARCHAR2(255 CHAR) NOT NULL" in body
    assert "payload CLOB" in body
    for column in TIMESTAMPS:
        assert re.search(rf"\b{column} TIMESTAMP WITH TIME ZONE\b", body), column
    for flag in ("paused", "stop_requested"):
        # DEFAULT must precede NOT NULL in Oracle's column syntax.
        assert f"{flag} INTEGER DEFAULT 0 NOT NULL" in body
    assert "CONSTRAINT scheduled_tasks_uq UNIQUE (queue_name)" in body
    assert "CREATE INDEX scheduled_tasks_next_idx ON scheduled_tasks (next_process_at)" in sql
    # Nothing Oracle 19 lacks or spells differently.
    for absent in (r"\bBOOLEAN\b", r"\bIF (NOT )?EXISTS\b", r"\bAUTO_INCREMENT\b",
                   r"\bSERIAL\b", r"\bTEXT\b", r"\bDATETIME", r"\bBIT\b", r"\bNVARCHAR\b",
                   r"\bBEGIN\b", r";\s*$"):
        assert not re.search(absent, sql, re.M), absent
    # Statements end with SQL*Plus's "/" line, and identifiers fit Oracle's 128 bytes.
    # 0001: four statements; 0002: four columns, an index, the version update; 0003: three
    # columns, the handler update, an index, the version update; 0004: three columns, an
    # index, the groups table, the version update; 0005: three columns, the last-success
    # update, an index, the runs table and its two indexes, the version update; 0006: the
    # items table, two indexes, the version update; 0007: a column, the version update; 0008:
    # the nodes table, the version update; 0009: a column, the version update; 0010: an
    # index, the version update; 0011: the version update (no index on Oracle); 0012: the
    # version update (Oracle keeps the claim index); the COMMIT
    assert sql.count("\n/\n") == 46
    for ident in re.findall(r"\b[a-z_][a-z0-9_]*\b", sql):
        assert len(ident.encode()) <= 128


def test_oracle_identifiers_of_the_longest_table_name_fit() -> None:
    name = "t" * 63
    sql = offline_sql("oracle", name)
    assert f"{name}_next_idx" in sql and f"{name}_version_pkc" in sql
    assert max(len(i) for i in re.findall(r"\b\w+\b", sql)) <= 128


def test_dialect_for_returns_the_completed_dialects() -> None:
    db = FakeDB()
    assert type(dialect_for(_engine("mssql", db))).__name__ == "MSSQLDialect"
    assert type(dialect_for(_engine("oracle", db))).__name__ == "OracleDialect"


# -- the run history ------------------------------------------------------------------------
def _finish_one(r: Rig, status: str = "success", error: str | None = None) -> None:
    r.store.finish(NODE, lambda now: [FinishWrite(
        7, 12, status, now + timedelta(hours=1), 0, now, error=error,  # type: ignore[arg-type]
        run=RunRecord(NAMES[0], 12, 3, NODE, NOW.replace(tzinfo=timezone.utc), STARTED))])


def test_the_run_row_is_written_first_fenced_by_the_execution(rig: Rig) -> None:
    # No data-modifying CTE here: the run row goes first, and only while this execution
    # still holds its row; then the fenced finish.
    _finish_one(rig, "error", "boom")
    sql = rig.db.sql()
    insert = rig.db.one(r"^INSERT INTO scheduled_tasks_runs")
    update = rig.db.one(r"^UPDATE scheduled_tasks SET .*last_finished_at=")
    assert sql.index(insert.sql) < sql.index(update.sql)
    text = " ".join(insert.sql.split())
    assert text.startswith(
        "INSERT INTO scheduled_tasks_runs (task_name, token, attempt, node_id, scheduled_at, "
        "started_at, finished_at, status, error) SELECT "), text
    clock = "SYSUTCDATETIME()" if rig.backend == "mssql" else "FROM_TZ(CAST(SYS_EXTRACT_UTC("
    assert clock in text  # finished on the database's clock
    assert re.search(r"FROM scheduled_tasks WHERE scheduled_tasks\.id = \S+ AND "
                     r"scheduled_tasks\.total_attempt = \S+ AND scheduled_tasks\.locked_by = "
                     r"\S+$", text), text
    values = _param_values(insert)
    for value in (NAMES[0], 12, 3, NODE, "error", "boom", 7):
        assert value in values, value
    # Every value is bound: the text is the same for every execution.
    assert NAMES[0] not in text and "boom" not in text


def test_a_success_leaves_the_error_out_of_its_run_row(rig: Rig) -> None:
    _finish_one(rig)
    insert = rig.db.one(r"^INSERT INTO scheduled_tasks_runs")
    assert "error" not in insert.sql.split("SELECT")[0]
    assert None not in _param_values(insert)  # no untyped NULL in the select list


def test_a_run_row_already_there_is_settled_not_duplicated(rig: Rig) -> None:
    # The same execution's row exists: this finish retried, or the node that took the task
    # over already wrote it lost. It is updated (never a lost one), then the finish runs.
    rig.db.on(r"^INSERT INTO scheduled_tasks_runs", Reply(error=_duplicate_error(rig.backend)))
    _finish_one(rig)
    settle = rig.db.one(r"^UPDATE scheduled_tasks_runs SET")
    text = " ".join(settle.sql.split())
    assert re.search(r"SET (?=.*\bstatus=)(?=.*\berror=)(?=.*\bfinished_at=).* WHERE", text), text
    assert re.search(r"WHERE scheduled_tasks_runs\.task_name = \S+ AND "
                     r"scheduled_tasks_runs\.token = \S+ AND scheduled_tasks_runs\.started_at = "
                     r"\S+ AND scheduled_tasks_runs\.status != \S+$", text), text
    assert "lost" in _param_values(settle) and STARTED.replace(tzinfo=None) in [
        v.replace(tzinfo=None) if isinstance(v, datetime) else v for v in _param_values(settle)]
    assert rig.db.find(r"^UPDATE scheduled_tasks SET .*last_finished_at="), "the finish ran"


def test_a_finish_that_did_not_land_takes_its_run_row_back(rig: Rig) -> None:
    # The fence refused the finish: another node picked the row meanwhile (token 13, and
    # it found this node's execution running). Its run row goes, unless it became lost.
    rig.db.on(r"^UPDATE scheduled_tasks SET .*last_finished_at=", Reply(rowcount=0))
    rig.db.on(r"^SELECT \S+\.id, \S+\.total_attempt, \S+\.locked_by, \S+\.prev_locked_by",
              Reply(["id", "total_attempt", "locked_by", "prev_locked_by"],
                    [(7, 13, OTHER_NODE, NODE)]))
    _finish_one(rig)
    delete = rig.db.one(r"^DELETE FROM scheduled_tasks_runs")
    assert re.search(r"WHERE scheduled_tasks_runs\.task_name = \S+ AND scheduled_tasks_runs\."
                     r"token = \S+ AND scheduled_tasks_runs\.started_at = \S+ AND "
                     r"scheduled_tasks_runs\.status != \S+$", " ".join(delete.sql.split()))
    assert {NAMES[0], 12, "lost"} <= set(_param_values(delete))


def test_a_finish_read_back_two_picks_later_is_settled_by_its_run_row(rig: Rig) -> None:
    # The finish's answer was lost and the row moved on by two picks before the node could
    # look: its own run row (not lost) says it landed, so it is kept and nothing is refused.
    rig.db.on(r"^UPDATE scheduled_tasks SET .*last_finished_at=", Reply(rowcount=0))
    rig.db.on(r"^SELECT \S+\.id, \S+\.total_attempt, \S+\.locked_by, \S+\.prev_locked_by",
              Reply(["id", "total_attempt", "locked_by", "prev_locked_by"],
                    [(7, 14, OTHER_NODE, OTHER_NODE)]))
    rig.db.on(r"^SELECT \S+\.task_name, \S+\.token, \S+\.started_at, \S+\.status",
              Reply(["task_name", "token", "started_at", "status"],
                    [(NAMES[0], 12, STARTED.replace(tzinfo=None), "success")]))
    _finish_one(rig)
    read = rig.db.one(r"^SELECT \S+\.task_name, \S+\.token, \S+\.started_at, \S+\.status")
    assert re.search(r"FROM scheduled_tasks_runs\s+WHERE scheduled_tasks_runs\.task_name IN "
                     r".* AND scheduled_tasks_runs\.token IN", read.sql), read.sql
    assert {NAMES[0], 12} <= set(_param_values(read))
    assert not rig.db.find(r"^DELETE FROM scheduled_tasks_runs"), "its run row stays"


def test_a_delivered_batch_makes_its_run_row_a_success(rig: Rig) -> None:
    # A delivery that removed its items under its lease, whose finish came after it: the run
    # row the node that took the key over wrote (lost) becomes a success, or is written.
    rig.db.on(r"^UPDATE scheduled_tasks_runs SET", Reply(rowcount=0))
    run = RunRecord(NAMES[0], 12, 1, NODE, STARTED, STARTED)
    with rig.store.autocommit() as conn:
        settle_success(rig.store, conn, run)
    update = rig.db.one(r"^UPDATE scheduled_tasks_runs SET")
    text = " ".join(update.sql.split())
    assert re.search(r"SET (?=.*\bstatus=)(?=.*\berror=)(?=.*\bfinished_at=).* WHERE "
                     r"scheduled_tasks_runs\.task_name = \S+ AND scheduled_tasks_runs\.token = "
                     r"\S+ AND scheduled_tasks_runs\.started_at = \S+$", text), text
    insert = rig.db.one(r"^INSERT INTO scheduled_tasks_runs")
    assert re.search(r"\) SELECT .*" + (" FROM DUAL$" if rig.backend == "oracle" else ""),
                     " ".join(insert.sql.split())), insert.sql
    assert {NAMES[0], 12, NODE, "success"} <= set(_param_values(insert))


def test_a_lost_execution_gets_its_row_from_the_node_that_found_it(rig: Rig) -> None:
    rig.store.record_lost(NODE, 7, 12, 2, "node Zz1 vanished",
                          RunRecord(NAMES[0], 11, 1, OTHER_NODE, STARTED, STARTED))
    insert = rig.db.one(r"^INSERT INTO scheduled_tasks_runs")
    values = _param_values(insert)
    # The lost execution's token and node, fenced by the finder's own (newer) token.
    assert {NAMES[0], 11, OTHER_NODE, "lost", "node Zz1 vanished", 12, NODE} <= set(values)
    sql = rig.db.sql()
    assert sql.index(insert.sql) < sql.index(rig.db.one(r"^UPDATE scheduled_tasks SET").sql)


def test_runs_ddl_on_sql_server_and_oracle() -> None:
    for dialect, name_type, stamp in (
        ("mssql", "NVARCHAR(255) COLLATE Latin1_General_100_BIN2", "DATETIME2(6)"),
        ("oracle", "VARCHAR2(255 CHAR)", "TIMESTAMP WITH TIME ZONE"),
    ):
        sql = offline_sql(dialect)
        match = re.search(r"CREATE TABLE scheduled_tasks_runs \((.*?)\n\)", sql, re.S)
        assert match, sql
        body = match.group(1)
        assert f"task_name {name_type} NOT NULL" in body
        for column in ("scheduled_at", "started_at", "finished_at"):
            assert re.search(rf"\b{column} {re.escape(stamp)} NOT NULL", body), (dialect, column)
        assert "CONSTRAINT scheduled_tasks_runs_uq UNIQUE (task_name, token, started_at)" in body
        assert ("CREATE INDEX scheduled_tasks_runs_task_idx ON scheduled_tasks_runs "
                "(task_name, finished_at)") in sql
        assert ("CREATE INDEX scheduled_tasks_runs_time_idx ON scheduled_tasks_runs "
                "(finished_at)") in sql
        assert ("CREATE INDEX scheduled_tasks_alert_idx ON scheduled_tasks "
                "(alerted_at, alert_after)") in sql


def test_the_run_status_index_on_sql_server_and_oracle() -> None:
    # Revision 10: a status filter reads one status's newest runs from an index.
    for dialect in ("mssql", "oracle"):
        sql = offline_sql(dialect)
        create = ("CREATE INDEX scheduled_tasks_runs_status_idx ON scheduled_tasks_runs "
                  "(status, finished_at)")
        assert sql.count(create) == 1, dialect
        assert sql.index("dbscheduler_0009 -> dbscheduler_0010") < sql.index(create), dialect


def test_pruning_deletes_by_id_at_most_a_batch_per_statement(rig: Rig) -> None:
    from dbscheduler._store import PRUNE_BATCH

    ids = [(i,) for i in range(PRUNE_BATCH)]
    rig.db.on(r"^SELECT (TOP \S+ )?\S+\.id\s+FROM scheduled_tasks_runs", Reply(["id"], ids))
    rig.db.on(r"^DELETE FROM scheduled_tasks_runs", Reply(rowcount=PRUNE_BATCH))
    assert next(prune_older(rig.store, NOW.replace(tzinfo=timezone.utc))) == PRUNE_BATCH
    read = rig.db.one(r"^SELECT (TOP \S+ )?\S+\.id\s+FROM scheduled_tasks_runs")
    limit = "TOP" if rig.backend == "mssql" else "FETCH FIRST"
    assert limit in read.sql and "ORDER BY scheduled_tasks_runs.finished_at" in read.sql
    delete = rig.db.one(r"^DELETE FROM scheduled_tasks_runs")
    # Within Oracle's 1,000-item IN lists and SQL Server's 2,100 parameters.
    assert len(_param_values(delete)) == PRUNE_BATCH + 1


def test_the_lateness_check_is_one_union_of_index_reads(rig: Rig) -> None:
    rig.db.on(r"UNION ALL", Reply(["id", "kind"], []))
    assert late_rows(rig.store, timedelta(seconds=90), one_offs=False) == []
    call = rig.db.one(r"UNION ALL")
    text = " ".join(call.sql.split())
    assert text.count("UNION ALL") == 2, text
    assert "alerted_at IS NULL" in text and "alert_after IS NOT NULL" in text
    assert "coalesce(scheduled_tasks.last_success_at, scheduled_tasks.created_at) <" in text
    assert -90.0 in _param_values(call)
    # A bounded page of each kind, the longest overdue first; one-off jobs left out.
    limit = f"TOP {PAGE}" if rig.backend == "mssql" else "FETCH FIRST"
    assert text.count(limit) == 3, text
    assert "ORDER BY scheduled_tasks.next_process_at, scheduled_tasks.id" in text
    assert "scheduled_tasks.schedule NOT LIKE" in text


def test_a_lateness_claim_is_one_update_for_its_page(rig: Rig) -> None:
    ids = list(range(1, PAGE + 1))
    if rig.backend == "mssql":
        rig.db.on(r"^UPDATE scheduled_tasks SET alerted_at", Reply(["id"], [(3,), (5,)]))
    else:
        rig.db.on(r"prev_last_started_at = ", Reply(["id", "ours"], [(3, 1), (5, 1)]))
    assert claim(rig.store, "overdue", ids, timedelta(seconds=90)) == [3, 5]
    (update,) = [c for c in _executed(rig.db) if c.sql.startswith("UPDATE")]
    text = " ".join(update.sql.split())
    assert "alerted_at IS NULL" in text and "locked_by IS NULL" in text
    if rig.backend == "mssql":  # the rows it changed come back with it
        assert "OUTPUT inserted.id" in text
    else:  # a random marker, read back by a plain select
        assert "prev_last_started_at=" in text.replace(" ", "")
        read = rig.db.one(r"^SELECT .*prev_last_started_at = ")
        assert "CASE WHEN" in read.sql
    # Within Oracle's 1,000-item IN lists and SQL Server's 2,100 parameters.
    assert len(_param_values(update)) < 1000
def test_a_trigger_in_a_trace_stores_its_link_with_the_next_token(rig: Rig) -> None:
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    _trace_links.install(lambda: parent)
    try:
        ops(rig.store).trigger(NAMES[0])
    finally:
        _trace_links.install(None)
    (update,) = [c for c in _executed(rig.db) if c.sql.startswith("UPDATE")]
    assert parent not in update.sql and f"{parent} " in _param_values(update)
    concat = {"mssql": r"\+ CAST\(\S+\.total_attempt \+ \S+ AS VARCHAR\(20\)\)",
              "oracle": r"\|\| CAST\(\S+\.total_attempt \+ \S+ AS VARCHAR2?\(20( CHAR)?\)\)"}
    assert re.search(r"trigger_link=\S+ " + concat[rig.backend], update.sql), update.sql


def test_bulk_creation_is_two_statements_per_batch_each_sent_once_for_all_rows(
    rig: Rig
) -> None:
    from dbscheduler._store.bulk import push_many, write_runtime_many
    from dbscheduler.bulk import push_rows, runtime_rows

    at = datetime(2031, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    rows = runtime_rows([("job-1", "mail", at, {"n": 1}), ("job-2", "mail", at, None),
                         ("job-3", "mail", at, {"n": 3}, )], once=True)
    rig.db.calls.clear()
    write_runtime_many(rig.store, rows)
    writes = [c for c in _executed(rig.db) if re.match(r"^(INSERT|UPDATE)", c.sql)]
    assert [w.sql.split()[0] for w in writes] == ["INSERT", "UPDATE"], rig.db.sql()
    insert, update = writes
    assert "WHERE NOT (EXISTS" in insert.sql
    if rig.backend == "mssql":
        assert "WITH (UPDLOCK, HOLDLOCK)" in insert.sql
    # Each statement once, with every row's values as parameter sets, nothing inlined.
    assert isinstance(insert.params, list) and len(insert.params) == 3
    assert isinstance(update.params, list) and len(update.params) == 3
    for call in writes:
        assert "job-" not in call.sql and "2031" not in call.sql
        assert "job-2" in _param_values(call)
    assert "CASE WHEN (scheduled_tasks.locked_by IS NULL)" in update.sql
    # Pushes: the items in one statement, the keys' rows as above.
    rig.db.calls.clear()
    push_many(rig.store, push_rows([("ann", {"e": 1}, "digest"), ("ann", {"e": 2}, "digest"),
                                    ("bob", None, "digest")]))
    writes = [c for c in _executed(rig.db) if re.match(r"^(INSERT|UPDATE)", c.sql)]
    assert [w.sql.split()[:3] for w in writes] == [
        ["INSERT", "INTO", "scheduled_tasks_items"], ["INSERT", "INTO", "scheduled_tasks"],
        ["UPDATE", "scheduled_tasks", "SET"]], rig.db.sql()
    # SQLAlchemy may send the items as one multi-row VALUES: the values are there either way.
    assert {'{"e": 1}', '{"e": 2}'} <= set(map(str, _param_values(writes[0])))
    assert len(writes[1].params) == 2  # one row per key
