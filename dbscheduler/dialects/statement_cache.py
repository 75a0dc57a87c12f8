"""Statements of the hot path built once per set of conditions, kept by each dialect."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["StatementCache"]


class StatementCache:
    """What a :class:`~.base.Dialect` builds once and runs many times with parameters.

    >>> cache = StatementCache()
    >>> where = object()
    >>> cache.built("pick", (where,), lambda: "UPDATE …", 32)
    'UPDATE …'
    >>> cache.built("pick", (where,), lambda: "never built again", 32)
    'UPDATE …'
    """

    def __init__(self) -> None:
        self._statements: dict[tuple[object, ...], tuple[tuple[object, ...], Any]] = {}

    def built(self, kind: str, parts: tuple[object, ...], build: Callable[[], Any],
              *extra: object) -> Any:
        """The statement ``build()`` returns, built once per ``kind``, ``parts`` and ``extra``.

        ``parts`` are compared by identity: the store passes the same condition objects while
        its node's names, tags and exclusions stay the same, so a statement of the hot path
        is built (and its cache key computed) once, not hundreds of times a second. They are
        kept with the statement, so their ids stay theirs."""
        key = (kind, *(id(p) for p in parts), *extra)
        found = self._statements.get(key)
        if found is None:
            if len(self._statements) > 256:  # limits per free workers; exclusions come and go
                self._statements.clear()
            found = self._statements[key] = (parts, build())
        return found[1]
