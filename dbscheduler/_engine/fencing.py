"""Fenced transactions: a task's business writes commit only while it still holds its lease.

The coordination table lives in the application's own database, so a task can put its writes
and a check of its lease in one transaction::

    @scheduler.task("charge", schedule=FixedRate(60))
    def charge(ctx: TaskContext) -> None:
        amount = compute()                      # may take long; the node may freeze here
        with ctx.fenced(engine) as conn:        # BEGIN, bounded; a first check of the lease
            conn.execute(payments.insert().values(amount=amount))
        # the final check, then COMMIT: only if this execution still held an unexpired lease

``ctx.fenced`` opens a transaction on the given engine or connection and:

1. bounds it on the server: a session left idle inside it (a frozen or partitioned node) is
   ended by the server, and its transaction rolled back, after ``idle`` seconds
   (:func:`bounds_for`);
2. checks, without locking, that the task's row still belongs to this execution (its id,
   fencing token, node and the pick's random claim) with its lease unexpired, and raises
   :class:`~dbscheduler.LeaseLost` otherwise (fail fast);
3. runs the block;
4. at the block's end, tightens the bounds (the final check's lock wait, and the idle time
   after it, to ``final`` seconds each) and checks again — one row by primary key — now
   locking the row for share, demanding that the lease run at least ``margin`` seconds past
   the database's now, where ``margin`` is more than the final check and the idle time after
   it can last;
5. commits.

Why a COMMIT the server accepts comes within the lease: the final check saw the lease end
after ``t + margin`` (``t`` the database clock at that statement's start). From then on the
row is locked for share, so no other node's pick can take it. Either the COMMIT arrives
within ``final`` seconds of the check's answer, which came within ``final`` seconds of its
start (a bounded lock wait and a primary-key read: the server's own time, which no client
freeze stretches), so before ``t + margin`` — inside the lease — or the server ends the
session first, and nothing is committed. A freeze anywhere before the final check is caught
by the check itself (the row moved on, or its lease is too short). A freeze inside the block
does not hold the row at all: only the final check locks it, for at most ``2 × final``
seconds.

Where the server cannot end an idle transaction on its own (SQLite, SQL Server, Oracle) a
node frozen between the final check and COMMIT keeps the row locked until it resumes: no other
node takes the task over meanwhile, so exclusion still holds, but that COMMIT may come after
the lease's end and other nodes wait for it. See the fenced transactions guide.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..dialects import Dialect, dialect_for, idle_transaction_timeout
from ..dialects.common import FenceBounds
from ..errors import LeaseLost
from ..logfields import about, engine_log
from ..table import make_table
from . import faultpoints as _faultpoints

__all__ = ["Fence", "bounds_for", "fenced"]

log = engine_log("dbscheduler.fencing")

DEFAULT_LEASE = 30.0
"""The lease assumed for a fence built without one (seconds): the Scheduler's default."""


@dataclass(frozen=True)
class Fence:
    """What identifies one execution's hold on its row: the row's id, the fencing token, the
    node, and the pick's random claim (a token that comes back after a failover lost the last
    commits is not the same execution: its claim differs); ``lease`` in seconds."""

    table: str
    id: int
    token: int
    node_id: str
    name: str
    claim: str | None = None
    lease: float = DEFAULT_LEASE


def bounds_for(lease: float) -> FenceBounds:
    """The server-side bounds of a fenced transaction under a lease of ``lease`` seconds.

    ``idle``: the longest the transaction may sit idle before its final check — the bound the
    Scheduler puts on its own sessions (a sixth of the lease, 2 to 10 s), so a frozen node's
    business locks go within about a lease. ``final``: the longest the final check and the
    idle time after it may each last — a tenth of the lease, 0.05 to 1 s.

    >>> bounds_for(30.0)
    FenceBounds(idle=5.0, final=1.0)
    """
    idle = idle_transaction_timeout(timedelta(seconds=lease)).total_seconds()
    return FenceBounds(idle=idle, final=min(1.0, max(0.05, lease / 10)))


@contextmanager
def fenced(fence: Fence, target: Engine | Connection) -> Iterator[Connection]:
    """A transaction on ``target`` that commits only while ``fence`` still holds its row.

    ``target`` is an engine (a connection is opened and closed here) or a connection with no
    transaction in progress. The transaction commits when the block ends, rolls back when it
    raises; :class:`~dbscheduler.LeaseLost` is raised, and nothing committed, when the lease
    is gone (before the block runs, or at its end).
    """
    if isinstance(target, Engine):
        with target.connect() as conn:
            if conn._is_autocommit_isolation():
                # An engine that autocommits (the Scheduler's own on MySQL/MariaDB) would
                # commit every statement of the block on its own.
                conn.execution_options(isolation_level=dialect_for(target).transaction_isolation)
            with _fenced_on(fence, conn) as inner:
                yield inner
        return
    if not isinstance(target, Connection):
        raise TypeError(f"ctx.fenced() takes a SQLAlchemy Engine or Connection, got "
                        f"{type(target).__name__}")
    if target._is_autocommit_isolation():
        raise ValueError(
            "ctx.fenced(): the connection is in autocommit mode, so its statements would "
            "commit one by one outside the fence; pass the engine, or a connection with "
            "transactions (e.g. conn.execution_options(isolation_level='READ COMMITTED'))"
        )
    with _fenced_on(fence, target) as inner:
        yield inner


@contextmanager
def _fenced_on(fence: Fence, conn: Connection) -> Iterator[Connection]:
    if conn.in_transaction():
        raise ValueError(
            "ctx.fenced(): the connection already has a transaction in progress; commit or "
            "roll it back first (the fenced transaction must contain the lease check)"
        )
    dialect = dialect_for(conn.engine)
    table = _table(fence.table)
    bounds = bounds_for(fence.lease)
    margin = dialect.fence_margin(conn, bounds)
    if margin > fence.lease / 2:
        raise ValueError(
            f"ctx.fenced() on {dialect.name}: a lease of {fence.lease:g} s is too short for a "
            f"fenced transaction (its final check needs {margin:.2f} s of lease left, and a "
            f"heartbeat every third of the lease leaves as little as two thirds of it); use a "
            f"lease of at least {math.ceil(2 * margin)} s"
        )
    lost = _Refusal(fence, dialect)
    tx = conn.begin()
    try:
        with lost.on_error():
            dialect.fence_open(conn, bounds)
            _faultpoints.reached("fenced_begin")
            # Fail fast, without a lock: the block's statements run with the row free.
            held = _hold(dialect, conn, table, fence, margin=0.0, lock=False)
        if not held:
            raise lost.refused("the row is no longer this execution's, or its lease ended")
        _faultpoints.reached("fenced_check")
        with lost.in_block(conn, table):
            yield conn
        _faultpoints.reached("fenced_exit")
        if dialect.commits_fenced(conn):
            with lost.on_error():
                dialect.fence_final(conn, bounds)
            sent = time.monotonic()
            _faultpoints.reached("fenced_commit")
            stalled = time.monotonic() - sent
            try:
                done = dialect.fence_commit(conn, table, fence.id, fence.token, fence.node_id,
                                            fence.claim, margin=margin)
            except sa.exc.DBAPIError as exc:
                # The statement holds the COMMIT: only a session the server had surely ended
                # before it was sent (idle past its bound), or a lock it refused, says that
                # nothing was committed. Otherwise its outcome is unknown: raised as is.
                if dialect.fence_lock_refused(exc) or stalled > dialect.fence_idle(bounds):
                    raise lost.refused(f"the server ended the transaction: {exc.orig}") from exc
                raise
            if not done:
                raise lost.refused(_AT_COMMIT.format(margin))
            tx.commit()  # the server committed already: this only ends the client's record
        else:
            with lost.on_error():
                dialect.fence_final(conn, bounds)
            _checked_commit(dialect, conn, tx, table, fence, bounds, margin, lost)
    except BaseException:
        if tx.is_active:
            try:
                tx.rollback()
            except sa.exc.DBAPIError as exc:
                log.debug("fenced transaction: rollback failed (session gone): %s", exc)
        raise
    finally:
        dialect.fence_close(conn)


@functools.lru_cache(maxsize=64)
def _table(name: str) -> sa.Table:
    """The scheduler table ``name``, built once: building it costs milliseconds, and the
    statements of every fenced transaction on one table object share their compiled form."""
    return make_table(name)


_AT_COMMIT = ("at commit the row was no longer this execution's, or its lease ended within "
              "{:.2f} s")


def _checked_commit(dialect: Dialect, conn: Connection, tx: sa.RootTransaction,
                    table: sa.Table, fence: Fence, bounds: FenceBounds, margin: float,
                    lost: _Refusal) -> None:
    """The final check (locking the row), then COMMIT: the server ends the session if the
    client stalls between the two longer than the bounds the margin covers."""
    with lost.on_error():
        held = _hold(dialect, conn, table, fence, margin=margin, lock=True)
    if not held:
        raise lost.refused(_AT_COMMIT.format(margin))
    checked = time.monotonic()
    _faultpoints.reached("fenced_commit")
    idle = time.monotonic() - checked
    try:
        tx.commit()
    except sa.exc.DBAPIError as exc:
        # The session stayed idle past the bound the server ends it at before the COMMIT was
        # even sent, so it arrived after the transaction had been rolled back. Any other
        # failure of a COMMIT leaves its outcome unknown, as for any transaction: raised as is.
        if dialect.fence_bounded and idle > bounds.final:
            raise lost.refused(f"the node stalled {idle:.2f} s before COMMIT; the server had "
                               "ended the transaction") from exc
        raise


def _hold(dialect: Dialect, conn: Connection, table: sa.Table, fence: Fence, *, margin: float,
          lock: bool) -> bool:
    return dialect.hold_fence(conn, table, fence.id, fence.token, fence.node_id, fence.claim,
                              margin=margin, lock=lock)


class _Refusal:
    """Building the :class:`LeaseLost` of a refused fenced transaction, and telling the
    errors of the fence's own statements that mean the server ended it by its bounds."""

    def __init__(self, fence: Fence, dialect: Dialect) -> None:
        self.fence, self.dialect = fence, dialect

    def refused(self, reason: str) -> LeaseLost:
        f = self.fence
        log.warning("fenced transaction refused: %s", reason, extra=about(f.name, f.token))
        return LeaseLost(f.name, f.token, f.node_id, reason=reason)

    @contextmanager
    def in_block(self, conn: Connection, table: sa.Table) -> Iterator[None]:
        """The user's statements: one that failed because the session is gone (the server
        ended it after the node stalled past the idle bound) is a :class:`LeaseLost` when the
        row is no longer this execution's, read on a connection of its own."""
        try:
            yield
        except sa.exc.DBAPIError as exc:
            if not (exc.connection_invalidated or self.dialect.fence_ended(exc)):
                raise
            try:
                with conn.engine.connect() as other:
                    held = _hold(self.dialect, other, table, self.fence, margin=0.0, lock=False)
            except sa.exc.DBAPIError:
                raise exc from None
            if held:
                raise
            raise self.refused(f"the session ended inside the block ({exc.orig}) and the "
                               "lease is gone") from exc

    @contextmanager
    def on_error(self) -> Iterator[None]:
        """Statements sent before the COMMIT: when they fail because the server ended the
        session (idle past its bound) or refused the check by its bounds, nothing was
        committed and the lease cannot be confirmed."""
        try:
            yield
        except sa.exc.DBAPIError as exc:
            if exc.connection_invalidated or self.dialect.fence_ended(exc):
                raise self.refused(f"the server ended the transaction: {exc.orig}") from exc
            raise
