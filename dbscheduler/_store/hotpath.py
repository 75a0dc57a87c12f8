"""The engine's fenced hot path: poll, pick, heartbeat, finish, release, lost executions;
the Store that composes the rooms each of them lives in.

Every write made on behalf of a running execution is *fenced*: it carries ``id``, the fencing
token (``total_attempt`` after the pick) and ``locked_by``, so a node that lost its lease can
never overwrite a row another node now owns. Every write here is an autocommit statement: a
node frozen right after one (a GC or VM pause, a partition) holds no lock, and the others
take its rows over as soon as its leases expire.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from .._engine import faultpoints as _faultpoints
from ..dialects import PickedRow, db_now
from ..dialects.types import to_utc
from ..logfields import engine_log
from ..table import COLUMNS
from .base import StoreBase
from .controls import settle
from .finish import FinishWrite, finish_batch
from .giveback import unpick
from .handlers import handler_params
from .history import RunRecord, forget, log_first, run_values, write_tracebacks
from .leases import Extended, extend, extended_read_back, extended_returning, fence, release
from .pick import pick_rows
from .registration import Registration, register
from .runtime import next_due_of
from .state import clean_text

__all__ = ["FinishWrite", "Picked", "PollState", "Store"]

log = engine_log("dbscheduler.store")

SHAPE_CHECK_INTERVAL = 1.0
"""Seconds between two checks of the table's shape (count, max id) by one node."""


@dataclass(frozen=True)
class PollState:
    """What one cheap query tells the poller: the time, the next due time, the table's shape."""

    db_now: datetime
    next_due: datetime | None
    """Earliest ``next_process_at`` among unpaused rows this node may pick, if any."""
    shape: tuple[int, int | None] | None
    """``(0 if the table is empty else 1, max id)``, when checked."""
    sent: float | None = None
    received: float | None = None
    """Monotonic times right before the query was sent and after its answer came: the
    database read ``db_now`` in between (a connection checkout is not part of it)."""


@dataclass(frozen=True)
class Picked:
    """What a pick took, and — where the backend tells it in the same round trip — when the
    next row this node may pick is due (``next_due_known``; ``next_due`` None: none is)."""

    rows: list[PickedRow]
    next_due: datetime | None = None
    next_due_known: bool = False
    given_back: int = 0
    """Rows taken and given back at once: their group was over its limit."""


class Store(StoreBase):
    """The engine's view of the table: registration and every fenced write of the hot path.

    >>> store = Store(sa.create_engine("sqlite://"), "scheduled_tasks")  # doctest: +SKIP
    >>> store.create_table(); store.poll(["report"]).next_due            # doctest: +SKIP
    """

    def __init__(
        self, engine: Engine, table: str = "scheduled_tasks", *, history: bool = True
    ) -> None:
        super().__init__(engine, table, history=history)
        self._shape_checked = float("-inf")
        self.finishing = self.dialect.finishing()
        """How a batch of finishes reaches this database, handed out by the dialect once
        (:mod:`dbscheduler.dialects.finishing`)."""
        self._extended: Extended = (extended_returning if self.dialect.returning_update
                          else extended_read_back)
        """How the heartbeat learns which leases it extended, chosen once: from the
        ``UPDATE`` itself where it returns rows, else by a read after it."""

    def register(self, items: Sequence[Registration]) -> None:
        """Insert each task unless present; apply a changed schedule at once."""
        register(self, items)

    # -- the poll ------------------------------------------------------------------------
    def poll(self, known: Collection[str]) -> PollState:
        """One small query: database time, next due time of this node's tasks, table shape."""
        t = self.table
        # A busy node checks the shape once a second, not on every one of its hundreds of
        # polls a second. An idle node checks it on every poll.
        check_shape = time.monotonic() - self._shape_checked >= SHAPE_CHECK_INTERVAL
        with self.read() as conn:
            before = time.monotonic()
            due = next_due_of(self)
            columns = [db_now().label("now"), due.scalar_subquery().label("next_due")]
            if check_shape:
                columns += [
                    # Whether any row exists (0 or 1), not a count: counting a table of a
                    # million pending one-off jobs on every idle poll would be a scan.
                    sa.case((sa.exists(sa.select(t.c.id)), 1), else_=0).label("n"),
                    sa.select(sa.func.max(t.c.id)).scalar_subquery().label("max_id"),
                ]
            before = time.monotonic()
            row = conn.execute(sa.select(*columns), handler_params(self, known)).one()
            after = time.monotonic()
        self.statistics.after(after - before)
        now = to_utc(row.now)
        assert now is not None
        self._db_minus_mono = now.timestamp() - (before + after) / 2
        shape = (int(row.n), row.max_id) if check_shape else None
        if shape is not None:
            self._shape_checked = time.monotonic()
        return PollState(now, to_utc(row.next_due), shape, before, after)

    # -- the pick ------------------------------------------------------------------------
    def pick(
        self,
        node_id: str,
        limit: int,
        lease: timedelta,
        known: Collection[str],
        exclude: Collection[int] = (),
        ahead: float = 0.0,
    ) -> Picked:
        """Take up to ``limit`` unpaused rows among ``known`` names due within ``ahead``
        seconds, except the rows ``exclude`` (ids whose execution this node still has in
        flight). A row picked ahead has its start (``last_started_at``) at its due time, and
        the pick's own time in ``heartbeat_at``: the caller starts it then."""
        if limit <= 0:
            return Picked([])
        rows = self.retrying(
            "pick", lambda: pick_rows(self, node_id, limit, lease, known, exclude, ahead)
        )
        rows, given_back = settle(self, node_id, rows)
        if given_back:
            return Picked(rows, given_back=given_back)
        if rows and "next_due" in rows[0] and len(rows) < limit:
            # Fewer rows than asked: every due row was taken, so the backend's "earliest
            # later row" is this node's next due time.
            return Picked(rows, to_utc(rows[0]["next_due"]), True)
        if rows and len(rows) >= limit:
            # As many as asked: more may be due already. Say "due at the pick's own time",
            # so the poller picks again as soon as a worker is free, instead of a full poll
            # after every busy pick (a pick that then finds none falls back to a poll).
            return Picked(rows, to_utc(rows[0]["heartbeat_at"]), True)
        return Picked(rows)

    # -- fenced writes of running executions ---------------------------------------------
    def heartbeat(
        self, node_id: str, lease: timedelta, tokens: Mapping[int, int]
    ) -> tuple[set[int], set[int]]:
        """Extend the lease of every execution in ``tokens`` (``id -> token``) in one statement.

        Returns ``(alive, stop_requested)``: the ids still owned by this node, and those of
        them whose cancel was requested. An id missing from ``alive`` has lost its lease.
        """
        if not tokens:
            return set(), set()
        return self.retrying(
            "heartbeat", lambda: extend(self, self._extended, node_id, lease, tokens))

    def finish(
        self,
        node_id: str,
        writes: Sequence[FinishWrite] | Callable[[datetime], Sequence[FinishWrite]],
        notify_within: timedelta = timedelta(seconds=1),
        on_replaced: Callable[[FinishWrite], None] | None = None,
        *,
        planned_at: datetime | None = None,
    ) -> tuple[datetime, list[FinishWrite]]:
        """Write finished executions, fenced; returns (estimated db now, writes not landed).

        ``writes`` were planned by the caller at ``planned_at``, its reading of
        :meth:`estimated_now` (the engine's finisher plans first, so the finish never calls
        back into it); or ``writes`` is a function that receives that estimate and plans
        them. ``last_finished_at`` is written with the database's clock. A write whose
        token moved on (another node owns the row) changes nothing and is returned. A write
        the database refuses for its values is replaced by an error finish saying why
        (``on_replaced`` receives it); the others land regardless.
        Sleeping nodes are notified when a new due time comes within ``notify_within``.
        """
        return finish_batch(self, self.finishing, node_id, writes, notify_within, on_replaced,
                            planned_at)

    def whole_row(self, picked: PickedRow) -> dict[str, Any]:
        """Every column of a row just picked (a pick returns only those running it takes);
        ``picked``'s own values for the columns it has (and ``None`` for the others if the
        row is gone)."""
        with self.read() as conn:
            found = conn.execute(
                sa.select(self.table).where(self.table.c.id == picked["id"])
            ).mappings().first()
        return {**dict.fromkeys(COLUMNS), **(found or {}), **picked}

    def record_lost(self, node_id: str, id_: int, token: int, attempt: int, error: str,
                    run: RunRecord | None = None) -> bool:
        """Record, on a row just picked, that its previous execution was lost, and keep it;
        with ``run`` (the lost execution), its ``lost`` row in the run history too."""
        error = clean_text(error) or ""
        fenced = fence(self, node_id, id_, token)
        update = sa.update(self.table).where(fenced).values(
            attempt=attempt,
            last_status="lost",
            last_error=error,
            last_finished_at=db_now(),
        )
        with self.autocommit() as conn:
            if run is None or not self.history:
                kept = conn.execute(update).rowcount
            elif self.finishing.run_row_shared:  # one statement, as the finish
                done = update.returning(self.table.c.id).cte("kept")
                columns, values = run_values(self, run, "lost", error)
                logged = self.finishing.run_rows(
                    self.runs_table, sa.select(*values).select_from(done), columns)
                kept = len(conn.execute(sa.select(done.c.id).add_cte(logged.cte("logged"))).all())
            else:
                log_first(self, conn, (id_, token, node_id), run, "lost", error)
                kept = conn.execute(update).rowcount
            _faultpoints.reached("record_lost")
        return bool(kept)

    def write_tracebacks(self, items: Sequence[tuple[RunRecord, str]]) -> None:
        """Add failures' tracebacks to their run rows (written with their finishes)."""
        write_tracebacks(self, items)

    def forget_runs(self, runs: Sequence[RunRecord]) -> None:
        """Remove the run rows of executions whose finish will not be written after all
        (shutdown gave their leases back): written before the finish where the database
        cannot share one statement, they must not outlive it."""
        if runs and self.history and not self.finishing.run_row_shared:
            with self.autocommit() as conn:
                forget(self, conn, runs)

    def release(self, node_id: str, tokens: Mapping[int, int]) -> int:
        """Give back leases this node still holds so another node can pick them at once."""
        return release(self, node_id, tokens)

    def give_back(self, node_id: str, rows: Sequence[PickedRow]) -> None:
        """Undo this node's pick of ``rows`` (answered too late to run them), leaving each as
        it was before the pick: due when it was due, and a row whose node had lost it held by
        that node's expired lease again, so the next pick records the lost execution instead
        of running the task as if nothing had been lost."""
        with self.autocommit() as conn:
            unpick(self, conn, node_id, rows)
            _faultpoints.reached("release")  # the freeze tests' point, as after a release
            self.notify(conn)
