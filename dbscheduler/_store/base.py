"""What every part of the store stands on: the connection kinds, retries, the database clock,
the schema checks, name validation and state decoding.

Nothing here knows about threads; nothing above ``_store`` and :mod:`dbscheduler.client`
writes SQL.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timezone
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..dialects import Dialect, autocommits, commits_each_statement, db_now, dialect_for
from ..dialects.types import to_utc
from ..errors import SchemaMismatch, SchemaMissing
from ..logfields import engine_log
from ..table import (
    COLUMNS,
    ITEM_COLUMNS,
    MAX_NAME_LENGTH,
    RESERVED_PREFIX,
    items_table_name,
    make_groups_table,
    make_items_table,
    make_nodes_table,
    make_runs_table,
    make_table,
    split_table_name,
)
from .statistics import Statistics

__all__ = ["IN_CHUNK", "TRANSIENT_RETRIES", "StoreBase", "refuse_reserved", "validate_name"]

log = engine_log("dbscheduler.store")

_T = TypeVar("_T")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

TRANSIENT_RETRIES = 3
"""Attempts of a statement that fails on a deadlock or serialization failure."""

IN_CHUNK = 500
"""Values per ``IN`` list where a statement names rows one by one: every statement stays
under SQL Server's 2,100 parameters and Oracle's 1,000-item lists, however many rows."""


class StoreBase:
    """The scheduler table on one database, reached through one SQLAlchemy engine."""

    def __init__(
        self, engine: Engine, table: str = "scheduled_tasks", *, history: bool = True
    ) -> None:
        split_table_name(table)
        self.engine = engine
        self.history = history
        """Write a run row for every finished execution (``Scheduler(history=None)``: no)."""
        self._db_minus_mono: float | None = None
        """Database clock minus the monotonic clock, measured at every poll."""
        self.clock: Callable[[], datetime] | None = None
        """Replaces :meth:`estimated_now`'s estimate (a test harness that moves the
        database clock by hand gives its clock here)."""
        self.table_name = table
        self.table = make_table(table)
        self.later = self.table.alias("later")
        """The table under another name, for subqueries of a statement on the table."""
        self.groups = make_groups_table(table)
        """``<table>_groups``: the limits of concurrency groups."""
        self.tags: frozenset[str] = frozenset()
        """The tags of the node this store picks for (its id among them): it takes rows
        that require one of them, or none."""
        self._full_groups: sa.Select[Any] | None = None
        self._eligible: dict[tuple[object, frozenset[str], bool], sa.ColumnElement[bool]] = {}
        """Conditions of :mod:`.controls`, built once (building them is costly)."""
        self.strangers: frozenset[str] = frozenset()
        """Handlers of rows met in the table that this node lacks (:mod:`.handlers`)."""
        self.pick_conditions: dict[tuple[frozenset[str], frozenset[int], float], Any] = {}
        """The pick's conditions by (tags, excluded ids, takeover margin), built once
        (:mod:`.pick`)."""
        self.takeover_margin = 0.0
        """Seconds a held row's lease must be past its end before this node's pick takes it:
        set by the node registry while this node's database clock reads ahead of the other
        nodes' (:class:`~dbscheduler._engine.nodes.ClockSkew`)."""
        self.handler_params: dict[tuple[frozenset[str], frozenset[str]], dict[str, Any]] = {}
        """The handler condition's parameters by (names, strangers) (:mod:`.handlers`)."""
        self.next_due: tuple[frozenset[str], sa.Select[Any]] | None = None
        """The poll's next-due query and the tags it was built for
        (:func:`.runtime.next_due_of`)."""
        self.finish_statements: dict[tuple[bool, bool], sa.Executable] = {}
        """The batch finish by (with run rows, with NOTIFY), built once where the dialect's
        batch text does not depend on the rows (:mod:`.finish`)."""
        self.joined_statements: dict[tuple[Any, ...], Any] = {}
        """The joined batch finish (MySQL/MariaDB, SQLite) by (with run rows, batch size, how
        the rows are passed), and the batch delete of finished one-off jobs by ("delete",
        batch size), built once."""
        self.row_statements: dict[tuple[str, bool], sa.Executable] = {}
        """The one-execution finish statements (run row first, fenced update) of the other
        databases, by (which, variant), built once and run with each execution's values."""
        self.runs_table = make_runs_table(table)
        """The run history, ``<table>_runs``."""
        self.items = make_items_table(table)
        """Where pushed batch items wait (``<table>_items``)."""
        self.nodes = make_nodes_table(table)
        """The node registry (``<table>_nodes``)."""
        self.dialect: Dialect = dialect_for(engine)
        self._autocommits = autocommits(engine)
        """The engine autocommits by default: transactions switch modes, not single writes."""
        self.statements_commit = commits_each_statement(engine)
        """Each statement in :meth:`autocommit` commits as it returns (otherwise the block's
        statements commit together at its end)."""
        name = split_table_name(table)[1]
        self.channel = f"dbscheduler_{name}"[:63]
        self.statistics = Statistics(self.dialect, self.table, self.autocommit)
        """Whether the database has planner statistics of the table (:mod:`.statistics`)."""
        self.inserting: Callable[[], AbstractContextManager[Connection]] = (
            self.begin if self.dialect.insert_needs_transaction else self.autocommit)
        """Where insert-if-absent runs, chosen once: a transaction where a duplicate rolls
        back to a savepoint (the dialect's ``insert_needs_transaction``), else autocommit."""

    # -- schema --------------------------------------------------------------------------
    def create_table(self) -> None:
        """Create or upgrade the table through the migrations (the embedded default's zero
        set-up), so that a later ``dbscheduler migrate`` finds it at its version."""
        from ..migrate import upgrade  # Alembic is only needed here

        schema, name = split_table_name(self.table_name)
        if sa.inspect(self.engine).has_table(name, schema=schema):
            return  # made by hand or an older version: check_schema() judges it
        upgrade(self.engine, self.table_name)

    def check_schema(self, history: bool = True) -> None:
        """Raise :class:`SchemaMissing` / :class:`SchemaMismatch` unless the table (and, with
        ``history``, the run history's) is usable."""
        schema, name = split_table_name(self.table_name)
        inspector = sa.inspect(self.engine)
        if not inspector.has_table(name, schema=schema):
            raise SchemaMissing(self.table_name, self.safe_url())
        present = {c["name"].lower() for c in inspector.get_columns(name, schema=schema)}
        missing = [c for c in COLUMNS if c not in present]
        if not missing and not inspector.has_table(self.groups.name, schema=schema):
            missing = [f"(table {self.groups.name})"]
        if history and not inspector.has_table(self.runs_table.name, schema=schema):
            missing.append(f"(the run history table {self.runs_table.name})")
        elif history:
            kept = {c["name"].lower() for c in inspector.get_columns(self.runs_table.name,
                                                                     schema=schema)}
            missing += [f"{self.runs_table.name}.{c.name}" for c in self.runs_table.columns
                        if c.name not in kept]
        if missing:
            raise SchemaMismatch(self.table_name, missing)
        items_schema, items_name = split_table_name(items_table_name(self.table_name))
        if not inspector.has_table(items_name, schema=items_schema):
            # An older revision: `dbscheduler migrate` adds it (the message says so).
            raise SchemaMissing(self.table_name, self.safe_url(),
                                items_table_name(self.table_name))
        present = {c["name"].lower() for c in inspector.get_columns(items_name,
                                                                    schema=items_schema)}
        missing = [c for c in ITEM_COLUMNS if c not in present]
        if missing:
            raise SchemaMismatch(items_table_name(self.table_name), missing)

    def safe_url(self) -> str:
        """The engine's URL with its password hidden, for messages."""
        return self.engine.url.render_as_string(hide_password=True)

    # -- connections ---------------------------------------------------------------------
    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A read-write transaction, committed at the end."""
        try:
            if self._autocommits:
                with self.engine.connect() as plain:
                    conn = plain.execution_options(
                        isolation_level=self.dialect.transaction_isolation)
                    with conn.begin():
                        yield conn
                return
            with self.engine.begin() as conn:
                yield conn
        except sa.exc.DBAPIError as exc:
            if self.dialect.is_missing_table(exc):
                raise SchemaMissing(self.table_name, self.safe_url()) from exc
            raise

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """A connection whose every statement commits on its own: nothing it runs holds a
        lock once the statement has returned."""
        try:
            with self.engine.connect() as conn:
                yield conn if self._autocommits else conn.execution_options(
                    **self.dialect.autocommit_options)
                # A no-op in autocommit mode; an engine whose driver was not set up for it
                # (SQLite without prepare_engine: implicit transactions) still commits here.
                if conn.in_transaction():
                    conn.commit()
        except sa.exc.DBAPIError as exc:
            if self.dialect.is_missing_table(exc):
                raise SchemaMissing(self.table_name, self.safe_url()) from exc
            raise

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for reads only (autocommit on servers: one round trip per query)."""
        try:
            with self.engine.connect() as conn:
                yield conn if self._autocommits else conn.execution_options(
                    **self.dialect.read_options)
        except sa.exc.DBAPIError as exc:
            if self.dialect.is_missing_table(exc):
                raise SchemaMissing(self.table_name, self.safe_url()) from exc
            raise

    def retrying(self, what: str, action: Callable[[], _T]) -> _T:
        """Run ``action``; again at once after a deadlock or serialization failure."""
        for attempt in range(1, TRANSIENT_RETRIES + 1):
            try:
                return action()
            except sa.exc.DBAPIError as exc:
                if attempt == TRANSIENT_RETRIES or not self.dialect.is_transient(exc):
                    raise
                log.debug("%s: transient error, retrying: %s", what, exc.orig)
        raise AssertionError("unreachable")

    # -- the database clock --------------------------------------------------------------
    def db_now(self) -> datetime:
        """The database's current time, aware UTC."""
        with self.read() as conn:
            return self.now(conn)

    def estimated_now(self) -> datetime:
        """The node's estimate of the database time: its monotonic clock plus the offset
        measured at the last poll (a read of the database clock before the first poll)."""
        if self.clock is not None:
            return self.clock()
        if self._db_minus_mono is None:
            return self.db_now()
        return datetime.fromtimestamp(time.monotonic() + self._db_minus_mono, timezone.utc)

    def refuses_writes(self) -> str | None:
        """Why the database refuses this node's writes (a read-only standby), else ``None``;
        also proves it answers (the health check's probe)."""
        with self.read() as conn:
            self.now(conn)
            return self.dialect.read_only(conn)

    def now(self, conn: Connection) -> datetime:
        """The database's current time on ``conn``, aware UTC."""
        value = to_utc(conn.execute(sa.select(db_now())).scalar_one())
        assert value is not None
        return value

    def notify(self, conn: Connection, payload: str = "") -> None:
        """Wake listening nodes (PostgreSQL ``NOTIFY``); nothing where unsupported."""
        if self.dialect.supports_notify:
            self.dialect.notify(conn, self.channel, payload)


def validate_name(name: object) -> str:
    """A task name: a non-empty string of at most 255 UTF-16 code units, no control character
    (Unicode category Cc: NUL, newline, tab, escape …), no leading or trailing white space."""
    if not isinstance(name, str):
        raise ValueError(f"task name must be a string, got {type(name).__name__}")
    # Category Cc is exactly U+0000-U+001F and U+007F-U+009F: one regex search, not a
    # category lookup per character (a fifth of a bulk call's CPU).
    found = _CONTROL.search(name)
    control = None if found is None else found.group()
    if control is not None:
        # The CLI and logs print one name per line: a newline or an escape would forge lines.
        raise ValueError(
            f"task name {name[:60]!r} contains the control character {control!r} "
            f"(U+{ord(control):04X}); names may not contain control characters"
        )
    if not name.strip():
        raise ValueError("task name must not be empty")
    if name != name.strip():
        # MySQL/MariaDB compare with trailing spaces ignored: "a " and "a" would be one row.
        raise ValueError(f"task name {name!r} must not start or end with white space")
    if 2 * len(name) <= MAX_NAME_LENGTH:  # no character takes more than two units
        return name
    # SQL Server's NVARCHAR counts UTF-16 code units: an emoji takes two.
    units = len(name.encode("utf-16-le")) // 2
    if units > MAX_NAME_LENGTH:
        raise ValueError(
            f"task name {name[:40]!r}… is {units} UTF-16 code units long ({len(name)} "
            f"characters); the limit is {MAX_NAME_LENGTH} UTF-16 code units (a character "
            "beyond U+FFFF, such as an emoji, counts two)"
        )
    return name



def refuse_reserved(name: str, what: str) -> None:
    """``ValueError`` for a name only dbscheduler's own tasks may have (``dbscheduler.…``);
    ``what`` says what is named (``task``, ``handler``)."""
    if isinstance(name, str) and name.startswith(RESERVED_PREFIX):
        raise ValueError(
            f"{what} {name!r}: names starting with {RESERVED_PREFIX!r} are reserved for "
            "dbscheduler's built-in tasks; choose another name"
        )
