"""Batch keys live on the batches page: the tasks listing of the API and the Tasks page
leave them out unless asked (``kind=all``), and say how many they left out."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from dbscheduler import FixedRate, Scheduler
from dbscheduler._engine.history import PRUNE_TASK
from dbscheduler.web import create_app


@pytest.fixture
def http(migrated: tuple[str, str]) -> Iterator[TestClient]:
    url, table = migrated
    node = Scheduler(url, table=table, node_id="kinds-node", lease=3, poll_interval=0.2)
    node.add("nightly", lambda ctx: None, schedule=FixedRate(3600))
    node.batch_handler("digest")(lambda ctx, items: None)
    node.handler("mail")(lambda ctx: None)
    node.start()
    later = time.time() + 3600
    try:
        for key in ("ann@example.com", "bob@example.com"):
            node.push(key, {"n": 1}, handler="digest", ontime=later)
        # A runtime task whose name merely looks like a key is a task.
        node.schedule("mail/weekly", "mail", FixedRate(600))
        with TestClient(create_app(url, table=table)) as client:
            yield client
    finally:
        node.shutdown(timeout=5)


def test_batch_keys_only_when_asked(http: TestClient) -> None:
    listed = http.get("/api/tasks").json()
    assert {t["name"] for t in listed["tasks"]} == {"mail/weekly", "nightly", PRUNE_TASK}
    assert listed["batch_keys"] == 2 and listed["counts"]["all"] == 3
    every = http.get("/api/tasks", params={"kind": "all"}).json()
    assert {t["name"] for t in every["tasks"]} == {
        "mail/weekly", "nightly", PRUNE_TASK, "digest/ann@example.com",
        "digest/bob@example.com"}
    assert every["batch_keys"] == 0 and every["total"] == 5
    assert http.get("/api/tasks", params={"kind": "keys"}).status_code == 422

    page = http.get("/").text
    assert "digest/ann@example.com" not in page and "nightly" in page
    assert "2 batch keys not listed" in page and "kind=all" in page
    both = http.get("/", params={"kind": "all"}).text
    assert "digest/ann@example.com" in both and "tasks only" in both
