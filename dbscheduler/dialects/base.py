"""The interface the store calls, and the SQL that is the same on every database.

A dialect answers what the engine cannot answer portably: what "now" is on the database clock
(:class:`db_now` / :class:`db_now_plus`, compiled per backend), how to insert a row only if its
name is absent, how to pick due rows so that two nodes never get the same one, how its columns
are typed and bound, how to set up a connection, how to wake other nodes and how to tell its
errors apart. Everything else is plain SQLAlchemy Core shared by all backends. The pieces the
dialect modules share besides this class live in :mod:`.common` (re-exported here).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.util import ClauseAdapter
from sqlalchemy.types import TypeEngine

from ..errors import ListenUnavailable
from ..logfields import engine_log
from .common import (
    FENCE_PAUSE,
    FENCE_SLACK,
    FENCE_TRIES,
    ConnectKind,
    ConnectProblem,
    FenceBounds,
    PickedRow,
    db_now,
    db_now_plus,
    driver_error,
    fence_conditions,
    first_int_arg,
    insert_if_absent_statement,
    pick_binds,
    pick_due,
    pick_params,
    pick_started,
    picked_columns,
    row_dicts,
    seconds_param,
)
from .finishing import Finishing, RowByRow
from .statement_cache import StatementCache

__all__ = ["ConnectKind", "ConnectProblem", "Dialect", "FenceBounds", "ListenUnavailable",
           "PickedRow", "db_now", "db_now_plus", "driver_error", "fence_conditions",
           "first_int_arg",
           "insert_if_absent_statement", "row_dicts", "seconds_param"]

log = engine_log("dbscheduler.dialects")


class Dialect(StatementCache):
    """What one database backend does differently. Subclasses live in ``dialects/<name>.py``.

    The defaults implement the portable strategy: pick with one autocommit ``UPDATE … WHERE id
    IN (oldest due ids)`` that stamps a claim, then read the claimed rows back (or have the
    update return them), and insert-if-absent by catching the unique violation. No engine
    statement leaves a lock behind it: a node frozen between two statements blocks nobody.
    """

    name: ClassVar[str] = "generic"
    supports_notify: ClassVar[bool] = False
    """Whether operations can wake sleeping nodes at once (PostgreSQL ``LISTEN/NOTIFY``)."""

    returning_update: ClassVar[bool] = False
    """``UPDATE`` can return the rows it changed (``RETURNING`` / ``OUTPUT``) in one round
    trip; otherwise the engine reads them back by their fence or claim."""
    batch_window: ClassVar[float] = 0.0
    """Seconds a node may let work gather into one statement: a pick also takes the rows due
    within it (each started at its due time, :func:`~.common.pick_due`), and a busy finisher
    waits half of it for more finishes. Set where it was measured to help; 0 picks only what
    is due and writes each finish batch at once."""
    read_options: ClassVar[dict[str, Any]] = {"isolation_level": "AUTOCOMMIT"}
    """Execution options of read-only statements: no BEGIN/COMMIT round trips around them."""
    insert_needs_transaction: ClassVar[bool] = True
    """Insert-if-absent rolls back to a savepoint on a duplicate, so registration runs in a
    (short, back-to-back) transaction; otherwise each of its statements autocommits."""
    transaction_isolation: ClassVar[str] = "READ COMMITTED"
    """Isolation of the store's transactions on an engine that autocommits by default."""
    autocommit_options: ClassVar[dict[str, Any]] = {"isolation_level": "AUTOCOMMIT"}
    """Execution options under which every statement commits on its own."""

    embedded: ClassVar[bool] = False
    """The database lives with the application (SQLite): the scheduler creates its table on
    first use instead of asking for ``dbscheduler migrate``."""
    # -- engine set-up -------------------------------------------------------------------
    def configure_engine(self, engine: Engine) -> None:
        """Attach whatever the backend needs to every new connection (SQLite: locking)."""

    def bound_sessions(self, engine: Engine, lease: timedelta, url: URL) -> None:
        """On an engine dbscheduler created from ``url``, bound every session on the server
        side: a transaction left open (a frozen or partitioned client) ends after
        :func:`~.sessions.idle_transaction_timeout` of ``lease``; settings the URL gives
        itself are kept. Nothing by default."""

    def read_only(self, conn: Connection) -> str | None:
        """Why the server behind ``conn`` refuses writes (a standby, a read-only mode), or
        ``None`` when it accepts them; one cheap query, for the health check."""
        return None
    # -- column types --------------------------------------------------------------------
    def timestamp_type(self) -> TypeEngine[Any]:
        """The column type of an aware UTC timestamp."""
        return sa.DateTime(timezone=True)

    def bind_timestamp(self, utc: datetime) -> Any:
        """The value bound for the aware UTC datetime ``utc``."""
        return utc

    def flag_type(self) -> TypeEngine[Any]:
        """The column type of a boolean flag."""
        return sa.Boolean(create_constraint=False)

    def bind_flag(self, value: bool) -> Any:
        """The value bound for a flag."""
        return value

    def text_type(self) -> TypeEngine[str] | None:
        """This backend's variant of unbounded text, if the portable one does not fit."""
        return None

    def state_type(self) -> TypeEngine[str] | None:
        """This backend's variant of the state column when :meth:`text_type` cannot hold
        :data:`dbscheduler.table.MAX_STATE_BYTES` (MySQL's ``TEXT`` stops at 64 KiB)."""
        return None

    def name_type(self, length: int) -> TypeEngine[str] | None:
        """This backend's variant of the name column: it must compare case- and
        accent-sensitively; ``None`` when the portable ``Unicode(length)`` already does."""
        return None

    def id_type(self) -> TypeEngine[int] | None:
        """This backend's variant of the primary key type, if ``BigInteger`` does not fit."""
        return None

    def table_options(self) -> dict[str, Any]:
        """``sa.Table`` keyword options for this backend (prefixed with its name)."""
        return {}

    # -- migrations ----------------------------------------------------------------------
    def offline_url(self, name: str) -> str:
        """A URL Alembic can render offline SQL for, without a driver or a server."""
        return f"{name}://"

    def finish_offline_sql(self, sql: str) -> str:
        """Adjust Alembic's offline SQL into a script a person can apply by hand."""
        # Alembic asks some servers to return the inserted version number, which only makes
        # sense through a driver.
        sql = re.sub(r" OUTPUT inserted\.version_num", "", sql)
        return re.sub(r" RETURNING \S*version_num( INTO :ret_0)?", "", sql)

    # -- registration --------------------------------------------------------------------
    def insert_if_absent(
        self, conn: Connection, table: sa.Table, values: Mapping[str, Any]
    ) -> None:
        """Insert ``values`` unless a row with the same ``queue_name`` exists.

        Racing nodes must both succeed, with exactly one row the result.
        """
        savepoint = conn.begin_nested()
        try:
            conn.execute(sa.insert(table).values(**values))
        except sa.exc.IntegrityError:
            savepoint.rollback()
        else:
            savepoint.commit()

    def insert_many_if_absent(
        self, conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]
    ) -> set[str] | None:
        """:meth:`insert_if_absent` for many rows (one statement where the backend allows).

        Returns the ``queue_name`` of every row it inserted where the database says so in
        the same statement (``RETURNING``), else ``None``: then the caller reads back what the
        rows hold, as another node may have inserted some of them first."""
        for values in rows:
            self.insert_if_absent(conn, table, values)
        return None

    upsert_rows: ClassVar[int] = 1000
    """Rows per :meth:`upsert_many` statement (a larger call is written in parts)."""
    bulk_writers: ClassVar[int] = 1
    """Batches of one bulk creation (``schedule_many``) written at once, each on its own
    connection (1: one after another)."""

    def upsert_many(
        self,
        conn: Connection,
        table: sa.Table,
        rows: Sequence[Mapping[str, Any]],
        on_existing: Callable[[Callable[[str], Any]], Sequence[tuple[sa.Column[Any], Any]]],
    ) -> None:
        """Insert each of ``rows`` (plain values, every row the same columns) or, when its
        ``queue_name`` is taken, apply ``on_existing(new)`` to the row that has it, where
        ``new(column)`` is the value the insert proposed. At most :attr:`upsert_rows` rows.

        The portable form is two statements, each one parameterised statement executed for
        all rows: insert-if-absent, then the update (which, on a row just inserted, writes
        what it already holds). Backends with an upsert override it as one statement.
        """
        if not rows:
            return
        t, names = table, list(rows[0])
        self._insert_absent_batch(conn, t, rows)
        update = (
            sa.update(t)
            .where(t.c.queue_name == sa.bindparam("u_queue_name", type_=t.c.queue_name.type))
            .ordered_values(*on_existing(
                lambda n: sa.bindparam(f"u_{n}", type_=t.c[n].type)))
        )
        conn.execute(update, [{f"u_{n}": r[n] for n in names} for r in rows])

    def insert_rows(
        self, conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]],
        now: Sequence[str] = (),
    ) -> None:
        """Insert ``rows`` (plain values, every row the same columns), the columns ``now``
        set to the database's clock, in one statement where the backend allows (at most
        :attr:`upsert_rows` rows): by default one insert executed for all rows."""
        if not rows:
            return
        stmt = sa.insert(table).values(
            **{n: sa.bindparam(f"r_{n}", type_=table.c[n].type) for n in rows[0]},
            **{n: db_now() for n in now})
        conn.execute(stmt, [{f"r_{n}": v for n, v in r.items()} for r in rows])

    insert_guard_hints: ClassVar[str | None] = None
    """Table hints of the probe of :func:`insert_if_absent_statement` (SQL Server's locks)."""

    def _insert_absent_batch(
        self, conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """``INSERT … SELECT … WHERE NOT EXISTS`` executed once for all ``rows``. A racing
        writer's row can still make it fail with a duplicate key (Oracle does not lock an
        absent key): the batch is then sent again, and the rows now present are skipped."""
        names = [n for n in rows[0] if any(r[n] is not None for r in rows)]
        # Only the binds' names and types matter: every row's own values are sent with it.
        shape = {n: next(r[n] for r in rows if r[n] is not None) for n in names}
        stmt = insert_if_absent_statement(table, shape, self.insert_guard_hints)
        params = [{f"v_{n}": r[n] for n in names} for r in rows]
        for attempt in range(3):
            savepoint = conn.begin_nested()
            try:
                conn.execute(stmt, params)
            except sa.exc.IntegrityError:
                savepoint.rollback()
                if attempt == 2:
                    raise
            else:
                savepoint.commit()
                return

    # -- batches -------------------------------------------------------------------------
    def push_statement(
        self,
        item: sa.Insert,
        table: sa.Table,
        row: Mapping[str, Any],
        on_existing: Sequence[tuple[sa.Column[Any], Any]],
        *,
        notify: tuple[str, float] | None = None,
    ) -> sa.Executable | None:
        """A batch push as one statement, where the backend can write two tables at once:
        insert ``item``, then insert ``row`` into ``table`` or, when its ``queue_name`` is
        taken, apply ``on_existing`` to that row; with ``notify`` ``(channel, seconds)``,
        notify when the row written is due within that many seconds. ``None``: the store sends the
        statements one by one (see :mod:`dbscheduler._store.batches`)."""
        return None

    def upsert_statement(
        self,
        table: sa.Table,
        row: Mapping[str, Any],
        on_existing: Sequence[tuple[sa.Column[Any], Any]],
    ) -> sa.Executable | None:
        """Insert ``row`` or, when its ``queue_name`` is taken, apply ``on_existing`` (in
        that order) to the row that has it, as one statement; ``None`` where the backend has
        no such statement (an update, then an insert-if-absent and the update again)."""
        return None

    # -- filters -------------------------------------------------------------------------
    def names_in(self, column: ColumnElement[str], names: Sequence[str]) -> ColumnElement[bool]:
        """``column IN names``, built so that thousands of names are still one parameter."""
        return column.in_(list(names))

    def not_among(self, column: ColumnElement[Any], values: sa.Select[Any]) -> ColumnElement[bool]:
        """``column NOT IN (values)``, for a ``values`` query that does not depend on the row
        (run once per statement)."""
        return column.not_in(values)

    def names_table(self, param: str) -> tuple[sa.FromClause, ColumnElement[str]]:
        """The names bound as the one parameter ``param`` (its value from
        :meth:`names_param`), as a table of one column: the table and its column.

        The statements of the hot path take a node's handler names this way, so their text
        is the same for one name and for ten thousand."""
        raise NotImplementedError

    def names_param(self, names: Sequence[str]) -> Any:
        """The value of a :meth:`names_table` parameter: by default the names as JSON text."""
        return json.dumps(list(names))

    def lacks_condition(self, column: ColumnElement[str]) -> ColumnElement[bool]:
        """Rows whose handler (``column``) is set and not among the bound names
        ``p_lacking``, when the parameter ``p_lacks`` is 1; else no row (see
        :meth:`handler_params`)."""
        lacking, name = self.names_table("p_lacking")
        return sa.and_(sa.bindparam("p_lacks", type_=sa.Integer()) == 1, column.is_not(None),
                       column.not_in(sa.select(name).select_from(lacking)))

    def handler_condition(self, column: ColumnElement[str]) -> ColumnElement[bool]:
        """Rows a node may take by their handler (``column``), with constant text: the names
        ``p_names`` it has, or — :meth:`handler_params` chooses — every handler but the
        names ``p_lacking``."""
        names, name = self.names_table("p_names")
        return sa.or_(column.in_(sa.select(name).select_from(names)),
                      self.lacks_condition(column))

    def handler_params(
        self, names: Sequence[str], lacking: Sequence[str] | None
    ) -> dict[str, Any]:
        """The parameters of :meth:`handler_condition`: rows of ``names``, or (``lacking``
        given) rows of any handler but ``lacking``."""
        return {"p_names": self.names_param(() if lacking is not None else names),
                "p_lacking": self.names_param(lacking or ()),
                "p_lacks": int(lacking is not None)}

    # -- the pick ------------------------------------------------------------------------
    def pick_values(
        self,
        table: sa.Table,
        *,
        lease: timedelta | ColumnElement[float],
        node_id: str | ColumnElement[str],
        claim: str | ColumnElement[str],
    ) -> list[tuple[sa.Column[Any], Any]]:
        """The pick's assignments, in the order they must run.

        The ``prev_*`` copies come first, and ``last_started_at`` (which reads the due time)
        before ``next_process_at``: MySQL evaluates single-table assignments left to right,
        so they must read the old values before ``locked_by`` … are overwritten (every other
        database evaluates every expression on the old row anyway).
        """
        t = table
        # Bound parameters instead of values: a statement built once (PostgreSQL) is run with
        # each pick's own.
        seconds = lease.total_seconds() if isinstance(lease, timedelta) else lease
        return [
            (t.c.prev_locked_by, t.c.locked_by),
            (t.c.prev_next_process_at, t.c.next_process_at),
            (t.c.prev_last_started_at, t.c.last_started_at),
            (t.c.claim, claim),
            (t.c.attempt, t.c.attempt + 1),
            (t.c.total_attempt, t.c.total_attempt + 1),
            (t.c.last_started_at, pick_started(t)),
            (t.c.next_process_at, db_now_plus(seconds)),
            (t.c.locked_by, node_id),
            (t.c.heartbeat_at, db_now()),
            (t.c.stop_requested, False),
        ]

    def pick_statement(
        self,
        table: sa.Table,
        *,
        where: ColumnElement[bool],
        limit: int,
        lease: timedelta | ColumnElement[float],
        node_id: str | ColumnElement[str],
        claim: str | ColumnElement[str],
    ) -> sa.Update:
        """The portable pick: one ``UPDATE … WHERE id IN (the first due ids)``, highest
        ``priority`` first, then earliest due.

        It holds no lock once it ends. Two pickers that chose the same row serialise on its
        row lock for the length of one statement; the second then finds the row no longer due
        (the due condition is repeated on the updated row itself), so a row is never taken
        twice.
        """
        t = table
        due = t.alias("due")
        oldest = (
            sa.select(due.c.id)
            .where(ClauseAdapter(due).traverse(where), pick_due(due))
            .order_by(due.c.priority.desc(), due.c.next_process_at)
            .limit(int(limit))
        )
        return (
            sa.update(t)
            .where(where, pick_due(t), t.c.id.in_(oldest))
            .ordered_values(*self.pick_values(t, lease=lease, node_id=node_id, claim=claim))
        )

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
        """Take up to ``limit`` rows matching ``where`` and due within ``ahead`` seconds
        (:func:`~.common.pick_due`) for ``node_id``, stamped ``claim``, whose handler passes
        :meth:`handler_condition` with ``params`` (from :meth:`handler_params`).

        ``conn`` is in autocommit: the pick is one statement (plus, where the database cannot
        return updated rows, a plain non-locking read of the claimed rows). ``where`` already
        holds ``paused = false`` and the node's tags and groups; the dialect adds the handler
        condition, the due condition and the ordering. A row another session holds locked is
        skipped, never waited for.
        """
        result = conn.execute(self._pick_built(table, where, int(limit)),
                              {**pick_params(claim, node_id, lease, ahead), **params})
        if self.returning_update:
            return row_dicts(result)
        return self.claimed(conn, table, node_id=node_id, claim=claim)

    def _pick_built(self, table: sa.Table, where: ColumnElement[bool], limit: int) -> Any:
        """:meth:`pick_statement` with parameters ``p_lease``, ``p_node``, ``p_claim`` and the
        handler condition's, built once (building it cost more than running it on SQLite)."""
        def build() -> Any:
            stmt: Any = self.pick_statement(
                table, where=sa.and_(where, self.handler_condition(table.c.handler)),
                limit=limit, **pick_binds(table))
            return stmt.returning(*picked_columns(table)) if self.returning_update else stmt

        return self.built("pick", (table, where), build, limit)

    def ensure_statistics(
        self, connect: Callable[[], AbstractContextManager[Connection]], table: sa.Table
    ) -> str:
        """Gather the planner statistics of ``table`` if the database has none, on a
        connection from ``connect`` (autocommit; none is opened where there is nothing to
        gather): "present" (or no such thing here), "gathered", or "refused" (this user may
        not gather them).

        Differs per database because only some choose the pick's plan from statistics that
        an explicit step gathers (PostgreSQL's ``ANALYZE``); elsewhere there is nothing to do.
        """
        return "present"

    def estimated_rows(self, conn: Connection, table: sa.Table) -> int | None:
        """The database's own estimate of how many rows ``table`` holds, from its
        statistics, without reading the table (None where there is none).

        Differs per database because each keeps it in its own catalogue; a large listing
        shows it where counting every row would cost what the table's size does.
        """
        return None

    def claimed(
        self, conn: Connection, table: sa.Table, *, node_id: str, claim: str,
        lease: timedelta | None = None,
    ) -> list[PickedRow]:
        """The rows a pick stamped with ``claim`` and still held by ``node_id``.

        With ``lease`` (the pick's), only rows whose lease runs out within it: the pick set
        ``next_process_at`` to its own time plus the lease, so those are the ones it can have
        taken, and the due-time index finds them where the claim has no index of its own
        (:func:`~dbscheduler.table.claim_index`)."""
        def build() -> sa.Select[Any]:
            t, b = table, sa.bindparam
            conditions = [t.c.claim == b("c_claim", type_=t.c.claim.type),
                          t.c.locked_by == b("c_node", type_=t.c.locked_by.type)]
            if lease is not None:
                conditions += [t.c.next_process_at > db_now(),
                               t.c.next_process_at <= db_now_plus(seconds_param("c_lease"))]
            return (sa.select(*picked_columns(t))
                    .where(*conditions)
                    .order_by(t.c.priority.desc(), t.c.prev_next_process_at, t.c.id))

        # Built once: MySQL reads every pick back through it.
        stmt = self.built("claimed", (table,), build, lease is not None)
        values: dict[str, Any] = {"c_claim": claim, "c_node": node_id}
        if lease is not None:
            values["c_lease"] = lease.total_seconds()
        return row_dicts(conn.execute(stmt, values))

    def finishing(self) -> Finishing:
        """How a batch of finishes reaches this database (:mod:`.finishing`), asked once
        per store: by default one fenced ``UPDATE`` per execution, right after its run row.
        Databases that can finish many rows in one statement hand out their own way."""
        return RowByRow()

    # -- fenced transactions -------------------------------------------------------------
    # ``ctx.fenced`` (dbscheduler._engine.fencing) drives these in this order, inside the user's
    # transaction: fence_open, a first check (no lock), the user's statements, fence_final,
    # the final check (locking), COMMIT, and fence_close once the transaction has ended.
    fence_bounded: ClassVar[bool] = False
    """The server ends a fenced transaction left idle past its bounds (see :meth:`fence_open`
    and :meth:`fence_final`), so a node frozen inside one holds nothing for long."""

    def fence_margin(self, conn: Connection, bounds: FenceBounds) -> float:
        """Seconds of lease the final check demands beyond the database's now: at least the
        longest the check statement and the idle time after it can last before the server
        ends the transaction, so a COMMIT that is still accepted comes within the lease."""
        return 2 * bounds.final + FENCE_SLACK

    def fence_idle(self, bounds: FenceBounds) -> float:
        """Seconds after which the server surely ended a fenced transaction left idle before
        its final check (``inf`` where it cannot)."""
        return bounds.idle if self.fence_bounded else float("inf")

    def fence_open(self, conn: Connection, bounds: FenceBounds) -> None:
        """Bound the fenced transaction just begun on ``conn``: ended by the server when idle
        longer than ``bounds.idle``. Nothing where the database cannot (see
        :attr:`fence_bounded`)."""

    def fence_final(self, conn: Connection, bounds: FenceBounds) -> None:
        """Before the final check: bound its lock wait and the idle time after it by
        ``bounds.final`` each (never the COMMIT: a synchronous commit must wait for its
        standby)."""

    def commits_fenced(self, conn: Connection) -> bool:
        """The database on ``conn`` can run the final check and the COMMIT as one statement
        (:meth:`fence_commit`); otherwise the check (:meth:`hold_fence`), then COMMIT."""
        return False

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
        """The final check and the COMMIT as one statement the server runs without waiting
        for the client in between: True committed, False refused (rolled back). Only where
        :meth:`commits_fenced`."""
        raise NotImplementedError(f"{self.name} cannot check and commit in one statement")

    def fence_close(self, conn: Connection) -> None:
        """After the fenced transaction ended (committed, rolled back, or its session gone):
        give the session back the settings :meth:`fence_open` changed."""

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
        """Select the row if it still belongs to the execution ``(id_, token, node_id,
        claim)`` and, with ``margin``, its lease runs at least that many seconds past the
        database's now; with ``lock``, lock it for share until the transaction ends
        (``FOR SHARE``) so no other node can take it over meanwhile."""
        stmt = sa.select(table.c.id).where(
            *fence_conditions(table, id_, token, node_id, claim, margin))
        return stmt.with_for_update(read=True) if lock else stmt

    def hold_fence(
        self,
        conn: Connection,
        table: sa.Table,
        id_: int,
        token: int,
        node_id: str,
        claim: str | None = None,
        *,
        margin: float | None = None,
        lock: bool = True,
    ) -> bool:
        """Inside the user's transaction on ``conn``: whether the execution still owns its
        row (with ``margin`` seconds of lease left); with ``lock`` the row then stays locked
        against a takeover until that transaction ends."""
        stmt = self.fence_statement(table, id_, token, node_id, claim, margin=margin, lock=lock)
        for tried in range(1, FENCE_TRIES + 1):
            try:
                return conn.execute(stmt).first() is not None
            except sa.exc.DBAPIError as exc:
                # A lock refused fails only that statement, not the transaction (InnoDB,
                # SQL Server and Oracle alike): the row was held for a moment (this node's
                # own heartbeat, another node's pick); look again.
                if tried == FENCE_TRIES or not self.fence_lock_refused(exc):
                    raise
            time.sleep(FENCE_PAUSE)
        raise AssertionError("unreachable")

    def fence_lock_refused(self, exc: BaseException) -> bool:
        """``exc`` is the final check's lock refused at once (where :meth:`fence_statement`
        asks for it without waiting): the check is tried again."""
        return False

    def fence_ended(self, exc: BaseException) -> bool:
        """``exc`` says the server ended or refused the fenced transaction by its own bounds
        (idle too long, the check's lock or statement time out): nothing was committed."""
        return False

    # -- wake-ups ------------------------------------------------------------------------
    def notify(self, conn: Connection, channel: str, payload: str) -> None:
        """Tell listening nodes that something became due; a no-op where unsupported."""

    def listen(
        self,
        engine: Engine,
        channel: str,
        *,
        on_ready: Callable[[], None],
        on_wait: Callable[[list[str]], None],
        stopping: threading.Event,
    ) -> None:
        """Hold a connection listening on ``channel`` until ``stopping`` is set: call
        ``on_ready`` once listening, then ``on_wait(payloads)`` after every wait of at most
        half a second with the payloads of the notifications it received; raise when the
        connection fails (the caller reconnects). Only where :attr:`supports_notify`."""
        raise NotImplementedError(f"{self.name} has no LISTEN/NOTIFY")

    # -- errors --------------------------------------------------------------------------
    # Each backend classifies its own driver's errors by code (SQLSTATE, errno, ORA-…): a
    # message text such as "does not exist" also describes a missing database or user.
    def is_transient(self, exc: BaseException) -> bool:
        """True for errors worth retrying at once: deadlocks and serialization failures."""
        return False

    def is_missing_table(self, exc: BaseException) -> bool:
        """True when ``exc`` says the table does not exist."""
        return False

    def connect_problem(self, exc: BaseException) -> ConnectProblem | None:
        """What went wrong when ``exc`` means no session could be opened, else ``None``."""
        return None
