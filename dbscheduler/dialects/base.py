"""The interface the store calls, and the SQL that is the same on every database.

A dialect answers three questions the engine cannot answer portably: what "now" is on the
database clock (:class:`db_now` / :class:`db_now_plus`, compiled per backend), how to insert a
row only if its name is absent, and how to pick due rows so that two nodes never get the same
one. Everything else is plain SQLAlchemy Core shared by all backends.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from ..table import UTCDateTime, to_utc

__all__ = ["Dialect", "PickedRow", "db_now", "db_now_plus"]

log = logging.getLogger("dbscheduler.dialects")

PickedRow = Mapping[str, Any]
"""A picked row: every column with its value after the pick, plus ``prev_locked_by``,
``prev_next_process_at`` and ``prev_last_started_at`` as they were before it."""


class db_now(FunctionElement[datetime]):
    """The database's current time in UTC, compiled per dialect (never the node's clock)."""

    type = UTCDateTime()
    inherit_cache = True
    name = "db_now"


class db_now_plus(FunctionElement[datetime]):
    """``db_now() + seconds``; the single argument is a number of seconds (a bound float)."""

    type = UTCDateTime()
    inherit_cache = True
    name = "db_now_plus"

    def __init__(self, seconds: ColumnElement[Any] | float) -> None:
        super().__init__(
            seconds
            if isinstance(seconds, ColumnElement)
            else sa.literal(float(seconds), sa.Float())
        )


def seconds_param(name: str) -> ColumnElement[float]:
    """A bound number of seconds, typed so every driver sends it as a float."""
    return sa.bindparam(name, type_=sa.Float())


class Dialect:
    """What one database backend does differently. Subclasses live in ``dialects/<name>.py``.

    The defaults implement the portable strategy: pick with ``SELECT … FOR UPDATE SKIP LOCKED``
    then ``UPDATE … WHERE id IN (…)`` in one transaction, and insert-if-absent by catching the
    unique violation.
    """

    name: ClassVar[str] = "generic"
    supports_notify: ClassVar[bool] = False
    """Whether operations can wake sleeping nodes at once (PostgreSQL ``LISTEN/NOTIFY``)."""

    single_statement_pick: ClassVar[bool] = False
    """The pick is one statement, atomic on its own: run it without BEGIN/COMMIT round trips."""
    read_options: ClassVar[dict[str, Any]] = {"isolation_level": "AUTOCOMMIT"}
    """Execution options of read-only statements: no BEGIN/COMMIT round trips around them."""

    # -- engine set-up -------------------------------------------------------------------
    def configure_engine(self, engine: Engine) -> None:
        """Attach whatever the backend needs to every new connection (SQLite: locking)."""

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
    ) -> None:
        """:meth:`insert_if_absent` for many rows (one statement where the backend allows)."""
        for values in rows:
            self.insert_if_absent(conn, table, values)

    # -- filters -------------------------------------------------------------------------
    def names_in(self, column: ColumnElement[str], names: Sequence[str]) -> ColumnElement[bool]:
        """``column IN names``, built so that thousands of names are still one parameter."""
        return column.in_(list(names))

    # -- the pick ------------------------------------------------------------------------
    def pick(
        self,
        conn: Connection,
        table: sa.Table,
        *,
        where: ColumnElement[bool],
        limit: int,
        lease: timedelta,
        node_id: str,
    ) -> list[PickedRow]:
        """Lock up to ``limit`` due rows matching ``where`` and take them for ``node_id``.

        Runs inside the caller's transaction. ``where`` already holds ``paused = false`` and
        the name filter; the dialect adds ``next_process_at <= db now`` and the locking.
        """
        rows = self.select_due_for_update(conn, table, where=where, limit=limit)
        if not rows:
            return []
        now = to_utc(rows[0]["db_now"])
        assert now is not None
        expiry = now + lease
        ids = [row["id"] for row in rows]
        conn.execute(
            sa.update(table)
            .where(table.c.id.in_(ids))
            .values(
                attempt=table.c.attempt + 1,
                total_attempt=table.c.total_attempt + 1,
                next_process_at=expiry,
                locked_by=node_id,
                heartbeat_at=now,
                last_started_at=now,
                stop_requested=False,
            )
        )
        picked: list[PickedRow] = []
        for row in rows:
            new = dict(row)
            new.pop("db_now")
            new["prev_locked_by"] = row["locked_by"]
            new["prev_next_process_at"] = row["next_process_at"]
            new["prev_last_started_at"] = row["last_started_at"]
            new.update(
                attempt=row["attempt"] + 1,
                total_attempt=row["total_attempt"] + 1,
                next_process_at=expiry,
                locked_by=node_id,
                heartbeat_at=now,
                last_started_at=now,
                stop_requested=False,
            )
            picked.append(new)
        return picked

    def select_due_for_update(
        self, conn: Connection, table: sa.Table, *, where: ColumnElement[bool], limit: int
    ) -> list[dict[str, Any]]:
        """The locking read of the portable pick: due rows with the database time as ``db_now``."""
        stmt = (
            sa.select(table, db_now().label("db_now"))
            .where(where, table.c.next_process_at <= db_now())
            .order_by(table.c.next_process_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return [dict(r) for r in conn.execute(stmt).mappings()]

    # -- wake-ups ------------------------------------------------------------------------
    def notify(self, conn: Connection, channel: str, payload: str) -> None:
        """Tell listening nodes that something became due; a no-op where unsupported."""

    # -- errors --------------------------------------------------------------------------
    def is_transient(self, exc: BaseException) -> bool:
        """True for errors worth retrying at once: deadlocks and serialization failures."""
        text = str(getattr(exc, "orig", exc)).lower()
        return any(
            marker in text
            for marker in ("deadlock", "40p01", "40001", "could not serialize", "(1213,",
                           "(1205,", "lock wait timeout", "ora-00060", "database is locked")
        )

    def is_missing_table(self, exc: BaseException) -> bool:
        """True when ``exc`` says the table does not exist."""
        text = str(getattr(exc, "orig", exc)).lower()
        return any(
            marker in text
            for marker in (
                "no such table",
                "does not exist",
                "doesn't exist",
                "invalid object name",
                "ora-00942",
            )
        )
