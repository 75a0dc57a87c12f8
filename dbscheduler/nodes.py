"""The node registry: which nodes work on a table, what they have and whether they are alive.

Each started :class:`~dbscheduler.Scheduler` keeps its row of ``<table>_nodes`` up to date from
its heartbeat thread (every :data:`WRITE_INTERVAL` at most, never per execution); any process
reads it with :meth:`dbscheduler.Client.nodes`::

    for node in client.nodes():
        print(node.node_id, "alive" if node.alive else "gone", node.running, node.tasks)

The registry also knows which handlers exist: scheduling or pushing for a handler that no
live or recent node has logs a warning naming the closest handler that does.
"""

from __future__ import annotations

import difflib
import os
import socket
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ._store.base import StoreBase
from ._store.nodes import NodeRecord, NodeRow, node_rows, prune_nodes, recent_handlers, write_node
from .errors import SchedulerError
from .logfields import engine_log

__all__ = [
    "ALIVE_WITHIN",
    "PRUNE_AFTER",
    "RECENT_WITHIN",
    "WRITE_INTERVAL",
    "NodeInfo",
    "NodeRegistry",
    "handler_warning",
    "list_nodes",
]

log = engine_log("dbscheduler.nodes")

WRITE_INTERVAL = 10.0
"""Longest time in seconds between two writes of a node's row (a node whose lease is shorter
than 30 s writes with every heartbeat, every ``lease / 3``)."""
ALIVE_WITHIN = timedelta(seconds=3 * WRITE_INTERVAL)
"""A node last seen longer ago than this (three missed writes) counts as gone."""
RECENT_WITHIN = timedelta(days=1)
"""The handlers of nodes seen within this long count as existing (a node stopped for a
deploy does not make its handlers unknown)."""
PRUNE_AFTER = timedelta(days=7)
"""Rows of nodes unseen for this long are deleted by the live nodes."""
PRUNE_EVERY = 3600.0
"""Seconds between two prunes by one node (and one at its start)."""


@dataclass(frozen=True)
class NodeInfo:
    """One node of the registry, from :meth:`dbscheduler.Client.nodes`.

    >>> [(n.node_id, n.alive, n.running) for n in client.nodes()]   # doctest: +SKIP
    [('web-1-4242-a1b2', True, 2)]
    """

    node_id: str
    host: str
    pid: int
    version: str
    """The dbscheduler version the node runs."""
    tags: list[str]
    handlers: list[str]
    """Its handlers for rows created at run time and batches (declared tasks not included)."""
    started_at: datetime
    last_seen: datetime
    """Its last write, on the database clock."""
    running: int
    """Executions it ran at its last write."""
    alive: bool
    """Seen within :data:`ALIVE_WITHIN` of the database's time of the read."""
    tasks: list[str] = field(default_factory=list)
    """The tasks it holds now (``locked_by`` in the tasks table)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values, ISO 8601 UTC timestamps.

        >>> client.nodes()[0].to_dict()["alive"]   # doctest: +SKIP
        True
        """
        out = dict(self.__dict__)
        out["started_at"] = self.started_at.isoformat()
        out["last_seen"] = self.last_seen.isoformat()
        return out


def _info(row: NodeRow) -> NodeInfo:
    v = row.values
    return NodeInfo(
        node_id=v["node_id"], host=v["host"], pid=int(v["pid"]), version=v["version"],
        tags=v["tags"], handlers=v["handlers"], started_at=v["started_at"],
        last_seen=v["last_seen"], running=int(v["running"]),
        alive=v["last_seen"] >= row.db_now - ALIVE_WITHIN, tasks=row.tasks,
    )


def list_nodes(store: StoreBase) -> list[NodeInfo]:
    """Every node of the registry, the most recently seen first."""
    return [_info(row) for row in node_rows(store)]


def handler_warning(store: StoreBase, handler: str) -> str | None:
    """Why ``handler`` may never run, or None: no node seen within :data:`RECENT_WITHIN`
    has it. Says nothing while the registry knows no recent node at all (a fresh deployment
    whose nodes have not started yet) or cannot be read (a table not yet migrated).

    >>> handler_warning(store, "mial")   # doctest: +SKIP
    "no live or recent node has the handler 'mial' (did you mean 'mail'?)"
    """
    try:
        count, names = recent_handlers(store, RECENT_WITHIN)
    except Exception as exc:  # advice only: what was asked is written already
        log.debug("node registry not readable: %s", exc)
        return None
    if count == 0 or handler in names:
        return None
    return f"no live or recent node has the handler {handler!r}{did_you_mean(handler, names)}"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or ``""``.

    >>> did_you_mean("mial", ["mail", "report"])
    " (did you mean 'mail'?)"
    """
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("dbscheduler")
    except Exception:  # not installed: a checkout on sys.path
        return "unknown"


class NodeRegistry:
    """A node's side of the registry, driven by its heartbeat thread: :meth:`beat` writes the
    node's row when :data:`WRITE_INTERVAL` (or the heartbeat's own interval) has passed, and
    prunes long-gone nodes at start and every :data:`PRUNE_EVERY` seconds.

    A table not migrated to the registry's revision is told once in the log; the node runs as
    before.
    """

    def __init__(self, store: StoreBase, node_id: str, tags: Collection[str],
                 handlers: Callable[[], Collection[str]]) -> None:
        self._store = store
        self._node_id = node_id
        self._tags = sorted(tags)
        self._handlers = handlers
        self._version = _version()
        self._host = socket.gethostname()
        self._next_write = 0.0
        self._next_prune = 0.0
        self._started = True
        self._missing_told = False
        self._failed_told = False

    def record(self) -> NodeRecord:
        """What this node says about itself."""
        return NodeRecord(self._node_id, self._host, os.getpid(), self._version, self._tags,
                          sorted(self._handlers()))

    def wait(self, now: float) -> float:
        """Seconds until the next write is due."""
        return max(0.0, self._next_write - now)

    def beat(self, running: int, interval: float, now: float | None = None) -> None:
        """Write the row if due (``interval``: the heartbeat's; the shorter one applies).
        Never raises: the registry must not disturb the heartbeat."""
        now = time.monotonic() if now is None else now
        if now < self._next_write:
            return
        self._next_write = now + min(interval, WRITE_INTERVAL)
        try:
            write_node(self._store, self.record(), running, started=self._started)
            self._started = False
            if now >= self._next_prune:
                self._next_prune = now + PRUNE_EVERY
                pruned = prune_nodes(self._store, PRUNE_AFTER)
                if pruned:
                    log.info("node registry: removed %d node(s) unseen for %s", pruned,
                             PRUNE_AFTER)
            self._failed_told = False
        except SchedulerError as exc:  # the table is older than the registry
            if not self._missing_told:
                self._missing_told = True
                log.warning("node registry %s unavailable (%s); run `dbscheduler migrate` "
                            "to list this node in `dbscheduler nodes`", self._store.nodes.name,
                            exc)
            self._next_write = now + PRUNE_EVERY
        except Exception as exc:
            if not self._failed_told:
                self._failed_told = True
                log.warning("node registry: could not write this node's row: %s", exc)
