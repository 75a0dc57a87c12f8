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
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import TIMESTAMP as PG_TIMESTAMP
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.util import ClauseAdapter
from sqlalchemy.types import TypeEngine

from .base import (
    ConnectProblem,
    Dialect,
    FenceBounds,
    ListenUnavailable,
    PickedRow,
    db_now,
    db_now_plus,
    driver_error,
    row_dicts,
)
from .common import pick_binds, pick_due, pick_limit, pick_params, picked_columns
from .finishing import Finishing
from .pg_arrays import array_literal
from .pg_finish import OneStatement
from .pg_infinity import register_infinity_loader
from .pg_sessions import ServerWatch, session_settings, watch_of
from .sessions import postgresql_options_names
from .types import FalseDefault

FENCE_ENDED_SQLSTATES = frozenset({"25P03", "55P03"})
"""idle_in_transaction_session_timeout, lock_not_available (lock_timeout): a fenced
transaction ended by the bounds it set itself."""
TRANSIENT_SQLSTATES = frozenset({"40P01", "40001"})
"""deadlock_detected, serialization_failure."""
UNDEFINED_TABLE = "42P01"
READ_ONLY_TRANSACTION = "25006"

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

    def __init__(self) -> None:
        super().__init__()
        self._once: dict[int, tuple[sa.Select[Any], sa.CTE]] = {}

    def timestamp_type(self) -> TypeEngine[Any]:
        return PG_TIMESTAMP(timezone=True, precision=6)

    def configure_engine(self, engine: Engine) -> None:
        # One row holding -infinity must not make every read of the table fail.
        sa.event.listen(engine, "connect", lambda dbapi_conn, record:
                        register_infinity_loader(dbapi_conn))

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
        watch = watch_of(engine)
        if watch is not None and watch.proxied:
            raw.close()
            # A transaction pooler hands the LISTEN to a server session that other clients
            # use next: no notification would ever arrive, and nothing would say so.
            raise ListenUnavailable(
                "the database is reached through a pooler or proxy, where LISTEN cannot be "
                "relied upon: this node wakes by polling; give the Scheduler listen_url= (a "
                "direct connection to the server) for instant wake-ups"
            )
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

    def bound_sessions(self, engine: Engine, lease: timedelta, url: URL) -> None:
        mine = postgresql_options_names(url)
        settings = {k: v for k, v in session_settings(lease).items() if k not in mine}
        ServerWatch(settings).attach(engine)

    def read_only(self, conn: Connection) -> str | None:
        recovery, flag = conn.execute(sa.text(
            "SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")).one()
        if recovery:
            return "the server is a standby in recovery"
        if flag == "on":
            return "the session is read-only (default_transaction_read_only)"
        return None

    supports_notify = True
    returning_update = True
    batch_window = 0.01
    """Measured with a load spread over time (3,000 executions/s at their own phases): its
    finishes carry two to three times as many rows per statement, and rows picked ahead start
    from memory on time (start lag p50 at 1,000 tasks × 1/s down to 1.7–4.7 ms from 5.0–5.5)."""

    def finishing(self) -> Finishing:
        return OneStatement(self)

    def insert_if_absent(
        self, conn: Connection, table: sa.Table, values: Mapping[str, Any]
    ) -> None:
        stmt = pg_insert(table).values(**values).on_conflict_do_nothing(
            index_elements=["queue_name"]
        )
        conn.execute(stmt)

    def insert_many_if_absent(
        self, conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]
    ) -> set[str]:
        # The rows as one array per column, unnested by the server (as the batch finish
        # does): an executemany bound every value of every row in Python, 1 s of CPU for
        # the 10,000 rows of a first start.
        if not rows:
            return set()
        names = list(rows[0])
        columns = [sa.column(n, table.c[n].type) for n in names]
        source, params = self.batch_rows("r", columns, [[r[n] for n in names] for r in rows])
        stmt = (
            pg_insert(table).from_select(names, sa.select(*source.c))
            .on_conflict_do_nothing(index_elements=["queue_name"])
            .returning(table.c.queue_name)
        )
        return set(conn.execute(stmt, params).scalars())

    # Two connections: while the server writes one batch, the client encodes the next
    # (the encoding was as long as the server's write; together they took their sum).
    bulk_writers = 2

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

    def not_among(self, column: ColumnElement[Any], values: sa.Select[Any]) -> ColumnElement[bool]:
        # Computed once for the statement, in a materialised CTE: as NOT IN (subquery) its
        # estimated cost was counted again in each per-name walk of the pick and the poll,
        # which with a few dozen names passed the cost at which the server compiles the plan
        # with JIT (seconds per pick on a stock server).
        found = self._once.get(id(values))
        if found is None or found[0] is not values:
            once = values.cte("once").prefix_with("MATERIALIZED")
            found = self._once[id(values)] = (values, once)
        return column.not_in(sa.select(found[1].c[0]))

    def names_table(self, param: str) -> tuple[sa.FromClause, ColumnElement[str]]:
        names = (sa.func.unnest(_names_array(param))
                 .table_valued("name").render_derived(name=f"{param}_h"))
        return names, names.c.name

    def names_param(self, names: Sequence[str]) -> Any:
        return array_literal(sa.Unicode(), list(names))

    def lacks_condition(self, column: ColumnElement[str]) -> ColumnElement[bool]:
        # NULL (not an empty array) turns the condition off: checked once per statement (the
        # value is read by an initplan, see _names_array), not once per row.
        lacking = _names_array("p_lacking")
        return sa.and_(lacking.is_not(None), column.is_not(None),
                       column != sa.all_(lacking))

    def handler_params(
        self, names: Sequence[str], lacking: Sequence[str] | None
    ) -> dict[str, Any]:
        return {"p_names": self.names_param(() if lacking is not None else names),
                "p_lacking": None if lacking is None else self.names_param(lacking)}

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
        # Built once per set of conditions, run with each pick's limit, claim, node, lease,
        # names and time ahead as parameters.
        stmt = self.built("pick", (table, where), lambda: self.pick_statement_built(table, where))
        values = {"p_limit": int(limit), **pick_params(claim, node_id, lease, ahead), **params}
        return row_dicts(conn.execute(stmt, values))

    def pick_statement_built(self, t: sa.Table, where: ColumnElement[bool]) -> sa.Update:
        """The pick (parameters ``p_limit``, ``p_lease``, ``p_node``, ``p_claim``, ``p_ahead``,
        ``p_names``, ``p_lacking``); its text does not depend on the node's names, their number, or
        whether it picks by the names it has or by those it lacks.

        Each way of finding due rows is an index walk in the pick's order that locks the
        rows it takes with ``FOR UPDATE SKIP LOCKED`` and stops after ``p_limit`` of them:

        * by name: for each name of ``p_names`` (``unnest`` … ``LATERAL``), the rows of
          priority 0 in due order (the ``(handler, next_process_at)`` index), and the others
          in priority order (the partial ``pick_idx``);
        * by the names lacked: the rows of priority 0 in due order (the due-time index) and
          the few others, when ``p_lacking`` is given.

        So its cost grows with the rows it takes (and the rows other nodes hold, skipped),
        never with the rows that are due or with what the planner believes of the table: no
        branch has anything to join or to sort but rows already limited. A row another
        session holds, whatever its lock, is skipped, never waited for; concurrent picks get
        disjoint rows. The first ``p_limit`` of all those rows are updated; the others the
        walks locked are unlocked when the statement ends.
        """
        later = t.alias("later")
        # A literal, not a parameter: so the partial index's predicate (priority != 0) matches.
        zero: ColumnElement[int] = sa.literal_column("0")
        names, name = self.names_table("p_names")
        due = sa.and_(where, pick_due(t))

        def walk(plain: bool, by_name: bool) -> sa.Select[Any]:
            found = (
                sa.select(t.c.id, t.c.priority, t.c.next_process_at)
                .where(due, t.c.priority == zero if plain else t.c.priority != zero,
                       t.c.handler == name if by_name else self.lacks_condition(t.c.handler))
                .order_by(*([] if plain else [t.c.priority.desc()]), t.c.next_process_at)
                .limit(_hidden_limit())
                .with_for_update(skip_locked=True)
            )
            label = "plain" if plain else "ranked"
            if not by_name:  # a subquery: a UNION's own branches take no FOR UPDATE
                rest = found.subquery(f"{label}_rest")
                return sa.select(rest.c.id, rest.c.priority, rest.c.next_process_at)
            each = found.lateral(f"{label}_each")
            return (sa.select(each.c.id, each.c.priority, each.c.next_process_at)
                    .select_from(names).join(each, sa.true()))

        found = sa.union_all(*(walk(plain, by_name) for by_name in (True, False)
                               for plain in (True, False))).subquery("found")
        # A CTE read twice (the update and its next due time): run once.
        chosen = (sa.select(found.c.id)
                  .order_by(found.c.priority.desc(), found.c.next_process_at)
                  .limit(_hidden_limit())
                  .cte("chosen"))
        ids = sa.func.array(sa.select(chosen.c.id).scalar_subquery())
        values = self.pick_values(t, **pick_binds(t))
        return (
            sa.update(t)
            # The ids as one array, not a join: the primary key finds them, where a join
            # with a small table's rows was planned as a scan of the table.
            .where(t.c.id == sa.any_(ids))
            .ordered_values(*values)
            .returning(
                *picked_columns(t),
                # The earliest row this node may take besides the ones taken (the statement's
                # snapshot still shows them at their old due times): when it is due already,
                # rows were due that other sessions held, and the poller picks again at once
                # instead of sleeping until the next due time.
                self._next_due(later, ClauseAdapter(later).traverse(where),
                               sa.not_(later.c.id == sa.any_(ids)))
                .scalar_subquery().label("next_due"),
            )
        )

    def _next_due(self, t: sa.FromClause, where: ColumnElement[bool],
                  besides: ColumnElement[bool]) -> sa.Select[Any]:
        """The earliest ``next_process_at`` among the rows of ``t`` matching ``where`` and
        ``besides`` whose handler passes the handler condition: per name, the first row of an
        index walk; by the names lacked, the first row of the due-time index."""
        names, name = self.names_table("p_names")
        first = (sa.select(t.c.next_process_at)
                 .where(where, besides, t.c.handler == name)
                 .order_by(t.c.next_process_at).limit(_ONE)
                 .scalar_subquery())
        by_name = sa.select(first.label("due")).select_from(names)
        rest = (sa.select(t.c.next_process_at.label("due"))
                .where(where, besides, self.lacks_condition(t.c.handler))
                .order_by(t.c.next_process_at).limit(_ONE))
        both = sa.union_all(by_name, rest.subquery("rest").select()).subquery("nexts")
        return sa.select(sa.func.min(both.c.due))

    def ensure_statistics(
        self, connect: Callable[[], AbstractContextManager[Connection]], table: sa.Table
    ) -> str:
        # Without statistics of next_process_at (never analysed, or analysed while empty)
        # the planner guesses, and may sort every due row on each pick.
        with connect() as conn:
            name = conn.dialect.identifier_preparer.format_table(table)
            known, may = conn.execute(_STATISTICS, {"name": name}).one()
            if known:
                return "present"
            if not may:  # ANALYZE would skip the table with a warning
                return "refused"
            conn.exec_driver_sql(f"ANALYZE {name}")
            # Still none: the table is empty, and there is nothing to gather yet.
            after = conn.execute(_STATISTICS, {"name": name}).one()[0]
        return "gathered" if after else "present"

    def estimated_rows(self, conn: Connection, table: sa.Table) -> int | None:
        name = conn.dialect.identifier_preparer.format_table(table)
        found = conn.execute(_ESTIMATED_ROWS, {"name": name}).scalar()
        return None if found is None else int(found)

    def batch_rows(
        self, name: str, columns: Sequence[sa.ColumnClause[Any]], rows: Sequence[Sequence[Any]]
    ) -> tuple[sa.FromClause, dict[str, Any]]:
        """``rows`` as a derived table ``name(columns…)`` (a CTE) to update or insert from,
        with the parameters to execute it with (:meth:`batch_params`)."""
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
        """The parameters of :meth:`batch_rows`'s derived table for ``rows``: its text is the
        same for any rows, so a statement built once is run with them."""
        # Each column as one array literal: see pg_arrays for why not Python lists.
        return {f"{name}_{c.name}": array_literal(c.type, [r[i] for r in rows])
                for i, c in enumerate(columns)}

    def batch_keys(
        self, name: str, key: sa.ColumnClause[Any], target: ColumnElement[Any]
    ) -> ColumnElement[bool] | None:
        """``target`` is one of the batch's ``key`` values (``target = ANY(<key array>)``)."""
        # The same array parameter again, as "id = ANY(…)": without it a table never analysed
        # (autovacuum off, or not yet run) is planned as a scan of the whole table for every
        # row of the batch, 90 ms a finish with 2,000 rows instead of 2 ms.
        param = sa.bindparam(f"{name}_{key.name}", type_=sa.UnicodeText())
        return target == sa.any_(sa.cast(param, ARRAY(key.type)))

    # -- fenced transactions -------------------------------------------------------------
    fence_bounded = True

    def fence_open(self, conn: Connection, bounds: FenceBounds) -> None:
        # set_config(…, true) is SET LOCAL: the bound ends with the transaction, whatever the
        # user's engine and session had. Only idleness is bounded here: the user's own
        # statements may take as long as they take.
        conn.execute(sa.select(_set_local("idle_in_transaction_session_timeout", bounds.idle)))

    def fence_final(self, conn: Connection, bounds: FenceBounds) -> None:
        # From here on the check may wait for a lock, and sit idle before COMMIT, for at most
        # bounds.final each; a frozen node's session is then ended by the server, its share
        # lock with it, before the margin the check demanded has run out. No
        # statement_timeout: it would also cut the COMMIT's wait for a synchronous standby
        # short (PostgreSQL then keeps the commit local and only warns).
        conn.execute(sa.select(*(_set_local(name, bounds.final) for name in (
            "lock_timeout", "idle_in_transaction_session_timeout"))))

    def fence_ended(self, exc: BaseException) -> bool:
        orig = driver_error(exc)
        if getattr(orig, "sqlstate", None) in FENCE_ENDED_SQLSTATES:
            return True
        # The FATAL of an idle-in-transaction timeout reaches libpq with the closed socket,
        # often without its SQLSTATE.
        return "idle-in-transaction timeout" in str(orig)

    def notify(self, conn: Connection, channel: str, payload: str) -> None:
        conn.execute(sa.select(sa.func.pg_notify(channel, payload)))

    def is_transient(self, exc: BaseException) -> bool:
        return getattr(driver_error(exc), "sqlstate", None) in TRANSIENT_SQLSTATES

    def is_missing_table(self, exc: BaseException) -> bool:
        return getattr(driver_error(exc), "sqlstate", None) == UNDEFINED_TABLE

    def connect_problem(self, exc: BaseException) -> ConnectProblem | None:
        orig = driver_error(exc)
        if getattr(orig, "sqlstate", None) == READ_ONLY_TRANSACTION:
            return ConnectProblem(
                "read-only", "the server is read-only (a standby, or default_transaction_"
                "read_only): with several hosts in the URL add target_session_attrs=read-write")
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


_STATISTICS = sa.text(
    "SELECT EXISTS (SELECT 1 FROM pg_stats s JOIN pg_namespace n ON n.nspname = s.schemaname "
    "WHERE n.oid = c.relnamespace AND s.tablename = c.relname "
    "AND s.attname = 'next_process_at'), "
    # ANALYZE takes the owner (or a member of its role) or a superuser.
    "pg_has_role(c.relowner, 'USAGE') "
    "OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) "
    "FROM pg_class c WHERE c.oid = to_regclass(:name)"
)
"""Whether the planner has statistics of a table's ``next_process_at`` (``:name``, quoted),
and whether this user may gather them."""

_ESTIMATED_ROWS = sa.text(
    # The planner's own arithmetic: rows per page at the last ANALYZE times the pages the
    # table has now, so that rows added since then are counted without reading them.
    "SELECT CASE WHEN c.reltuples < 0 OR c.relpages = 0 THEN NULL "
    "ELSE round(c.reltuples / c.relpages "
    "* (pg_relation_size(c.oid) / current_setting('block_size')::int)) END "
    "FROM pg_class c WHERE c.oid = to_regclass(:name)"
)
"""The estimated rows of a table (``:name``, quoted); NULL when it was never analysed."""


def _names_array(param: str) -> ColumnElement[Any]:
    """The bound parameter ``param`` as an array of names (its value an array literal).

    Read through a scalar subquery, so that no plan sees the value: a custom plan given an
    empty array estimates its walks cheaper than the generic plan, and PostgreSQL then plans
    the pick again on every run. Measured: that planning was two thirds of the pick's server
    time, about 50 µs per execution (``pg_stat_statements.track_planning``); with the value
    hidden both plans cost the same and the statement's generic plan is kept."""
    array = ARRAY(sa.Unicode())
    value = sa.select(sa.cast(sa.bindparam(param, type_=sa.UnicodeText()), array))
    return sa.cast(value.scalar_subquery(), array)


_ONE: ColumnElement[int] = sa.literal_column("1")
"""A limit of one row as a literal: a bound one is unknown to a generic plan, which then
assumes a tenth of the rows and costs the statement more than its custom plans."""


def _hidden_limit() -> ColumnElement[int]:
    """The pick's limit (``p_limit``) read through a scalar subquery: both kinds of plan then
    assume the same share of the rows for it, so the generic plan costs what a custom one does
    and is kept (see ``_names_array``)."""
    return sa.select(pick_limit()).scalar_subquery()


def _set_local(name: str, seconds: float) -> ColumnElement[Any]:
    """``set_config(name, '<ms>', true)``: a setting for the rest of the transaction."""
    ms = max(1, round(seconds * 1000))
    return sa.func.set_config(name, str(ms), True)


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else text
    return line.removeprefix("connection failed: ")
