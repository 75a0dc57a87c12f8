"""Three real node processes drain a backlog of one-off jobs all due at one instant, next to
pending jobs that are not due: every due job runs exactly once, none is left, no pending one
runs, and each node runs a share (the scale benchmark, ``bench/probes/backlog.py``, at CI size)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from dbscheduler import Client
from dbscheduler.migrate import upgrade
from tests.harness.node import read_events

NODE = Path(__file__).with_name("drain_node.py")
DUE = 2_000
PENDING = 1_000
NODES = 3


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def nodes(db_url: str, table_name: str, tmp_path: Path) -> Iterator[tuple[Client, Path]]:
    client = Client(db_url, table=table_name)
    upgrade(client.engine, table_name)
    out = tmp_path / "runs.jsonl"
    procs = [
        subprocess.Popen([sys.executable, str(NODE), db_url, table_name, f"n{i}", str(out)],
                         stdout=subprocess.PIPE, text=True)
        for i in range(NODES)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        yield client, out
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
        client.close()


def test_three_nodes_drain_a_backlog_each_job_exactly_once(
    nodes: tuple[Client, Path]
) -> None:
    client, out = nodes
    now = client.db_now()
    client.schedule_once_many([(f"later-{i}", "drain", now + timedelta(days=1), None)
                               for i in range(PENDING)])
    client.schedule_once_many([(f"job-{i}", "drain", now, None) for i in range(DUE)])

    deadline = time.monotonic() + 120
    while client.counts(timedelta(minutes=5)).total > PENDING:
        assert time.monotonic() < deadline, "the backlog was not drained"
        time.sleep(0.1)
    # A job's row is deleted only after its handler returned: its line is written.
    runs = read_events(out)
    names = Counter(r["name"] for r in runs)
    assert [n for n, k in names.items() if k > 1] == [], "a job ran twice"
    assert set(names) == {f"job-{i}" for i in range(DUE)}, "every due job ran, no pending one"
    per_node = Counter(r["node"] for r in runs)
    assert sorted(per_node) == [f"n{i}" for i in range(NODES)], f"each node ran some: {per_node}"
    assert client.counts(timedelta(minutes=5)).total == PENDING, "the pending jobs are kept"
