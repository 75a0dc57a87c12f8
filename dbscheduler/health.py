"""Health of one node, for liveness and readiness probes: :class:`Health`.

``scheduler.health()`` answers whether this node can do its job now: the database answers,
the poller polls, and the heartbeat keeps the leases of what runs here alive. It never raises
and never waits longer than its ``timeout``::

    @app.get("/healthz")
    def healthz():
        h = scheduler.health()
        return JSONResponse(h.to_dict(), status_code=200 if h.ok else 503)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["Health"]


@dataclass(frozen=True)
class Health:
    """What ``scheduler.health()`` found.

    ``ok`` is False with a one-line ``reason`` when the node is not started, the database does
    not answer or refuses writes (a read-only standby), the poller has not polled within a
    few poll intervals, or executions run but no heartbeat went out within the lease. Times are
    aware UTC, on this node's estimate of the database clock.

    While this node's database clock reads ahead of the other nodes' beyond the bound (several
    database servers, such as Galera nodes, with unsynchronised clocks), ``reason`` says so
    and ``ok`` stays True: the node takes over leases only past that skew, so it is safe to
    keep, and restarting it would not mend the clocks.
    """

    ok: bool
    node_id: str
    db_reachable: bool
    last_poll_at: datetime | None
    last_heartbeat_at: datetime | None
    running: int
    """Executions running on this node."""
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values (ISO 8601 timestamps)."""
        return {k: v.isoformat() if isinstance(v, datetime) else v
                for k, v in self.__dict__.items()}
