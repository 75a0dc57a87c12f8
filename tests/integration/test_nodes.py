"""The node registry on real databases: nodes write their rows with their heartbeat, the
client reads who is alive and what each runs, long-gone nodes are pruned, and a handler no
node has is warned about with a suggestion."""

from __future__ import annotations

import json
import logging
import os
import threading
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from dbscheduler import Client, FixedRate, Scheduler, TaskContext
from dbscheduler.table import make_nodes_table
from tests.unit.test_cli import invoke
from tests.web.conftest import wait_for


def _stale_row(node_id: str, age: timedelta) -> dict[str, object]:
    seen = datetime.now(timezone.utc) - age
    return {"node_id": node_id, "host": "old-host", "pid": 1, "version": "0.0.1",
            "tags": "[]", "handlers": '["retired"]', "started_at": seen, "last_seen": seen,
            "running": 0}


def test_nodes_list_who_is_alive_and_what_each_runs(
    migrated: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    url, table = migrated
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.insert(make_nodes_table(table)), [
            _stale_row("gone-node", timedelta(minutes=2)),
            _stale_row("long-gone-node", timedelta(days=8)),
        ])
    engine.dispose()
    release = threading.Event()
    a = Scheduler(url, table=table, node_id="node-a", tags=["gpu"], lease=3, poll_interval=0.2)
    b = Scheduler(url, table=table, node_id="node-b", lease=3, poll_interval=0.2)

    def hold(ctx: TaskContext) -> None:
        release.wait(20)

    a.add("hold", hold, schedule=FixedRate(3600))
    a.handler("mail")(lambda ctx: None)
    b.handler("digest")(lambda ctx: None)
    with Client(url, table=table) as client:
        a.start()
        b.start()
        try:
            a.trigger("hold")
            def registered() -> bool:
                found = {n.node_id: n for n in client.nodes()}
                held = found.get("node-a")
                return "node-b" in found and held is not None and held.tasks == ["hold"] \
                    and held.running == 1
            wait_for(registered, what="both nodes, node-a running 'hold'")
            found = {n.node_id: n for n in client.nodes()}
            assert "long-gone-node" not in found  # pruned at the first node's start
            assert not found["gone-node"].alive and found["gone-node"].handlers == ["retired"]
            node_a = found["node-a"]
            assert node_a.alive and node_a.pid == os.getpid() and node_a.version
            assert node_a.tags == ["gpu", "node-a"] and node_a.handlers == ["mail"]
            assert found["node-b"].handlers == ["digest"] and found["node-b"].tasks == []
            assert node_a.to_dict()["last_seen"] == node_a.last_seen.isoformat()

            assert client.handler_warning("mail") is None
            assert client.handler_warning("retired") is None  # a node of the last day has it
            assert client.handler_warning("mial") == (
                "no live or recent node has the handler 'mial' (did you mean 'mail'?)")
            with caplog.at_level(logging.WARNING, logger="dbscheduler.client"):
                client.schedule("typo", "mial", FixedRate(60))
                client.push("k", 1, handler="digets")
            warned = [r.getMessage() for r in caplog.records if r.name == "dbscheduler.client"]
            assert any("'mial' (did you mean 'mail'?)" in m for m in warned), warned
            assert any("'digets' (did you mean 'digest'?)" in m for m in warned), warned
        finally:
            release.set()
            a.shutdown(timeout=5)
            b.shutdown(timeout=5)


def test_no_warning_before_any_node_registered(migrated: tuple[str, str],
                                               caplog: pytest.LogCaptureFixture) -> None:
    url, table = migrated
    with Client(url, table=table) as client, caplog.at_level(logging.WARNING):
        client.schedule("early", "mail", FixedRate(60))
        assert client.handler_warning("mail") is None
        assert client.nodes() == []
    assert not [r for r in caplog.records if r.name == "dbscheduler.client"]


def test_cli_lists_nodes_and_warns_of_a_handler_no_node_has(migrated: tuple[str, str]) -> None:
    url, table = migrated
    db = ["--url", url, "--table", table]
    node = Scheduler(url, table=table, node_id="cli-node", lease=3, poll_interval=0.2)
    node.handler("send-mail")(lambda ctx: None)
    node.start()
    try:
        with Client(url, table=table) as client:
            wait_for(lambda: [n.node_id for n in client.nodes()] == ["cli-node"],
                     what="the node's row")
        listed = json.loads(invoke("nodes", "--json", *db).stdout)
        assert [(n["node_id"], n["alive"], n["handlers"]) for n in listed] == [
            ("cli-node", True, ["send-mail"])]
        shown = invoke("nodes", *db, env={"COLUMNS": "200"}).stdout
        assert "cli-node" in shown and "alive" in shown and "1 node(s), 1 alive" in shown
        typo = invoke("schedule", "m-1", "--handler", "send-mial", "--every", "30", *db)
        assert typo.exit_code == 0, typo.output
        assert ("warning: no live or recent node has the handler 'send-mial' "
                "(did you mean 'send-mail'?)") in typo.stderr
        fine = invoke("schedule", "m-2", "--handler", "send-mail", "--every", "30", *db)
        assert fine.exit_code == 0 and "warning" not in fine.stderr
    finally:
        node.shutdown(timeout=5)
