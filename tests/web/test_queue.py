"""The exfe-style queue service: ``/v3/queue`` pushes through the web app (its own client, as
a separate web process would), a running node delivers with the built-in HTTP handler to a
real HTTP server on 127.0.0.1, and every kind of bad input answers a JSON error and stores
nothing."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from dbscheduler import Scheduler
from dbscheduler.table import make_items_table
from dbscheduler.web import create_app
from tests.helpers import no_keys, polled
from tests.web.conftest import WITH_MARIADB, wait_for


@dataclass
class Received:
    method: str
    path: str
    items: Any
    attempt: str | None
    batch: str | None


@dataclass
class Receiver:
    """A real HTTP server recording what it is sent; ``answer`` picks the status."""

    server: ThreadingHTTPServer
    got: list[Received] = field(default_factory=list)
    answer: Callable[[Received], int] = lambda r: 200

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def wait(self, n: int, timeout: float = 15) -> list[Received]:
        wait_for(lambda: len(self.got) >= n, timeout, f"{n} request(s) at the receiver")
        return list(self.got)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    holder: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            got = Received(self.command, self.path, json.loads(body) if body else None,
                           self.headers.get("X-Dbscheduler-Attempt"),
                           self.headers.get("X-Dbscheduler-Batch"))
            status = holder[0].answer(got)
            holder[0].got.append(got)
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("Location", holder[0].base + "/elsewhere")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        do_POST = do_PUT = do_PATCH = do_DELETE = _any

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Receiver(server))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield holder[0]
    server.shutdown()
    server.server_close()


def b64(url: str, pad: bool = False) -> str:
    text = base64.urlsafe_b64encode(url.encode()).decode()
    return text if pad else text.rstrip("=")


@pytest.fixture
def service(migrated: tuple[str, str], receiver: Receiver
            ) -> Iterator[tuple[TestClient, Scheduler]]:
    url, table = migrated
    node = Scheduler(url, table=table, lease=3, poll_interval=0.2,
                     http_delivery_hosts=["127.0.0.1"])
    node.start()
    app = create_app(url, table=table, http_delivery_hosts=["127.0.0.1"])
    with TestClient(app) as http:
        yield http, node
    node.shutdown(timeout=5)


def queue_path(merge_key: str, target: str, method: str = "POST") -> str:
    return f"/v3/queue/{merge_key}/{method}/{b64(target)}"


@WITH_MARIADB
def test_pushed_items_are_merged_and_posted_as_one_json_array(
    service: tuple[TestClient, Scheduler], receiver: Receiver
) -> None:
    http, node = service
    target = receiver.base + "/digest?user=42"
    # Due after the three pushes land, with room for a slow machine (each push is a few
    # statements on the server; a loaded CI run took more than 1.5 s for the three).
    at = time.time() + 5.0
    for i in range(3):
        answer = http.post(queue_path("digest-42", target), params={"ontime": at,
                           "update": "once"}, json={"n": i, "text": "ünï"})
        assert answer.status_code == 200, answer.text
    assert answer.json()["url"] == target and answer.json()["method"] == "POST"
    # Another target under the same merge key is its own batch.
    http.post(queue_path("digest-42", target, "PUT"), params={"ontime": at}, json="other")
    (one, two) = sorted(receiver.wait(2), key=lambda r: r.method)
    assert (one.method, one.path, one.items) == (
        "POST", "/digest?user=42", [{"n": i, "text": "ünï"} for i in range(3)])
    assert (two.method, two.items) == ("PUT", ["other"])
    assert one.attempt == "1" and unquote(one.batch or "").startswith("dbscheduler.http/digest-42")
    wait_for(lambda: no_keys(node), what="the delivered keys to go")
    polled(node)  # nothing else comes
    assert len(receiver.got) == 2


def test_dash_keys_are_each_delivered_alone(
    service: tuple[TestClient, Scheduler], receiver: Receiver
) -> None:
    http, _ = service
    at = time.time() + 0.3
    for i in range(3):
        assert http.post(queue_path("-now", receiver.base + "/x"), params={"ontime": at},
                         json=i).status_code == 200
    assert sorted(r.items for r in receiver.wait(3)) == [[0], [1], [2]]


def test_a_failing_target_gets_the_same_items_again_with_a_higher_attempt(
    service: tuple[TestClient, Scheduler], receiver: Receiver
) -> None:
    http, node = service
    receiver.answer = lambda r: 503 if r.attempt in ("1", "2") else 200
    http.post(queue_path("k", receiver.base + "/flaky"), params={"ontime": 0}, json="a")
    got = receiver.wait(3, timeout=20)  # GeometricBackoff(1 s, …): 1 s, then 2 s
    assert [(r.attempt, r.items) for r in got] == [("1", ["a"]), ("2", ["a"]), ("3", ["a"])]
    wait_for(lambda: no_keys(node), what="the key to go after its success")


def test_a_redirect_is_a_failure_and_is_not_followed(
    service: tuple[TestClient, Scheduler], receiver: Receiver
) -> None:
    http, node = service
    receiver.answer = lambda r: 307
    http.post(queue_path("k", receiver.base + "/moved"), params={"ontime": 0}, json=1)
    receiver.wait(1)
    wait_for(lambda: (node.batches() or [None])[0] is not None
             and node.batches()[0].last_status == "error", what="the failure recorded")
    assert "answered 307" in (node.batches()[0].last_error or "")
    assert all(r.path == "/moved" for r in receiver.got)
    http.delete(queue_path("k", receiver.base + "/moved"))


def test_delete_drops_the_pending_items(
    service: tuple[TestClient, Scheduler], receiver: Receiver
) -> None:
    http, node = service
    path = queue_path("later", receiver.base + "/d")
    for i in range(4):
        http.post(path, params={"ontime": time.time() + 60}, json=i)
    assert [b.items for b in node.batches()] == [4]
    answer = http.delete(path)
    assert answer.status_code == 200 and answer.json()["dropped"] == 4
    assert node.batches() == []
    assert http.delete(path).json()["dropped"] == 0
    polled(node)  # the dropped key's row goes by an empty delivery, calling nothing
    assert receiver.got == []


def test_the_nodes_own_allow_list_is_checked_again_before_delivering(
    migrated: tuple[str, str], receiver: Receiver
) -> None:
    url, table = migrated
    # The web app accepts the host; the delivering node no longer does.
    node = Scheduler(url, table=table, poll_interval=0.2, http_delivery_hosts=["localhost"])
    app = create_app(url, table=table, http_delivery_hosts=["127.0.0.1"])
    with node, TestClient(app) as http:
        http.post(queue_path("k", receiver.base + "/x"), params={"ontime": 0}, json=1)
        wait_for(lambda: node.batches() and node.batches()[0].last_status == "error",
                 what="the refused delivery")
        assert "allow-list" in (node.batches()[0].last_error or "")
        assert receiver.got == []
        node.drop(node.batches()[0].key, handler="dbscheduler.http")


def _bad_requests(target: str) -> list[tuple[str, str, dict[str, Any], Any, int, str]]:
    ok = b64(target)
    return [
        # (what, path, params, body, status, message fragment)
        ("not base64", "/v3/queue/k/POST/%25%25%25", {"ontime": 0}, 1, 422, "base64"),
        ("base64 of a non-URL", f"/v3/queue/k/POST/{b64('just words')}", {"ontime": 0}, 1,
         422, "http(s) URL"),
        ("not http", f"/v3/queue/k/POST/{b64('ftp://127.0.0.1/x')}", {"ontime": 0}, 1, 422,
         "http(s) URL"),
        ("no host", f"/v3/queue/k/POST/{b64('http:///x')}", {"ontime": 0}, 1, 422, "no host"),
        ("no ontime", f"/v3/queue/k/POST/{ok}", {}, 1, 422, "ontime"),
        ("bad ontime", f"/v3/queue/k/POST/{ok}", {"ontime": "soon"}, 1, 422, "ontime"),
        ("ontime not finite", f"/v3/queue/k/POST/{ok}", {"ontime": "nan"}, 1, 422, "ontime"),
        ("negative ontime", f"/v3/queue/k/POST/{ok}", {"ontime": -5}, 1, 422, "ontime"),
        ("unknown update", f"/v3/queue/k/POST/{ok}", {"ontime": 0, "update": "sometimes"}, 1,
         422, "update"),
        ("unknown method", f"/v3/queue/k/GET/{ok}", {"ontime": 0}, 1, 422, "method"),
        ("body not JSON", f"/v3/queue/k/POST/{ok}", {"ontime": 0}, b"{oops", 422, "not JSON"),
        ("empty body", f"/v3/queue/k/POST/{ok}", {"ontime": 0}, b"", 422, "not JSON"),
        ("bad key", f"/v3/queue/%20k/POST/{ok}", {"ontime": 0}, 1, 422, "key"),
        ("host off the list", f"/v3/queue/k/POST/{b64('http://10.9.8.7/x')}", {"ontime": 0},
         1, 403, "allow-list"),
        ("port off the list", f"/v3/queue/k/POST/{b64('http://localhost:1/x')}",
         {"ontime": 0}, 1, 403, "allow-list"),
    ]


@WITH_MARIADB
def test_bad_input_answers_a_json_error_and_stores_nothing(
    migrated: tuple[str, str], receiver: Receiver
) -> None:
    url, table = migrated
    app = create_app(url, table=table, http_delivery_hosts=["127.0.0.1"])
    with TestClient(app) as http:
        for what, path, params, body, status, message in _bad_requests(receiver.base + "/x"):
            kwargs: dict[str, Any] = ({"content": body} if isinstance(body, bytes)
                                      else {"json": body})
            answer = http.post(path, params=params, **kwargs)
            assert answer.status_code == status, (what, answer.text)
            assert answer.headers["content-type"] == "application/json", what
            error = answer.json()
            assert set(error) == {"error", "message"}, (what, error)
            assert message.lower() in error["message"].lower(), (what, error)
            assert "Traceback" not in answer.text
        assert http.get("/api/batches").json()["batches"] == []
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(
            make_items_table(table))).scalar_one() == 0
    engine.dispose()


def test_without_an_allow_list_every_target_is_refused(migrated: tuple[str, str]) -> None:
    url, table = migrated
    with TestClient(create_app(url, table=table)) as http:
        answer = http.post(f"/v3/queue/k/POST/{b64('http://127.0.0.1/x')}",
                           params={"ontime": 0}, json=1)
        assert answer.status_code == 403
        assert answer.json()["error"] == "host_not_allowed"
        assert "--allow-host" in answer.json()["message"]


def test_a_scheduler_given_to_create_app_lends_it_its_allow_list(
    migrated: tuple[str, str], receiver: Receiver
) -> None:
    url, table = migrated
    node = Scheduler(url, table=table, http_delivery_hosts=["127.0.0.1"])
    with TestClient(create_app(node)) as http:
        assert http.post(queue_path("k", receiver.base + "/x"), params={"ontime": 9e9},
                         json=1).status_code == 200
        assert http.post(f"/v3/queue/k/POST/{b64('http://10.0.0.1/x')}",
                         params={"ontime": 0}, json=1).status_code == 403
        listing = http.get("/api/batches").json()["batches"]
        assert [(b["items"], b["data"]["url"]) for b in listing] == [(1, receiver.base + "/x")]
        key = listing[0]["key"]
        assert http.post("/api/batches/drop", json={"handler": "dbscheduler.http",
                                                     "key": key}).json()["dropped"] == 1
    node.engine.dispose()


def test_the_queue_obeys_read_only_auth_and_the_cross_site_check(
    migrated: tuple[str, str], receiver: Receiver
) -> None:
    url, table = migrated
    path = queue_path("k", receiver.base + "/x")
    hosts = ["127.0.0.1"]
    with TestClient(create_app(url, table=table, read_only=True,
                               http_delivery_hosts=hosts)) as http:
        answer = http.post(path, params={"ontime": 0}, json=1)
        assert (answer.status_code, answer.json()["error"]) == (403, "read_only")
        assert http.delete(path).status_code == 403
    with TestClient(create_app(url, table=table, auth=lambda request: None,
                               http_delivery_hosts=hosts)) as http:
        answer = http.post(path, params={"ontime": 0}, json=1)
        assert (answer.status_code, answer.json()["error"]) == (401, "unauthorized")
    with TestClient(create_app(url, table=table, http_delivery_hosts=hosts)) as http:
        answer = http.post(path, params={"ontime": 0}, json=1,
                           headers={"Origin": "https://evil.example"})
        assert (answer.status_code, answer.json()["error"]) == (403, "cross_site")
        assert http.get("/api/batches").json()["batches"] == []
        # Routes of the service that do not exist answer JSON too.
        missing = http.get("/v3/queue/k")
        assert missing.status_code in (404, 405) and "error" in missing.json()


def test_serve_and_web_check_their_allow_list_and_address() -> None:
    from click.testing import CliRunner

    from dbscheduler.cli import cli

    runner = CliRunner()
    result = runner.invoke(cli, ["serve"])
    assert result.exit_code == 2 and "--allow-host" in result.output
    result = runner.invoke(cli, ["serve", "--allow-host", "h", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "refusing to serve on 0.0.0.0" in result.output
    result = runner.invoke(cli, ["serve", "--allow-host", "http://h/x"])
    assert result.exit_code == 2 and "not a URL" in result.output
