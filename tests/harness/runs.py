"""What the nodes did, read back from their event logs: one :class:`Run` per execution.

Every node (``tests/harness/node.py``) runs on this machine, so the wall-clock times of all
logs share one clock and runs of different nodes can be compared directly.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass
class Run:
    """One execution as the logs tell it."""

    task: str
    node: str
    token: int
    start: float
    end: float | None
    prev: int | None
    has_prev: bool
    written: bool | None
    status: str | None
    lease_lost: bool
    scheduled: float
    started_db: float
    eff_end: float = float("inf")
    how_ended: str = "logged"


def runs_from(events: Iterable[Mapping[str, Any]]) -> list[Run]:
    """Pair each ``start`` with its ``end``, ``finished`` and ``lease_lost`` events by
    (node, task, token), in order; ``end`` is None if the execution never logged its end.

    In order, not by the key alone: after a failover that lost commits, a token comes back,
    and one node may run a task twice with the same token — one after the other, so its k-th
    start of a key goes with its k-th end of that key.
    """
    ends: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    finished: dict[tuple[str, str, int], list[Mapping[str, Any]]] = defaultdict(list)
    lost: dict[tuple[str, str, int], int] = defaultdict(int)
    starts: list[Mapping[str, Any]] = []
    for e in events:
        kind = e["event"]
        if kind == "start":
            starts.append(e)
            continue
        if kind not in ("end", "finished", "lease_lost"):
            continue
        key = (e["node"], e["task"], int(e["token"]))
        if kind == "end":
            ends[key].append(float(e["t"]))
        elif kind == "finished":
            finished[key].append(e)
        else:
            lost[key] += 1
    out = []
    seen: dict[tuple[str, str, int], int] = defaultdict(int)
    for e in starts:
        key = (e["node"], e["task"], int(e["token"]))
        k = seen[key]
        seen[key] += 1
        fin = finished[key][k] if k < len(finished[key]) else None
        out.append(Run(
            task=e["task"], node=e["node"], token=int(e["token"]), start=float(e["t"]),
            end=ends[key][k] if k < len(ends[key]) else None, prev=e.get("prev"),
            has_prev="prev" in e,
            written=None if fin is None else bool(fin["written"]),
            status=None if fin is None else str(fin["status"]), lease_lost=k < lost[key],
            scheduled=float(e["scheduled"]), started_db=float(e["started"]),
        ))
    return out


def assert_no_overlap(runs: list[Run], grace_end: float | None = None) -> None:
    """No two executions of one task overlap in time; fencing tokens never repeat."""
    by_task: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_task[run.task].append(run)
    for task, items in by_task.items():
        tokens = [r.token for r in items]
        assert len(tokens) == len(set(tokens)), f"{task}: a fencing token repeats: {sorted(tokens)}"
        items.sort(key=lambda r: r.start)
        for a, b in itertools.pairwise(items):
            assert a.token < b.token, f"{task}: token {b.token} started after {a.token}"
            a_end = a.end if a.end is not None else (grace_end or float("inf"))
            assert a_end <= b.start, (
                f"{task}: executions overlap: token {a.token} on {a.node} "
                f"[{a.start:.3f}, {a_end:.3f}] and token {b.token} on {b.node} from {b.start:.3f}"
            )
