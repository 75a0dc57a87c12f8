"""The built-in HTTP delivery handler against a real HTTP server on 127.0.0.1: what it sends,
what counts as a failure, and that a target off its allow-list is never called."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from dbscheduler import TaskContext
from dbscheduler.http_delivery import AllowList, DeliveryFailed, HttpDelivery, TargetRefused

NOW = datetime(2031, 1, 1, tzinfo=timezone.utc)


def ctx(data: Any, attempt: int = 2) -> TaskContext:
    return TaskContext(name="dbscheduler.http/k POST abc", node_id="n", attempt=attempt,
                       reenqueue_attempt=0, total_attempt=attempt, scheduled_at=NOW,
                       started_at=NOW, created_at=NOW, state=None, data=data)


def test_a_delivery_sends_the_items_as_one_json_array() -> None:
    got: list[tuple[str, str, Any, dict[str, str]]] = []
    status = [200]

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.command, self.path, json.loads(body), dict(self.headers)))
            self.send_response(status[0])
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook?x=1"
        deliver = HttpDelivery(AllowList(["127.0.0.1"]), timeout=5)
        deliver(ctx({"method": "PUT", "url": url}), [{"a": "ü"}, None, 3])
        (method, path, items, headers) = got[0]
        assert (method, path, items) == ("PUT", "/hook?x=1", [{"a": "ü"}, None, 3])
        assert headers["Content-Type"] == "application/json"
        assert headers["X-Dbscheduler-Attempt"] == "2"
        assert headers["X-Dbscheduler-Batch"] == "dbscheduler.http%2Fk%20POST%20abc"
        status[0] = 500
        with pytest.raises(DeliveryFailed, match="answered 500"):
            deliver(ctx({"method": "PUT", "url": url}), [1])
        with pytest.raises(TargetRefused):
            HttpDelivery(AllowList(["localhost"]))(ctx({"method": "PUT", "url": url}), [1])
        with pytest.raises(ValueError, match="no HTTP target"):
            deliver(ctx(None), [1])
        assert len(got) == 2, "a refused target is never called"
    finally:
        server.shutdown()
        server.server_close()


def test_a_target_that_does_not_answer_is_a_failure() -> None:
    deliver = HttpDelivery(AllowList(["127.0.0.1"]), timeout=1, connect_timeout=1)
    with pytest.raises(httpx.HTTPError):
        deliver(ctx({"method": "POST", "url": "http://127.0.0.1:9/closed"}), [1])
