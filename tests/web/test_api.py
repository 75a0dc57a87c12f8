"""The REST API under ``/api`` against a running node on SQLite, PostgreSQL and MariaDB.

The app reads and writes through its own :class:`~dbscheduler.Client`, as a separate web
process would; every change is checked in the database through the node's scheduler.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from dbscheduler import FixedRate, Scheduler
from dbscheduler._engine.history import PRUNE_TASK
from dbscheduler.cli import cli
from dbscheduler.web import create_app
from tests.web.conftest import ODD_NAMES, WITH_MARIADB, Node, wait_for

USER_NAMES = ["nightly-report", "every-5-minutes", "cleanup", "slow", "broken", *ODD_NAMES]
ALL_NAMES = sorted([*USER_NAMES, PRUNE_TASK])
"""Every row the node writes: its tasks and dbscheduler's own pruning task, which operators
see in every listing like any other."""


def path(name: str, suffix: str = "") -> str:
    return f"/api/tasks/{quote(name, safe='')}{suffix}"


@pytest.fixture
def http(node: Node) -> Iterator[TestClient]:
    with TestClient(create_app(node.url, table=node.table)) as client:
        yield client


def names(response: object) -> list[str]:
    body = response.json()  # type: ignore[attr-defined]
    return [task["name"] for task in body["tasks"]]


def add_orphan(node: Node, name: str = "orphan") -> None:
    """A row no running node registers (its node is gone), due two minutes ago: overdue."""
    other = Scheduler(node.url, table=node.table, node_id="gone")
    other.add(name, lambda ctx: None, schedule=FixedRate(3600))
    other.start()
    other.shutdown(timeout=1)
    other.reschedule(name, other.client.db_now() - timedelta(minutes=2))
    other.engine.dispose()


def quiet_listing(node: Node, http: TestClient) -> tuple[dict[str, Any], list[Any]]:
    """The API's listing and the CLI's ``list --json``, read while no execution started or
    ended: the node's cron task fires every five minutes, maybe between two reads."""
    def read() -> tuple[dict[str, Any], list[Any]]:
        return http.get("/api/tasks").json(), json.loads(CliRunner().invoke(
            cli, ["list", "--json", "--url", node.url, "--table", node.table]).output)

    for _ in range(50):
        listing, cli_listing = read()
        again = http.get("/api/tasks").json()
        if listing["tasks"] == again["tasks"] and not listing["counts"]["running"]:
            return listing, cli_listing
        time.sleep(0.1)
    raise AssertionError(f"the listing never held still: {listing}")


# -- reading ----------------------------------------------------------------------------------


@WITH_MARIADB
def test_list_is_the_cli_json_with_pagination_counts_and_filters(
    node: Node, http: TestClient
) -> None:
    listing, cli_listing = quiet_listing(node, http)
    assert listing["tasks"] == cli_listing
    assert [t["name"] for t in listing["tasks"]] == ALL_NAMES
    assert [t["builtin"] for t in listing["tasks"]] == [n == PRUNE_TASK for n in ALL_NAMES]
    assert listing["total"] == len(ALL_NAMES) == len(USER_NAMES) + 1
    assert listing["counts"] == {"all": 12, "running": 0, "paused": 0, "failing": 0,
                                 "overdue": 0, "idle": 12}

    page = http.get("/api/tasks", params={"limit": 3, "offset": 3}).json()
    assert [t["name"] for t in page["tasks"]] == ALL_NAMES[3:6]
    assert (page["total"], page["limit"], page["offset"]) == (12, 3, 3)

    assert names(http.get("/api/tasks", params={"q": "REPORT"})) == [
        "nightly-report", "reports/daily/eu"]
    assert names(http.get("/api/tasks", params={"q": "fixed-delay"})) == ["cleanup"]

    node.start_slow()
    node.run_failing()
    node.scheduler.pause("cleanup")
    add_orphan(node)
    # The node's cron task may fire meanwhile: it runs for a moment, then is idle again.
    wait_for(lambda: names(http.get("/api/tasks", params={"state": "running"})) == ["slow"],
             what="only 'slow' running")
    assert names(http.get("/api/tasks", params={"state": "failing"})) == ["broken"]
    assert names(http.get("/api/tasks", params={"state": "paused"})) == ["cleanup"]
    # A node may take a row it does not know for a moment (and give it back at once): wait.
    wait_for(lambda: names(http.get("/api/tasks", params={"state": "overdue"})) == ["orphan"],
             what="orphan to show as overdue")
    idle = names(http.get("/api/tasks", params={"state": "idle", "limit": 1000}))
    assert set(idle) == set(ALL_NAMES) - {"slow", "broken", "cleanup"}
    expected = {"all": 13, "running": 1, "paused": 1, "failing": 1, "overdue": 1, "idle": 9}
    wait_for(lambda: http.get("/api/tasks").json()["counts"] == expected, what=str(expected))


def test_one_task_and_its_next_ten_fire_times(node: Node, http: TestClient) -> None:
    info = node.scheduler.info("nightly-report")
    assert http.get(path("nightly-report")).json() == info.to_dict()

    body = http.get(path("nightly-report", "/upcoming")).json()
    times = [datetime.fromisoformat(t) for t in body["times"]]
    assert len(times) == 10
    assert times[0] == info.next_process_at
    berlin = [t.astimezone(ZoneInfo("Europe/Berlin")) for t in times]
    assert {(t.hour, t.minute) for t in berlin} == {(3, 0)}
    assert [b.date() - a.date() for a, b in itertools.pairwise(berlin)] == [
        timedelta(days=1)] * 9

    rate = http.get(path("slow", "/upcoming"), params={"n": 3}).json()["times"]
    steps = {datetime.fromisoformat(b) - datetime.fromisoformat(a)
             for a, b in itertools.pairwise(rate)}
    assert len(rate) == 3 and steps == {timedelta(hours=1)}

    delay = http.get(path("cleanup", "/upcoming")).json()
    assert "assuming each run takes no time" in delay["note"]

    node.start_slow()
    running = http.get(path("slow", "/upcoming")).json()
    assert running["times"] == [] and "running now" in running["note"]


def test_health_answers_200_with_the_database_clock(node: Node, http: TestClient) -> None:
    body = http.get("/api/health").json()
    assert body["ok"] is True and body["tasks"] == len(ALL_NAMES) and body["tasks_exact"] is True
    assert abs(datetime.fromisoformat(body["db_now"]) - node.scheduler.client.db_now()) < \
        timedelta(seconds=5)


def test_health_is_503_with_the_reason_when_the_table_is_missing(node: Node) -> None:
    with TestClient(create_app(node.url, table="no_such_table_here")) as client:
        response = client.get("/api/health")
        assert response.status_code == 503
        assert response.json()["ok"] is False
        assert "dbscheduler migrate" in response.json()["reason"]
        listing = client.get("/api/tasks")
        assert listing.status_code == 503
        assert listing.json()["error"] == "schema_missing"
        page = client.get("/")
        assert page.status_code == 503 and "dbscheduler migrate" in page.text


# -- writing ----------------------------------------------------------------------------------


@WITH_MARIADB
def test_single_actions_change_the_row(node: Node, http: TestClient) -> None:
    ops = node.scheduler
    before = ops.info("cleanup").reenqueue_attempt
    response = http.post(path("cleanup", "/trigger"))
    assert response.status_code == 200
    wait_for(lambda: ops.info("cleanup").reenqueue_attempt == before + 1,
             what="the node to run the triggered task")

    assert http.post(path("cleanup", "/pause")).json()["paused"] is True
    assert ops.info("cleanup").paused is True
    assert http.post(path("cleanup", "/resume")).json()["paused"] is False
    assert ops.info("cleanup").paused is False

    at = "2031-05-06T07:08:09+02:00"
    body = http.post(path("cleanup", "/reschedule"), json={"at": at}).json()
    expected = datetime(2031, 5, 6, 5, 8, 9, tzinfo=timezone.utc)
    assert datetime.fromisoformat(body["next_process_at"]) == expected
    assert ops.info("cleanup").next_process_at == expected

    cancelled = http.post(path("cleanup", "/cancel")).json()
    assert cancelled["cancelled"] is False

    assert http.delete(path("cleanup")).json() == {"deleted": "cleanup"}
    assert "cleanup" not in [i.name for i in ops.tasks()]
    assert http.get(path("cleanup")).status_code == 404


def test_a_running_task_answers_409_and_can_be_cancelled_or_force_deleted(
    node: Node, http: TestClient
) -> None:
    node.start_slow()
    for response in (
        http.post(path("slow", "/trigger")),
        http.post(path("slow", "/reschedule"), json={"at": "2031-01-01T00:00:00Z"}),
        http.delete(path("slow")),
    ):
        assert response.status_code == 409
        assert response.json()["error"] == "running"
        assert "web-test-node" in response.json()["message"]
    body = http.post(path("slow", "/cancel")).json()
    assert body["cancelled"] is True and body["task"]["stop_requested"] is True
    assert node.slow_stopped.wait(10), "the running execution never saw the cancel"

    wait_for(lambda: not node.scheduler.info("slow").running, what="the cancelled run to end")
    assert node.scheduler.info("slow").last_status == "cancelled"
    node.slow_started.clear()
    node.start_slow()
    assert http.delete(path("slow"), params={"force": "true"}).status_code == 200
    assert "slow" not in [i.name for i in node.scheduler.tasks()]


def test_bulk_operations_by_names_and_by_filter(node: Node, http: TestClient) -> None:
    ops = node.scheduler
    result = http.post("/api/tasks/pause",
                       json={"names": ["cleanup", "every-5-minutes", "missing"]}).json()
    assert result["done"] == ["cleanup", "every-5-minutes"]
    assert [(f["name"], f["error"]) for f in result["failed"]] == [("missing", "not_found")]
    assert ops.info("cleanup").paused and ops.info("every-5-minutes").paused

    result = http.post("/api/tasks/resume", json={"state": "paused"}).json()
    assert sorted(result["done"]) == ["cleanup", "every-5-minutes"]
    assert not ops.info("cleanup").paused

    node.start_slow()
    result = http.post("/api/tasks/trigger", json={"names": ["slow", "nightly-report"]}).json()
    assert result["done"] == ["nightly-report"]
    assert [(f["name"], f["error"]) for f in result["failed"]] == [("slow", "running")]

    result = http.post("/api/tasks/pause", json={"q": "report"}).json()
    assert sorted(result["done"]) == ["nightly-report", "reports/daily/eu"]

    for bad in ({}, {"names": ["a"], "state": "paused"}, {"names": "a"}, {"state": "busy"},
                {"names": ["a"], "extra": 1}):
        response = http.post("/api/tasks/pause", json=bad)
        assert response.status_code == 422, bad
        assert response.json()["error"] == "invalid"


# -- errors and names ------------------------------------------------------------------------


def test_errors_are_json_with_a_code_and_a_message(node: Node, http: TestClient) -> None:
    for method, url in (("GET", path("nope")), ("GET", path("nope", "/upcoming")),
                        ("POST", path("nope", "/trigger")), ("POST", path("nope", "/pause")),
                        ("POST", path("nope", "/resume")), ("POST", path("nope", "/cancel")),
                        ("DELETE", path("nope")), ("GET", path(" padded ")),
                        ("GET", "/api/no/such/route")):
        response = http.request(method, url)
        assert response.status_code == 404, (method, url)
        assert response.json()["error"] == "not_found"
        assert response.json()["message"]
    response = http.post(path("nope", "/reschedule"), json={"at": "2031-01-01T00:00:00Z"})
    assert response.status_code == 404

    bad = [
        http.post(path("cleanup", "/reschedule"), json={"at": "2031-01-01T00:00:00"}),
        http.post(path("cleanup", "/reschedule"), json={"at": "soon"}),
        http.post(path("cleanup", "/reschedule"), content=b"{not json",
                  headers={"content-type": "application/json"}),
        http.get("/api/tasks", params={"limit": 0}),
        http.get("/api/tasks", params={"state": "sleepy"}),
        http.get(path("cleanup", "/upcoming"), params={"n": "ten"}),
    ]
    for response in bad:
        assert response.status_code == 422, response.url
        assert response.json()["error"] == "invalid"
        assert "Traceback" not in response.text
    assert http.patch(path("cleanup")).status_code == 405
    assert http.patch(path("cleanup")).json()["error"] == "method_not_allowed"
    no_body = http.put(path("cleanup"))
    assert no_body.status_code == 422 and "Traceback" not in no_body.text


@WITH_MARIADB
def test_any_name_works_percent_encoded_in_the_api_and_the_pages(
    node: Node, http: TestClient
) -> None:
    for name in ODD_NAMES:
        assert http.get(path(name)).json()["name"] == name
        assert len(http.get(path(name, "/upcoming")).json()["times"]) == 10
        assert http.post(path(name, "/pause")).json()["paused"] is True
        assert node.scheduler.info(name).paused is True
        assert http.post(path(name, "/resume")).json()["paused"] is False
        page = http.get(f"/tasks/{quote(name, safe='')}")
        assert page.status_code == 200, name
        partial = http.get(f"/partials/task/{quote(name, safe='')}")
        assert partial.status_code == 200, name
    listing = http.get("/").text
    assert "<script>alert(1)</script>" not in listing
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in listing
    assert f'href="/tasks/{quote("100% done?#frag", safe="")}"' in listing
    page = http.get(f"/tasks/{quote('<script>alert(1)</script>', safe='')}").text
    assert "<script>alert(1)</script>" not in page


def test_a_name_ending_like_a_route_is_read_whole_when_its_slash_is_encoded(
    migrated: tuple[str, str],
) -> None:
    url, table = migrated
    scheduler = Scheduler(url, table=table)
    for name in ("a", "a/upcoming", "b/pause", "c/runs"):
        scheduler.add(name, lambda ctx: None, schedule=FixedRate(3600))
    scheduler.start()
    scheduler.shutdown(timeout=1)
    with TestClient(create_app(url, table=table)) as http:
        assert http.get("/api/tasks/a%2Fupcoming").json()["name"] == "a/upcoming"
        assert "times" in http.get("/api/tasks/a/upcoming").json()
        assert http.get("/api/tasks/a%2Fupcoming/upcoming").json()["name"] == "a/upcoming"
        refused = http.post("/api/tasks/b%2Fpause")
        assert refused.status_code == 405 and refused.json()["error"] == "method_not_allowed"
        assert not scheduler.info("b/pause").paused
        assert http.post("/api/tasks/b%2Fpause/pause").json()["paused"] is True
        assert http.get("/api/tasks/c%2Fruns").json()["name"] == "c/runs"
        assert http.get("/api/tasks/c%2Fruns/runs").json() == {
            "runs": [], "limit": 100, "next_cursor": None}
    scheduler.engine.dispose()


@WITH_MARIADB
def test_runs_of_every_task_and_of_one_are_the_cli_json(node: Node, http: TestClient) -> None:
    node.run_failing()
    for name in ODD_NAMES:
        node.scheduler.trigger(name)
    wait_for(lambda: all(node.scheduler.runs(name) for name in ODD_NAMES), what="their runs")
    everything = http.get("/api/runs").json()
    assert everything == {"runs": [r.to_dict() for r in node.scheduler.runs()], "limit": 100,
                          "next_cursor": None}
    cli_json = CliRunner().invoke(
        cli, ["runs", "--json", "--limit", "100", "--url", node.url, "--table", node.table]
    ).output
    assert everything["runs"] == json.loads(cli_json)
    failed = http.get("/api/runs", params={"status": "error"}).json()["runs"]
    assert [(r["name"], r["error"]) for r in failed] == [
        ("broken", "RuntimeError: upstream answered 503")]
    two = http.get("/api/runs", params=[("status", "error"), ("status", "success"),
                                        ("limit", "2")]).json()
    assert [r["id"] for r in two["runs"]] == [r.id for r in node.scheduler.runs(limit=2)]
    for name in ODD_NAMES:
        (run,) = http.get(path(name, "/runs")).json()["runs"]
        assert run["name"] == name and run["status"] == "success"
    since = node.scheduler.runs("broken")[0].finished_at
    later = http.get(path("broken", "/runs"), params={"since": since.isoformat()}).json()
    assert [r["name"] for r in later["runs"]] == ["broken"]
    assert http.get(path("no-such-task", "/runs")).json()["runs"] == []
    for bad in ({"status": "failed"}, {"since": "2026-03-29T00:00:00"}, {"limit": "0"}):
        response = http.get("/api/runs", params=bad)
        assert response.status_code == 422, bad
        assert response.json()["error"] == "invalid"


def test_metrics_serves_the_process_registry(node: Node, http: TestClient) -> None:
    from prometheus_client import REGISTRY, Counter

    counter = Counter("dbscheduler_web_test_probe", "a probe of the /metrics route")
    try:
        counter.inc(3)
        response = http.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        assert "dbscheduler_web_test_probe_total 3.0" in response.text
    finally:
        REGISTRY.unregister(counter)


# -- runtime tasks ------------------------------------------------------------------------------


@WITH_MARIADB
def test_put_creates_and_updates_a_runtime_task_that_a_node_runs(
    node: Node, http: TestClient
) -> None:
    name = "reports/customer 42 ✓"
    created = http.put(path(name), json={
        "handler": "echo", "schedule": "cron 0 8 * * 1-5 Europe/Berlin", "data": {"c": 42}})
    assert created.status_code == 200, created.text
    task = created.json()
    assert (task["name"], task["handler"], task["data"], task["schedule"]) == (
        name, "echo", {"c": 42}, "cron 0 8 * * 1-5 Europe/Berlin")
    assert task.pop("warning") is None  # the node has the handler
    assert http.get(path(name)).json() == task

    # Updating: new schedule and data, counters kept; a past one-off runs at once.
    node.scheduler.reschedule(name, node.scheduler.client.db_now() + timedelta(hours=5))
    attempts = node.scheduler.info(name).total_attempt
    updated = http.put(path(name), json={
        "handler": "echo", "schedule": "once 2020-01-01T00:00:00Z", "data": [1, "two"]})
    assert updated.status_code == 200, updated.text
    assert updated.json()["total_attempt"] == attempts
    wait_for(lambda: (name, [1, "two"]) in node.echoed, what="the node to run the new data")


@WITH_MARIADB
def test_put_with_bad_input_is_422_naming_the_field_and_writes_nothing(
    node: Node, http: TestClient
) -> None:
    before = http.get("/api/tasks").json()["total"]
    cases = [
        ({"handler": "echo", "schedule": "weekly on mondays"}, "schedule"),
        ({"handler": "echo", "schedule": "dynamic app.next_time"}, "schedule"),
        ({"handler": "echo", "schedule": "cron 61 * * * *"}, "schedule"),
        ({"handler": "echo", "schedule": "fixed-rate 0s"}, "schedule"),
        ({"handler": "", "schedule": "fixed-rate 60s"}, "handler"),
        ({"handler": "echo", "schedule": "fixed-rate 60s", "data": "x" * 1_100_000}, "data"),
        ({"handler": "echo", "schedule": "fixed-rate 60s", "color": "red"}, "color"),
        ({"schedule": "fixed-rate 60s"}, "handler"),
    ]
    for body, field in cases:
        answer = http.put(path("new-one"), json=body)
        assert answer.status_code == 422, (body, answer.text)
        error = answer.json()
        assert error["error"] in ("invalid", "validation_error"), error
        assert field in error["message"], (field, error)
    assert http.put(path("x" * 300), json={"handler": "echo",
                                           "schedule": "fixed-rate 60s"}).status_code == 422
    assert http.get("/api/tasks").json()["total"] == before
    assert http.get(path("new-one")).status_code == 404
