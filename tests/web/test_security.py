"""Who may do what: cross-site requests, read-only mode, auth roles; and the app mounted
under a prefix in FastAPI and Starlette (the mount example included). SQLite only: none of
this touches the database differently from the API tests."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.routing import Mount

from dbscheduler import FixedRate, Scheduler
from dbscheduler._engine.history import PRUNE_TASK
from dbscheduler.cli import cli
from dbscheduler.web import Role, create_app
from dbscheduler.web.loopback import serve_app

ROOT = Path(__file__).resolve().parents[2]
OWN = "http://testserver"


@pytest.fixture
def backend() -> str:
    return "sqlite"


@pytest.fixture
def rows(migrated: tuple[str, str]) -> Iterator[Scheduler]:
    """A table with two idle tasks, written by a node that then stopped."""
    url, table = migrated
    scheduler = Scheduler(url, table=table)
    scheduler.add("alpha", lambda ctx: None, schedule=FixedRate(3600))
    scheduler.add("beta", lambda ctx: None, schedule=FixedRate(3600))
    scheduler.start()
    scheduler.shutdown(timeout=1)
    yield scheduler
    scheduler.engine.dispose()


def client(app: Any, **kwargs: Any) -> TestClient:
    return TestClient(app, **kwargs)


# -- cross-site requests -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "allowed"),
    [
        ({}, True),                                             # an API client: no browser
        ({"Origin": OWN}, True),
        ({"Origin": "http://evil.example"}, False),
        ({"Origin": "http://testserver.evil.example"}, False),
        ({"Origin": "https://testserver"}, False),             # another scheme is another site
        ({"Origin": "null"}, False),                            # sandboxed frames, file://
        ({"Referer": f"{OWN}/tasks/alpha"}, True),
        ({"Referer": "http://evil.example/page"}, False),
        ({"Origin": "http://evil.example", "Referer": f"{OWN}/"}, False),  # Origin decides
    ],
)
def test_state_changing_requests_from_another_site_are_refused(
    rows: Scheduler, headers: dict[str, str], allowed: bool
) -> None:
    http = client(create_app(rows))
    pause = http.post("/api/tasks/alpha/pause", headers=headers)
    delete = http.delete("/api/tasks/beta", headers=headers)
    if allowed:
        assert (pause.status_code, delete.status_code) == (200, 200)
        assert rows.info("alpha").paused
    else:
        for response in (pause, delete):
            assert response.status_code == 403
            assert response.json()["error"] == "cross_site"
        assert not rows.info("alpha").paused
        assert "beta" in [i.name for i in rows.tasks()]
    # Reading is never refused: a GET changes nothing.
    assert http.get("/api/tasks/alpha", headers=headers).status_code == 200


# -- read-only and roles ----------------------------------------------------------------------


def assert_no_controls(html: str) -> None:
    for control in ('data-action=', 'class="select"', 'id="bulkbar"', 'id="select-all"'):
        assert control not in html


def test_read_only_hides_controls_and_answers_403_to_changes(rows: Scheduler) -> None:
    http = client(create_app(rows, read_only=True))
    for response in (http.post("/api/tasks/alpha/pause"), http.post("/api/tasks/alpha/trigger"),
                     http.delete("/api/tasks/alpha"),
                     http.post("/api/tasks/pause", json={"names": ["alpha"]})):
        assert response.status_code == 403
        assert response.json() == {"error": "read_only",
                                   "message": "this dashboard is read-only"}
    assert not rows.info("alpha").paused
    assert [t["name"] for t in http.get("/api/tasks").json()["tasks"]] == [
        "alpha", "beta", PRUNE_TASK]
    listing, page = http.get("/").text, http.get("/tasks/alpha").text
    assert_no_controls(listing)
    assert_no_controls(page)
    assert "read-only" in listing
    # The same pages with full rights do show them: the check above can fail.
    full = client(create_app(rows))
    assert "data-action=" in full.get("/tasks/alpha").text
    assert 'class="select"' in full.get("/").text


def role_from_header(request: Request) -> Role | None:
    role = request.headers.get("x-role")
    return role if role in ("admin", "viewer") else None  # type: ignore[return-value]


async def async_role_from_header(request: Request) -> Role | None:
    return role_from_header(request)


def exploding_auth(request: Request) -> Role | None:
    raise RuntimeError("identity provider down")


@pytest.mark.parametrize("auth", [role_from_header, async_role_from_header])
def test_auth_roles_admin_viewer_and_nobody(rows: Scheduler, auth: Any) -> None:
    http = client(create_app(rows, auth=auth))
    admin, viewer = {"x-role": "admin"}, {"x-role": "viewer"}

    assert http.post("/api/tasks/alpha/pause", headers=admin).status_code == 200
    assert rows.info("alpha").paused
    assert "data-action=" in http.get("/tasks/alpha", headers=admin).text

    assert http.get("/api/tasks/alpha", headers=viewer).status_code == 200
    refused = http.post("/api/tasks/alpha/resume", headers=viewer)
    assert refused.status_code == 403 and refused.json()["error"] == "read_only"
    assert rows.info("alpha").paused
    assert_no_controls(http.get("/tasks/alpha", headers=viewer).text)

    for response in (http.get("/api/tasks"), http.post("/api/tasks/alpha/resume"),
                     http.get("/api/tasks", headers={"x-role": "root"})):
        assert response.status_code == 401
        assert response.json()["error"] == "unauthorized"
    page = http.get("/")
    assert page.status_code == 401 and "Sign-in required" in page.text
    assert http.get("/static/app.css").status_code == 401


def test_an_auth_callback_that_raises_answers_401_without_a_trace(rows: Scheduler) -> None:
    response = client(create_app(rows, auth=exploding_auth)).get("/api/tasks")
    assert response.status_code == 401
    assert "identity provider" not in response.text and "Traceback" not in response.text


def test_create_app_rejects_what_it_cannot_use(rows: Scheduler) -> None:
    with pytest.raises(ValueError, match="Scheduler, a Client or a database URL"):
        create_app(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pass table= only with a URL"):
        create_app(rows, table="other_table")
    assert create_app(rows.client, table=rows.table) is not None


# -- mounted under a prefix -------------------------------------------------------------------


LINK = re.compile(r'(?<![\w-])(?:href|src|action|data-root|data-partial)="([^"]*)"')


def assert_links_under(html: str, prefix: str) -> list[str]:
    links = LINK.findall(html)
    assert links, "the page has no links at all"
    for link in links:
        assert link.startswith(prefix), f"{link!r} escapes the mount {prefix!r}"
    return links


@pytest.mark.parametrize("framework", ["fastapi", "starlette"])
def test_mounted_under_a_prefix_every_link_and_asset_works(
    rows: Scheduler, framework: str
) -> None:
    prefix = "/ops/scheduler"
    dashboard = create_app(rows)
    host: Any
    if framework == "fastapi":
        host = FastAPI()
        host.mount(prefix, dashboard)
    else:
        host = Starlette(routes=[Mount(prefix, app=dashboard)])
    http = client(host)
    listing = http.get(prefix + "/")
    assert listing.status_code == 200
    for link in assert_links_under(listing.text, prefix + "/"):
        if "?" not in link:
            assert http.get(link).status_code == 200, link
    task = http.get(f"{prefix}/tasks/alpha")
    for link in assert_links_under(task.text, prefix + "/"):
        assert http.get(link).status_code == 200, link
    assert 'data-root="/ops/scheduler/"' in task.text
    assert http.post(f"{prefix}/api/tasks/alpha/pause",
                     headers={"Origin": OWN}).status_code == 200
    assert rows.info("alpha").paused
    missing = http.get(f"{prefix}/api/tasks/nope")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    page_404 = http.get(f"{prefix}/tasks/nope")
    assert page_404.status_code == 404
    assert_links_under(page_404.text, prefix + "/")
    assert http.get(f"{prefix}/api/openapi.json").json()["paths"]


def test_the_fastapi_mount_example_serves_the_dashboard_with_roles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DBSCHEDULER_URL", f"sqlite:///{tmp_path / 'example.sqlite3'}")
    monkeypatch.setenv("DASHBOARD_TOKEN", "s3cret")
    spec = importlib.util.spec_from_file_location(
        f"web_fastapi_{uuid.uuid4().hex[:6]}", ROOT / "examples" / "web_fastapi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with TestClient(module.app) as http:  # runs the lifespan: the scheduler starts
        names = [t["name"] for t in http.get("/scheduler/api/tasks").json()["tasks"]]
        assert names == [PRUNE_TASK, "nightly-report", "refresh-rates"]
        assert "every day at 03:00 Europe/Berlin" in http.get("/scheduler/").text
        refused = http.post("/scheduler/api/tasks/refresh-rates/pause")
        assert refused.status_code == 403
        done = http.post("/scheduler/api/tasks/refresh-rates/pause",
                         headers={"Authorization": "Bearer s3cret"})
        assert done.status_code == 200 and done.json()["paused"] is True
        assert http.get("/").json() == {"dashboard": "/scheduler/"}
    module.scheduler.engine.dispose()


# -- the command ------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::"])
def test_web_refuses_a_public_address_without_read_only_or_insecure(host: str) -> None:
    result = CliRunner().invoke(cli, ["web", "--host", host])
    assert result.exit_code == 2
    assert f"refusing to serve on {host}" in result.output
    assert "--read-only" in result.output and "--insecure" in result.output


def test_web_stops_with_exit_1_when_the_table_is_missing(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["web", "--url", f"sqlite:///{tmp_path / 'x.sqlite3'}", "--table", "missing_table"])
    assert result.exit_code == 1
    assert "dbscheduler migrate" in result.output


def test_loopback_serving_answers_loopback_host_names_only(rows: Scheduler) -> None:
    app = create_app(rows)
    served = serve_app(app, "127.0.0.1")
    for base in ("http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:8080"):
        assert client(served, base_url=base).get("/api/tasks").status_code == 200, base
    # A page whose own name was rebound to 127.0.0.1 (DNS rebinding) is not answered.
    for base in ("http://evil.example:8080", "http://127.0.0.1.evil.example"):
        rebound = client(served, base_url=base).post("/api/tasks/alpha/pause")
        assert rebound.status_code == 400, base
    assert not rows.info("alpha").paused
    assert serve_app(app, "0.0.0.0") is app


def test_responses_carry_security_and_cache_headers(rows: Scheduler) -> None:
    http = client(create_app(rows))
    for url in ("/", "/tasks/alpha", "/api/tasks", "/api/tasks/nope"):
        headers = http.get(url).headers
        assert "default-src 'self'" in headers["content-security-policy"]
        assert "frame-ancestors 'self'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["cache-control"] == "no-store"
    assert "no-store" not in http.get("/static/app.js").headers.get("cache-control", "")


def test_the_command_line_works_without_the_web_extra_loaded() -> None:
    code = ("import sys, dbscheduler.cli; "
            "assert not {'fastapi', 'starlette', 'uvicorn', 'jinja2'} & set(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def test_an_empty_table_says_how_tasks_get_there(migrated: tuple[str, str]) -> None:
    url, table = migrated
    http = client(create_app(url, table=table))
    page = http.get("/").text
    assert "No tasks yet" in page and "scheduler.start()" in page and table in page
    body = http.get("/api/tasks").json()
    assert body.pop("db_now")
    assert body == {"tasks": [], "total": 0, "limit": 100, "offset": 0,
                    "counts": {"all": 0, "running": 0, "paused": 0, "failing": 0,
                               "overdue": 0, "idle": 0}, "batch_keys": 0,
                    "exact": True, "estimate": None}


def test_an_unexpected_error_is_a_500_without_a_trace(
    rows: Scheduler, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(rows)
    client_ = app.state.dashboard.client

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(client_, "tasks", broken)
    http = client(app, raise_server_exceptions=False)
    response = http.get("/api/tasks")
    assert response.status_code == 500
    assert response.json() == {"error": "internal",
                               "message": "unexpected error; the server log has the details"}
    page = http.get("/")
    assert page.status_code == 500 and "Something went wrong" in page.text
    assert "secret internals" not in response.text + page.text
    assert "secret internals" in caplog.text  # logged on the server, for the operator
