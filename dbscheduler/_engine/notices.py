"""The text of the ``NOTIFY`` a finish sends: which node wrote it and the earliest due time it
wrote, so that the node that sent it ignores it and the others take it as a hint instead of
running a full poll.

Every other notification (a trigger, a schedule change, a push …) carries a task name or
nothing, and means "poll now". Names never contain control characters
(:func:`dbscheduler._store.base.validate_name`), so the leading ``\\x1f`` cannot clash with
one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

__all__ = ["DueNotice", "due_payload", "parse_due"]

_PREFIX = "\x1fdue "


@dataclass(frozen=True)
class DueNotice:
    """A finish of ``node`` wrote a row due at ``at``."""

    node: str
    at: datetime


def due_payload(node: str, at: datetime) -> str:
    """The payload of a finish's ``NOTIFY``: ``node`` wrote a row due at ``at``."""
    micros = round(at.timestamp() * 1_000_000)
    return f"{_PREFIX}{micros} {node}"


def parse_due(payload: str) -> DueNotice | None:
    """The finish notice in ``payload``, or ``None`` when it is any other notification."""
    if not payload.startswith(_PREFIX):
        return None
    micros, _, node = payload[len(_PREFIX):].partition(" ")
    try:
        at = datetime.fromtimestamp(int(micros) / 1_000_000, timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None
    return DueNotice(node, at)
