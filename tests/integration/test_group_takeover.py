"""A vanished node's slots in a concurrency group are free when its leases are: kill -9 a node
running a full group's executions, and the live nodes fill the group again within lease + 2 s,
never running more than the limit at once (real processes, real time)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dbscheduler import Client
from tests.harness import cluster

pytestmark = pytest.mark.slow

LEASE = 3.0
LIMIT = 2


def _starts(events: list[dict[str, Any]], node: str | None = None,
            after: float = 0.0) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "start" and e["task"].startswith("g-")
            and (node is None or e["node"] == node) and e["t"] > after]


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals],
                   key=lambda x: (x[0], x[1]))  # an end before a start at the same instant
    most = running = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


@pytest.mark.parametrize("backend", ["postgresql", "mysql", "sqlite"])
def test_a_killed_nodes_group_slots_are_free_when_its_leases_are(
        migrated: tuple[str, str], tmp_path: Path) -> None:
    url, table = migrated
    Client(url, table=table).set_group_limit("grp", LIMIT)
    # Three grouped tasks for two slots, each execution long enough to hold its slot for the
    # whole test; a plain short task of each node's own shows that the node is polling. The
    # default poll interval: the slots must not wait for a node's safety-net poll.
    def args(node: str) -> list[str]:
        return ["--tasks", "1", "--prefix", f"plain-{node}", "--delay", "0.2", "--work", "0.05",
                "--group", "g:3:30", "--task-options", 'g={"group": "grp"}',
                "--lease", str(LEASE), "--poll", "1", "--workers", "4"]

    with cluster(url, table, tmp_path) as c:
        c.start("victim", *args("victim"))
        c.wait_for(lambda ev: len(_starts(ev, "victim")) >= LIMIT, 30,
                   "the victim runs the group's two slots")
        for n in ("n1", "n2"):
            c.start(n, *args(n))
        c.wait_for(lambda ev: all(any(e["event"] == "end" and e["node"] == n for e in ev)
                                  for n in ("n1", "n2")), 30, "the other nodes run tasks")
        killed = c.kill("victim")
        events = c.wait_for(lambda ev: len(_starts(ev, after=killed)) >= LIMIT, LEASE + 15,
                            "the live nodes fill the group again")
        taken = sorted(e["t"] - killed for e in _starts(events, after=killed))[:LIMIT]
        before = [e for e in _starts(events) if e["t"] <= killed]
    # Every grouped execution is held until the victim's kill (its own) or the end of the
    # test (the live nodes'): at no instant more than the limit.
    intervals = [(e["t"], killed if e["node"] == "victim" else float("inf")) for e in before]
    intervals += [(e["t"], float("inf")) for e in _starts(events, after=killed)]
    assert _most_at_once(intervals) <= LIMIT, json.dumps(
        [(e["node"], e["task"], e["t"]) for e in _starts(events)])
    assert max(taken) <= LEASE + 2.0, (
        f"the group's slots were taken over {taken} s after the kill (lease {LEASE} s)")
