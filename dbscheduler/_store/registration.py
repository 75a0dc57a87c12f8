"""Registration: insert each declared task unless present, and apply a changed schedule or
dead-man limit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .._engine import faultpoints as _faultpoints
from ..logfields import engine_log
from .base import IN_CHUNK, StoreBase

__all__ = ["Registration", "register"]

log = engine_log("dbscheduler.store")


@dataclass(frozen=True)
class Registration:
    """A task to insert if absent: its name, schedule text and first due time given db now."""

    name: str
    schedule: str
    first_run: Callable[[datetime], datetime]
    options: str | None = None
    """The execution options as stored JSON text (``None``: all defaults)."""
    priority: int = 0
    group: str | None = None
    requires: str | None = None
    alert_after: float | None = None
    """The dead-man limit in seconds (``None``: none)."""


def register(store: StoreBase, items: Sequence[Registration]) -> None:
    """Insert each task unless present; apply a changed schedule and changed options at once.

    A row that exists keeps its state; when its ``schedule`` text differs, its next time is
    recomputed from the new schedule unless it is running, and the text updated. Changed
    options are written as they are (a running execution keeps the ones it started with).
    """
    store.retrying("registration", lambda: _register(store, items))


def _register(store: StoreBase, items: Sequence[Registration]) -> None:
    t, b = store.table, sa.bindparam
    # One order on every node: racing registrations lock rows in the same sequence.
    ordered = sorted(items, key=lambda i: i.name)
    # Reads and Python work (first due times) first, outside the transaction: the writes
    # below go to the server back to back, so the transaction never waits on this process.
    names = [item.name for item in ordered]
    with store.read() as conn:
        now = store.now(conn)
        present: dict[str, str | None] = {}
        stored_options: dict[str, str | None] = {}
        limits: dict[str, float | None] = {}
        for name, schedule, options, limit in _stored(store, conn, names):
            present[name] = schedule
            stored_options[name] = options
            limits[name] = limit
    first = {item.name: item.first_run(now) for item in ordered}
    missing = [item for item in ordered if item.name not in present]
    relimit = [i for i in ordered
               if i.name in present and not _same_limit(limits[i.name], i.alert_after)]
    # Each statement below is idempotent on its own: autocommit where the insert needs no
    # savepoint (MySQL has no server-side bound on an idle transaction).
    with store.inserting() as conn:
        if missing:
            inserted = store.dialect.insert_many_if_absent(conn, t, [
                {
                    "queue_name": item.name,
                    "handler": item.name,
                    "payload": None,
                    "created_at": now,
                    "next_process_at": first[item.name],
                    "attempt": 0,
                    "reenqueue_attempt": 0,
                    "total_attempt": 0,
                    "paused": False,
                    "schedule": item.schedule,
                    "stop_requested": False,
                    "options": item.options,
                    "priority": item.priority,
                    "task_group": item.group,
                    "requires": item.requires,
                    "alert_after": item.alert_after,
                }
                for item in missing
            ])
            _faultpoints.reached("register")
            # The rows this insert made hold what was registered. A row another node
            # inserted meanwhile may carry another schedule or other options (the last
            # registration wins): read back (all, where the database did not say which
            # rows the insert made), so that only those are updated below, not every new
            # row again (one round trip per row on MySQL).
            for item in missing:
                if inserted is not None and item.name in inserted:
                    present[item.name] = item.schedule
                    stored_options[item.name] = item.options
            unknown = [i.name for i in missing if i.name not in present]
            for name, schedule, options, _ in _stored(store, conn, unknown):
                if name not in present:
                    present[name] = schedule
                    stored_options[name] = options
        # The statement itself only touches rows whose schedule text differs.
        check = [i for i in ordered if i.name not in present or present[i.name] != i.schedule]
        reoption = [i for i in ordered
                    if i.name not in present or stored_options[i.name] != i.options]
        if check:
            idle = t.c.locked_by.is_(None)
            changed = conn.execute(
                sa.update(t)
                .where(
                    t.c.queue_name == b("r_name", type_=t.c.queue_name.type),
                    sa.or_(t.c.schedule.is_(None),
                           t.c.schedule != b("r_schedule", type_=t.c.schedule.type)),
                )
                .values(
                    schedule=b("r_schedule", type_=t.c.schedule.type),
                    next_process_at=sa.case(
                        (idle, b("r_first", type_=t.c.next_process_at.type)),
                        else_=t.c.next_process_at,
                    ),
                    attempt=sa.case((idle, 0), else_=t.c.attempt),
                ),
                [{"r_name": i.name, "r_schedule": i.schedule, "r_first": first[i.name]}
                 for i in check],
            ).rowcount
            if changed and changed > 0:
                log.info("%d task(s) registered with a changed schedule: %s", changed,
                         ", ".join(repr(i.name) for i in check if i.name in present))
        if reoption:
            conn.execute(
                sa.update(t)
                .where(t.c.queue_name == b("o_name", type_=t.c.queue_name.type))
                .values(options=b("o_options", type_=t.c.options.type),
                        priority=b("o_priority", type_=t.c.priority.type),
                        task_group=b("o_group", type_=t.c.task_group.type),
                        requires=b("o_requires", type_=t.c.requires.type)),
                [{"o_name": i.name, "o_options": i.options, "o_priority": i.priority,
                  "o_group": i.group, "o_requires": i.requires} for i in reoption],
            )
        if relimit:
            conn.execute(
                sa.update(t).where(t.c.queue_name == b("r_name", type_=t.c.queue_name.type))
                .values(alert_after=b("r_limit", type_=t.c.alert_after.type)),
                [{"r_name": i.name, "r_limit": i.alert_after} for i in relimit],
            )
        if items:
            store.notify(conn)


def _stored(store: StoreBase, conn: Connection, names: Sequence[str]
            ) -> list[tuple[str, str | None, str | None, float | None]]:
    """The stored name, schedule, options and dead-man limit of the rows of ``names``: by
    the unique index on the name, so registering a few tasks costs the same beside a table
    of a million one-off jobs as beside an empty one."""
    t = store.table
    stmt = (sa.select(t.c.queue_name, t.c.schedule, t.c.options, t.c.alert_after)
            .where(t.c.queue_name.in_(sa.bindparam("r_names", expanding=True))))
    return [(r[0], r[1], r[2], r[3]) for start in range(0, len(names), IN_CHUNK)
            for r in conn.execute(stmt, {"r_names": list(names[start:start + IN_CHUNK])})]


def _same_limit(stored: float | None, wanted: float | None) -> bool:
    if stored is None or wanted is None:
        return stored is wanted
    return abs(stored - wanted) < 1e-6
