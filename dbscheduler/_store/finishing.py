"""How a batch of finishes reaches the database: the strategy chosen once per store.

Databases differ in how many rows one fenced statement can finish, and that choice used to be
made again on every finish by reading the dialect's capability flags. It is made here, once,
when the store is built (:func:`finishing_for`); the finish (:mod:`.finish`) only calls the
strategy it was given:

- :class:`OneStatement` (PostgreSQL): the whole batch in one ``UPDATE … FROM <rows>
  RETURNING`` with its run rows and ``NOTIFY`` in the same statement, and finished one-off jobs
  in one ``DELETE … USING … RETURNING`` (:func:`.finish_values.write_values`,
  :func:`.finish_values.delete_values`). Its run rows share the finish's statement, so a finish
  that did not land left none behind.
- :class:`JoinedChunks` (MySQL/MariaDB, SQLite): chunks of at most ``most`` rows, each its run
  rows' ``INSERT … SELECT`` and one multi-row ``UPDATE`` joining the chunk's rows
  (:func:`.finish_values.write_joined`); a chunk that cannot go joined goes row by row.
- :class:`RowByRow` (the others): one fenced ``UPDATE`` per execution, right after its run row.

Both of the last two write run rows before the finish, which the caller undoes
(:func:`.history.forget`) for a finish that did not land.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy.engine import Connection

from .finish_values import delete_joined, delete_values, write_joined, write_values
from .finish_write import FinishWrite

if TYPE_CHECKING:
    from ..dialects.base import Dialect
    from .base import StoreBase as Store

__all__ = ["Finishing", "JoinedChunks", "OneStatement", "RowByRow", "finishing_for"]


class Finishing:
    """The finish of a batch, one fenced statement per execution (the base case).

    Each method writes what it can as batches and returns the writes left for the caller's
    fenced statement per execution; it adds the ids that landed to ``landed``.
    """

    run_row_shared = False
    """The run row is written in the finish's own statement: a finish that did not land left
    no run row (nothing to forget), and a row gone with no run row is not telling."""

    deletes_joined_max = 256
    """Rows per fenced multi-row ``DELETE`` of finished one-off jobs (the same text on every
    database, so every strategy but :class:`OneStatement` uses it)."""

    joins_run_rows = False
    """A batch's run rows go in as one ``INSERT … SELECT`` joining the batch's rows."""

    def write(self, store: Store, conn: Connection, node_id: str,
              writes: Sequence[FinishWrite], notify: bool,
              landed: set[int]) -> Sequence[FinishWrite]:
        """Write what this database writes as batches; return the writes left."""
        return writes

    def delete(self, store: Store, conn: Connection, node_id: str,
               writes: Sequence[FinishWrite], landed: set[int]) -> list[FinishWrite]:
        """Delete the rows of finished one-off jobs (not batch keys, more than one) as
        batches; return the writes left."""
        alone: list[FinishWrite] = []
        most = self.deletes_joined_max
        for start in range(0, len(writes), most):
            chunk = writes[start : start + most]
            deleted = delete_joined(store, conn, node_id, chunk, most, self.joins_run_rows)
            if deleted is None:
                alone += chunk
            else:
                landed |= deleted
        return alone


class RowByRow(Finishing):
    """One fenced ``UPDATE`` per execution, each with its own row count (SQL Server, Oracle):
    which writes landed is known at once."""


class JoinedChunks(Finishing):
    """Chunks of at most ``most`` rows, each two statements joining the chunk's rows."""

    joins_run_rows = True

    def __init__(self, most: int) -> None:
        self.most = most
        self.deletes_joined_max = most

    def write(self, store: Store, conn: Connection, node_id: str,
              writes: Sequence[FinishWrite], notify: bool,
              landed: set[int]) -> Sequence[FinishWrite]:
        if len(writes) <= 1:
            return writes
        alone: list[FinishWrite] = []
        for start in range(0, len(writes), self.most):
            chunk = writes[start : start + self.most]
            joined = (write_joined(store, conn, node_id, chunk, self.most)
                      if len(chunk) > 1 else None)
            if joined is None:
                alone += chunk
            else:
                landed |= joined
        return alone


class OneStatement(Finishing):
    """The whole batch in one statement, run rows and ``NOTIFY`` included (PostgreSQL)."""

    run_row_shared = True

    def write(self, store: Store, conn: Connection, node_id: str,
              writes: Sequence[FinishWrite], notify: bool,
              landed: set[int]) -> Sequence[FinishWrite]:
        landed |= write_values(store, conn, node_id, writes, notify)
        return ()

    def delete(self, store: Store, conn: Connection, node_id: str,
               writes: Sequence[FinishWrite], landed: set[int]) -> list[FinishWrite]:
        landed |= delete_values(store, conn, node_id, writes)
        return []


def finishing_for(dialect: Dialect) -> Finishing:
    """The finish strategy of ``dialect``, read from its capabilities once, when a store is
    built (never on the hot path)."""
    if dialect.update_from_values:
        return OneStatement()
    if dialect.joined_finish:
        return JoinedChunks(dialect.joined_max)
    strategy = RowByRow()
    strategy.deletes_joined_max = dialect.joined_max
    return strategy
