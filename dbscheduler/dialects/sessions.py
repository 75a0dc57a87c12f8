"""What a session of an engine dbscheduler creates carries: its time bounds, and the user's URL
merged with the engine's defaults so that what the URL says always wins.

The bounds are computed from the lease alone, so every backend derives its own settings from
the same three numbers (:func:`statement_timeout`, :func:`idle_transaction_timeout`,
:data:`CONNECT_TIMEOUT`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy.engine import URL

__all__ = [
    "CONNECT_TIMEOUT",
    "IDLE_TRANSACTION_FLOOR",
    "idle_transaction_timeout",
    "missing",
    "postgresql_options_names",
    "statement_timeout",
]

CONNECT_TIMEOUT = 10
"""Seconds a new connection may take before it fails (unless the URL says otherwise)."""

IDLE_TRANSACTION_FLOOR = timedelta(seconds=2)
"""The shortest server-side bound on an idle open transaction, whatever the lease."""
_IDLE_TRANSACTION_CAP = timedelta(seconds=10)


def idle_transaction_timeout(lease: timedelta) -> timedelta:
    """How long the server lets a session sit idle inside an open transaction before ending
    it: a sixth of the lease, at least :data:`IDLE_TRANSACTION_FLOOR`, at most 10 s.

    Engine statements are autocommit or transactions sent back to back, so only a client
    frozen or cut off mid-transaction ever reaches it; its locks then go well within the
    lease, and the other nodes take over when the lease expires.

    >>> idle_transaction_timeout(timedelta(seconds=30))
    datetime.timedelta(seconds=5)
    """
    return max(IDLE_TRANSACTION_FLOOR, min(lease / 6, _IDLE_TRANSACTION_CAP))


def statement_timeout(lease: timedelta) -> timedelta:
    """How long one statement may run: two leases and ten seconds. Generous on purpose:
    leases are guarded by the heartbeat's watchdog, not by it, and a statement that merely
    waits for a lock must not fail; it turns a hung connection into an error instead of a
    thread stuck forever.

    >>> statement_timeout(timedelta(seconds=30))
    datetime.timedelta(seconds=70)
    """
    return 2 * lease + timedelta(seconds=10)


def missing(url: URL | None, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``defaults`` less every key the URL's query gives itself: the user's URL wins.

    >>> from sqlalchemy.engine import make_url
    >>> missing(make_url("postgresql://h/db?connect_timeout=3"), {"connect_timeout": 10, "a": 1})
    {'a': 1}
    """
    given = set(url.query) if url is not None else set()
    return {k: v for k, v in defaults.items() if k not in given}


_OPTION = re.compile(r"^(?:-c|--)?\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*=")


def postgresql_options_names(url: URL | None) -> frozenset[str]:
    """The server settings the URL's libpq ``options`` parameter sets itself (``-c name=v``
    or ``--name=v``): the engine leaves those to the user.

    >>> from sqlalchemy.engine import make_url
    >>> sorted(postgresql_options_names(make_url(
    ...     "postgresql://h/db?options=-c%20statement_timeout%3D5s%20--search_path%3Dapp")))
    ['search_path', 'statement_timeout']
    """
    if url is None:
        return frozenset()
    raw = url.query.get("options")
    values = [raw] if isinstance(raw, str) else list(raw or ())
    names: set[str] = set()
    for value in values:
        try:
            words = shlex.split(value)
        except ValueError:
            words = value.split()
        pending = False
        for word in words:
            if word == "-c":
                pending = True
                continue
            match = _OPTION.match(word if not pending else f"-c {word}")
            pending = False
            if match:
                names.add(match.group(1).replace("-", "_"))
    return frozenset(names)
