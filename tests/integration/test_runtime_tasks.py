"""Rows created by a process without the handler run on nodes that have it (real processes)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from dbscheduler import Client, FixedRate
from dbscheduler.errors import TaskNotFound
from dbscheduler.migrate import upgrade
from tests.harness.node import read_events

NODE = Path(__file__).with_name("runtime_node.py")


@pytest.fixture
def cluster(db_url: str, table_name: str, tmp_path: Path) -> Iterator[tuple[Client, Path]]:
    client = Client(db_url, table=table_name)
    upgrade(client.engine, table_name)
    out = tmp_path / "runs.jsonl"
    nodes = [
        subprocess.Popen([sys.executable, str(NODE), db_url, table_name, f"n{i}", str(out)],
                         stdout=subprocess.PIPE, text=True)
        for i in range(3)
    ]
    try:
        for p in nodes:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        yield client, out
    finally:
        for p in nodes:
            p.terminate()
        for p in nodes:
            p.wait(timeout=30)
        client.close()


def runs(out: Path) -> list[dict[str, object]]:
    return read_events(out)


def wait_for(check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_runtime_rows_run_with_their_data(cluster: tuple[Client, Path]) -> None:
    client, out = cluster
    now = client.db_now()
    client.schedule_once("once-1", "record", now, data={"n": 1})
    client.schedule("every", "record", FixedRate(0.5), data={"v": 1})

    wait_for(lambda: sum(r["name"] == "every" for r in runs(out)) >= 2)
    wait_for(lambda: not any(i.name == "once-1" for i in client.tasks()))
    # Two more runs of "every": the nodes have picked since, a duplicate run would show.
    done = sum(r["name"] == "every" for r in runs(out))
    wait_for(lambda: sum(r["name"] == "every" for r in runs(out)) >= done + 2)
    once = [r for r in runs(out) if r["name"] == "once-1"]
    assert [r["data"] for r in once] == [{"n": 1}], "a one-off job runs exactly once"

    before = client.info("every").total_attempt
    client.schedule("every", "record", FixedRate(0.5), data={"v": 2})
    assert client.info("every").total_attempt >= before, "counters are kept"
    wait_for(lambda: any(r["name"] == "every" and r["data"] == {"v": 2} for r in runs(out)))

    assert client.unschedule("every") is True
    with pytest.raises(TaskNotFound):
        client.info("every")
    # Another task marks the nodes' picks since: after two of its runs, a run of "every"
    # already under way has written its line; after three more, a new one would show.
    client.schedule("tick", "record", FixedRate(0.3))

    def ticks() -> int:
        return sum(r["name"] == "tick" for r in runs(out))

    wait_for(lambda: ticks() >= 2)
    count = sum(r["name"] == "every" for r in runs(out))
    wait_for(lambda: ticks() >= 5)
    assert sum(r["name"] == "every" for r in runs(out)) == count, "unschedule stops it"
    client.unschedule("tick")
    assert client.unschedule("every") is False


def test_a_row_without_a_handler_waits_and_is_shown(cluster: tuple[Client, Path]) -> None:
    client, out = cluster
    client.schedule_once("orphan", "nobody-has-this", client.db_now() - timedelta(minutes=5))
    client.schedule_once("known", "record", client.db_now())
    wait_for(lambda: any(r["name"] == "known" for r in runs(out)))
    info = client.info("orphan")
    assert (info.handler, info.total_attempt, info.locked_by) == ("nobody-has-this", 0, None)
