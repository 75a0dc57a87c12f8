"""The batch finish as one statement, where the database can update from a derived table of
the batch's rows (PostgreSQL): ``UPDATE … FROM <rows> RETURNING``, with the run rows'
``INSERT`` and the ``NOTIFY`` in the same statement, built once and run with each batch's
rows as parameters; elsewhere (MySQL/MariaDB, SQLite) the run rows' ``INSERT … SELECT`` and
one fenced multi-row ``UPDATE``. Finished one-off jobs are deleted the same way, a batch per
fenced ``DELETE`` (:func:`delete_values`, :func:`delete_joined`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .._engine import faultpoints as _faultpoints
from .._engine.notices import due_payload
from ..context import _Unset
from ..dialects import db_now
from ..dialects.types import UTCDateTime
from .history import RUN_COLUMNS, RunRecord, insert_from, log_first

if TYPE_CHECKING:
    # The base, not the Store class: that one builds on this module.
    from .base import StoreBase as Store
    from .finish_write import FinishWrite

__all__ = ["delete_joined", "delete_values", "write_joined", "write_values"]

K = TypeVar("K")


def write_values(
    store: Store, conn: Connection, node_id: str, writes: Sequence[FinishWrite], notify: bool
) -> set[int]:
    """The whole batch in one ``UPDATE … FROM <the batch's rows> RETURNING``, with an
    ``INSERT`` of the run rows of exactly the rows it changed in the same statement."""
    history = store.history and any(w.run is not None for w in writes)
    columns = _batch_columns(store, history)
    rows = [
        (w.id, w.token, w.next_at, w.attempt, w.status, 1 if w.status == "success" else 0,
         w.error, not isinstance(w.payload, _Unset),
         None if isinstance(w.payload, _Unset) else w.payload,
         *(_run_fields(w.run) if history else ()))
        for w in writes
    ]
    stmt, params = _batch_statement(
        store, store.finish_statements, (history, notify), columns, rows,
        lambda v: _values_statement(store, v, history, notify))
    params["w_node"] = node_id
    if notify:
        params["n_payload"] = due_payload(node_id, min(w.next_at for w in writes))
    ids = {int(r[0]) for r in conn.execute(stmt, params)}
    _faultpoints.reached("finish")
    return ids


def _batch_statement(
    store: Store,
    cache: dict[K, sa.Executable],
    key: K,
    columns: list[sa.ColumnClause[Any]],
    rows: list[tuple[Any, ...]],
    build: Callable[[sa.FromClause], sa.Executable],
) -> tuple[sa.Executable, dict[str, Any]]:
    """The statement over the batch's ``rows`` (as ``w``) and its parameters: the one in
    ``cache`` under ``key`` where the dialect's batch text does not depend on the rows
    (PostgreSQL's unnest of arrays: its cache key and compiled form are reused by every
    batch), else built by ``build`` (and kept in ``cache`` when it can be reused)."""
    reusable = store.dialect.batch_params("w", columns, rows)
    stmt = cache.get(key)
    if reusable is not None and stmt is not None:
        return stmt, reusable
    v, params = store.dialect.batch_rows("w", columns, rows)
    stmt = build(v)
    if reusable is not None:
        cache[key] = stmt
    return stmt, params


def _batch_columns(store: Store, history: bool) -> list[sa.ColumnClause[Any]]:
    t, runs = store.table, store.runs_table
    return [
        sa.column("w_id", sa.BigInteger()),
        sa.column("w_token", sa.BigInteger()),
        sa.column("w_next", UTCDateTime()),
        sa.column("w_attempt", sa.Integer()),
        sa.column("w_status", t.c.last_status.type),
        sa.column("w_success", sa.Integer()),
        sa.column("w_error", t.c.last_error.type),
        sa.column("w_set_payload", sa.Boolean()),
        sa.column("w_payload", t.c.payload.type),
        *([
            sa.column("r_log", sa.Boolean()),
            sa.column("r_name", runs.c.task_name.type),
            sa.column("r_token", sa.BigInteger()),
            sa.column("r_attempt", sa.Integer()),
            sa.column("r_node", runs.c.node_id.type),
            sa.column("r_scheduled", UTCDateTime()),
            sa.column("r_started", UTCDateTime()),
        ] if history else []),
    ]


def _finished(
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


def _values_statement(
    store: Store, v: sa.FromClause, history: bool, notify: bool
) -> sa.Executable:
    """The batch's fenced ``UPDATE … FROM v RETURNING`` (``w_node`` is the node's id), with
    the run rows' ``INSERT`` (``history``) and the ``NOTIFY`` (``notify``, payload
    ``n_payload``) in the same statement."""
    t = store.table
    node = sa.bindparam("w_node", type_=t.c.locked_by.type)
    keys = store.dialect.batch_keys("w", _batch_columns(store, history)[0], t.c.id)
    update = (
        sa.update(t)
        .where(t.c.id == v.c.w_id, t.c.total_attempt == v.c.w_token, t.c.locked_by == node,
               *([keys] if keys is not None else []))
        .values(**_finished(t, v, v.c.w_set_payload))
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
        # The next occurrence is due before the peers' next poll (FixedDelay(0), a retry):
        # wake them, in the same statement (identical notifications are delivered once).
        # Its payload says who wrote what is due when: this node's listener ignores it (its
        # poller knows already), the others take the time as a hint instead of polling.
        columns.append(sa.func.pg_notify(
            store.channel, sa.bindparam("n_payload", type_=sa.Unicode())).label("notified"))
    stmt = sa.select(*columns)
    if history:
        logged = insert_from(store, sa.select(
            done.c.r_name, done.c.r_token, done.c.r_attempt, done.c.r_node, done.c.r_scheduled,
            done.c.r_started, db_now(), done.c.w_status, done.c.w_error,
        ).where(done.c.r_log))
        stmt = stmt.add_cte(logged.cte("logged"))
    return stmt


def _run_fields(run: RunRecord | None) -> tuple[Any, ...]:
    if run is None:
        return (False, None, None, None, None, None, None)
    return (True, run.name, run.token, run.attempt, run.node_id, run.scheduled_at,
            run.started_at)


# -- databases that join the batch's rows as a derived table (MySQL/MariaDB, SQLite) -------
def write_joined(
    store: Store, conn: Connection, node_id: str, writes: Sequence[FinishWrite], most: int
) -> set[int] | None:
    """The batch in two statements instead of two per execution: the run rows first, one
    ``INSERT … SELECT`` joining the batch's rows to the tasks they still hold (fenced, as
    :func:`~.history.log_first` does for one), then one fenced multi-row ``UPDATE``.

    Returns the ids that landed, or ``None`` when the run rows could not be written as one
    statement (a row of the same execution is there already: a retried finish, a ``lost``
    row), for the caller to write the batch one execution at a time, as before.

    Which writes landed is exact: the update stamps the batch's own random ``claim`` on the
    rows it finishes (a finished row's claim is not read any more), so a read of that stamp
    right after tells them apart from rows another node took over, unless one was picked
    again within that moment (then the pick's ``prev_locked_by`` tells, as after a lost
    answer)."""
    history = store.history and any(w.run is not None for w in writes)
    # Past 8, padded to a multiple of 8 with rows that match nothing (no id, no run row):
    # a few dozen statements, each built and compiled once, instead of one per number of
    # rows, for at most 7 rows of parameters more.
    size = len(writes) if len(writes) <= 8 else -(-len(writes) // 8) * 8
    if size > most:
        raise ValueError(f"at most {most} writes per joined finish, not {len(writes)}")
    insert, update = _joined_statements(store, history, size)
    params: dict[str, Any] = {"j_node": node_id, "j_marker": uuid.uuid4().hex}
    names = _names(history)
    for n, w in enumerate(writes):
        for name, value in zip(names, _row_values(w, history), strict=True):
            params[f"j{n}_{name}"] = value
    for n in range(len(writes), size):
        for name in names:
            params[f"j{n}_{name}"] = 0 if name in _FLAGS else None
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
    t = store.table
    ids = [w.id for w in writes]
    return {int(r[0]) for r in conn.execute(
        sa.select(t.c.id).where(t.c.id.in_(ids), t.c.claim == params["j_marker"]))}


def _names(history: bool) -> list[str]:
    return _NAMES_HISTORY if history else _NAMES


def _joined_statements(
    store: Store, history: bool, size: int
) -> tuple[sa.Executable | None, sa.Executable]:
    """The run rows' insert (with ``history``) and the fenced update for a batch of ``size``,
    built once per size: parameters ``j<n>_<column>``, ``j_node`` and ``j_marker``."""
    key = (history, size)
    cached: tuple[sa.Executable | None, sa.Executable] | None = store.joined_statements.get(key)
    if cached is not None:
        return cached
    t = store.table
    columns = {c.name: c for c in _batch_columns(store, history)}
    node = sa.bindparam("j_node", type_=t.c.locked_by.type)

    def fence(v: sa.Subquery) -> sa.ColumnElement[bool]:
        return sa.and_(t.c.id == v.c.w_id, t.c.total_attempt == v.c.w_token,
                       t.c.locked_by == node)

    insert = None
    if history:
        # Each statement's rows carry only the columns it reads: PyMySQL escapes every
        # parameter in Python.
        r = _union_rows([columns[n] for n in _INSERT_NAMES], size, store)
        source = sa.select(
            r.c.r_name, r.c.r_token, r.c.r_attempt, r.c.r_node, r.c.r_scheduled,
            r.c.r_started, db_now(), r.c.w_status, r.c.w_error,
        ).select_from(t.join(r, fence(r))).where(r.c.r_log == 1)
        insert = sa.insert(store.runs_table).from_select(list(RUN_COLUMNS), source)
    v = _union_rows([columns[n] for n in _NAMES], size, store)
    update = (
        sa.update(t)
        .where(fence(v))
        # The flag arrives as 0/1 from a UNION of parameters, not as a boolean column.
        .values(claim=sa.bindparam("j_marker", type_=t.c.claim.type),
                **_finished(t, v, v.c.w_set_payload == 1))
    )
    store.joined_statements[key] = (insert, update)
    return insert, update


_FLAGS = frozenset({"w_set_payload", "r_log"})

_NAMES = ["w_id", "w_token", "w_next", "w_attempt", "w_status", "w_success", "w_error",
          "w_set_payload", "w_payload"]
_INSERT_NAMES = ["w_id", "w_token", "w_status", "w_error", "r_log", "r_name", "r_token",
                 "r_attempt", "r_node", "r_scheduled", "r_started"]
_NAMES_HISTORY = [*_NAMES, "r_log", "r_name", "r_token", "r_attempt", "r_node", "r_scheduled",
                  "r_started"]


def _row_values(w: FinishWrite, history: bool) -> tuple[Any, ...]:
    payload = not isinstance(w.payload, _Unset)
    return (w.id, w.token, w.next_at, w.attempt, w.status, 1 if w.status == "success" else 0,
            w.error, 1 if payload else 0, w.payload if payload else None,
            *((1 if w.run is not None else 0, *_run_fields(w.run)[1:]) if history else ()))


def _union_rows(
    columns: Sequence[sa.ColumnClause[Any]], size: int, store: Store
) -> sa.Subquery:
    """``size`` rows as ``(SELECT :j0_w_id AS w_id, … UNION ALL SELECT …) AS w``, each value a
    parameter typed like the column it is written to (flags as integers: every database
    compares them alike)."""
    t = store.table
    types: dict[str, Any] = {"w_next": t.c.next_process_at.type,
                             "r_scheduled": store.runs_table.c.scheduled_at.type,
                             "r_started": store.runs_table.c.started_at.type}
    def typed(c: sa.ColumnClause[Any]) -> Any:
        if c.name in _FLAGS:
            return sa.Integer()
        return types.get(c.name, c.type)

    selects = [
        sa.select(*(sa.bindparam(f"j{n}_{c.name}", type_=typed(c)).label(c.name)
                    for c in columns))
        for n in range(size)
    ]
    union = selects[0] if len(selects) == 1 else sa.union_all(*selects)
    return union.subquery("w")


# -- finished one-off jobs: their rows deleted, a batch per statement -----------------------
_DELETE_NAMES = ["w_id", "w_token", "w_status", "w_error"]


def delete_values(
    store: Store, conn: Connection, node_id: str, writes: Sequence[FinishWrite]
) -> set[int]:
    """Delete the rows of the finished one-off jobs ``writes`` in one fenced
    ``DELETE … USING <the batch's rows> RETURNING`` (PostgreSQL), with the ``INSERT`` of the
    run rows of exactly the rows it deleted in the same statement. Returns their ids.

    >>> delete_values(store, conn, "node-1", writes)  # doctest: +SKIP
    {12, 13}
    """
    history = store.history and any(w.run is not None for w in writes)
    columns = _delete_columns(store, history)
    rows = [(w.id, w.token, w.status, w.error, *(_run_fields(w.run) if history else ()))
            for w in writes]
    stmt, params = _batch_statement(
        store, store.row_statements, ("delete_values", history), columns, rows,
        lambda v: _delete_statement(store, v, history))
    params["w_node"] = node_id
    ids = {int(r[0]) for r in conn.execute(stmt, params)}
    _faultpoints.reached("finish")
    return ids


def _delete_columns(store: Store, history: bool) -> list[sa.ColumnClause[Any]]:
    every = {c.name: c for c in _batch_columns(store, history)}
    return [every[n] for n in (_DELETE_NAMES + _NAMES_HISTORY[len(_NAMES):] if history
                               else _DELETE_NAMES)]


def _delete_statement(store: Store, v: sa.FromClause, history: bool) -> sa.Executable:
    t = store.table
    node = sa.bindparam("w_node", type_=t.c.locked_by.type)
    keys = store.dialect.batch_keys("w", _delete_columns(store, history)[0], t.c.id)
    delete = sa.delete(t).where(
        t.c.id == v.c.w_id, t.c.total_attempt == v.c.w_token, t.c.locked_by == node,
        *([keys] if keys is not None else []))
    if not history:
        return delete.returning(t.c.id)
    gone = delete.returning(
        t.c.id, v.c.w_status, v.c.w_error, v.c.r_log, v.c.r_name, v.c.r_token, v.c.r_attempt,
        v.c.r_node, v.c.r_scheduled, v.c.r_started).cte("gone")
    logged = insert_from(store, sa.select(
        gone.c.r_name, gone.c.r_token, gone.c.r_attempt, gone.c.r_node, gone.c.r_scheduled,
        gone.c.r_started, db_now(), gone.c.w_status, gone.c.w_error,
    ).where(gone.c.r_log))
    return sa.select(gone.c.id).add_cte(logged.cte("logged"))


def delete_joined(
    store: Store, conn: Connection, node_id: str, writes: Sequence[FinishWrite], most: int,
    join_run_rows: bool,
) -> set[int] | None:
    """Delete the rows of the finished one-off jobs ``writes`` (at most ``most``) with one
    fenced multi-row ``DELETE``, after their run rows: one ``INSERT … SELECT`` of the batch's
    rows joined to the tasks they still hold with ``join_run_rows`` (:func:`write_joined`),
    else one fenced insert per run row.

    Returns the ids whose rows it deleted (those gone from the table afterwards, read back
    when the count says some were not), or ``None`` when the run rows could not be written
    as one statement (one of them is there already: a retried finish), for the caller to
    write the batch one execution at a time.

    >>> delete_joined(store, conn, "node-1", writes, 256, True)  # doctest: +SKIP
    {12, 13}
    """
    history = store.history and any(w.run is not None for w in writes)
    size = len(writes) if len(writes) <= 8 else -(-len(writes) // 8) * 8
    if size > most:
        raise ValueError(f"at most {most} writes per joined delete, not {len(writes)}")
    params: dict[str, Any] = {"j_node": node_id}
    for n, w in enumerate(writes):
        params[f"j{n}_w_id"], params[f"j{n}_w_token"] = w.id, w.token
    for n in range(len(writes), size):
        # Padding that matches no row: ids are never NULL.
        params[f"j{n}_w_id"] = params[f"j{n}_w_token"] = None
    if history and join_run_rows:
        insert, _ = _joined_statements(store, True, size)
        assert insert is not None
        padded = dict(params)
        for n, w in enumerate(writes):
            for name, value in zip(_NAMES_HISTORY, _row_values(w, True), strict=True):
                if name in _INSERT_NAMES:
                    padded[f"j{n}_{name}"] = value
        for n in range(len(writes), size):
            for name in _INSERT_NAMES:
                padded[f"j{n}_{name}"] = 0 if name in _FLAGS else padded.get(f"j{n}_{name}")
        try:
            # One autocommit statement: it inserts all its rows or none.
            conn.execute(insert, padded)
        except sa.exc.IntegrityError:
            return None
        _faultpoints.reached("finish_history")
    elif history:
        for w in writes:
            if w.run is not None:
                log_first(store, conn, (w.id, w.token, node_id), w.run, w.status, w.error)
                _faultpoints.reached("finish_history")
    count = conn.execute(_joined_delete(store, size), params).rowcount
    _faultpoints.reached("finish")
    ids = [w.id for w in writes]
    if count == len(writes):
        return set(ids)
    t = store.table
    # The rows a fence refused are still there (another node holds them); a one-off job's
    # id is never given to another row.
    present = {int(r[0]) for r in conn.execute(sa.select(t.c.id).where(t.c.id.in_(ids)))}
    return {i for i in ids if i not in present}


def _joined_delete(store: Store, size: int) -> sa.Executable:
    """``DELETE … WHERE locked_by = :j_node AND ((id = :j0_w_id AND total_attempt =
    :j0_w_token) OR …)`` for ``size`` rows, built once per size: the same on every
    database."""
    key = ("delete", size)
    cached: sa.Executable | None = store.joined_statements.get(key)
    if cached is not None:
        return cached
    t, b = store.table, sa.bindparam
    stmt = sa.delete(t).where(
        t.c.locked_by == b("j_node", type_=t.c.locked_by.type),
        sa.or_(*(sa.and_(t.c.id == b(f"j{n}_w_id", type_=sa.BigInteger()),
                         t.c.total_attempt == b(f"j{n}_w_token", type_=sa.BigInteger()))
                 for n in range(size))))
    store.joined_statements[key] = stmt
    return stmt
