"""``PUT /api/tasks`` with a list: bulk creation over REST (``Client.schedule_many``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from dbscheduler import Client
from dbscheduler.web import create_app


@pytest.fixture
def http(migrated: tuple[str, str]) -> Iterator[TestClient]:
    url, table = migrated
    with TestClient(create_app(url, table=table)) as client:
        yield client


def test_a_list_creates_many_tasks_and_a_bad_item_writes_nothing(
    http: TestClient, migrated: tuple[str, str]
) -> None:
    url, table = migrated
    items = [{"name": f"r/{i}", "handler": "report", "schedule": "fixed-rate 60s",
              "data": {"i": i}, "options": {"priority": i % 3}} for i in range(1200)]
    items.append({"name": "job", "handler": "mail", "schedule": "once 2030-01-01T00:00:00Z"})
    done = http.put("/api/tasks", json=items)
    assert done.status_code == 200, done.text
    assert done.json() == {"written": 1201}
    again = http.put("/api/tasks", json=items)  # the same rows again
    assert again.json() == {"written": 1201}
    with Client(url, table=table) as client:
        assert client.counts().total == 1201
        assert client.info("r/7").data == {"i": 7} and client.info("r/7").options == {
            "priority": 1}
        assert client.info("job").schedule == "once 2030-01-01T00:00:00+00:00"
    for bad, fragment in (
        ([{"name": "x", "handler": "h", "schedule": "weekly"}], "item 0 ('x'): schedule"),
        ([{"name": "y", "handler": "h", "schedule": "fixed-rate 60s"},
          {"name": "", "handler": "h", "schedule": "fixed-rate 60s"}], "item 1 (''): name"),
        ([{"name": "z", "handler": "h", "schedule": "fixed-rate 60s", "color": "red"}],
         "color"),
    ):
        answer = http.put("/api/tasks", json=bad)
        assert answer.status_code == 422, answer.text
        assert fragment in answer.json()["message"], answer.json()
    with Client(url, table=table) as client:
        assert client.counts().total == 1201
