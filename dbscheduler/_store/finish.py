"""Finishing executions: fenced writes that hold no lock, one row never failing the others.

How a batch reaches the database is the strategy the dialect handed out once, when the store
was built (:mod:`dbscheduler.dialects.finishing`; PostgreSQL: one statement per batch;
MySQL/MariaDB and SQLite: joined chunks; the others: one fenced ``UPDATE`` per execution, right
after its run row, see :mod:`dbscheduler._store.history` for why that order is safe). This
module does what every database shares: retries, answers lost with the connection, refused
rows, read-backs.
``last_finished_at`` is the database's clock in the statement; the next due time is planned
with the node's estimate of that clock (its monotonic clock plus the offset measured at
every poll), so no ``SELECT now()`` precedes the write.

When the database refuses a write for one row (too long, invalid text), the rows are written
one by one and each refused one is recorded as an error saying why: the others land at once.
When the answer of a write was lost (the connection dropped), what landed is read back by
fence (the row still carries this execution's token, with ``locked_by`` cleared) instead of
being called refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .._engine import faultpoints as _faultpoints
from ..context import UNSET, _Unset
from ..dialects import db_now
from ..dialects.finishing import Finishing
from ..dialects.types import to_utc
from ..logfields import engine_log
from ..table import MAX_ERROR_LENGTH
from .base import IN_CHUNK
from .batches import queued_due, queued_guards, removed_all
from .finish_write import FinishWrite
from .history import forget, log_first, run_values, settle_success
from .leases import fence
from .state import clean_text

if TYPE_CHECKING:
    # The base, not the Store class: that one builds on this module.
    from .base import StoreBase as Store

__all__ = ["FinishWrite", "finish_batch"]

log = engine_log("dbscheduler.store")


LOST_ANSWER_RETRIES = 3
"""Writes of a batch whose connection died, each after reading back what landed, before the
finisher's slower retries take over (connections cut again and again)."""


def finish_batch(
    store: Store,
    finishing: Finishing,
    node_id: str,
    planned: Sequence[FinishWrite] | Callable[[datetime], Sequence[FinishWrite]],
    notify_within: timedelta,
    on_replaced: Callable[[FinishWrite], None] | None,
    planned_at: datetime | None = None,
) -> tuple[datetime, list[FinishWrite]]:
    """See :meth:`Store.finish`."""
    if callable(planned):
        now = store.estimated_now()
        planned = planned(now)
    else:
        now = store.estimated_now() if planned_at is None else planned_at
    writes = [
        dataclasses.replace(w, error=clean_text(w.error)) if w.error is not None else w
        for w in planned
    ]
    if not writes:
        return now, []
    notify = store.dialect.supports_notify and any(
        w.next_at <= now + notify_within for w in writes
    )
    # Each statement that confirms its writes adds them here at once: a transient error later
    # in the batch (a deadlock of its last statement) retries only what did not land yet.
    # Written again, a landed one would be refused by its own fence, and only a read-back
    # could tell, which guesses wrong once the row has moved on (picked and finished again).
    landed: set[int] = set()

    def attempt() -> None:
        # Where the statements commit together, an error rolls back what they confirmed.
        confirmed = landed if store.statements_commit else set()
        rest = [w for w in writes if w.id not in landed]
        if rest:
            _write(store, finishing, node_id, rest, notify, confirmed)
        landed.update(confirmed)

    try:
        for tries in range(1, LOST_ANSWER_RETRIES + 1):
            try:
                store.retrying("finish", attempt)
                break
            except sa.exc.DBAPIError as exc:
                if not exc.connection_invalidated or tries == LOST_ANSWER_RETRIES:
                    raise
                # The connection died with the answer: read back at once, on a new
                # connection, what landed (before the rows move on, and before the heartbeat,
                # kept for them while the finisher retries later, calls a landed one's lease
                # lost); write the rest.
                _settle_lost_answer(store, finishing, writes, landed, exc)
    except Exception as exc:
        if not refused(store, exc):
            raise
        log.warning("finish: the database refused a write of the batch (%s); writing the "
                    "%d execution(s) one by one", _reason(exc), len(writes))
        writes = _one_by_one(store, finishing, node_id, writes, notify, on_replaced, landed)
    unsure = [w for w in writes if w.id not in landed]
    stale = _not_landed(store, finishing, unsure) if unsure else []
    # A delivery that removed its items under its lease delivered them, although its finish
    # came too late: its run row says so, not "lost".
    delivered = [w.run for w in stale if w.keyed and w.status == "success" and w.run is not None
                 and removed_all(store, w.run.name, w.token, node_id, w.run.started_at)]
    first = [w.run for w in stale if w.run is not None and w.run not in delivered]
    if store.history and (delivered or (first and not finishing.run_row_shared)):
        with store.autocommit() as conn:
            for run in delivered:
                settle_success(store, conn, run)
            if not finishing.run_row_shared:
                # Their run rows were written before the finish, which did not land.
                forget(store, conn, first)
    return now, stale


def _settle_lost_answer(store: Store, finishing: Finishing, writes: Sequence[FinishWrite],
                        landed: set[int], error: sa.exc.DBAPIError) -> None:
    """Add to ``landed`` the writes not confirmed yet that landed after all (their
    statement committed, its answer was lost with the connection); re-raise ``error`` when
    the database cannot be read now either (the caller retries later)."""
    unsure = [w for w in writes if w.id not in landed]
    if not unsure:
        return
    try:
        stale = {(w.id, w.token) for w in _not_landed(store, finishing, unsure)}
    except sa.exc.DBAPIError:
        raise error from None
    found = [w.id for w in unsure if (w.id, w.token) not in stale]
    landed.update(found)
    log.warning("finish: the connection was lost (%s); read back, %d of %d unconfirmed "
                "write(s) had landed", error.orig, len(found), len(unsure))


def _one_by_one(
    store: Store,
    finishing: Finishing,
    node_id: str,
    writes: list[FinishWrite],
    notify: bool,
    on_replaced: Callable[[FinishWrite], None] | None,
    landed: set[int],
) -> list[FinishWrite]:
    """Each write not in ``landed`` alone (adding to it those that land); a refused one
    becomes an error finish saying why. Returns the writes as written."""
    done: list[FinishWrite] = []
    for w in writes:
        if w.id in landed:
            done.append(w)
            continue
        try:
            _write(store, finishing, node_id, [w], notify, landed)
        except Exception as exc:
            if not refused(store, exc):
                raise
            reason = clean_text(f"the database refused this execution's finish: {_reason(exc)}")
            log.error("finish of row %d (token %d) refused by the database: %s; recorded as "
                      "an error", w.id, w.token, reason)
            w = dataclasses.replace(w, status="error", error=reason, payload=UNSET)
            _write(store, finishing, node_id, [w], notify, landed)
            if on_replaced is not None:
                on_replaced(w)
        done.append(w)
    return done


def refused(store: Store, exc: BaseException) -> bool:
    """True when ``exc`` is the database (or its driver) refusing the values of a write, as
    opposed to a lost connection, a deadlock or a missing table (worth retrying as is)."""
    if isinstance(exc, sa.exc.DBAPIError):
        if exc.connection_invalidated or store.dialect.is_transient(exc):
            return False
        if store.dialect.is_missing_table(exc):
            return False
        return isinstance(exc, (sa.exc.DataError, sa.exc.IntegrityError))
    if isinstance(exc, sa.exc.StatementError):  # a bind processor refused a value
        return True
    return isinstance(exc, (ValueError, UnicodeError, OverflowError, RecursionError))


def _reason(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    return f"{type(orig or exc).__name__}: {orig or exc}"[:MAX_ERROR_LENGTH]


def _write(store: Store, finishing: Finishing, node_id: str, writes: Sequence[FinishWrite],
           notify: bool, landed: set[int]) -> None:
    """Write ``writes`` in autocommit; adds to ``landed`` the ids known to have landed, as
    each statement confirms them."""
    deletes = [w for w in writes if w.delete]
    if deletes:
        _delete_done(store, finishing, node_id, deletes, landed)
        rest = [w for w in writes if not w.delete]
        if rest:
            _write(store, finishing, node_id, rest, notify, landed)
        return
    with store.autocommit() as conn:
        writes = finishing.write(store, conn, node_id, writes, notify, landed)
        # One statement per execution, each with its own row count: which writes landed is
        # known at once, never guessed later from a row that may have moved on meanwhile
        # (PyMySQL runs an executemany of UPDATEs as these same round trips anyway).
        for w in writes:
            _log_first(store, conn, node_id, w)
            count = conn.execute(
                _fenced_update(store, not isinstance(w.payload, _Unset)), _params(w, node_id)
            ).rowcount
            _faultpoints.reached("finish")
            if count == 1:
                landed.add(w.id)


def _delete_done(store: Store, finishing: Finishing, node_id: str,
                 writes: Sequence[FinishWrite], landed: set[int]) -> None:
    """Delete the rows of finished one-off jobs, fenced, so a job another node took over
    meanwhile is never deleted under it (its run stays in the history): a batch per
    statement as ``finishing`` deletes batches, a batch key's delivery or a batch of one in a
    statement of its own. Adds to ``landed`` the ids of the writes that landed."""
    t = store.table
    with store.autocommit() as conn:
        alone = [w for w in writes if w.keyed]
        together = [w for w in writes if not w.keyed]
        if len(together) == 1:
            alone, together = [*alone, *together], []
        if together:
            alone += finishing.delete(store, conn, node_id, together, landed,
                                      lambda conn, w: _log_first(store, conn, node_id, w))
        for w in alone:
            held = fence(store, node_id, w.id, w.token)
            guards = queued_guards(store) if w.keyed else ()
            if (finishing.run_row_shared and store.history and w.run is not None
                    and not w.keyed):
                gone = sa.delete(t).where(held).returning(t.c.id).cte("gone")
                columns, values = run_values(store, w.run, w.status, w.error)
                logged = finishing.run_rows(
                    store.runs_table, sa.select(*values).select_from(gone), columns
                ).cte("logged")
                count = len(conn.execute(sa.select(gone.c.id).add_cte(logged)).all())
            else:
                # A batch key's delivery may keep its row: its run row goes first, fenced,
                # whichever way the row then ends.
                _log_first(store, conn, node_id, w)
                count = conn.execute(sa.delete(t).where(held, *guards)).rowcount
            if w.keyed and count != 1:
                # Items were pushed meanwhile: the key stays, due when they say.
                count = conn.execute(
                    _fenced_update(store, False).values(
                        next_process_at=queued_due(store), payload=None),
                    _params(w, node_id),
                ).rowcount
            _faultpoints.reached("finish")
            if count == 1:
                landed.add(w.id)


def _log_first(store: Store, conn: Connection, node_id: str, w: FinishWrite) -> None:
    """Where the run row cannot share the finish's statement, write it first, fenced."""
    if not store.history or w.run is None:
        return
    log_first(store, conn, (w.id, w.token, node_id), w.run, w.status, w.error)
    _faultpoints.reached("finish_history")


def _fenced_update(store: Store, with_payload: bool) -> sa.Update:
    """One execution's fenced finish, built once (parameters: :func:`_params`)."""
    key = ("finish", with_payload)
    built = store.row_statements.get(key)
    if built is not None:
        assert isinstance(built, sa.Update)
        return built
    t, b = store.table, sa.bindparam
    stmt = (
        sa.update(t)
        .where(t.c.id == b("w_id"), t.c.total_attempt == b("w_token"),
               t.c.locked_by == b("w_node", type_=t.c.locked_by.type))
        .values(
            locked_by=None,
            next_process_at=b("w_next", type_=t.c.next_process_at.type),
            attempt=b("w_attempt", type_=sa.Integer()),
            last_status=b("w_status", type_=t.c.last_status.type),
            last_finished_at=db_now(),
            stop_requested=False,
            reenqueue_attempt=t.c.reenqueue_attempt + b("w_success", type_=sa.Integer()),
            # A success keeps the last failure's text; a failure replaces it.
            last_error=sa.func.coalesce(b("w_error", type_=t.c.last_error.type), t.c.last_error),
            last_success_at=sa.case(
                (b("w_success", type_=sa.Integer()) == 1, db_now()), else_=t.c.last_success_at),
        )
    )
    if with_payload:
        stmt = stmt.values(payload=b("w_payload", type_=t.c.payload.type))
    store.row_statements[key] = stmt
    return stmt


def _params(write: FinishWrite, node_id: str) -> dict[str, Any]:
    params = {
        "w_node": node_id,
        "w_id": write.id,
        "w_token": write.token,
        "w_next": write.next_at,
        "w_attempt": write.attempt,
        "w_status": write.status,
        "w_success": 1 if write.status == "success" else 0,
        "w_error": write.error,
    }
    if not isinstance(write.payload, _Unset):
        params["w_payload"] = write.payload
    return params


def _not_landed(store: Store, finishing: Finishing,
                writes: Sequence[FinishWrite]) -> list[FinishWrite]:
    """Which of ``writes`` (those a statement did not confirm: refused by their fence, or
    retried after an answer lost with the connection) did not land, read back by fence.

    The write landed when the row still carries the execution's token with ``locked_by``
    cleared, or when the pick right after it (token + 1) found ``locked_by`` already cleared
    (``prev_locked_by`` NULL): only the finish clears it while the execution holds the row.
    When the row has moved on further (picked and finished again, maybe by other nodes, while
    this node waited to reconnect), the execution's run row decides (history on): the finish
    writes it in its own statement, or (where it goes first) a finish that did not land leaves
    it to become the ``lost`` one of the node that took the row over, before any later pick;
    so a run row that is not ``lost`` means the finish landed. A row that is gone is read the
    same way where the run row is part of the finish's statement, and as refused elsewhere.
    """
    t = store.table
    ids = [w.id for w in writes]
    with store.read() as conn:
        rows = {
            r.id: r
            for start in range(0, len(ids), IN_CHUNK)
            for r in conn.execute(
                sa.select(t.c.id, t.c.total_attempt, t.c.locked_by, t.c.prev_locked_by).where(
                    t.c.id.in_(ids[start : start + IN_CHUNK])
                )
            )
        }
        moved_on = [w for w in writes
                    if (w.id not in rows and not w.delete)
                    or (w.id in rows and rows[w.id].total_attempt > w.token + 1)]
        logged = _run_statuses(store, conn, moved_on)

    def landed(w: FinishWrite) -> bool:
        row = rows.get(w.id)
        if row is None and w.delete:
            return True  # a one-off job's row is gone: its fenced delete landed
        if row is not None and w.delete and not w.keyed:
            return False  # a batch key's finish may keep its row, a one-off job's never
        if row is not None and row.total_attempt == w.token:
            return row.locked_by is None
        if row is not None and row.total_attempt == w.token + 1:
            return row.prev_locked_by is None
        if row is None and not finishing.run_row_shared:
            # Deleted (by an operator) with the execution's run row written first: nobody
            # makes that one lost, so it tells nothing.
            return False
        if w.run is not None and store.history:
            status = logged.get((w.run.name, w.run.token, to_utc(w.run.started_at)))
            return status is not None and status != "lost"
        return False

    return [w for w in writes if not landed(w)]


def _run_statuses(store: Store, conn: Connection,
                  writes: Sequence[FinishWrite]) -> dict[tuple[str, int, Any], str]:
    """The status of each write's run row, by its key, where there is one."""
    records = [w.run for w in writes if w.run is not None]
    if not records or not store.history:
        return {}
    runs = store.runs_table
    found: dict[tuple[str, int, Any], str] = {}
    for start in range(0, len(records), IN_CHUNK):
        chunk = records[start : start + IN_CHUNK]
        for r in conn.execute(
            sa.select(runs.c.task_name, runs.c.token, runs.c.started_at, runs.c.status)
            .where(runs.c.task_name.in_(sorted({c.name for c in chunk})),
                   runs.c.token.in_(sorted({c.token for c in chunk})))
        ):
            found[(r.task_name, int(r.token), to_utc(r.started_at))] = r.status
    return found
