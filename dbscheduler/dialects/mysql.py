"""MySQL ≥ 8 and MariaDB ≥ 10.6: the pick is a plain read of the first due ids, then an
autocommit ``UPDATE`` of those ids.

Neither server has ``UPDATE … RETURNING`` (MariaDB only on ``INSERT``/``DELETE``), and neither
accepts ``LIMIT`` in an ``IN`` subquery of the updated table. The pick therefore reads the
first due ids (two index walks, the rows of priority 0 in due order and the others in
priority order, each ``LIMIT n``, no lock kept), then updates
exactly those rows where they are still due, stamping a fresh claim value and copying the
overwritten values to ``prev_*`` (assignments run left to right), then reads the claimed rows
back. A row another node took in between is no longer due and is left to it; no lock
outlives a statement. (A single ``UPDATE … ORDER BY … LIMIT`` locks every due row while it
sorts them, and deadlocked with finishes that made one of them due again.)

Timestamps are ``DATETIME(6)`` holding UTC, compared against ``UTC_TIMESTAMP(6)``.
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.mysql import DATETIME as MY_DATETIME
from sqlalchemy.dialects.mysql import LONGTEXT
from sqlalchemy.dialects.mysql import Insert as MySQLInsert
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter, ColumnElement
from sqlalchemy.sql.visitors import replacement_traverse
from sqlalchemy.types import TypeEngine

from ..logfields import engine_log
from .base import (
    ConnectProblem,
    Dialect,
    FenceBounds,
    PickedRow,
    db_now,
    db_now_plus,
    driver_error,
    first_int_arg,
)
from .common import (
    FENCE_PAUSE,
    FENCE_SLACK,
    FENCE_TRIES,
    fence_conditions,
    names_from_text,
    pick_binds,
    pick_due,
    pick_params,
)
from .finishing import Finishing, FinishTarget, JoinedChunks, written_type
from .sessions import idle_transaction_timeout
from .types import Flag, UTCDateTime, as_utc

TRANSIENT_ERRNOS = frozenset({1213, 1205})
"""ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT."""
LOCK_REFUSED = frozenset({1205, 3572})
"""ER_LOCK_WAIT_TIMEOUT (MariaDB's answer to NOWAIT), ER_LOCK_NOWAIT (MySQL's)."""
FENCE_ENDED = frozenset({1969, 3024, 4031, 2006, 2013})
"""max_statement_time exceeded (MariaDB), max_execution_time exceeded (MySQL), disconnected
for inactivity (MySQL), server gone, connection lost: a fenced transaction ended by the bounds
it set itself (the server closes the session of an idle transaction)."""
SIGNALLED = 1644
"""ER_SIGNAL_EXCEPTION: a SIGNAL of SQLSTATE 45000."""
FENCE_REFUSED = "dbscheduler: fenced transaction refused"
"""The message the one-statement check-and-commit signals when the row is no longer ours."""
NO_SUCH_TABLE = 1146
READ_ONLY = frozenset({1290, 1792})
"""ER_OPTION_PREVENTS_STATEMENT (``--read-only``), ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION."""
BAD_DATABASE = 1049
ACCESS_DENIED = frozenset({1045, 1698})
"""ER_ACCESS_DENIED_ERROR; 1698 is MariaDB's for a user that has no password login."""
CANNOT_CONNECT = frozenset({2002, 2003, 2005, 2006, 2013})
"""Client errors: no server at the socket/host, unknown host, server gone, lost connection."""
STARTING = frozenset({1040, 1053})
"""Too many connections; server shutdown in progress."""

log = engine_log("dbscheduler.dialects")

PICK_LOCK_WAIT = "innodb_lock_wait_timeout=1"
"""MariaDB's bound on the pick's update waiting for a row lock (seconds; a 1205 then retries
the pick)."""


@compiles(db_now, "mysql")
@compiles(db_now, "mariadb")
def _now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "UTC_TIMESTAMP(6)"


@compiles(db_now_plus, "mysql")
@compiles(db_now_plus, "mariadb")
def _now_plus(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    (seconds,) = element.clauses
    micros = f"CAST(ROUND({compiler.process(seconds, **kw)} * 1000000) AS SIGNED)"
    return f"TIMESTAMPADD(MICROSECOND, {micros}, UTC_TIMESTAMP(6))"


def _inlined(expr: Any, conn: Connection) -> Any:
    """``expr`` with its bound constants rendered as SQL literals."""
    if not isinstance(expr, sa.ClauseElement):
        return expr

    def literal(element: Any) -> Any:
        if isinstance(element, BindParameter) and element.value is not None:
            text = element.compile(dialect=conn.dialect,
                                   compile_kwargs={"literal_binds": True})
            return sa.literal_column(str(text), element.type)
        return None

    return replacement_traverse(expr, {}, literal)  # type: ignore[call-overload]


class MySQLDialect(Dialect):
    name = "mysql"
    insert_needs_transaction = False
    transaction_isolation = "READ COMMITTED"
    batch_window = 0.0
    """Measured worse on MariaDB 10.11: with a window of 10 ms, one node offered 1,000
    executions/s stalled for more than a period (100 ms) in three 3-second runs of four, every
    task skipping an occurrence; without it, two runs of eight had 12 and 32 tasks skip one.
    Why is not known yet."""

    def finishing(self) -> Finishing:
        # A batch in two statements, its run rows' INSERT … SELECT and a multi-table UPDATE,
        # each joining the batch's rows: no data-modifying CTE to make it one.
        return JoinedChunks(256, JsonRows())

    def bound_sessions(self, engine: Engine, lease: timedelta, url: URL) -> None:
        """Every session READ COMMITTED (the pick then takes no gap locks, which made
        concurrent picks deadlock, also in autocommit); on MariaDB ``idle_transaction_timeout``
        too. MySQL has no such variable; there every engine statement is autocommit or a
        back-to-back transaction, and docs/guides/databases.md says what to set server-side."""
        seconds = max(1, math.ceil(idle_transaction_timeout(lease).total_seconds()))

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, record: Any) -> None:
            info = str(getattr(dbapi_conn, "get_server_info", lambda: "")())
            cursor = dbapi_conn.cursor()
            try:
                cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                if "mariadb" in info.lower():
                    cursor.execute(f"SET SESSION idle_transaction_timeout = {int(seconds)}")
            finally:
                cursor.close()

    def read_only(self, conn: Connection) -> str | None:
        # The global flag: a replica (or a Galera node desynced) set read-only by its operator.
        if conn.execute(sa.text("SELECT @@global.read_only")).scalar():
            return "the server's read_only is on (a replica?)"
        return None

    def configure_engine(self, engine: Engine) -> None:
        # A statement run with the execution option ``dbscheduler_set_statement`` gets it as
        # MariaDB's per-statement setting (``SET STATEMENT x=1 FOR …``); MySQL has no such
        # prefix for InnoDB's lock wait, and runs the statement as it is.
        @event.listens_for(engine, "before_cursor_execute", retval=True)
        def _set_statement(conn: Connection, cursor: Any, statement: str, parameters: Any,
                           context: Any, executemany: bool) -> tuple[str, Any]:
            setting = (context.execution_options.get("dbscheduler_set_statement")
                       if context is not None else None)
            if setting and getattr(conn.dialect, "is_mariadb", False):
                statement = f"SET STATEMENT {setting} FOR {statement}"
            return statement, parameters

    def pick(
        self,
        conn: Connection,
        table: sa.Table,
        *,
        where: ColumnElement[bool],
        limit: int,
        lease: timedelta,
        node_id: str,
        claim: str,
        params: Mapping[str, Any],
        ahead: float = 0.0,
    ) -> list[PickedRow]:
        # Statements none of which holds a lock past itself: a read of the first due ids
        # that skips the rows another session holds locked (another pick's, a fenced
        # transaction's shared lock), an update of the first of those ids that repeats the
        # due condition (a row another node took in between is no longer due, and is left to
        # it), then the read-back of the claimed rows (no RETURNING on UPDATE here). A single
        # UPDATE … ORDER BY … LIMIT locks every due row while it sorts them; a finish that
        # makes one of them due again then deadlocks with it, several times a second under
        # load.
        #
        # The read is two index walks in one round trip (a UNION ALL of two parenthesized
        # selects, each with its own lock clause), each stopping after ``limit`` rows: the
        # rows of priority 0 in due order, and the others in priority order. One read ordered by
        # priority then due time was planned as a range over every due row plus a sort, so
        # each pick cost in proportion to the backlog (48 ms at 20,000 due rows against
        # 0.07 ms for the walk). Their first ``limit`` rows in the pick's order are the
        # pick's: any row among the first ``limit`` of all due rows is among the first
        # ``limit`` of its own walk.
        walks, take = self._two_step(table, where, int(limit))
        found = [(int(r[0]), int(r[1]), r[2])
                 for r in conn.execute(walks, {"p_ahead": float(ahead), **params})]
        found.sort(key=lambda r: (-r[1], r[2]))
        ids = [r[0] for r in found[: int(limit)]]
        if not ids:
            return []
        conn.execute(take, {"p_ids": ids, **pick_params(claim, node_id, lease, ahead)})
        return self.claimed(conn, table, node_id=node_id, claim=claim)

    def _two_step(
        self, table: sa.Table, where: ColumnElement[bool], limit: int
    ) -> tuple[sa.CompoundSelect[Any], sa.Executable]:
        """The pick's read of due ids (each row: id, priority, due time; the rows of
        priority 0 in due order, then the others in priority order: one round trip;
        parameter ``p_ahead``) and its update of the chosen ids (parameters ``p_ids``,
        ``p_lease``, ``p_node``, ``p_claim``, ``p_ahead``), built once per conditions and
        limit."""
        def build() -> tuple[sa.CompoundSelect[Any], sa.Executable]:
            t = table
            due = sa.and_(where, pick_due(t))
            # A literal, not a parameter: the planner sees an equality it can walk an index
            # on, not a comparison with an unknown value.
            zero: ColumnElement[int] = sa.literal_column("0")

            def walk(plain: bool) -> sa.Select[Any]:
                found = sa.select(t.c.id, t.c.priority, t.c.next_process_at)
                if not plain:
                    # Forced: without it the planner ranged over every due row by due time,
                    # as the ranked rows' few are no use to its estimates.
                    found = found.with_hint(t, f"FORCE INDEX ({t.name}_rank_idx)")
                return (
                    found
                    .where(due, t.c.priority == zero if plain else t.c.priority != zero,
                           self.handler_condition(t.c.handler))
                    .order_by(*([] if plain else [t.c.priority.desc()]), t.c.next_process_at)
                    .limit(limit)
                    # Autocommit: the locks end with the read. They only make it pass over
                    # the rows another session holds, instead of choosing ids the update
                    # would wait for.
                    .with_for_update(skip_locked=True)
                )

            take = (
                sa.update(t)
                .where(due, t.c.id.in_(sa.bindparam("p_ids", expanding=True)))
                .ordered_values(*self.pick_values(t, **pick_binds(t)))
                # A row locked between the read and the update (a fenced transaction that
                # began meanwhile) costs the pick at most a second, then a retry.
                .execution_options(dbscheduler_set_statement=PICK_LOCK_WAIT)
            )
            return sa.union_all(walk(True), walk(False)), take

        return self.built("two-step pick", (table, where), build, limit)  # type: ignore[no-any-return]

    def names_table(self, param: str) -> tuple[sa.FromClause, ColumnElement[str]]:
        # The column's own binary collation: names compare exactly, as in the table.
        return names_from_text(param, (
            f"SELECT name FROM JSON_TABLE(:{param}, '$[*]' COLUMNS (name VARCHAR(255) "
            "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS jt"))

    def timestamp_type(self) -> TypeEngine[Any]:
        return MY_DATETIME(fsp=6)

    def bind_timestamp(self, utc: datetime) -> Any:
        return utc.replace(tzinfo=None)  # DATETIME holds UTC wall time

    def name_type(self, length: int) -> TypeEngine[str]:
        return sa.Unicode(length, collation="utf8mb4_bin")

    def state_type(self) -> TypeEngine[str]:
        return LONGTEXT()

    def table_options(self) -> dict[str, Any]:
        return {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4",
                "mysql_collate": "utf8mb4_bin"}

    def offline_url(self, name: str) -> str:
        return f"{name}+pymysql://"

    def insert_if_absent(
        self, conn: Connection, table: sa.Table, values: Mapping[str, Any]
    ) -> None:
        # ON DUPLICATE KEY UPDATE id = id, not INSERT IGNORE: IGNORE would also swallow real
        # errors (truncation, bad values) as warnings.
        stmt = mysql_insert(table).values(**values)
        conn.execute(stmt.on_duplicate_key_update(id=table.c.id))

    def upsert_statement(
        self,
        table: sa.Table,
        row: Mapping[str, Any],
        on_existing: Sequence[tuple[sa.Column[Any], Any]],
    ) -> sa.Executable | None:
        # The list of pairs keeps the assignments in order (evaluated left to right).
        pairs = [(c.name, v) for c, v in on_existing]
        return mysql_insert(table).values(**row).on_duplicate_key_update(pairs)

    # Two connections, as on PostgreSQL: the client encodes a batch while the server
    # writes another. Two upserts of disjoint names may still deadlock on InnoDB's gap
    # locks; the deadlock is transient and the batch is sent again.
    bulk_writers = 2

    def upsert_many(
        self,
        conn: Connection,
        table: sa.Table,
        rows: Sequence[Mapping[str, Any]],
        on_existing: Callable[[Callable[[str], Any]], Sequence[tuple[sa.Column[Any], Any]]],
    ) -> None:
        # INSERT … SELECT FROM JSON_TABLE(<the rows as one JSON text>) ON DUPLICATE KEY
        # UPDATE: one statement whose text is the same for any number of rows, its values
        # one parameter encoded by the json module, where a multi-row VALUES had PyMySQL
        # escape every value of every row in Python (a third of the client's time). The
        # update reads the proposed values from the JSON_TABLE's columns.
        if not rows:
            return
        names = list(rows[0])
        source = self._json_rows(table, names, "u")
        proposed = {n: sa.literal_column(f"u.c{i}", table.c[n].type)
                    for i, n in enumerate(names)}
        select: sa.Select[Any] = sa.select(*proposed.values()).select_from(source)
        insert = mysql_insert(table).from_select(names, select)
        # The list of pairs keeps the assignments in order (evaluated left to right).
        pairs = [(c.name, v) for c, v in on_existing(lambda n: proposed[n])]
        conn.execute(insert.on_duplicate_key_update(pairs),
                     {"u_rows": self._json_rows_value(names, rows)})

    def insert_rows(
        self, conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]],
        now: Sequence[str] = (),
    ) -> None:
        # INSERT … SELECT FROM JSON_TABLE(<the rows as one JSON text>): one statement. An
        # executemany with the clock in its VALUES is not folded by PyMySQL: one statement
        # (and one commit) per row.
        if not rows:
            return
        names = list(rows[0])
        conn.execute(self._json_insert(table, names, "r", now),
                     {"r_rows": self._json_rows_value(names, rows)})

    def _json_insert(self, table: sa.Table, names: Sequence[str], alias: str,
                     now: Sequence[str] = ()) -> MySQLInsert:
        """``INSERT INTO table (names, now) SELECT … FROM JSON_TABLE(:<alias>_rows …)``, the
        columns ``now`` set to the database's clock (see :meth:`_json_rows`)."""
        picked: list[ColumnElement[Any]] = [
            sa.literal_column(f"{alias}.c{i}") for i in range(len(names))]
        select: sa.Select[Any] = sa.select(*picked, *(db_now() for _ in now)).select_from(
            self._json_rows(table, names, alias))
        return mysql_insert(table).from_select([*names, *now], select)

    def _json_rows(self, table: sa.Table, names: Sequence[str], alias: str) -> sa.TextClause:
        """``JSON_TABLE(:<alias>_rows …) AS <alias>``: rows given as one JSON parameter (see
        :meth:`_json_rows_value`), column ``c<i>`` holding ``names[i]`` typed as in ``table``."""
        columns = ", ".join(
            f"c{i} {self._json_column_type(table.c[n].type)} PATH '$[{i}]'"
            for i, n in enumerate(names))
        return sa.text(
            f"JSON_TABLE(:{alias}_rows, '$[*]' COLUMNS ({columns})) AS {alias}"
        ).bindparams(sa.bindparam(f"{alias}_rows", type_=sa.UnicodeText()))

    def _json_rows_value(self, names: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
        return json.dumps([[self._json_value(r[n]) for n in names] for r in rows])

    @staticmethod
    def _json_column_type(type_: TypeEngine[Any]) -> str:
        if isinstance(type_, (sa.Boolean, sa.Integer, Flag)):
            return "BIGINT"
        if isinstance(type_, (sa.DateTime, UTCDateTime)):
            return "DATETIME(6)"
        if isinstance(type_, sa.Float):
            return "DOUBLE"
        return "LONGTEXT"

    def _json_value(self, value: Any) -> Any:
        if isinstance(value, datetime):
            return _utc_text(value)
        if isinstance(value, bool):
            return int(value)
        return value

    def insert_many_if_absent(
        self, conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        # INSERT … SELECT FROM JSON_TABLE, as upsert_many: a node registering 10,000 tasks
        # had PyMySQL escape 160,000 values one by one in Python (most of a second of its
        # start-up). In parts, each well under the server's max_allowed_packet. Neither
        # server returns the rows an INSERT … ON DUPLICATE KEY inserted: the caller reads
        # them back.
        if not rows:
            return None
        names = list(rows[0])
        stmt = self._json_insert(table, names, "i").on_duplicate_key_update(id=table.c.id)
        for start in range(0, len(rows), self.upsert_rows):
            conn.execute(stmt, {"i_rows": self._json_rows_value(
                names, rows[start:start + self.upsert_rows])})
        return None

    # -- fenced transactions -------------------------------------------------------------
    # Neither server has a transaction-scoped setting: the session's are saved in user
    # variables by the same SET that changes them (assignments run left to right), and put
    # back by fence_close once the transaction has ended. MariaDB ends a session idle inside
    # a transaction after idle_transaction_timeout; MySQL has no such variable, but
    # wait_timeout ends any session idle that long, which, set for the length of the block,
    # is the same bound. Both count whole seconds, so on MariaDB the final check and the
    # COMMIT are one statement (fence_commit) and nothing is left to bound between them.
    fence_bounded = True

    def estimated_rows(self, conn: Connection, table: sa.Table) -> int | None:
        # InnoDB's estimate, kept up to date as rows change (no read of the table).
        found = conn.execute(
            sa.text("SELECT TABLE_ROWS FROM information_schema.TABLES "
                    "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :name"),
            {"schema": table.schema, "name": table.name}).scalar()
        return None if found is None else int(found)

    def fence_margin(self, conn: Connection, bounds: FenceBounds) -> float:
        if _is_mariadb(conn):
            # Check and COMMIT run back to back inside the server: only its own time counts.
            return bounds.final + FENCE_SLACK
        return bounds.final + math.ceil(bounds.final) + FENCE_SLACK

    def fence_idle(self, bounds: FenceBounds) -> float:
        return max(1, math.ceil(bounds.idle))  # what fence_open sets

    def fence_open(self, conn: Connection, bounds: FenceBounds) -> None:
        saved = ", ".join(f"@dbscheduler_fence_{i} = @@session.{name}"
                          for i, name in enumerate(_fence_settings(conn)))
        idle = _fence_settings(conn)[0]
        conn.exec_driver_sql(f"SET {saved}, SESSION {idle} = {max(1, math.ceil(bounds.idle))}")

    def fence_final(self, conn: Connection, bounds: FenceBounds) -> None:
        if _is_mariadb(conn):
            # fence_commit: no client round trip between the check and the COMMIT; the check
            # inside it must not wait for a lock (NOWAIT is not allowed there), it is tried
            # again instead.
            conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 0")
            return
        idle, limit = _fence_settings(conn)
        conn.exec_driver_sql(f"SET SESSION {idle} = {max(1, math.ceil(bounds.final))}, "
                             f"SESSION {limit} = {max(1, round(bounds.final * 1000))}")

    def commits_fenced(self, conn: Connection) -> bool:
        return _is_mariadb(conn)

    def fence_commit(
        self,
        conn: Connection,
        table: sa.Table,
        id_: int,
        token: int,
        node_id: str,
        claim: str | None,
        *,
        margin: float,
    ) -> bool:
        # An anonymous compound statement (MariaDB ≥ 10.1): the server checks and commits, or
        # rolls back and signals, without waiting for the client in between.
        sql, order = _check_and_commit(table, conn.dialect, claim is not None)
        named = {"f_id": id_, "f_token": token, "f_node": node_id, "f_claim": claim,
                 "f_margin": margin}
        params: Any = named if order is None else tuple(named[n] for n in order)
        for tried in range(1, FENCE_TRIES + 1):
            try:
                conn.exec_driver_sql(sql, params)
                return True
            except sa.exc.OperationalError as exc:
                orig = driver_error(exc)
                if first_int_arg(orig) == SIGNALLED and FENCE_REFUSED in str(orig):
                    return False
                if tried == FENCE_TRIES or not self.fence_lock_refused(exc):
                    raise
            time.sleep(FENCE_PAUSE)
        raise AssertionError("unreachable")

    def fence_close(self, conn: Connection) -> None:
        if conn.closed or conn.invalidated:
            return  # a session the server ended, or one given back: nothing to restore
        restore = ", ".join(f"SESSION {name} = @dbscheduler_fence_{i}"
                            for i, name in enumerate(_fence_settings(conn)))
        # On the driver's connection: through SQLAlchemy the statement would begin a new
        # transaction on a connection the user may have passed in.
        try:
            cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            try:
                cursor.execute(f"SET {restore}")
            finally:
                cursor.close()
        except Exception as exc:
            # The server ended the session meanwhile: no pool may hand it out again.
            log.debug("fenced transaction: session settings not restored: %s", exc)
            conn.invalidate(exc)

    def fence_statement(
        self,
        table: sa.Table,
        id_: int,
        token: int,
        node_id: str,
        claim: str | None = None,
        *,
        margin: float | None = None,
        lock: bool = True,
    ) -> sa.Select[Any]:
        # NOWAIT: a lock wait here is bounded only in whole seconds (innodb_lock_wait_timeout),
        # so the check looks again instead (Dialect.hold_fence).
        stmt = sa.select(table.c.id).where(
            *fence_conditions(table, id_, token, node_id, claim, margin))
        return stmt.with_for_update(read=True, nowait=True) if lock else stmt

    def fence_lock_refused(self, exc: BaseException) -> bool:
        return first_int_arg(driver_error(exc)) in LOCK_REFUSED

    def fence_ended(self, exc: BaseException) -> bool:
        return first_int_arg(driver_error(exc)) in FENCE_ENDED | LOCK_REFUSED

    def is_transient(self, exc: BaseException) -> bool:
        return first_int_arg(driver_error(exc)) in TRANSIENT_ERRNOS

    def is_missing_table(self, exc: BaseException) -> bool:
        return first_int_arg(driver_error(exc)) == NO_SUCH_TABLE

    def connect_problem(self, exc: BaseException) -> ConnectProblem | None:
        orig = driver_error(exc)
        errno = first_int_arg(orig)
        args: tuple[Any, ...] = getattr(orig, "args", ())
        text = str(args[1]) if len(args) > 1 else str(orig)
        if errno in READ_ONLY:
            return ConnectProblem("read-only", f"the server is read-only (a replica?): {text}")
        if errno == BAD_DATABASE:
            found = re.search(r"'([^']*)'", text)
            name = found.group(1) if found else "?"
            return ConnectProblem("database", f"the server has no database {name!r}")
        if errno in ACCESS_DENIED:
            # MySQL answers "access denied" alike for an unknown user and a wrong password.
            return ConnectProblem("login", f"unknown user or wrong password: {text}")
        if errno in CANNOT_CONNECT:
            # PyMySQL passes on the resolver's error, mysqlclient names the host.
            if re.search(r"Name or service not known|nodename nor servname|"
                         r"getaddrinfo failed|Errno -[23]\b|Unknown (MySQL )?server host",
                         text):
                return ConnectProblem("host", f"the host name does not resolve: {text}")
            return ConnectProblem("host", f"no server answers: {text}")
        if errno in STARTING:
            return ConnectProblem("starting", f"the server does not accept connections yet: "
                                              f"{text}")
        return None


@functools.lru_cache(maxsize=32)
def _check_and_commit(table: sa.Table, dialect: sa.Dialect,
                      with_claim: bool) -> tuple[str, tuple[str, ...] | None]:
    """The text of MariaDB's one-statement final check and COMMIT (parameters ``f_id``,
    ``f_token``, ``f_node``, ``f_claim``, ``f_margin``), compiled once per table and engine,
    and, for a driver whose placeholders are positional (mysqlclient's ``%s``), the order in
    which it takes them (PyMySQL's are named: ``None``)."""
    t, b = table, sa.bindparam
    conditions = [t.c.id == b("f_id", type_=t.c.id.type),
                  t.c.total_attempt == b("f_token", type_=t.c.total_attempt.type),
                  t.c.locked_by == b("f_node", type_=t.c.locked_by.type),
                  t.c.next_process_at > db_now_plus(b("f_margin", type_=sa.Float()))]
    if with_claim:
        conditions.append(t.c.claim == b("f_claim", type_=t.c.claim.type))
    check = sa.select(t.c.id).where(*conditions).with_for_update(read=True)
    compiled = check.compile(dialect=dialect)
    order = tuple(compiled.positiontup) if compiled.positiontup else None
    return (f"BEGIN NOT ATOMIC IF EXISTS ({compiled}) THEN COMMIT; ELSE ROLLBACK; "
            f"SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{FENCE_REFUSED}'; END IF; END", order)


def driver_connect_args(driver: str) -> dict[str, Any]:
    """Connect arguments a MySQL driver needs to read rows as the engine expects.

    mysqlclient reads a timestamp it cannot represent (a zero date a hand edit stored) as
    ``None``, which a ``NOT NULL`` column never holds: the engine could not tell that row from
    a healthy one and the whole pick failed on it. Given back as its text, as PyMySQL does, it
    reads as unreadable and fails its own row alone.

    >>> sorted(driver_connect_args("pymysql"))
    []
    """
    if driver != "mysqldb":
        return {}
    from MySQLdb.constants import FIELD_TYPE
    from MySQLdb.converters import conversions
    from MySQLdb.times import DateTime_or_None

    def datetime_or_text(value: Any) -> Any:
        parsed = DateTime_or_None(value)
        if parsed is not None:
            return parsed
        return value.decode() if isinstance(value, (bytes, bytearray)) else value

    conv = dict(conversions)
    conv[FIELD_TYPE.DATETIME] = conv[FIELD_TYPE.TIMESTAMP] = datetime_or_text
    return {"conv": conv}


def _is_mariadb(conn: Connection) -> bool:
    return bool(getattr(conn.dialect, "is_mariadb", False))


def _fence_settings(conn: Connection) -> tuple[str, ...]:
    """The session variables a fenced transaction changes on this server, the idle bound
    first: MariaDB's idle transaction bound and its lock wait (for the check inside the
    one-statement commit), MySQL's idle bound and its SELECTs' time (milliseconds)."""
    if _is_mariadb(conn):
        return "idle_transaction_timeout", "innodb_lock_wait_timeout"
    return "wait_timeout", "max_execution_time"


class JsonRows:
    """A joined finish's rows as one JSON parameter read through ``JSON_TABLE``: the
    statement's text is the same for any number of rows, and its values are encoded by the
    json module in one call, where a ``UNION`` of parameters had the driver escape and format
    each of a batch's several hundred values in Python and the server parse them all."""

    kind = "json"

    def size(self, rows: int) -> int:
        return 0

    def source(self, target: FinishTarget, columns: Sequence[sa.ColumnClause[Any]],
               size: int, names: Sequence[str]) -> sa.Subquery:
        typed = [(c.name, written_type(target, c)) for c in columns]
        paths = ", ".join(
            f"{name} {MySQLDialect._json_column_type(type_)} PATH '$[{names.index(name)}]'"
            for name, type_ in typed)
        rows = sa.text(f"JSON_TABLE(:j_rows, '$[*]' COLUMNS ({paths})) AS j").bindparams(
            sa.bindparam("j_rows", type_=sa.UnicodeText()))
        return (sa.select(*(sa.literal_column(f"j.{name}", type_).label(name)
                            for name, type_ in typed))
                .select_from(rows).subquery("w"))

    def params(self, names: Sequence[str], rows: Sequence[tuple[Any, ...]],
               size: int) -> dict[str, Any]:
        # Not escaped to ASCII: a text the database cannot hold (a lone surrogate) then fails
        # to encode in the driver, a refused value, instead of reaching the server as an
        # escape its JSON parser rejects as a syntax error.
        return {"j_rows": json.dumps(rows, default=_json_default, ensure_ascii=False)}


def _utc_text(value: datetime) -> str:
    """An aware time as the text of a ``DATETIME(6)`` in UTC."""
    # "2026-11-29 21:00:00.123456+00:00" without its offset; twice as fast as strftime.
    return as_utc(value).isoformat(" ", "microseconds")[:26]


def _json_default(value: Any) -> Any:
    """What ``json.dumps`` cannot encode itself: times (as :func:`_utc_text`)."""
    if isinstance(value, datetime):
        return _utc_text(value)
    raise TypeError(f"{type(value).__name__} cannot be written as JSON")
