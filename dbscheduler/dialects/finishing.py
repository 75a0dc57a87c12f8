"""How a batch of finishes reaches the database: the strategy each dialect hands out.

Databases differ in how many rows one fenced statement can finish. Each dialect says which way
is its own once, with :meth:`Dialect.finishing <dbscheduler.dialects.base.Dialect.finishing>`,
when a store is built; the store's finish (``dbscheduler._store.finish``) only calls the
strategy it was given, and never asks the dialect again on the hot path:

- :class:`RowByRow` (SQL Server, Oracle, and any dialect that says nothing): one fenced
  ``UPDATE`` per execution, right after its run row, each with its own row count.
- :class:`JoinedChunks` (MySQL/MariaDB, SQLite): chunks of at most ``most`` rows, each its run
  rows' ``INSERT … SELECT`` and one multi-row ``UPDATE`` joining the chunk's rows as a derived
  table of parameters (:func:`write_joined`); a chunk that cannot go joined goes row by row.
- ``OneStatement`` (PostgreSQL, in :mod:`.pg_finish`): the whole batch in one statement, its
  run rows and ``NOTIFY`` included.

The statements here are portable SQL; what a strategy writes to is the store's side of the
seam, :class:`FinishTarget`, and what it writes is a :class:`FinishRow` per execution.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.types import TypeEngine

from .._engine import faultpoints as _faultpoints
from .common import db_now
from .types import UTCDateTime

__all__ = [
    "RUN_COLUMNS",
    "FinishRow",
    "FinishRun",
    "FinishTarget",
    "Finishing",
    "JoinedChunks",
    "JoinedRows",
    "RowByRow",
    "UnionRows",
    "batch_columns",
    "delete_joined",
    "finished_values",
    "has_runs",
    "joined_statements",
    "run_fields",
    "write_joined",
    "written_type",
]

RUN_COLUMNS = ("task_name", "token", "attempt", "node_id", "scheduled_at", "started_at",
               "finished_at", "status", "error")
"""The columns a run row is written with, in this order (its ``id`` is generated)."""


class FinishRun(Protocol):
    """The run-history row of one execution, as a finish writes it."""

    @property
    def name(self) -> str: ...
    @property
    def token(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def node_id(self) -> str: ...
    @property
    def scheduled_at(self) -> datetime: ...
    @property
    def started_at(self) -> datetime: ...


class FinishRow(Protocol):
    """The fenced write that ends one execution (the store's ``FinishWrite``)."""

    @property
    def id(self) -> int: ...
    @property
    def token(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def next_at(self) -> datetime: ...
    @property
    def attempt(self) -> int: ...
    @property
    def error(self) -> str | None: ...
    @property
    def sets_payload(self) -> bool:
        """The write replaces the stored state with :attr:`payload`."""
        ...
    @property
    def payload(self) -> Any: ...
    @property
    def run(self) -> FinishRun | None: ...


class FinishTarget(Protocol):
    """What a strategy writes to: the store's tables, and the statements it keeps built."""

    table: sa.Table
    runs_table: sa.Table
    history: bool
    """Run rows are written with the finishes."""
    channel: str
    """Where a finish that makes a row due soon wakes the other nodes (``NOTIFY``)."""
    finish_statements: dict[tuple[bool, bool], sa.Executable]
    joined_statements: dict[tuple[Any, ...], Any]
    row_statements: dict[tuple[str, bool], sa.Executable]


R = TypeVar("R", bound=FinishRow)
"""The store's own write type: a strategy hands back the writes it was given."""

RunFirst = Callable[[Connection, R], None]
"""Writes one execution's run row before its finish, fenced (where the run row cannot share
the finish's statement)."""


class Finishing:
    """The finish of a batch, one fenced statement per execution (the base case).

    Each method writes what it can as batches and returns the writes left for the caller's
    fenced statement per execution; it adds the ids that landed to ``landed``.

    >>> strategy = dialect.finishing()                                  # doctest: +SKIP
    >>> left = strategy.write(store, conn, "node-1", writes, False, landed)  # doctest: +SKIP
    """

    run_row_shared = False
    """The run row is written in the finish's own statement: a finish that did not land left
    no run row (nothing to forget), and a row gone with no run row is not telling."""

    joins_run_rows = False
    """A batch's run rows go in as one ``INSERT … SELECT`` joining the batch's rows."""

    def __init__(self, deletes_most: int = 256, rows: JoinedRows | None = None) -> None:
        self.deletes_most = deletes_most
        """Rows per fenced multi-row ``DELETE`` of finished one-off jobs (the same text on
        every database)."""
        self.rows: JoinedRows = rows or UnionRows()
        """How a statement joining a batch's rows receives them (the run rows of a joined
        finish or delete)."""

    def write(self, target: FinishTarget, conn: Connection, node_id: str,
              writes: Sequence[R], notify: bool,
              landed: set[int]) -> Sequence[R]:
        """Write what this database writes as batches; return the writes left."""
        return writes

    def delete(self, target: FinishTarget, conn: Connection, node_id: str,
               writes: Sequence[R], landed: set[int],
               run_first: RunFirst[R]) -> list[R]:
        """Delete the rows of finished one-off jobs (not batch keys, more than one) as
        batches, their run rows first (each with ``run_first`` where they cannot be joined);
        return the writes left."""
        alone: list[R] = []
        most = self.deletes_most
        for start in range(0, len(writes), most):
            chunk = writes[start : start + most]
            deleted = delete_joined(target, conn, node_id, chunk, most,
                                    None if self.joins_run_rows else run_first, self.rows)
            if deleted is None:
                alone += chunk
            else:
                landed |= deleted
        return alone

    def run_rows(self, runs: sa.Table, source: sa.Select[Any],
                 columns: Sequence[str] = RUN_COLUMNS) -> sa.Insert:
        """``INSERT INTO <runs> (columns) <source>``, for a statement that writes run rows
        with the finish (only where :attr:`run_row_shared`)."""
        return sa.insert(runs).from_select(list(columns), source)


class RowByRow(Finishing):
    """One fenced ``UPDATE`` per execution, each with its own row count (SQL Server, Oracle):
    which writes landed is known at once."""


class JoinedChunks(Finishing):
    """Chunks of at most ``most`` rows, each two statements joining the chunk's rows (MySQL's
    multi-table ``UPDATE``, SQLite's ``UPDATE … FROM``)."""

    joins_run_rows = True

    def __init__(self, most: int, rows: JoinedRows | None = None) -> None:
        super().__init__(most, rows)
        self.most = most

    def write(self, target: FinishTarget, conn: Connection, node_id: str,
              writes: Sequence[R], notify: bool,
              landed: set[int]) -> Sequence[R]:
        if len(writes) <= 1:
            return writes
        alone: list[R] = []
        for start in range(0, len(writes), self.most):
            chunk = writes[start : start + self.most]
            joined = (write_joined(target, conn, node_id, chunk, self.most, self.rows)
                      if len(chunk) > 1 else None)
            if joined is None:
                alone += chunk
            else:
                landed |= joined
        return alone


# -- what every batch statement writes ------------------------------------------------------
def batch_columns(target: FinishTarget, history: bool) -> tuple[sa.ColumnClause[Any], ...]:
    """The columns of a batch's rows (``w_*``, and ``r_*`` for its run rows with
    ``history``), typed like the columns they are written to."""
    return _batch_columns(target.table, target.runs_table, history)


@functools.lru_cache(maxsize=64)
def _batch_columns(t: sa.Table, runs: sa.Table,
                   history: bool) -> tuple[sa.ColumnClause[Any], ...]:
    # Kept: sixteen column objects made for every finish cost a busy node more than the
    # finish's own parameters.
    return (
        sa.column("w_id", sa.BigInteger()),
        sa.column("w_token", sa.BigInteger()),
        sa.column("w_next", UTCDateTime()),
        sa.column("w_attempt", sa.Integer()),
        sa.column("w_status", t.c.last_status.type),
        sa.column("w_success", sa.Integer()),
        sa.column("w_error", t.c.last_error.type),
        sa.column("w_set_payload", sa.Boolean()),
        sa.column("w_payload", t.c.payload.type),
        *((
            sa.column("r_log", sa.Boolean()),
            sa.column("r_name", runs.c.task_name.type),
            sa.column("r_token", sa.BigInteger()),
            sa.column("r_attempt", sa.Integer()),
            sa.column("r_node", runs.c.node_id.type),
            sa.column("r_scheduled", UTCDateTime()),
            sa.column("r_started", UTCDateTime()),
        ) if history else ()),
    )


def finished_values(
    t: sa.Table, v: sa.FromClause, set_payload: sa.ColumnElement[Any]
) -> dict[str, Any]:
    """What a landed finish writes on its row, from the batch's columns ``w_*``."""
    return {
        "locked_by": None,
        "next_process_at": v.c.w_next,
        "attempt": v.c.w_attempt,
        "last_status": v.c.w_status,
        "last_finished_at": db_now(),
        "stop_requested": False,
        "reenqueue_attempt": t.c.reenqueue_attempt + v.c.w_success,
        "last_error": sa.func.coalesce(v.c.w_error, t.c.last_error),
        "payload": sa.case((set_payload, v.c.w_payload), else_=t.c.payload),
        "last_success_at": sa.case((v.c.w_success == 1, db_now()), else_=t.c.last_success_at),
    }


def run_fields(run: FinishRun | None) -> tuple[Any, ...]:
    """The ``r_*`` values of a batch row: whether it has a run row, and that row's fields."""
    if run is None:
        return (False, None, None, None, None, None, None)
    return (True, run.name, run.token, run.attempt, run.node_id, run.scheduled_at,
            run.started_at)


def has_runs(target: FinishTarget, writes: Sequence[R]) -> bool:
    """Whether any of ``writes`` has a run row to write."""
    return target.history and any(w.run is not None for w in writes)


# -- databases that join the batch's rows as a derived table (MySQL/MariaDB, SQLite) -------
def write_joined(
    target: FinishTarget, conn: Connection, node_id: str, writes: Sequence[R],
    most: int, rows: JoinedRows | None = None,
) -> set[int] | None:
    """The batch in two statements instead of two per execution: the run rows first, one
    ``INSERT … SELECT`` joining the batch's rows to the tasks they still hold (fenced, as a
    run row written first for one execution is), then one fenced multi-row ``UPDATE``.

    Returns the ids that landed, or ``None`` when the run rows could not be written as one
    statement (a row of the same execution is there already: a retried finish, a ``lost``
    row), for the caller to write the batch one execution at a time, as before.

    Which writes landed is exact: the update stamps the batch's own random ``claim`` on the
    rows it finishes (a finished row's claim is not read any more), so a read of that stamp
    right after tells them apart from rows another node took over, unless one was picked
    again within that moment (then the pick's ``prev_locked_by`` tells, as after a lost
    answer).

    >>> write_joined(store, conn, "node-1", writes, 256)  # doctest: +SKIP
    {12, 13}
    """
    rows = rows or UnionRows()
    history = has_runs(target, writes)
    size = rows.size(len(writes))
    if len(writes) > most:
        raise ValueError(f"at most {most} writes per joined finish, not {len(writes)}")
    insert, update = joined_statements(target, history, size, rows)
    params: dict[str, Any] = {"j_node": node_id, "j_marker": uuid.uuid4().hex}
    params.update(rows.params(_NAMES_HISTORY if history else _NAMES,
                              [_row_values(w, history) for w in writes], size))
    if insert is not None:
        try:
            # One autocommit statement: it inserts all its rows or none.
            conn.execute(insert, params)
        except sa.exc.IntegrityError:
            return None
        _faultpoints.reached("finish_history")
    count = conn.execute(update, params).rowcount
    _faultpoints.reached("finish")
    if count == len(writes):
        return {w.id for w in writes}
    t = target.table
    ids = [w.id for w in writes]
    return {int(r[0]) for r in conn.execute(
        sa.select(t.c.id).where(t.c.id.in_(ids), t.c.claim == params["j_marker"]))}


class JoinedRows(Protocol):
    """How a joined finish hands the server its batch's rows: a derived table ``w`` whose
    columns are named as the batch's columns, and the parameters that fill it."""

    kind: str
    """Names the way, for the statements kept built."""

    def size(self, rows: int) -> int:
        """The size the statement is built for, for a batch of ``rows`` (0: any size)."""
        ...

    def source(self, target: FinishTarget, columns: Sequence[sa.ColumnClause[Any]],
               size: int, names: Sequence[str]) -> sa.Subquery:
        """The derived table ``w`` of ``columns`` for a batch of ``size`` rows whose values
        :meth:`params` is given in the order of ``names``."""
        ...

    def params(self, names: Sequence[str], rows: Sequence[tuple[Any, ...]],
               size: int) -> dict[str, Any]:
        """The parameters of :meth:`source` for ``rows``, their values in the order of
        ``names``."""
        ...


class UnionRows:
    """The rows as ``(SELECT :j0_w_id AS w_id, … UNION ALL SELECT …) AS w``: every value its
    own parameter, one statement per batch size (padded past 8 rows)."""

    kind = "union"

    def size(self, rows: int) -> int:
        # Past 8, padded to a multiple of 8 with rows that match nothing (no id, no run row):
        # a few dozen statements, each built and compiled once, instead of one per number of
        # rows, for at most 7 rows of parameters more.
        return rows if rows <= 8 else -(-rows // 8) * 8

    def source(self, target: FinishTarget, columns: Sequence[sa.ColumnClause[Any]],
               size: int, names: Sequence[str]) -> sa.Subquery:
        return _union_rows(target, columns, size)

    def params(self, names: Sequence[str], rows: Sequence[tuple[Any, ...]],
               size: int) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for n, row in enumerate(rows):
            for name, value in zip(names, row, strict=True):
                params[f"j{n}_{name}"] = value
        for n in range(len(rows), size):
            for name in names:
                params[f"j{n}_{name}"] = 0 if name in _FLAGS else None
        return params


def joined_statements(
    target: FinishTarget, history: bool, size: int, rows: JoinedRows | None = None,
) -> tuple[sa.Executable | None, sa.Executable]:
    """The run rows' insert (with ``history``) and the fenced update for a batch of ``size``
    (see :meth:`JoinedRows.size`), built once per size: parameters those of ``rows``,
    ``j_node`` and ``j_marker``."""
    rows = rows or UnionRows()
    key = (history, size, rows.kind)
    cached: tuple[sa.Executable | None, sa.Executable] | None = target.joined_statements.get(key)
    if cached is not None:
        return cached
    t = target.table
    columns = {c.name: c for c in batch_columns(target, history)}
    names = _NAMES_HISTORY if history else _NAMES
    node = sa.bindparam("j_node", type_=t.c.locked_by.type)

    def fence(v: sa.Subquery) -> sa.ColumnElement[bool]:
        return sa.and_(t.c.id == v.c.w_id, t.c.total_attempt == v.c.w_token,
                       t.c.locked_by == node)

    insert = None
    if history:
        # Each statement's rows carry only the columns it reads.
        r = rows.source(target, [columns[n] for n in _INSERT_NAMES], size, names)
        source = sa.select(
            r.c.r_name, r.c.r_token, r.c.r_attempt, r.c.r_node, r.c.r_scheduled,
            r.c.r_started, db_now(), r.c.w_status, r.c.w_error,
        ).select_from(t.join(r, fence(r))).where(r.c.r_log == 1)
        insert = sa.insert(target.runs_table).from_select(list(RUN_COLUMNS), source)
    v = rows.source(target, [columns[n] for n in _NAMES], size, names)
    update = (
        sa.update(t)
        .where(fence(v))
        # The flag arrives as 0/1 from the batch's rows, not as a boolean column.
        .values(claim=sa.bindparam("j_marker", type_=t.c.claim.type),
                **finished_values(t, v, v.c.w_set_payload == 1))
    )
    target.joined_statements[key] = (insert, update)
    return insert, update


_FLAGS = frozenset({"w_set_payload", "r_log"})

_NAMES = ["w_id", "w_token", "w_next", "w_attempt", "w_status", "w_success", "w_error",
          "w_set_payload", "w_payload"]
_INSERT_NAMES = ["w_id", "w_token", "w_status", "w_error", "r_log", "r_name", "r_token",
                 "r_attempt", "r_node", "r_scheduled", "r_started"]
_NAMES_HISTORY = [*_NAMES, "r_log", "r_name", "r_token", "r_attempt", "r_node", "r_scheduled",
                  "r_started"]


def _row_values(w: FinishRow, history: bool) -> tuple[Any, ...]:
    payload = w.sets_payload
    return (w.id, w.token, w.next_at, w.attempt, w.status, 1 if w.status == "success" else 0,
            w.error, 1 if payload else 0, w.payload if payload else None,
            *((1 if w.run is not None else 0, *run_fields(w.run)[1:]) if history else ()))


def written_type(target: FinishTarget, column: sa.ColumnClause[Any]) -> TypeEngine[Any]:
    """The type of a joined batch's ``column`` (of :func:`batch_columns`): that of the table
    column it is written to, flags as integers (every database compares them alike)."""
    if column.name in _FLAGS:
        return sa.Integer()
    written = {"w_next": target.table.c.next_process_at,
               "r_scheduled": target.runs_table.c.scheduled_at,
               "r_started": target.runs_table.c.started_at}.get(column.name)
    return column.type if written is None else written.type


def _union_rows(
    target: FinishTarget, columns: Sequence[sa.ColumnClause[Any]], size: int
) -> sa.Subquery:
    """``size`` rows as ``(SELECT :j0_w_id AS w_id, … UNION ALL SELECT …) AS w``, each value a
    parameter typed by :func:`written_type`."""
    selects = [
        sa.select(*(sa.bindparam(f"j{n}_{c.name}", type_=written_type(target, c)).label(c.name)
                    for c in columns))
        for n in range(size)
    ]
    union = selects[0] if len(selects) == 1 else sa.union_all(*selects)
    return union.subquery("w")


# -- finished one-off jobs: their rows deleted, a batch per statement -----------------------
def delete_joined(
    target: FinishTarget, conn: Connection, node_id: str, writes: Sequence[R],
    most: int, run_first: RunFirst[R] | None, rows: JoinedRows | None = None,
) -> set[int] | None:
    """Delete the rows of the finished one-off jobs ``writes`` (at most ``most``) with one
    fenced multi-row ``DELETE``, after their run rows: one ``INSERT … SELECT`` of the batch's
    rows joined to the tasks they still hold without ``run_first`` (:func:`write_joined`),
    else ``run_first`` for each.

    Returns the ids whose rows it deleted (those gone from the table afterwards, read back
    when the count says some were not), or ``None`` when the run rows could not be written
    as one statement (one of them is there already: a retried finish), for the caller to
    write the batch one execution at a time.

    >>> delete_joined(store, conn, "node-1", writes, 256, None)  # doctest: +SKIP
    {12, 13}
    """
    history = has_runs(target, writes)
    size = UnionRows().size(len(writes))
    if size > most:
        raise ValueError(f"at most {most} writes per joined delete, not {len(writes)}")
    params: dict[str, Any] = {"j_node": node_id}
    for n, w in enumerate(writes):
        params[f"j{n}_w_id"], params[f"j{n}_w_token"] = w.id, w.token
    for n in range(len(writes), size):
        # Padding that matches no row: ids are never NULL.
        params[f"j{n}_w_id"] = params[f"j{n}_w_token"] = None
    if history and run_first is None:
        # The run rows as a joined finish writes them (with the rows' own padding).
        rows = rows or UnionRows()
        run_size = rows.size(len(writes))
        insert, _ = joined_statements(target, True, run_size, rows)
        assert insert is not None
        values = rows.params(_NAMES_HISTORY, [_row_values(w, True) for w in writes], run_size)
        try:
            # One autocommit statement: it inserts all its rows or none.
            conn.execute(insert, {**values, "j_node": node_id})
        except sa.exc.IntegrityError:
            return None
        _faultpoints.reached("finish_history")
    elif history and run_first is not None:
        for w in writes:
            run_first(conn, w)
    count = conn.execute(_joined_delete(target, size), params).rowcount
    _faultpoints.reached("finish")
    ids = [w.id for w in writes]
    if count == len(writes):
        return set(ids)
    t = target.table
    # The rows a fence refused are still there (another node holds them); a one-off job's
    # id is never given to another row.
    present = {int(r[0]) for r in conn.execute(sa.select(t.c.id).where(t.c.id.in_(ids)))}
    return {i for i in ids if i not in present}


def _joined_delete(target: FinishTarget, size: int) -> sa.Executable:
    """``DELETE … WHERE locked_by = :j_node AND ((id = :j0_w_id AND total_attempt =
    :j0_w_token) OR …)`` for ``size`` rows, built once per size: the same on every
    database."""
    key = ("delete", size)
    cached: sa.Executable | None = target.joined_statements.get(key)
    if cached is not None:
        return cached
    t, b = target.table, sa.bindparam
    stmt = sa.delete(t).where(
        t.c.locked_by == b("j_node", type_=t.c.locked_by.type),
        sa.or_(*(sa.and_(t.c.id == b(f"j{n}_w_id", type_=sa.BigInteger()),
                         t.c.total_attempt == b(f"j{n}_w_token", type_=sa.BigInteger()))
                 for n in range(size))))
    target.joined_statements[key] = stmt
    return stmt
