"""The :class:`~dbscheduler.Client`'s concurrency groups and keyed delayed batches (a
mixin: the client holds the store these use)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import batches as _batches
from ._store import StoreBase
from ._store.controls import group_infos, set_group_limit
from .batches import BatchInfo
from .context import GroupInfo
from .options import options_from

__all__ = ["GroupsAndBatches"]


class GroupsAndBatches:
    """Group limits and batches, on the client's table."""

    _store: StoreBase

    def _check_handler(self, handler: str) -> None:
        """Warn about a handler no node has (the client's registry check)."""

    # -- concurrency groups --------------------------------------------------------------
    def set_group_limit(self, group: str, limit: int | None) -> None:
        """At most ``limit`` executions of the tasks with ``group=group`` at once, across the
        cluster (``None`` removes the limit; 0 holds the group). Applies at every node's next
        pick; executions already running are not stopped.

        >>> client.set_group_limit("reports", 2)   # doctest: +SKIP
        """
        options_from({"group": group}, "set_group_limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or not 0 <= limit < 2**31):
            raise ValueError(f"set_group_limit: limit must be an integer >= 0 or None, got "
                             f"{limit!r}")
        set_group_limit(self._store, group, limit)

    def groups(self) -> list[GroupInfo]:
        """Every group that has a limit or tasks: its limit and its executions running now.

        >>> [(g.name, g.running, g.limit) for g in client.groups()]   # doctest: +SKIP
        [('reports', 2, 2)]
        """
        return group_infos(self._store)

    # -- keyed delayed batches ------------------------------------------------------------
    def push(self, key: str, item: Any, *, handler: str, ontime: datetime | float | None = None,
             update: str = "always", data: Any = None) -> None:
        """Queue ``item`` (JSON) under ``key``; the batch handler ``handler`` gets every
        pending item of the key in one call when the key is due.

        ``ontime``: when the key should be due, an aware datetime or Unix seconds (default:
        now, on the database's clock). ``update="always"`` makes the key due at this
        ``ontime``; ``"once"`` only when the key has no pending items yet (after a failed
        delivery, the next push sets the time whatever ``update`` says). A key starting with
        ``-`` is never merged: each push is delivered alone. ``data`` (JSON) is stored with the
        key by the push that creates it and reaches every delivery of it as ``ctx.data``
        (pushes to a pending key keep the data it has). Bad input raises ``ValueError`` naming
        the field; nothing is written then.

        >>> client.push("ann@example.com", {"event": "comment"}, handler="digest",
        ...             ontime=time.time() + 600, update="once")   # doctest: +SKIP
        """
        _batches.push(self._store, key, item, handler=handler, ontime=ontime, update=update,
                      data=data)
        self._check_handler(handler)

    def drop(self, key: str, *, handler: str) -> int:
        """Remove the pending items of ``key`` (every pending push of a ``-`` key); returns
        how many. A delivery already running ends as usual.

        >>> client.drop("ann@example.com", handler="digest")   # doctest: +SKIP
        3
        """
        return _batches.drop(self._store, key, handler=handler)

    def batches(self, handler: str | None = None) -> list[BatchInfo]:
        """Every key with pending items (of ``handler``), soonest due first, as
        :class:`~dbscheduler.batches.BatchInfo`.

        >>> [(b.key, b.items) for b in client.batches("digest")]   # doctest: +SKIP
        [('ann@example.com', 3)]
        """
        return _batches.list_batches(self._store, handler)
