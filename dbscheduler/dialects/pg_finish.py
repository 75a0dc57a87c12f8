"""PostgreSQL's finish: a whole batch in one statement, its run rows and ``NOTIFY`` included.

``UPDATE … FROM <the batch's rows> RETURNING`` is a data-modifying CTE, and an ``INSERT …
SELECT`` from it adds a run row for exactly the rows it changed (:meth:`OneStatement.run_rows`
settles a row of the same execution already there), so a finish that did not land left no run
row behind. Finished one-off jobs go the same way, one ``DELETE … USING … RETURNING`` per
batch. The batch's rows are one array parameter per column (``unnest``), so each statement is
built and compiled once and run with every batch's rows as parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from .._engine import faultpoints as _faultpoints
from .._engine.notices import due_payload
from .common import db_now
from .finishing import (
    RUN_COLUMNS,
    Finishing,
    FinishTarget,
    R,
    RunFirst,
    batch_columns,
    finished_values,
    has_runs,
    run_fields,
)

__all__ = ["BatchRows", "OneStatement"]

K = TypeVar("K")


class BatchRows(Protocol):
    """How the dialect turns a batch's rows into a derived table (PostgreSQL's unnest)."""

    def batch_rows(
        self, name: str, columns: Sequence[sa.ColumnClause[Any]], rows: Sequence[Sequence[Any]]
    ) -> tuple[sa.FromClause, dict[str, Any]]: ...

    def batch_params(
        self, name: str, columns: Sequence[sa.ColumnClause[Any]], rows: Sequence[Sequence[Any]]
    ) -> dict[str, Any] | None: ...

    def batch_keys(
        self, name: str, key: sa.ColumnClause[Any], target: ColumnElement[Any]
    ) -> ColumnElement[bool] | None: ...


class OneStatement(Finishing):
    """The whole batch in one statement, run rows and ``NOTIFY`` included (PostgreSQL).

    >>> OneStatement(PostgreSQLDialect()).run_row_shared  # doctest: +SKIP
    True
    """

    run_row_shared = True

    def __init__(self, rows: BatchRows) -> None:
        super().__init__()
        self._rows = rows

    def write(self, target: FinishTarget, conn: Connection, node_id: str,
              writes: Sequence[R], notify: bool,
              landed: set[int]) -> Sequence[R]:
        landed |= self._write(target, conn, node_id, writes, notify)
        return ()

    def delete(self, target: FinishTarget, conn: Connection, node_id: str,
               writes: Sequence[R], landed: set[int],
               run_first: RunFirst[R]) -> list[R]:
        landed |= self._delete(target, conn, node_id, writes)
        return []

    def run_rows(self, runs: sa.Table, source: sa.Select[Any],
                 columns: Sequence[str] = RUN_COLUMNS) -> sa.Insert:
        """``INSERT INTO <runs> (columns) <source>``, settling a row of the same execution
        that is already there (only a ``lost`` row is final)."""
        stmt = pg_insert(runs).from_select(list(columns), source)
        return stmt.on_conflict_do_update(
            index_elements=[runs.c.task_name, runs.c.token, runs.c.started_at],
            set_={"status": stmt.excluded.status, "error": stmt.excluded.error,
                  "finished_at": stmt.excluded.finished_at},
            where=runs.c.status != "lost",
        )

    # -- the batch's update ----------------------------------------------------------------
    def _write(self, target: FinishTarget, conn: Connection, node_id: str,
               writes: Sequence[R], notify: bool) -> set[int]:
        """The whole batch in one ``UPDATE … FROM <the batch's rows> RETURNING``, with an
        ``INSERT`` of the run rows of exactly the rows it changed in the same statement."""
        history = has_runs(target, writes)
        columns = batch_columns(target, history)
        rows = [
            (w.id, w.token, w.next_at, w.attempt, w.status, 1 if w.status == "success" else 0,
             w.error, w.sets_payload, w.payload if w.sets_payload else None,
             *(run_fields(w.run) if history else ()))
            for w in writes
        ]
        stmt, params = self._statement(
            target.finish_statements, (history, notify), columns, rows,
            lambda v: self._update(target, v, history, notify))
        params["w_node"] = node_id
        if notify:
            params["n_payload"] = due_payload(node_id, min(w.next_at for w in writes))
        ids = {int(r[0]) for r in conn.execute(stmt, params)}
        _faultpoints.reached("finish")
        return ids

    def _statement(
        self,
        cache: dict[K, sa.Executable],
        key: K,
        columns: Sequence[sa.ColumnClause[Any]],
        rows: list[tuple[Any, ...]],
        build: Callable[[sa.FromClause], sa.Executable],
    ) -> tuple[sa.Executable, dict[str, Any]]:
        """The statement over the batch's ``rows`` (as ``w``) and its parameters: the one in
        ``cache`` under ``key`` where the batch's text does not depend on the rows (the
        unnest of arrays: its cache key and compiled form are reused by every batch), else
        built by ``build`` (and kept in ``cache`` when it can be reused)."""
        reusable = self._rows.batch_params("w", columns, rows)
        stmt = cache.get(key)
        if reusable is not None and stmt is not None:
            return stmt, reusable
        v, params = self._rows.batch_rows("w", columns, rows)
        stmt = build(v)
        if reusable is not None:
            cache[key] = stmt
        return stmt, params

    def _update(self, target: FinishTarget, v: sa.FromClause, history: bool,
                notify: bool) -> sa.Executable:
        """The batch's fenced ``UPDATE … FROM v RETURNING`` (``w_node`` is the node's id),
        with the run rows' ``INSERT`` (``history``) and the ``NOTIFY`` (``notify``, payload
        ``n_payload``) in the same statement."""
        t = target.table
        node = sa.bindparam("w_node", type_=t.c.locked_by.type)
        keys = self._rows.batch_keys("w", batch_columns(target, history)[0], t.c.id)
        update = (
            sa.update(t)
            .where(t.c.id == v.c.w_id, t.c.total_attempt == v.c.w_token, t.c.locked_by == node,
                   *([keys] if keys is not None else []))
            .values(**finished_values(t, v, v.c.w_set_payload))
        )
        if not history and not notify:
            return update.returning(t.c.id)
        returned: list[sa.ColumnElement[Any]] = [t.c.id]
        if history:
            returned += [v.c.w_status, v.c.w_error, v.c.r_log, v.c.r_name, v.c.r_token,
                         v.c.r_attempt, v.c.r_node, v.c.r_scheduled, v.c.r_started]
        done = update.returning(*returned).cte("finished")
        columns: list[sa.ColumnElement[Any]] = [done.c.id]
        if notify:
            # The next occurrence is due before the peers' next poll (FixedDelay(0), a
            # retry): wake them, in the same statement (identical notifications are delivered
            # once). Its payload says who wrote what is due when: this node's listener
            # ignores it (its poller knows already), the others take the time as a hint
            # instead of polling.
            columns.append(sa.func.pg_notify(
                target.channel, sa.bindparam("n_payload", type_=sa.Unicode())).label("notified"))
        stmt = sa.select(*columns)
        if history:
            logged = self.run_rows(target.runs_table, sa.select(
                done.c.r_name, done.c.r_token, done.c.r_attempt, done.c.r_node,
                done.c.r_scheduled, done.c.r_started, db_now(), done.c.w_status,
                done.c.w_error,
            ).where(done.c.r_log))
            stmt = stmt.add_cte(logged.cte("logged"))
        return stmt

    # -- finished one-off jobs ---------------------------------------------------------------
    def _delete(self, target: FinishTarget, conn: Connection, node_id: str,
                writes: Sequence[R]) -> set[int]:
        """Delete the rows of the finished one-off jobs ``writes`` in one fenced ``DELETE …
        USING <the batch's rows> RETURNING``, with the ``INSERT`` of the run rows of exactly
        the rows it deleted in the same statement. Returns their ids."""
        history = has_runs(target, writes)
        columns = _delete_columns(target, history)
        rows = [(w.id, w.token, w.status, w.error, *(run_fields(w.run) if history else ()))
                for w in writes]
        stmt, params = self._statement(
            target.row_statements, ("delete_values", history), columns, rows,
            lambda v: self._delete_statement(target, v, history))
        params["w_node"] = node_id
        ids = {int(r[0]) for r in conn.execute(stmt, params)}
        _faultpoints.reached("finish")
        return ids

    def _delete_statement(self, target: FinishTarget, v: sa.FromClause,
                          history: bool) -> sa.Executable:
        t = target.table
        node = sa.bindparam("w_node", type_=t.c.locked_by.type)
        keys = self._rows.batch_keys("w", _delete_columns(target, history)[0], t.c.id)
        delete = sa.delete(t).where(
            t.c.id == v.c.w_id, t.c.total_attempt == v.c.w_token, t.c.locked_by == node,
            *([keys] if keys is not None else []))
        if not history:
            return delete.returning(t.c.id)
        gone = delete.returning(
            t.c.id, v.c.w_status, v.c.w_error, v.c.r_log, v.c.r_name, v.c.r_token,
            v.c.r_attempt, v.c.r_node, v.c.r_scheduled, v.c.r_started).cte("gone")
        logged = self.run_rows(target.runs_table, sa.select(
            gone.c.r_name, gone.c.r_token, gone.c.r_attempt, gone.c.r_node, gone.c.r_scheduled,
            gone.c.r_started, db_now(), gone.c.w_status, gone.c.w_error,
        ).where(gone.c.r_log))
        return sa.select(gone.c.id).add_cte(logged.cte("logged"))


_DELETE_NAMES = ("w_id", "w_token", "w_status", "w_error")
_RUN_NAMES = ("r_log", "r_name", "r_token", "r_attempt", "r_node", "r_scheduled", "r_started")


def _delete_columns(target: FinishTarget, history: bool) -> list[sa.ColumnClause[Any]]:
    every = {c.name: c for c in batch_columns(target, history)}
    return [every[n] for n in (_DELETE_NAMES + _RUN_NAMES if history else _DELETE_NAMES)]
