"""PostgreSQL: the whole pick is one ``UPDATE … RETURNING`` statement, and ``NOTIFY`` wakes nodes.

The pick locks due rows with ``FOR UPDATE SKIP LOCKED`` in a CTE and updates them in the same
autocommit statement, copying what it overwrites (who held them, when they were due) into the
``prev_*`` columns, so a single round trip both takes the rows and tells the engine which ones
belonged to a vanished node; its locks end with the statement.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import TIMESTAMP as PG_TIMESTAMP
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.util import ClauseAdapter
from sqlalchemy.types import TypeEngine

from .base import (
    ConnectProblem,
    Dialect,
    PickedRow,
    db_now,
    db_now_plus,
    driver_error,
    row_dicts,
)
from .common import pick_binds, pick_limit, pick_params, picked_columns
from .pg_arrays import array_literal
from .types import FalseDefault

TRANSIENT_SQLSTATES = frozenset({"40P01", "40001"})
"""deadlock_detected, serialization_failure."""
UNDEFINED_TABLE = "42P01"

# libpq reports a failed connection without a SQLSTATE (the server's FATAL message is all the
# client gets), so connection failures are recognised by the server's and libpq's own texts.
_CONNECT_TEXTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r'database "(?P<x>[^"]*)" does not exist'), "database"),
    (re.compile(r'role "(?P<x>[^"]*)" does not exist'), "user"),
    (re.compile(r'password authentication failed for user "(?P<x>[^"]*)"'), "password"),
    (re.compile(r"no password supplied|password is required|fe_sendauth"), "password"),
    (re.compile(r"the database system is (starting up|in recovery mode|shutting down)"
                r"|too many clients"), "starting"),
    (re.compile(r"failed to resolve host '(?P<x>[^']*)'|could not translate host name "
                r'"(?P<y>[^"]*)"'), "resolve"),
    (re.compile(r"connection refused|timeout expired|no route to host|network is unreachable"
                r"|server closed the connection|connection timed out", re.I), "host"),
)


@compiles(db_now, "postgresql")
def _now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    # statement_timestamp(), not now(): now() is frozen at transaction start.
    return "statement_timestamp()"


@compiles(db_now_plus, "postgresql")
def _now_plus(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    (seconds,) = element.clauses
    return f"(statement_timestamp() + make_interval(secs => {compiler.process(seconds, **kw)}))"


@compiles(FalseDefault, "postgresql")
def _false(element: FalseDefault, compiler: SQLCompiler, **kw: Any) -> str:
    return "false"


class PostgreSQLDialect(Dialect):
    name = "postgresql"
    insert_needs_transaction = False

    def timestamp_type(self) -> TypeEngine[Any]:
        return PG_TIMESTAMP(timezone=True, precision=6)

    def listen(
        self,
        engine: Engine,
        channel: str,
        *,
        on_ready: Callable[[], None],
        on_wait: Callable[[list[str]], None],
        stopping: threading.Event,
    ) -> None:
        raw = engine.raw_connection()
        try:
            conn: Any = raw.driver_connection  # psycopg 3: notifies() is driver API
            conn.autocommit = True
            conn.execute(f'LISTEN "{channel}"')
            on_ready()
            while not stopping.is_set():
                on_wait([n.payload for n in conn.notifies(timeout=0.5, stop_after=1)])
        except Exception:
            raw.invalidate()
            raise
        finally:
            raw.close()

    supports_notify = True
    returning_update = True
    uses_candidates = True
    update_from_values = True

    def insert_if_absent(
        self, conn: Connection, table: sa.Table, values: Mapping[str, Any]
    ) -> None:
        stmt = pg_insert(table).values(**values).on_conflict_do_nothing(
            index_elements=["queue_name"]
        )
        conn.execute(stmt)

    def insert_many_if_absent(
        self, conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        # The rows as one array per column, unnested by the server (as the batch finish
        # does): an executemany bound every value of every row in Python, 1 s of CPU for
        # the 10,000 rows of a first start.
        if not rows:
            return
        names = list(rows[0])
        columns = [sa.column(n, table.c[n].type) for n in names]
        source, params = self.batch_rows("r", columns, [[r[n] for n in names] for r in rows])
        stmt = (
            pg_insert(table).from_select(names, sa.select(*source.c))
            .on_conflict_do_nothing(index_elements=["queue_name"])
        )
        conn.execute(stmt, params)

    def upsert_many(
        self,
        conn: Connection,
        table: sa.Table,
        rows: Sequence[Mapping[str, Any]],
        on_existing: Callable[[Callable[[str], Any]], Sequence[tuple[sa.Column[Any], Any]]],
    ) -> None:
        # One INSERT … SELECT FROM unnest(one array per column) ON CONFLICT DO UPDATE: the
        # same text for any number of rows (compiled once, prepared by the server). A column
        # with one value in every row (the batch's created_at, the zero counters) is one
        # typed parameter instead of an array.
        if not rows:
            return
        names, first = list(rows[0]), rows[0]
        fixed = {n for n in names if n != "queue_name" and all(r[n] == first[n] for r in rows)}
        varying = [n for n in names if n not in fixed]
        columns = [sa.column(n, table.c[n].type) for n in varying]
        source, params = self.batch_rows("u", columns, [[r[n] for n in varying] for r in rows])
        select = sa.select(*(
            sa.cast(sa.bindparam(f"f_{n}", first[n], type_=table.c[n].type), table.c[n].type)
            if n in fixed else source.c[n]
            for n in names
        ))
        insert = pg_insert(table).from_select(names, select)
        stmt = insert.on_conflict_do_update(
            index_elements=["queue_name"],
            set_={c.name: v for c, v in on_existing(lambda n: insert.excluded[n])})
        conn.execute(stmt, params)

    def insert_rows(
        self, conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]],
        now: Sequence[str] = (),
    ) -> None:
        # One INSERT … SELECT FROM unnest(one array per column), as the upsert above.
        if not rows:
            return
        names = list(rows[0])
        columns = [sa.column(n, table.c[n].type) for n in names]
        source, params = self.batch_rows("r", columns, [[r[n] for n in names] for r in rows])
        conn.execute(sa.insert(table).from_select(
            [*names, *now], sa.select(*source.c, *(db_now() for _ in now))), params)

    def push_statement(
        self,
        item: sa.Insert,
        table: sa.Table,
        row: Mapping[str, Any],
        on_existing: Sequence[tuple[sa.Column[Any], Any]],
        *,
        notify: tuple[str, float] | None = None,
    ) -> sa.Executable | None:
        # Both writes commit together: the item is never visible without its key's row.
        pushed = item.returning(item.table.c.id).cte("pushed")
        upsert = (
            pg_insert(table).values(**row)
            .on_conflict_do_update(index_elements=["queue_name"],
                                   set_={c.name: v for c, v in on_existing})
            .returning(table.c.next_process_at)
            .cte("keyed")
        )
        woken: Any = sa.null()
        if notify is not None:
            channel, seconds = notify
            woken = (
                sa.select(sa.func.pg_notify(channel, "")).select_from(upsert)
                .where(upsert.c.next_process_at <= db_now_plus(seconds))
                .scalar_subquery()
            )
        return sa.select(pushed.c.id, woken.label("woken")).add_cte(upsert)

    def names_in(self, column: ColumnElement[str], names: Sequence[str]) -> ColumnElement[bool]:
        # One array instead of thousands of IN placeholders, written into the statement as a
        # constant: a constant array is hashed by the server, where a parameter array is
        # compared with every row one name at a time (milliseconds per pick with a thousand
        # handlers). Rendered here, once per set of names: a literal-execute parameter would
        # be rendered again on every pick (a tenth of a busy poller's time with a thousand
        # names). E'' strings read the same whatever standard_conforming_strings says.
        if not names:
            return sa.false()  # an empty ARRAY[] has no type to compare with
        quoted = ", ".join("E'" + n.replace("\\", "\\\\").replace("'", "''") + "'"
                           for n in names)
        return column == sa.any_(sa.literal_column(f"ARRAY[{quoted}]", ARRAY(sa.Unicode())))

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
        candidates: ColumnElement[bool] | None = None,
        next_due: sa.Select[Any] | None = None,
    ) -> list[PickedRow]:
        # Built once per set of conditions, run with each pick's limit, claim, node and
        # lease as parameters.
        stmt = self.built("pick", (table, where, candidates, next_due),
                          lambda: self._pick_statement(table, where, candidates, next_due))
        params = {"p_limit": int(limit), **pick_params(claim, node_id, lease)}
        return row_dicts(conn.execute(stmt, params))

    def _pick_statement(
        self,
        t: sa.Table,
        where: ColumnElement[bool],
        candidates: ColumnElement[bool] | None,
        next_due: sa.Select[Any] | None,
    ) -> sa.Update:
        later = t.alias("later")
        # A literal, not a parameter: so the partial index's predicate (priority != 0) matches.
        zero: ColumnElement[int] = sa.literal_column("0")

        def first(plain: bool) -> sa.CTE:
            """The first due rows of priority 0 in due order (a walk of the due-time index
            that stops after ``p_limit`` rows), or of the other priorities in their order
            (the partial index of the few such rows). One ``ORDER BY priority`` over the
            whole table would read and sort every due row on every pick: with 5,000 due at
            once, 1.3 ms instead of 0.1 ms, 156 times over."""
            return (
                sa.select(t.c.id, t.c.priority, t.c.next_process_at)
                # Without the candidates, a table whose earliest rows all belong to handlers
                # this node lacks (a million overdue jobs of another service) would be read
                # past, row by row, in due-time order on every pick.
                .where(where, t.c.next_process_at <= db_now(),
                       t.c.priority == zero if plain else t.c.priority != zero,
                       *([candidates] if candidates is not None else []))
                .order_by(*([] if plain else [t.c.priority.desc()]), t.c.next_process_at)
                .limit(pick_limit())
                .with_for_update(skip_locked=True)
                .cte("plain" if plain else "ranked")
            )

        # Rows a branch locked and the limit leaves out are unlocked when the statement ends.
        both = sa.union_all(*(sa.select(c.c.id, c.c.priority, c.c.next_process_at)
                              for c in (first(True), first(False)))).subquery("both")
        due = (
            sa.select(both.c.id)
            .order_by(both.c.priority.desc(), both.c.next_process_at)
            .limit(pick_limit())
        )
        values = self.pick_values(t, **pick_binds(t))
        return (
            sa.update(t)
            # The ids as one array, not a join: the primary key finds them, where a join
            # with a small table's rows was planned as a scan of the table.
            .where(t.c.id == sa.any_(sa.func.array(due.scalar_subquery())))
            .ordered_values(*values)
            .returning(
                *picked_columns(t),
                # The statement's snapshot still shows picked rows at their old (past) due
                # times, so "> now" leaves exactly the rows due later: the poller's next
                # wake-up, without another round trip.
                (
                    next_due if next_due is not None
                    else sa.select(sa.func.min(later.c.next_process_at)).where(
                        ClauseAdapter(later).traverse(where), later.c.next_process_at > db_now())
                ).scalar_subquery().label("next_due"),
            )
        )

    def batch_rows(
        self, name: str, columns: Sequence[sa.ColumnClause[Any]], rows: Sequence[Sequence[Any]]
    ) -> tuple[sa.FromClause, dict[str, Any]]:
        # unnest() of one array parameter per column: the statement's text is the same for
        # every batch size, so it is compiled once and prepared by the server, where VALUES
        # would be a new statement (compiled on the node's CPU) for each number of rows.
        arrays = [
            sa.cast(sa.bindparam(f"{name}_{c.name}", type_=sa.UnicodeText()), ARRAY(c.type))
            for c in columns
        ]
        unnested = (
            sa.func.unnest(*arrays)
            .table_valued(*(sa.column(c.name, c.type) for c in columns))
            .render_derived(name=f"{name}_rows")
        )
        # Materialised: a plan that joins the table's rows to these one by one reads a
        # stored result again, instead of parsing every array again for each of them.
        source = sa.select(*unnested.c).cte(name).prefix_with("MATERIALIZED")
        return source, self.batch_params(name, columns, rows)

    def batch_params(
        self, name: str, columns: Sequence[sa.ColumnClause[Any]], rows: Sequence[Sequence[Any]]
    ) -> dict[str, Any]:
        # Each column as one array literal: see pg_arrays for why not Python lists.
        return {f"{name}_{c.name}": array_literal(c.type, [r[i] for r in rows])
                for i, c in enumerate(columns)}

    def batch_keys(
        self, name: str, key: sa.ColumnClause[Any], target: ColumnElement[Any]
    ) -> ColumnElement[bool] | None:
        # The same array parameter again, as "id = ANY(…)": without it a table never analysed
        # (autovacuum off, or not yet run) is planned as a scan of the whole table for every
        # row of the batch, 90 ms a finish with 2,000 rows instead of 2 ms.
        param = sa.bindparam(f"{name}_{key.name}", type_=sa.UnicodeText())
        return target == sa.any_(sa.cast(param, ARRAY(key.type)))

    def notify(self, conn: Connection, channel: str, payload: str) -> None:
        conn.execute(sa.select(sa.func.pg_notify(channel, payload)))

    def is_transient(self, exc: BaseException) -> bool:
        return getattr(driver_error(exc), "sqlstate", None) in TRANSIENT_SQLSTATES

    def is_missing_table(self, exc: BaseException) -> bool:
        return getattr(driver_error(exc), "sqlstate", None) == UNDEFINED_TABLE

    def connect_problem(self, exc: BaseException) -> ConnectProblem | None:
        orig = driver_error(exc)
        if getattr(orig, "sqlstate", None) is not None:
            return None  # the session exists: the server answered a statement
        text = str(orig)
        for pattern, kind in _CONNECT_TEXTS:
            found = pattern.search(text)
            if found is None:
                continue
            what = next((v for v in found.groupdict().values() if v), "")
            if kind == "database":
                return ConnectProblem("database", f"the server has no database {what!r}")
            if kind == "user":
                return ConnectProblem("user", f"the server has no user (role) {what!r}")
            if kind == "password":
                who = f" for user {what!r}" if what else ""
                return ConnectProblem("password", f"wrong or missing password{who}")
            if kind == "starting":
                return ConnectProblem(
                    "starting", f"the server does not accept connections yet: {found.group(0)}"
                )
            if kind == "resolve":
                return ConnectProblem("host", f"the host name {what!r} does not resolve")
            return ConnectProblem("host", f"no server answers: {_first_line(text)}")
        return None


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else text
    return line.removeprefix("connection failed: ")
