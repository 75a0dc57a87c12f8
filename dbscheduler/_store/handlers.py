"""Which rows a node may pick, by their handler: the names it has, or — when it has many —
the few names it has found in the table and lacks."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..logfields import engine_log
from .base import StoreBase

__all__ = ["UNION_LIMIT", "handler_params", "learn_strangers"]

log = engine_log("dbscheduler.store")

UNION_LIMIT = 64
"""Up to this many handlers, the pick and the poll look for each handler's rows separately
(an index walk each); beyond it, they take rows of any handler but the few this node lacks
(:func:`handler_params`). The statements are the same either way: only their parameters
change."""


def handler_params(store: StoreBase, known: Collection[str]) -> dict[str, Any]:
    """The parameters of the dialect's handler condition for a node with the names ``known``.

    Up to :data:`UNION_LIMIT` names, the rows of those names. Beyond it, every row is usually
    one this node has (all nodes run the same code), and walking thousands of names on every
    pick and poll costs more than the pick itself; so the rows of every handler but those
    this node has met in the table and lacks (``store.strangers``, learned by
    :func:`learn_strangers` when a pick takes such a row and gives it back), until they
    become the longer list. Kept while the names and strangers stay the same.
    """
    key = (known if isinstance(known, frozenset) else frozenset(known), store.strangers)
    cached = store.handler_params.get(key)
    if cached is not None:
        return cached
    names = sorted(key[0])
    lacking = sorted(store.strangers.difference(names))
    by_names = len(names) <= UNION_LIMIT or len(lacking) >= len(names)
    params = store.dialect.handler_params(names, None if by_names else lacking)
    if len(store.handler_params) > 16:
        store.handler_params.clear()
    store.handler_params[key] = params
    return params


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
