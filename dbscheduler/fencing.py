"""Fenced transactions: a task's business writes commit only while it still holds its lease.

The coordination table lives in the application's own database, so a task can put its writes
and a check of its lease in one transaction::

    @scheduler.task("charge", schedule=FixedRate(60))
    def charge(ctx: TaskContext) -> None:
        amount = compute()                      # may take long; the node may freeze here
        with ctx.fenced(engine) as conn:        # BEGIN; check and hold the lease row
            conn.execute(payments.insert().values(amount=amount))
        # COMMIT happened only if this execution still owned its row

``ctx.fenced`` opens a transaction on the given engine or connection, reads the task's row by
its id, this execution's fencing token and node — and holds it for the transaction (``FOR
SHARE``, or the dialect's equivalent) so no other node can take the task over until the
transaction ends — and raises :class:`~dbscheduler.LeaseLost` (rolling back) when the row is
no longer this execution's: a node that was frozen past its lease (a "zombie") cannot commit
what it computed before it froze. Keep the transaction short: while it holds the row, this
node's heartbeat for the row waits for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy.engine import Connection, Engine

from .dialects import dialect_for
from .errors import LeaseLost
from .logfields import about, engine_log
from .table import make_table

__all__ = ["Fence", "fenced"]

log = engine_log("dbscheduler.fencing")


@dataclass(frozen=True)
class Fence:
    """What identifies one execution's hold on its row."""

    table: str
    id: int
    token: int
    node_id: str
    name: str


@contextmanager
def fenced(fence: Fence, target: Engine | Connection) -> Iterator[Connection]:
    """A transaction on ``target`` that commits only while ``fence`` still holds its row.

    ``target`` is an engine (a connection is opened and closed here) or a connection with no
    transaction in progress. The transaction commits when the block ends, rolls back when it
    raises; :class:`~dbscheduler.LeaseLost` is raised before the block runs when the lease is
    gone.
    """
    if isinstance(target, Engine):
        with target.connect() as conn, _fenced_on(fence, conn) as inner:
            yield inner
        return
    if not isinstance(target, Connection):
        raise TypeError(f"ctx.fenced() takes a SQLAlchemy Engine or Connection, got "
                        f"{type(target).__name__}")
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
    table = make_table(fence.table)
    with conn.begin():
        if not dialect.hold_fence(conn, table, fence.id, fence.token, fence.node_id):
            log.warning("fenced transaction refused: the lease of this execution is lost",
                        extra=about(fence.name, fence.token))
            raise LeaseLost(fence.name, fence.token, fence.node_id)
        yield conn
