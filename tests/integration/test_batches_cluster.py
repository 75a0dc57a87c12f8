"""Keyed delayed batches across real node processes (``tests/harness/node.py --batch``) on
SQLite, PostgreSQL and MariaDB: a node killed with SIGKILL in the middle of a delivery, and
two nodes pushing and delivering at once with failing deliveries."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import pytest

from dbscheduler import Client
from tests.harness.cluster import cluster
from tests.helpers import no_keys, wait_until

pytestmark = [pytest.mark.slow,
              pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])]

NODE_ARGS = ("--tasks", "0", "--batch", "digest", "--lease", "2", "--poll", "0.2")


def successful(
    events: list[dict[str, Any]], succeeded: AbstractSet[tuple[str, int, float]] = frozenset()
) -> list[dict[str, Any]]:
    """The deliveries whose finish landed as a success, or (``succeeded``) whose run row is
    a success: their items are delivered (a delivery that removed its items under its lease
    on a loaded machine may finish after it: refused, and still a success in the history). A
    key's row starts again at token 1 when the key comes back after a delivery removed it, so
    a delivery is known by its row, token and pick time together."""
    landed = {(e["task"], e["token"], e["started"]) for e in events
              if e["event"] == "finished" and e["status"] == "success" and e["written"]}
    return [e for e in events if e["event"] == "deliver_start"
            and ((e["task"], e["token"], e["started"]) in landed
                 or (e["task"], e["token"], e["started"]) in succeeded)]


def succeeded_runs(url: str, table: str) -> set[tuple[str, int, float]]:
    """The successful executions in the run history, as ``successful`` knows deliveries."""
    with Client(url, table=table) as client:
        return {(r.name, r.token, r.started_at.timestamp())
                for r in client.runs(status="success", limit=100_000)}


def test_a_node_killed_mid_delivery_leaves_its_items_to_another_node(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    with cluster(url, table, tmp_path) as c:
        for node in ("a", "b"):
            c.start(node, *NODE_ARGS, "--batch-hang-first", "60")
        c.wait_for(lambda ev: sum(e["event"] == "node_start" for e in ev) == 2, 20,
                   "both nodes to start")
        with Client(url, table=table) as client:
            at = time.time() + 0.5
            for i in range(5):
                client.push("ann", i, handler="digest", update="once", ontime=at)
            events = c.wait_for(
                lambda ev: any(e["event"] == "deliver_start" for e in ev), 20,
                "the first delivery to start")
            first = next(e for e in events if e["event"] == "deliver_start")
            assert (first["attempt"], first["items"]) == (1, [0, 1, 2, 3, 4])
            victim = first["node"]
            (info,) = client.batches()
            assert info.running and info.locked_by == victim
            c.kill(victim)
            survivor = "b" if victim == "a" else "a"
            events = c.wait_for(lambda ev: bool(successful(ev)), 30,
                                "the survivor to deliver the items again")
            (again,) = successful(events)
            assert (again["node"], again["attempt"]) == (survivor, 2)
            assert again["items"] == [0, 1, 2, 3, 4]
            # Taken over only once the killed node's lease (2 s) ran out.
            assert again["started"] - first["started"] >= 1.9
            assert not any(e["event"] == "deliver_end" and e["node"] == victim
                           for e in c.events())
            # The survivor's finish removes the key's row after the delivery's own event.
            wait_until(lambda: client.batches() == [] and no_keys(client), 60,
                       "the delivered key's row to go")


def test_two_nodes_pushing_and_delivering_lose_nothing_and_deliver_nothing_twice(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    per_node = 500
    with cluster(url, table, tmp_path) as c:
        for node in ("a", "b"):
            c.start(node, *NODE_ARGS, "--push", f"50:{per_node}", "--batch-fail", "0.2",
                    "--batch-work", "0.01")
        c.wait_for(lambda ev: sum(e["event"] == "push_done" for e in ev) == 2, 120,
                   "both nodes to finish pushing")

        def pushed(ev: list[dict[str, Any]]) -> set[str]:
            return {e["item"] for e in ev if e["event"] == "pushed"}

        events = c.wait_for(
            lambda ev: pushed(ev) <= {i for e in successful(ev) for i in e["items"]}
            or pushed(ev) <= {i for e in successful(ev, succeeded_runs(url, table))
                              for i in e["items"]}, 120,
            "every pushed item to be in a successful delivery")
        with Client(url, table=table) as client:
            # A push whose item went with an earlier delivery may have created its key's row
            # after that delivery ended: the row's own, empty, delivery removes it.
            wait_until(lambda: client.batches() == [] and no_keys(client), 30,
                       "every key and row to go")
        exits = c.stop_all()
        assert all(x.code == 0 for x in exits.values()), exits
        events = c.events()
        confirmed = pushed(events)
        assert len(confirmed) == 2 * per_node, "every push was confirmed"
        done = successful(events, succeeded_runs(url, table))
        counts = Counter(i for e in done for i in e["items"])
        assert set(counts) == confirmed, "nothing delivered that was not pushed"
        twice = {i: n for i, n in counts.items() if n > 1}
        assert not twice, f"delivered twice successfully: {twice}"
        # The failures really happened, were retried, and both nodes delivered.
        starts = [e for e in events if e["event"] == "deliver_start"]
        assert any(e["attempt"] > 1 for e in starts)
        assert {e["node"] for e in done} == {"a", "b"}
        # Every key's items came in push order within each delivery.
        for e in done:
            for node in ("a", "b"):
                mine = [int(i.split("-")[1]) for i in e["items"] if i.startswith(node + "-")]
                assert mine == sorted(mine), e
        with Client(url, table=table) as client:
            assert client.batches() == [] and no_keys(client)
