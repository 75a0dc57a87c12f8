"""The run history's SQL: the row a finish writes, reading runs back, and pruning in batches.

A finish that lands has exactly one run row and a fenced-off finish none, whatever crashes in
between. How that is made atomic depends on what the database can do in one statement:

* **PostgreSQL** writes the run rows in the finish's own statement: the fenced ``UPDATE``
  (or a one-off job's ``DELETE``) is a data-modifying CTE, and an ``INSERT … SELECT`` from it
  adds a run row for exactly the rows it changed (the dialect's finish strategy,
  :mod:`dbscheduler.dialects.pg_finish`).
* **The others** have no data-modifying CTE (MySQL, MariaDB, SQLite) or were kept on the
  portable path (SQL Server, Oracle; see ``docs/architecture.md``). The run row is written
  *first*, by an ``INSERT … SELECT … FROM <tasks> WHERE <fence>``: only while this execution
  still holds its row (:func:`log_first`). Then the fenced finish. What can go wrong between
  the two statements is settled by whoever learns of it: a crash leaves the row held by a
  vanished node, and the node that takes it over turns that run row into the ``lost`` one it
  writes anyway (same key: ``(task_name, token, started_at)`` is unique); a finish whose
  fence failed removes its own run row again (:func:`forget`), unless it became ``lost``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..context import RunInfo
from ..dialects import db_now
from ..dialects.finishing import RUN_COLUMNS
from ..dialects.types import to_utc
from ..logfields import engine_log

if TYPE_CHECKING:
    from .base import StoreBase

__all__ = [
    "PRUNE_BATCH",
    "RUN_COLUMNS",
    "RunRecord",
    "forget",
    "log_first",
    "prune_beyond",
    "prune_older",
    "run_params",
    "run_values",
    "select_runs",
    "settle_success",
    "write_tracebacks",
]

log = engine_log("dbscheduler.store")

PRUNE_BATCH = 1000
"""Run rows deleted per statement: each delete is short, whatever the backlog (and 1,000 ids
fit Oracle's longest ``IN`` list and SQL Server's parameter limit)."""


@dataclass(frozen=True)
class RunRecord:
    """The execution a run row describes; its status and error come with the finish."""

    name: str
    token: int
    """The execution's fencing token (for a lost execution: the lost one's, not the
    token of the node that found it)."""
    attempt: int
    node_id: str
    scheduled_at: datetime
    started_at: datetime
    """Exactly as the row holds it: it is part of the run row's key."""


# -- writing -------------------------------------------------------------------------------
def run_values(
    store: StoreBase, run: RunRecord, status: str, error: str | None
) -> tuple[list[str], list[sa.ColumnElement[Any]]]:
    """The columns and bound values of ``run``'s row, finished at the database's clock now.

    ``error`` is left out when there is none: an untyped NULL in a select list is something
    drivers describe differently (the column defaults to NULL)."""
    runs, b = store.runs_table, sa.bindparam
    given = run_params(run, status, error)
    values: list[sa.ColumnElement[Any]] = [
        b("h_name", given["h_name"], type_=runs.c.task_name.type),
        b("h_token", given["h_token"], type_=sa.BigInteger()),
        b("h_attempt", given["h_attempt"], type_=sa.Integer()),
        b("h_node", given["h_node"], type_=runs.c.node_id.type),
        b("h_scheduled", given["h_scheduled"], type_=runs.c.scheduled_at.type),
        b("h_started", given["h_started"], type_=runs.c.started_at.type),
        db_now(),
        b("h_status", given["h_status"], type_=runs.c.status.type),
    ]
    columns = list(RUN_COLUMNS)
    if error is None:
        columns.remove("error")
    else:
        values.append(b("h_error", given["h_error"], type_=runs.c.error.type))
    return columns, values


def run_params(run: RunRecord, status: str, error: str | None) -> dict[str, Any]:
    """The values of :func:`run_values`'s parameters for ``run`` (``h_error`` only with an
    error), to run a statement built once from them with another execution's."""
    params = {"h_name": run.name, "h_token": run.token, "h_attempt": run.attempt,
              "h_node": run.node_id, "h_scheduled": run.scheduled_at,
              "h_started": run.started_at, "h_status": status}
    if error is not None:
        params["h_error"] = error
    return params


def log_first(
    store: StoreBase,
    conn: Connection,
    fence: tuple[int, int, str],
    run: RunRecord,
    status: str,
    error: str | None,
) -> None:
    """Write the run row of ``run`` if the tasks row still matches ``fence`` (``(id, token,
    node)``: the execution still holds it), before its finish. A row of the same execution
    already there (this finish retried, or a ``lost`` row) is settled instead: to
    ``status``, unless it is lost."""
    runs = store.runs_table
    key = ("log_first", error is None)
    stmt = store.row_statements.get(key)
    if stmt is None:
        # Built once: a statement built per execution cost more than the database's work
        # on SQLite, where a statement costs no round trip.
        t, b = store.table, sa.bindparam
        columns, values = run_values(store, run, status, error)
        stmt = store.row_statements[key] = sa.insert(runs).from_select(
            columns, sa.select(*values).select_from(t).where(
                t.c.id == b("f_id", type_=sa.BigInteger()),
                t.c.total_attempt == b("f_token", type_=sa.BigInteger()),
                t.c.locked_by == b("f_node", type_=t.c.locked_by.type)))
    id_, token, node_id = fence
    params = {**run_params(run, status, error), "f_id": id_, "f_token": token, "f_node": node_id}
    try:
        conn.execute(stmt, params)
    except sa.exc.IntegrityError:
        conn.execute(
            sa.update(runs)
            .where(_key(store, run), runs.c.status != "lost")
            .values(status=status, error=error, finished_at=db_now())
        )


def settle_success(store: StoreBase, conn: Connection, run: RunRecord) -> None:
    """Make ``run``'s row a success, whatever it says (``lost``, written by the node that took
    the task over), or write it: an execution whose effect is known to have committed under
    its lease (a delivery that removed its items) although its finish was refused."""
    runs = store.runs_table
    settled = sa.update(runs).where(_key(store, run)).values(
        status="success", error=None, finished_at=db_now())
    if conn.execute(settled).rowcount:
        return
    columns, values = run_values(store, run, "success", None)
    try:
        conn.execute(sa.insert(runs).from_select(columns, sa.select(*values)))
    except sa.exc.IntegrityError:  # written meanwhile by the node that took the task over
        conn.execute(settled)


def forget(store: StoreBase, conn: Connection, runs: Sequence[RunRecord]) -> None:
    """Delete the run rows of executions whose finish did not land after all (written first
    by :func:`log_first`), unless they became ``lost``: the node that took the row over owns
    that one."""
    table = store.runs_table
    for run in runs:
        conn.execute(sa.delete(table).where(_key(store, run), table.c.status != "lost"))


def _key(store: StoreBase, run: RunRecord) -> sa.ColumnElement[bool]:
    runs, b = store.runs_table, sa.bindparam
    return sa.and_(
        runs.c.task_name == b("k_name", run.name, type_=runs.c.task_name.type),
        runs.c.token == b("k_token", run.token, type_=sa.BigInteger()),
        runs.c.started_at == b("k_started", run.started_at, type_=runs.c.started_at.type),
    )


def write_tracebacks(store: StoreBase, items: Sequence[tuple[RunRecord, str]]) -> None:
    """Add each failure's traceback to its run row, written with the finish that landed:
    one ``UPDATE`` by the run row's key for all of them (failures only; a crash before it
    loses the traceback, never the run)."""
    if not items:
        return
    runs, b = store.runs_table, sa.bindparam
    stmt = sa.update(runs).where(
        runs.c.task_name == b("k_name", type_=runs.c.task_name.type),
        runs.c.token == b("k_token", type_=sa.BigInteger()),
        runs.c.started_at == b("k_started", type_=runs.c.started_at.type),
    ).values(traceback=b("k_traceback", type_=runs.c.traceback.type))
    with store.autocommit() as conn:
        conn.execute(stmt, [{"k_name": run.name, "k_token": run.token,
                             "k_started": run.started_at, "k_traceback": text}
                            for run, text in items])


# -- reading -------------------------------------------------------------------------------
def select_runs(
    store: StoreBase,
    name: str | None,
    statuses: Sequence[str],
    since: datetime | None,
    until: datetime | None,
    limit: int,
    node: str | None = None,
    before: tuple[datetime, int] | None = None,
) -> list[RunInfo]:
    """Runs newest first (by ``finished_at``, then ``id``), filtered; one indexed query.
    ``before``: only runs older than ``(finished_at, id)`` (the last of a previous page)."""
    runs = store.runs_table
    stmt = sa.select(runs)
    if name is not None:
        stmt = stmt.where(runs.c.task_name == name)
    if node is not None:
        stmt = stmt.where(runs.c.node_id == node)
    if before is not None:
        at, id_ = before
        # "Older than (at, id_)", spelt with a bound the index reads from: a page deep in the
        # history starts at the cursor instead of walking every newer run to get there.
        stmt = stmt.where(runs.c.finished_at <= at,
                          sa.or_(runs.c.finished_at < at, runs.c.id < id_))
    if statuses:
        stmt = stmt.where(runs.c.status.in_(list(statuses)))
    if since is not None:
        stmt = stmt.where(runs.c.finished_at >= since)
    if until is not None:
        stmt = stmt.where(runs.c.finished_at < until)
    stmt = stmt.order_by(runs.c.finished_at.desc(), runs.c.id.desc()).limit(int(limit))
    with store.read() as conn:
        return [run_info(r._mapping) for r in conn.execute(stmt)]


def run_info(row: Any) -> RunInfo:
    """A run row (its columns by name) as a :class:`RunInfo`."""
    return RunInfo(
        id=int(row["id"]), name=row["task_name"], token=int(row["token"]),
        attempt=int(row["attempt"]), node_id=row["node_id"],
        scheduled_at=_utc(row["scheduled_at"]), started_at=_utc(row["started_at"]),
        finished_at=_utc(row["finished_at"]), status=row["status"], error=row["error"],
        traceback=row.get("traceback"),
    )


def _utc(value: Any) -> datetime:
    out = to_utc(value)
    assert out is not None
    return out


# -- pruning -------------------------------------------------------------------------------
def prune_older(store: StoreBase, cutoff: datetime, batch: int = PRUNE_BATCH) -> Iterator[int]:
    """Delete the runs that finished before ``cutoff``, oldest first, ``batch`` rows per
    statement; yields how many each statement deleted (stop iterating to stop)."""
    runs = store.runs_table
    oldest = (sa.select(runs.c.id).where(runs.c.finished_at < cutoff)
              .order_by(runs.c.finished_at).limit(int(batch)))
    yield from _delete_batches(store, oldest, runs.c.finished_at < cutoff)


def prune_beyond(store: StoreBase, keep: int, batch: int = PRUNE_BATCH) -> Iterator[int]:
    """Delete each task's runs beyond its ``keep`` newest, ``batch`` rows per statement;
    yields how many each statement deleted."""
    runs = store.runs_table
    with store.read() as conn:
        crowded = [r[0] for r in conn.execute(
            sa.select(runs.c.task_name).group_by(runs.c.task_name)
            .having(sa.func.count() > int(keep)).order_by(runs.c.task_name))]
    for name in crowded:
        older = (
            sa.select(runs.c.id).where(runs.c.task_name == name)
            .order_by(runs.c.finished_at.desc(), runs.c.id.desc())
            .offset(int(keep)).limit(int(batch))
        )
        yield from _delete_batches(store, older, runs.c.task_name == name)


def _delete_batches(
    store: StoreBase, ids: sa.Select[Any], still: sa.ColumnElement[bool]
) -> Iterator[int]:
    """Read the next ``ids`` (a plain, non-locking read), delete them by primary key in one
    autocommit statement, and again until none is left. Two short statements per batch on
    every database: MySQL cannot limit a subquery of the table it deletes from."""
    runs = store.runs_table
    while True:
        with store.read() as conn:
            found = [int(r[0]) for r in conn.execute(ids)]
        if not found:
            return
        with store.autocommit() as conn:
            deleted = conn.execute(
                sa.delete(runs).where(runs.c.id.in_(found), still)).rowcount
        if deleted == 0:  # what was read is gone already: whoever deleted it goes on
            return
        yield max(deleted, 0)
