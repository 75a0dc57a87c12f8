"""The nodes working on a table, as :meth:`dbscheduler.Client.nodes` lists them: :class:`NodeInfo`.

::

    for node in client.nodes():
        print(node.node_id, "alive" if node.alive else "gone", node.running, node.tasks)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["NodeInfo"]


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
    """Seen within three of its registry writes (30 s) of the database's time of the read."""
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
