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
import math
import os
import random
import socket
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable
from datetime import datetime, timedelta

from .._store.base import StoreBase
from .._store.nodes import (
    NodeRecord,
    NodeRow,
    node_clocks,
    node_rows,
    prune_nodes,
    recent_handlers,
    write_node,
)
from ..errors import SchedulerError
from ..logfields import engine_log
from ..nodes import NodeInfo

__all__ = [
    "ALIVE_WITHIN",
    "PRUNE_AFTER",
    "RECENT_WITHIN",
    "WRITE_INTERVAL",
    "ClockSkew",
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
SKEW_FLOOR = 0.5
"""Seconds: a database clock ahead of another's by no more than this, or than the registry's
write interval (a third of the lease) if more, is never counted as skew (see
:class:`ClockSkew`)."""
SKEW_SAMPLES = 20
"""Fresh writes of another node kept per node for the skew estimate (the smallest wins)."""
SKEW_TOLD_AFTER = 10
"""Fresh writes of a node seen before skew against it is logged (one early sample may be an
old write read late; the margin applies from the first)."""


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


class ClockSkew:
    """How far the database clock this node reads is *ahead* of the clocks that wrote the
    other live nodes' rows: the one danger of several database servers (a Galera cluster
    written through several of its nodes), where a picker whose clock is fast sees a live
    lease written elsewhere as expired.

    Each read of the registry gives, for another node whose ``last_seen`` advanced since
    the previous read, ``my database's now - its last_seen``: the age of its write plus the
    skew. The age is never negative (the write was evaluated before this read could see
    it), so each sample is an upper bound of the skew, and the smallest of the last
    :data:`SKEW_SAMPLES` is the tightest; the registry's writes are spaced irregularly, so
    the reads meet the other nodes' writes at every phase and the smallest age tends to
    zero. An estimate at or below ``bound`` is no skew (a live lease keeps two thirds of its
    length between renewals, so a smaller difference can never make it look expired).

    >>> from datetime import datetime, timezone
    >>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    >>> skew = ClockSkew(bound=0.5)
    >>> skew.observe([("b", t, t + timedelta(seconds=3.0))], mono=0.0)   # first read
    >>> skew.observe([("b", t + timedelta(seconds=1), t + timedelta(seconds=3.6))], mono=1.0)
    >>> skew.ahead()
    (2.6, ['b'])
    """

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self._last: dict[str, tuple[datetime, float]] = {}
        self._samples: dict[str, deque[float]] = {}
        self._first_at: dict[str, float] = {}
        self._first: dict[str, float] = {}
        """A node's difference at its first read, counted until the next read tells whether
        its row advances (a node met a moment ago is compared at once)."""

    def observe(self, rows: Iterable[tuple[str, datetime, datetime]], mono: float) -> None:
        """One read of the registry (``(node id, last_seen, this database's now)``) made at
        ``mono`` (monotonic seconds). Rows that did not advance since the last read say
        nothing about the clocks (a stopped node's row only ages)."""
        seen = set()
        for node, last_seen, now in rows:
            seen.add(node)
            previous = self._last.get(node)
            self._last[node] = (last_seen, mono)
            if previous is None:
                self._first[node] = (now - last_seen).total_seconds()
                self._first_at[node] = mono
                continue
            if last_seen <= previous[0]:
                # Not written since: a live node writes within one interval, so its first
                # difference stands until then (dropping it at once left a node that had
                # just joined with no margin for an interval, and it took a live lease).
                if mono - self._first_at.get(node, mono) > 2 * self.bound:
                    self._first.pop(node, None)
                continue
            self._first.pop(node, None)
            samples = self._samples.setdefault(node, deque(maxlen=SKEW_SAMPLES))
            samples.append((now - last_seen).total_seconds())
        for node in [n for n in self._last if n not in seen]:  # gone from the registry
            self._last.pop(node, None)
            self._samples.pop(node, None)
            self._first.pop(node, None)
            self._first_at.pop(node, None)

    def ahead(self, samples: int = 1) -> tuple[float, list[str]]:
        """``(seconds, nodes)``: the largest estimate beyond :attr:`bound` among the nodes
        with at least ``samples`` samples, and the nodes beyond the bound; ``(0.0, [])``
        when none is. With ``samples`` 1, a node met at the last read counts by its first
        difference (an upper bound as well, if it is alive)."""
        worst, nodes = 0.0, []
        found = {n: list(v) for n, v in self._samples.items() if len(v) >= samples}
        if samples <= 1:
            found.update((n, [d]) for n, d in self._first.items())
        for node, values in sorted(found.items()):
            estimate = min(values)
            if estimate > self.bound:
                nodes.append(node)
                worst = max(worst, round(estimate, 3))
        return worst, nodes


def takeover_margin(skew: float) -> float:
    """Seconds by which a lease must be expired on this node's database clock before it takes
    the row over: the estimated skew rounded up to half a second (few distinct statements),
    0 when there is none.

    >>> takeover_margin(2.52), takeover_margin(0.0)
    (3.0, 0.0)
    """
    return math.ceil(skew * 2) / 2 if skew > 0 else 0.0


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
        self._random = random.Random()
        self.skew: ClockSkew | None = None
        """This node's database clock against the others' (set up by the first write)."""
        self._skew_told: tuple[str, ...] = ()

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
        every = min(interval, WRITE_INTERVAL)
        # Spaced irregularly (never further apart than ``every``) so that this node's reads
        # meet the other nodes' writes at every phase: see ClockSkew.
        self._next_write = now + every * self._random.uniform(0.75, 1.0)
        try:
            write_node(self._store, self.record(), running, started=self._started)
            self._started = False
            self._compare_clocks(every, now)
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

    def _compare_clocks(self, every: float, now: float) -> None:
        """Read the other live nodes' last writes, update the skew estimate, and set the
        store's takeover margin from it; log once when this node's clock is found ahead."""
        if self.skew is None:
            # A whole write interval: a busy machine delays writes and reads by a fraction of
            # it (seen: a smallest age of 0.6 s out of five reads on one database), and a
            # skew under a third of the lease cannot make a lease renewed every third of it
            # look expired.
            self.skew = ClockSkew(max(SKEW_FLOOR, every))
        try:
            rows = node_clocks(self._store, self._node_id, ALIVE_WITHIN)
        except Exception as exc:
            log.debug("node registry: could not read the other nodes' clocks: %s", exc)
            return
        self.skew.observe(rows, now)
        ahead, _ = self.skew.ahead()
        self._store.takeover_margin = takeover_margin(ahead)
        told, nodes = self.skew.ahead(SKEW_TOLD_AFTER)
        if nodes and not self._skew_told:
            log.warning(
                "database clock skew: the database server this node writes through reads "
                "%.1f s ahead of the server(s) that node(s) %s write through (more than "
                "%.1f s); this node takes over a lease only once it is %.1f s past its end "
                "on its clock. Synchronise the database hosts' clocks, or write through one "
                "server",
                told, ", ".join(nodes), self.skew.bound, takeover_margin(told))
            self._skew_told = tuple(nodes)
        elif not nodes and self._skew_told and not self.skew.ahead()[1]:
            log.info("database clock skew: no longer ahead of node(s) %s",
                     ", ".join(self._skew_told))
            self._skew_told = ()

    def skew_reason(self) -> str | None:
        """One line on this node's database clock running ahead of the others', or None."""
        if self.skew is None:
            return None
        ahead, nodes = self.skew.ahead(SKEW_TOLD_AFTER)
        if not nodes:
            return None
        return (f"database clock {ahead:.1f} s ahead of node(s) {', '.join(nodes)}'s: "
                f"takeovers wait {takeover_margin(ahead):.1f} s past a lease's end")
