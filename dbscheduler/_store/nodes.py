"""The node registry's SQL: a node's own row written with its heartbeat, the registry read
back, and the rows of long-gone nodes pruned.

A node writes only its own row (keyed by its id), so no two nodes ever contend for a row; the
update comes first because it is what every write but the first one does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..dialects import db_now, db_now_plus
from ..dialects.types import to_utc

if TYPE_CHECKING:
    from .base import StoreBase

__all__ = ["NodeRecord", "NodeRow", "clocks_statement", "node_clocks", "node_rows",
           "prune_nodes", "prune_statement", "recent_handlers", "recent_statement",
           "write_node"]


@dataclass(frozen=True)
class NodeRecord:
    """What a node says about itself (all but the times, which are the database's)."""

    node_id: str
    host: str
    pid: int
    version: str
    tags: Sequence[str]
    handlers: Sequence[str]


@dataclass(frozen=True)
class NodeRow:
    """A registry row as read, with the database clock of the read and the tasks the node
    holds now in the tasks table."""

    values: dict[str, Any]
    db_now: datetime
    tasks: list[str]


def _names(text: Any) -> list[str]:
    try:
        value = json.loads(text) if text else []
    except (TypeError, ValueError):
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def write_node(store: StoreBase, record: NodeRecord, running: int, started: bool = False
               ) -> None:
    """Record that ``record``'s node is alive now (database clock), running ``running``
    executions: one ``UPDATE``, an ``INSERT`` the first time. ``started``: the node's first
    write since it started (a fixed node id restarted gets its new ``started_at``)."""
    n = store.nodes
    values: dict[str, Any] = {
        "host": record.host[:255], "pid": int(record.pid), "version": record.version[:64],
        "tags": json.dumps(sorted(record.tags)), "handlers": json.dumps(sorted(record.handlers)),
        "running": int(running),
    }
    with store.autocommit() as conn:
        updated = conn.execute(
            sa.update(n).where(n.c.node_id == record.node_id)
            .values(last_seen=db_now(), **({"started_at": db_now()} if started else {}),
                    **values)).rowcount
        if updated:
            return
        try:
            conn.execute(sa.insert(n).values(node_id=record.node_id, started_at=db_now(),
                                             last_seen=db_now(), **values))
        except sa.exc.IntegrityError:
            # Another process started with the same node id a moment ago: its row stands.
            if conn.in_transaction():
                conn.rollback()


def prune_statement(store: StoreBase, unseen_for: timedelta) -> sa.Delete:
    """The ``DELETE`` of the rows of nodes unseen for longer than ``unseen_for``."""
    n = store.nodes
    return sa.delete(n).where(n.c.last_seen < db_now_plus(-unseen_for.total_seconds()))


def prune_nodes(store: StoreBase, unseen_for: timedelta) -> int:
    """Delete the rows of nodes unseen for longer than ``unseen_for``; returns how many."""
    with store.autocommit() as conn:
        count = conn.execute(prune_statement(store, unseen_for)).rowcount
    return max(count, 0)


def node_rows(store: StoreBase) -> list[NodeRow]:
    """Every registry row, newest contact first, with the tasks each node holds now."""
    n, t = store.nodes, store.table
    with store.read() as conn:
        now = store.now(conn)
        rows = [dict(r._mapping) for r in conn.execute(
            sa.select(n).order_by(n.c.last_seen.desc(), n.c.node_id))]
        held: dict[str, list[str]] = {}
        for name, node in conn.execute(
                sa.select(t.c.queue_name, t.c.locked_by).where(t.c.locked_by.is_not(None))
                .order_by(t.c.queue_name)):
            held.setdefault(node, []).append(name)
    out = []
    for row in rows:
        row["tags"] = _names(row["tags"])
        row["handlers"] = _names(row["handlers"])
        for key in ("started_at", "last_seen"):
            row[key] = to_utc(row[key])
        out.append(NodeRow(row, now, held.get(row["node_id"], [])))
    return out


def recent_statement(store: StoreBase, within: timedelta) -> sa.Select[Any]:
    """The handlers of the nodes seen within ``within``, one row per node."""
    n = store.nodes
    return sa.select(n.c.handlers).where(n.c.last_seen >= db_now_plus(-within.total_seconds()))


def recent_handlers(store: StoreBase, within: timedelta) -> tuple[int, set[str]]:
    """``(nodes seen within ``within``, the handler names they have)``."""
    with store.read() as conn:
        found = conn.execute(recent_statement(store, within)).all()
    names: set[str] = set()
    for (text,) in found:
        names.update(_names(text))
    return len(found), names


def clocks_statement(store: StoreBase, node_id: str, within: timedelta) -> sa.Select[Any]:
    """The other nodes seen within ``within``: their id and last write (each on its own
    database server's clock), with this database's clock at the read."""
    n = store.nodes
    return (sa.select(n.c.node_id, n.c.last_seen, db_now().label("db_now"))
            .where(n.c.node_id != node_id,
                   n.c.last_seen >= db_now_plus(-within.total_seconds())))


def node_clocks(store: StoreBase, node_id: str, within: timedelta
                ) -> list[tuple[str, datetime, datetime]]:
    """``(node id, its last_seen, this database's now)`` of the other nodes seen within
    ``within``: what :class:`~dbscheduler._engine.nodes.ClockSkew` compares."""
    with store.read() as conn:
        found = conn.execute(clocks_statement(store, node_id, within)).all()
    out = []
    for other, seen, now in found:
        seen, now = to_utc(seen), to_utc(now)
        if seen is not None and now is not None:
            out.append((str(other), seen, now))
    return out
