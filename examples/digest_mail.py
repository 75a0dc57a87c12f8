"""exfe's digest mail, end to end: notifications pushed over HTTP are merged per user and
reach the mail service as one digest.

Three pieces, all on this machine:

- a small *mail service* (``http.server``) that turns each JSON array it is sent into one
  "mail" and prints it;
- the queue service, ``dbscheduler serve --allow-host 127.0.0.1`` (on a SQLite file in the
  working directory, or ``$DBSCHEDULER_URL``);
- the *application*, which pushes every notification as it happens:
  ``POST /v3/queue/<user>/POST/<mail service URL in base64>?update=once&ontime=<now + window>``.

With ``update=once``, a user's first notification opens a window and later ones join it
without moving it: when the window closes, the user gets one mail with everything. A merge key
starting with ``-`` is never merged (a password reset goes out alone, at once).

Run it::

    python examples/digest_mail.py            # needs dbscheduler[web]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import quote

WINDOW = 5.0
"""Seconds a user's first notification waits for more to join its digest: long enough for
the other pushes to join it on a busy machine, where each takes a request to the queue service."""


class MailService(BaseHTTPRequestHandler):
    """``POST /mail/<user>``: the body is a JSON array of notifications, one mail per call."""

    sent: ClassVar[list[tuple[str, list[Any]]]] = []
    lock: ClassVar[threading.Lock] = threading.Lock()

    def do_POST(self) -> None:
        notifications = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        user = self.path.rsplit("/", 1)[-1]
        lines = "\n".join(f"  - {n['text']}" for n in notifications)
        # Under the lock: two mails delivered at once would interleave their lines.
        with self.lock:
            print(f"mail to {user}: {len(notifications)} notification(s)\n{lines}", flush=True)
            self.sent.append((user, notifications))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def push(queue: str, user: str, mail_service: str, text: str, *, merge: bool = True) -> None:
    """What the application does for each notification."""
    target = base64.urlsafe_b64encode(f"{mail_service}/mail/{user}".encode()).decode()
    key = quote(user if merge else f"-{user}", safe="")
    ontime = time.time() + (WINDOW if merge else 0)
    request = urllib.request.Request(
        f"{queue}/v3/queue/{key}/POST/{target.rstrip('=')}?update=once&ontime={ontime:.3f}",
        data=json.dumps({"text": text}).encode(), method="POST",
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200, answer.read()


def wait_until_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"dbscheduler serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/api/health", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("dbscheduler serve did not come up")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("DBSCHEDULER_URL",
                                                         "sqlite:///digest.sqlite3"))
    args = parser.parse_args()

    mail = ThreadingHTTPServer(("127.0.0.1", 0), MailService)
    threading.Thread(target=mail.serve_forever, daemon=True).start()
    mail_service = f"http://127.0.0.1:{mail.server_address[1]}"

    port = free_port()
    queue = f"http://127.0.0.1:{port}"
    serve = subprocess.Popen(
        [sys.executable, "-m", "dbscheduler", "serve", "--url", args.url,
         "--port", str(port), "--allow-host", "127.0.0.1", "--log-level", "warning"])
    try:
        wait_until_up(queue, serve)
        print(f"queue service on {queue}, mail service on {mail_service}", flush=True)
        push(queue, "ann@example.com", mail_service, "Bob commented on 'Dinner'")
        push(queue, "bob@example.com", mail_service, "Ann invited you to 'Dinner'")
        push(queue, "ann@example.com", mail_service, "Carol is going to 'Dinner'")
        push(queue, "ann@example.com", mail_service, "'Dinner' moved to 8 pm")
        push(queue, "ann@example.com", mail_service, "Your password reset link", merge=False)
        deadline = time.monotonic() + WINDOW + 15
        while len(MailService.sent) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        print(f"{len(MailService.sent)} mails for 5 notifications", flush=True)
    finally:
        serve.terminate()
        serve.wait(20)
        mail.shutdown()


if __name__ == "__main__":
    main()
