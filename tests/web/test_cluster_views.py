"""The operator's cluster views over HTTP: the nodes and groups of the API and the pages, why
a task waits, and the warning a runtime task for an unknown handler gets."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from dbscheduler import FixedRate, Scheduler, TaskContext
from dbscheduler.migrate import upgrade
from dbscheduler.web import create_app
from tests.web.conftest import wait_for


@pytest.fixture
def cluster(migrated: tuple[str, str]) -> Iterator[tuple[Scheduler, TestClient]]:
    """A node running ``hold`` of the full group ``reports`` (limit 1) while ``queued`` of
    the same group is due, and a handler ``echo``."""
    url, table = migrated
    release = threading.Event()
    node = Scheduler(url, table=table, node_id="views-node", tags=["eu"], lease=3,
                     poll_interval=0.2)

    def hold(ctx: TaskContext) -> None:
        release.wait(300)  # until the test ends (it sets the event): a slow machine takes long

    node.add("hold", hold, schedule=FixedRate(3600), group="reports")
    node.add("queued", lambda ctx: None, schedule=FixedRate(3600), group="reports")
    node.handler("echo")(lambda ctx: None)
    node.start()
    node.client.set_group_limit("reports", 1)
    node.trigger("hold")
    wait_for(lambda: node.info("hold").running, what="hold to run")
    node.trigger("queued")
    try:
        with TestClient(create_app(url, table=table)) as http:
            yield node, http
    finally:
        release.set()
        node.shutdown(timeout=5)


def test_nodes_and_groups_in_the_api_and_the_pages(
        cluster: tuple[Scheduler, TestClient]) -> None:
    _, http = cluster
    wait_for(lambda: http.get("/api/nodes").json()["nodes"][0]["tasks"] == ["hold"],
             what="the node's row to show 'hold'")
    (listed,) = http.get("/api/nodes").json()["nodes"]
    assert listed["node_id"] == "views-node" and listed["alive"] is True
    assert listed["handlers"] == ["echo"] and listed["tags"] == ["eu", "views-node"]
    assert "last_seen" in listed and "started_at" in listed

    assert http.get("/api/groups").json() == {
        "groups": [{"group": "reports", "limit": 1, "running": 1, "tasks": 2}]}

    nodes_page = http.get("/nodes").text
    assert "views-node" in nodes_page and "alive" in nodes_page and ">hold</a>" in nodes_page
    groups_page = http.get("/groups").text
    assert "reports" in groups_page and "1 / 1" in groups_page and ">queued</a>" in groups_page
    waiting = http.get(f"/tasks/{quote('queued', safe='')}").text
    assert "waiting for group reports (1/1 running)" in waiting
    running = http.get("/tasks/hold").text
    assert "waiting for group" not in running and "reports" in running


def test_put_warns_of_a_handler_no_node_has(cluster: tuple[Scheduler, TestClient]) -> None:
    _, http = cluster
    wait_for(lambda: http.get("/api/nodes").json()["nodes"], what="the node's row")
    typo = http.put("/api/tasks/r-1", json={"handler": "ecko", "schedule": "fixed-rate 60s"})
    assert typo.status_code == 200, typo.text
    assert typo.json()["warning"] == (
        "no live or recent node has the handler 'ecko' (did you mean 'echo'?)")
    fine = http.put("/api/tasks/r-2", json={"handler": "echo", "schedule": "fixed-rate 60s"})
    assert fine.status_code == 200 and fine.json()["warning"] is None


def test_api_docs_are_served_by_the_app_itself(cluster: tuple[Scheduler, TestClient]) -> None:
    _, http = cluster
    page = http.get("/api/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert 'data-openapi="/api/openapi.json"' in page.text
    assert "//" not in page.text.split("<body>")[1].replace("http://www.w3.org", "")
    bundle = http.get("/api/docs/assets/swagger-ui-bundle.js")
    assert bundle.status_code == 200 and "SwaggerUIBundle" in bundle.text
    assert "no-store" not in bundle.headers.get("cache-control", "")


def test_the_edit_page_is_for_admins_and_runtime_tasks(
        cluster: tuple[Scheduler, TestClient], migrated: tuple[str, str]) -> None:
    node, http = cluster
    node.schedule("mail/7", "echo", FixedRate(60), data={"to": "ann"})
    edit = http.get("/edit", params={"name": "mail/7"}).text
    assert 'id="task-form"' in edit and "&#34;to&#34;: &#34;ann&#34;" in edit
    assert 'id="f-name" name="name"' in edit and "readonly" in edit
    assert "Declared in code" in http.get("/edit", params={"name": "hold"}).text
    assert 'id="edit-task"' in http.get("/tasks/mail%2F7").text
    assert 'id="edit-task"' not in http.get("/tasks/hold").text
    preview = http.get("/api/schedules/preview", params={"schedule": "fixed-rate 60s", "n": 3})
    assert preview.json()["words"] == "every minute" and len(preview.json()["times"]) == 3
    bad = http.get("/api/schedules/preview", params={"schedule": "dynamic x"})
    assert bad.status_code == 422 and bad.json()["message"].startswith("schedule:")
    url, table = migrated
    with TestClient(create_app(url, table=table, read_only=True)) as viewer:
        page = viewer.get("/edit").text
        assert "Read-only" in page and 'id="task-form"' not in page
        assert 'id="new-task"' not in viewer.get("/").text


def test_an_unavailable_database_page_tries_again_by_itself(tmp_path: Path) -> None:
    with TestClient(create_app(f"sqlite:///{tmp_path / 'none.sqlite3'}")) as http:
        page = http.get("/")
    assert page.status_code == 503
    assert 'id="retry" data-retry-s="5"' in page.text


def test_a_body_that_is_not_utf8_json_is_a_documented_422(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    upgrade(sa.create_engine(url))
    with TestClient(create_app(url)) as http:
        for method, route in (("POST", "/api/tasks/pause"), ("PUT", "/api/tasks/x"),
                              ("POST", "/api/batches/drop"), ("POST", "/api/tasks/x/reschedule")):
            answer = http.request(method, route, content=b"\xff\xfe{",
                                  headers={"content-type": "application/json"})
            assert answer.status_code == 422, (route, answer.text)
            assert answer.json()["error"] == "invalid"
            assert "not UTF-8 JSON" in answer.json()["message"]
