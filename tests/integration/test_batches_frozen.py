"""A process frozen between the statements of a push or of a delivery holds no lock and loses
nothing: real node processes that stop themselves (``DBSCHEDULER_FREEZE_AT``, SIGSTOP) right
after the push's item insert and right after a delivery removed its items, on SQLite,
PostgreSQL and MariaDB. The other node keeps pushing and delivering meanwhile."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import Client
from tests.harness.cluster import Cluster, cluster
from tests.helpers import no_keys, sqlite_write_lock_free, user_rows, wait_until

pytestmark = [pytest.mark.slow,
              pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])]

NODE_ARGS = ("--tasks", "0", "--batch", "digest", "--lease", "2", "--poll", "0.2")


@contextmanager
def frozen_at(point: str) -> Iterator[None]:
    """Nodes started inside the block stop themselves at ``point`` (the first time)."""
    os.environ["DBSCHEDULER_FREEZE_AT"] = point
    try:
        yield
    finally:
        del os.environ["DBSCHEDULER_FREEZE_AT"]


def stopped(c: Cluster, node: str) -> bool:
    """The node's process is stopped (SIGSTOP): state ``T`` in /proc."""
    stat = Path(f"/proc/{c.nodes[node].pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


def delivered(events: list[dict[str, Any]]) -> Counter[Any]:
    """Items by the number of deliveries that handed them over and ended without failing."""
    ok = {(e["task"], e["token"]) for e in events
          if e["event"] == "deliver_end" and not e["failed"]}
    return Counter(i for e in events if e["event"] == "deliver_start"
                   and (e["task"], e["token"]) in ok for i in e["items"])


def test_a_push_frozen_after_its_item_blocks_nobody_and_its_item_is_delivered_once(
    migrated: tuple[str, str], tmp_path: Path, backend: str
) -> None:
    url, table = migrated
    with cluster(url, table, tmp_path) as c, Client(url, table=table) as client:
        c.start("b", *NODE_ARGS)
        # The pusher runs no scheduler: on SQLite a poll or heartbeat frozen mid-write would
        # hold the file lock (the documented limit of a one-machine database), and that is
        # not what this test is about.
        with frozen_at("push"):
            c.start("a", "--push", "1:1", "--push-only", "--batch", "digest")
        wait_until(lambda: stopped(c, "a"), 20, "the pusher to freeze after its item")
        if backend != "postgresql":  # there, the push is one statement: item and row
            # Its item waits, without a row: the push stopped before its row statement.
            (waiting,) = client.batches()
            assert (waiting.key, waiting.items, waiting.due_at) == ("k-0", 1, None)
        # Another push to the key, its delivery and its finish go ahead of the frozen process,
        # and the waiting item rides along.
        client.push("k-0", {"id": "late", "key": "k-0"}, handler="digest")
        c.wait_for(lambda ev: delivered(ev) == Counter({"a-0": 1, "late": 1}), 20,
                   "both items delivered while the pusher is frozen")
        wait_until(lambda: client.batches() == [], 10, "the key to be empty")
        assert stopped(c, "a")
        os.kill(c.nodes["a"].pid, signal.SIGCONT)
        # Thawed, the push ends (its row statement finds no key and creates one, which its
        # empty delivery removes): nothing is delivered again.
        c.wait_for(lambda ev: any(e["event"] == "pushed" for e in ev), 20, "the push to end")
        wait_until(lambda: no_keys(client), 20, "the empty key's row to go")
        time.sleep(0.5)  # a window, its length the point: a second delivery would show in it
        assert delivered(c.events()) == Counter({"a-0": 1, "late": 1})


def test_a_delivery_frozen_after_removing_its_items_is_never_delivered_again(
    migrated: tuple[str, str], tmp_path: Path
) -> None:
    url, table = migrated
    with cluster(url, table, tmp_path) as c, Client(url, table=table) as client:
        with frozen_at("delivered"):
            c.start("a", *NODE_ARGS)
        at = time.time() + 0.5
        for i in range(3):
            client.push("k", i, handler="digest", ontime=at, update="once")
        wait_until(lambda: stopped(c, "a"), 20, "the node to freeze after removing its items")
        if url.startswith("sqlite"):
            path = sa.make_url(url).database
            assert path is not None
            # The whole process stops: a heartbeat or poll of it caught inside its write holds
            # SQLite's file lock (the documented limit of a one-machine database), and then no
            # other process can write; this test is about the delivery's own point.
            deadline = time.monotonic() + 2
            while not sqlite_write_lock_free(path):
                if time.monotonic() > deadline:
                    pytest.skip("the node froze while another of its threads was inside a write "
                                "(SQLite's file lock, documented); this trial tests nothing")
                time.sleep(0.02)
        # Frozen before its finish: the row is still leased to it, its items are gone.
        (row,) = user_rows(client)
        assert row.locked_by == "a" and client.batches() == []
        c.start("b", *NODE_ARGS)
        client.push("k2", "other", handler="digest")  # b delivers meanwhile
        c.wait_for(lambda ev: delivered(ev)["other"] == 1, 20, "b to deliver another key")
        # Once a's lease runs out, b takes the key over: an empty delivery removes it.
        wait_until(lambda: no_keys(client), 20, "b to remove the key a left")
        os.kill(c.nodes["a"].pid, signal.SIGCONT)
        c.wait_for(lambda ev: any(e["event"] == "finished" and e["node"] == "a"
                                  for e in ev), 20, "a's finish after it thawed")
        events = c.events()
        assert delivered(events) == Counter({0: 1, 1: 1, 2: 1, "other": 1})
        assert [(e["node"], e["lost_node"]) for e in events
                if e["event"] == "lost_execution"] == [("b", "a")], "b took the key over"
        assert not [e for e in events if e["event"] == "deliver_start" and e["node"] == "b"
                    and e["task"] == "digest/k"], "b found nothing left to deliver"
        assert no_keys(client) and client.batches() == []
