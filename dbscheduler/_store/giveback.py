"""Giving picked rows back as they were: the pick's rows this node cannot run (a handler it
lacks, :mod:`.pick`), those over their group's limit (:mod:`.controls`), and those of a pick
answered after its leases could have expired (``Store.give_back``).

Its own module, below all three, so that they need not import each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..dialects import PickedRow

if TYPE_CHECKING:
    from .base import StoreBase

__all__ = ["unpick"]


def unpick(store: StoreBase, conn: Connection, node_id: str, rows: Sequence[PickedRow]) -> None:
    """Undo a committed pick of rows this node will not run (fenced by the pick's token).

    The token goes back too. A row the pick found lost is then held again by the lost
    execution's own token, so the next pick records that execution (its token is the
    row's token then, minus one), and a finish of it that still comes in is judged by that
    token. Left one ahead, the next pick recorded a token no execution had, and the lost
    execution's own finish could read its run row as proof it had landed. A later pick
    issues the given-back token again: nothing holds it, as no execution started with it."""
    t, b = store.table, sa.bindparam
    conn.execute(
        sa.update(t)
        .where(t.c.id == b("u_id"), t.c.total_attempt == b("u_token"), t.c.locked_by == node_id)
        .values(
            locked_by=t.c.prev_locked_by,
            next_process_at=t.c.prev_next_process_at,
            last_started_at=t.c.prev_last_started_at,
            attempt=t.c.attempt - 1,
            total_attempt=t.c.total_attempt - 1,
        ),
        [{"u_id": r["id"], "u_token": r["total_attempt"]} for r in rows],
    )
