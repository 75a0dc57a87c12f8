"""Which rows a node may pick, by their handler: the names it has, or — when it has many —
the few names it has found in the table and lacks."""

from __future__ import annotations

from collections.abc import Collection

import sqlalchemy as sa

from ..logfields import engine_log
from .base import StoreBase

__all__ = ["UNION_LIMIT", "handler_filter", "learn_strangers"]

log = engine_log("dbscheduler.store")

UNION_LIMIT = 64
"""Up to this many handlers, the poll asks for each handler's earliest due time separately
(an index lookup each) and the pick filters by their names; beyond it, by the names the node
lacks (:func:`handler_filter`)."""


def handler_filter(
    store: StoreBase, column: sa.ColumnElement[str], known: Collection[str]
) -> sa.ColumnElement[bool]:
    """Rows whose handler (``column``) is one of ``known``.

    Up to :data:`UNION_LIMIT` names, ``handler IN known``. Beyond it, every row is usually
    one this node has (all nodes run the same code), and sending thousands of names with
    every pick and poll costs more than the pick itself; so the condition names only the
    handlers this node has met in the table and lacks (``store.strangers``, learned by
    :func:`learn_strangers` when a pick takes such a row and gives it back), until they
    become the longer list.
    """
    names = sorted(known)
    if len(names) <= UNION_LIMIT:
        return store.dialect.names_in(column, names)
    lacking = sorted(store.strangers.difference(names))
    if len(lacking) >= len(names):
        return store.dialect.names_in(column, names)
    present = column.is_not(None)  # a row without a handler is run by no node
    if not lacking:
        return present
    return sa.and_(present, sa.not_(store.dialect.names_in(column, lacking)))


def learn_strangers(store: StoreBase, handlers: Collection[str | None]) -> None:
    """Remember handlers of rows a pick took although this node lacks them, so that its
    picks and polls leave their rows alone from now on."""
    new = {h for h in handlers if h is not None} - store.strangers
    if not new:
        return
    # A new set, not an update in place: the pick keys its built statements on it.
    store.strangers = store.strangers | new
    log.info("the table holds rows of handler(s) %s, which this node does not have; it "
             "leaves them to nodes that do", ", ".join(sorted(new)))
