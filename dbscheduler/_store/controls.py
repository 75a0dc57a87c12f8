"""Which due rows a node may take (its tags, full groups), and concurrency groups: at most
``max_running`` executions of a group at once, across the cluster, without any lock outliving
a statement.

Two steps, each one autocommit statement:

1. **The pick leaves full groups alone**: its ``WHERE`` skips rows of groups whose running
   executions already reach their limit (:func:`full_groups`). Nodes picking at the same
   instant may still take more than the limit together: this filter only keeps a busy node
   from taking rows it would give back.
2. **Settle after the pick** (:func:`settle`): a plain read, after the pick committed, counts
   each group's running rows (every node's, this pick's included); when a group is over its
   limit, this pick gives back as many of its own rows as the group is over, before any of
   them starts.

Why it is never exceeded: take any moment at which executions of a group run, and among the
picks that took them, the one whose settling read came last. Every other of those executions
was picked (committed) before that read and still holds its row, so the read counted it; the
last pick kept only what fitted under the limit beside them. Picks that settle at the same
instant may both give back (the group runs below its limit for a moment, and they pick again
after a short random pause): safe, and quickly resolved.

A row counts as running while ``locked_by`` is set and its lease has not expired: a vanished
node's row stops counting when its lease ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..context import GroupInfo
from ..dialects import PickedRow, db_now
from ..logfields import engine_log
from .giveback import unpick

if TYPE_CHECKING:
    from .base import StoreBase

__all__ = ["GroupInfo", "eligible", "full_groups", "group_infos", "set_group_limit", "settle"]

log = engine_log("dbscheduler.store")


def _running(t: sa.FromClause) -> sa.ColumnElement[bool]:
    return sa.and_(t.c.locked_by.is_not(None), t.c.next_process_at > db_now())


def eligible(store: StoreBase, t: sa.FromClause, tags: Collection[str], *,
             groups: bool = True) -> sa.ColumnElement[bool]:
    """Rows of ``t`` (the table or an alias of it) a node carrying ``tags`` may take now:
    no tag required or one it has, and no group whose running executions reach its limit.

    The poll's next due time and the pick use the same condition, so a node never wakes up
    for rows it would not take (a full group's, another node's). Built once per table (or
    alias) and tags: the poll and the pick run it hundreds of times a second. ``groups=False``
    leaves out the full-group filter (a statement whose candidate rows already passed it).
    """
    key = (t, frozenset(tags), groups)
    cached = store._eligible.get(key)
    if cached is None:
        # One bound value per tag, not an expanding list: that one is rendered again at every
        # execution (and for no tags it is only ever false).
        tagged = sa.or_(t.c.requires.is_(None),
                        *([t.c.requires.in_([sa.literal(tag) for tag in sorted(tags)])]
                          if tags else []))
        cached = sa.and_(
            tagged,
            sa.or_(t.c.task_group.is_(None),
                   store.dialect.not_among(t.c.task_group, full_groups(store))),
        ) if groups else tagged
        if len(store._eligible) > 64:
            store._eligible.clear()
        store._eligible[key] = cached
    return cached


def full_groups(store: StoreBase) -> sa.Select[Any]:
    """The names of the groups whose running executions reach their limit.

    Each limited group counts its running rows through the ``(task_group, locked_by)``
    index; without limits the query reads nothing. Grouped in a derived table: MySQL accepts
    a subquery on the table it updates only when the subquery is materialized, which grouping
    guarantees.
    """
    if store._full_groups is not None:
        return store._full_groups
    g = store.groups
    r = store.table.alias("grp_running")
    running = (sa.select(sa.func.count(r.c.id))
               .where(r.c.task_group == g.c.name, _running(r))
               .scalar_subquery())
    counted = (
        sa.select(g.c.name)
        .where(g.c.max_running <= running)
        .group_by(g.c.name)
        .subquery("full_groups")
    )
    store._full_groups = sa.select(counted.c.name)
    return store._full_groups


def settle(store: StoreBase, node_id: str, rows: list[PickedRow]) -> tuple[list[PickedRow], int]:
    """Give back the rows of ``rows`` (just picked) that would put a group over its limit.

    Returns the rows kept and how many were given back. Rows without a group pass through
    without a statement.
    """
    mine: dict[str, list[PickedRow]] = {}
    for r in rows:
        group = r.get("task_group")
        if group is not None:
            mine.setdefault(group, []).append(r)
    if not mine:
        return rows, 0
    try:
        back = _over_limit(store, mine)
        if back:
            _give_back(store, node_id, back)
    except sa.exc.DBAPIError as exc:
        # Unsure whether they fit: none of them may start. Their leases expire if even the
        # giving back failed.
        back = [r for taken in mine.values() for r in taken]
        log.warning("groups: could not check the limits of a pick (%s); its %d grouped "
                    "row(s) do not run now", exc.orig, len(back))
        with contextlib.suppress(sa.exc.DBAPIError):
            _give_back(store, node_id, back)
    if not back:
        return rows, 0
    returned = {id(r) for r in back}
    return [r for r in rows if id(r) not in returned], len(back)


def _over_limit(store: StoreBase, mine: dict[str, list[PickedRow]]) -> list[PickedRow]:
    """The rows of ``mine`` (this pick's, by group) to give back: as many as each group is
    over its limit, counting every node's running rows."""
    g, t = store.groups, store.table
    with store.read() as conn:
        counts = conn.execute(
            sa.select(g.c.name, g.c.max_running, sa.func.count(t.c.id).label("running"))
            .select_from(g.outerjoin(t, sa.and_(t.c.task_group == g.c.name, _running(t))))
            .where(g.c.name.in_(sorted(mine)))
            .group_by(g.c.name, g.c.max_running)
        ).all()
    back: list[PickedRow] = []
    for name, limit, running in counts:
        over = int(running) - int(limit)
        if over <= 0:
            continue
        # Keep what the pick's order puts first (priority, then due time), give back the
        # rest: the rows come back in no particular order (RETURNING), and giving back the
        # same ones every time would starve them.
        taken = sorted(mine[name], key=_pick_order)
        back.extend(taken[max(0, len(taken) - over):])
    return back


def _pick_order(row: PickedRow) -> tuple[int, Any, int]:
    try:
        priority = int(row["priority"])
    except (TypeError, ValueError):
        # SQLite keeps a hand-written 'high' in an INTEGER column: one such row must not
        # fail the whole pick (the poller fails that row's execution alone).
        priority = 0
    return (-priority, row["prev_next_process_at"], int(row["id"]))


def _give_back(store: StoreBase, node_id: str, rows: list[PickedRow]) -> None:
    with store.autocommit() as conn:
        unpick(store, conn, node_id, rows)
    log.debug("groups: gave back %d row(s) over their group's limit", len(rows))


def set_group_limit(store: StoreBase, group: str, limit: int | None) -> None:
    """Set (``limit`` an int ≥ 0) or remove (``None``) the limit of ``group``; applies at
    every node's next pick. Each statement is one autocommit write."""
    g = store.groups
    with store.autocommit() as conn:
        if limit is None:
            conn.execute(sa.delete(g).where(g.c.name == group))
            return
        values = {"max_running": limit, "updated_at": db_now()}
        if conn.execute(sa.update(g).where(g.c.name == group).values(**values)).rowcount:
            store.notify(conn)
            return
        try:
            conn.execute(sa.insert(g).values(name=group, **values))
        except sa.exc.IntegrityError:  # set at the same moment by another process
            conn.execute(sa.update(g).where(g.c.name == group).values(**values))
        # A raised limit may let waiting rows run now.
        store.notify(conn)


def group_infos(store: StoreBase, names: Collection[str] | None = None) -> list[GroupInfo]:
    """Every group that has a limit or rows, by name (only ``names`` when given)."""
    g, t = store.groups, store.table
    running = sa.case((_running(t), 1), else_=0)
    with store.read() as conn:
        where_t = [t.c.task_group.is_not(None)]
        where_g: list[sa.ColumnElement[bool]] = []
        if names is not None:
            where_t.append(t.c.task_group.in_(sorted(names)))
            where_g.append(g.c.name.in_(sorted(names)))
        used = {
            r.task_group: (int(r.running or 0), int(r.tasks))
            for r in conn.execute(
                sa.select(t.c.task_group, sa.func.sum(running).label("running"),
                          sa.func.count(t.c.id).label("tasks"))
                .where(*where_t).group_by(t.c.task_group)
            )
        }
        limits = {r.name: (int(r.max_running), r.updated_at)
                  for r in conn.execute(sa.select(g).where(*where_g))}
    out: list[GroupInfo] = []
    for name in sorted(set(used) | set(limits)):
        running_now, tasks = used.get(name, (0, 0))
        limit, updated = limits.get(name, (None, None))
        out.append(GroupInfo(name, limit, running_now, tasks, updated))
    return out
