"""The built-in HTTP delivery handler of the queue service (exfe-bus's ``/v3/queue``).

A push names its target as ``{method}/{service}``: an HTTP method and the target URL in
URL-safe base64. Items pushed under one merge key *for one target* are merged: the key of the
batch is the merge key plus the method and a digest of the URL, and the key's row carries the
target as its data. When the key is due, one node sends ``{method} {url}`` with the JSON array
of the merged items; a 2xx answer is a success, anything else (a redirect included) or a
network error a failure, retried like any batch.

Only ``http``/``https`` targets whose host is on the allow-list are accepted
(``Scheduler(http_delivery_hosts=[...])``, ``dbscheduler serve --allow-host``): a queue that
calls any URL it is given is an open relay into the network it runs in. The list is checked
when the push arrives (403) and again before each delivery.

>>> allow = AllowList(["mail.internal", "*.example.com"])
>>> allow.allows("https://hooks.example.com/digest"), allow.allows("http://10.0.0.1/")
(True, False)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from .batches import check_batch_handler_name
from .context import TaskContext
from .errors import DeliveryFailed, TargetRefused
from .logfields import engine_log

__all__ = [
    "HTTP_HANDLER",
    "METHODS",
    "AllowList",
    "DeliveryFailed",
    "HttpDelivery",
    "HttpTarget",
    "TargetRefused",
    "decode_service",
    "http_target",
]

log = engine_log("dbscheduler.http_delivery")

HTTP_HANDLER = check_batch_handler_name("dbscheduler.http", internal=True)
"""The batch handler name of HTTP deliveries (reserved: ``dbscheduler.`` names are built in)."""
METHODS = ("POST", "PUT", "PATCH", "DELETE")
"""The methods a delivery may use: each carries the JSON array as its body."""
MAX_URL_LENGTH = 2000
CONNECT_TIMEOUT = 5.0
"""Seconds to open the connection to a target."""
TIMEOUT = 30.0
"""Seconds a target may take to answer (and each read of its answer)."""
_DIGEST_HEX = 16


def _host_entry(entry: object) -> str:
    if not isinstance(entry, str) or not entry.strip():
        raise ValueError(f"allowed host must be a non-empty string, got {entry!r}")
    value = entry.strip().lower().rstrip(".")
    if "/" in value or "@" in value or any(c.isspace() for c in value):
        raise ValueError(f"allowed host {entry!r}: give a host name or address, optionally "
                         "with :port (e.g. mail.internal, 10.1.2.3:8080, *.example.com), "
                         "not a URL")
    probe = urlsplit("//" + value.replace("*.", "x.", 1))
    try:
        _ = probe.port
    except ValueError:
        raise ValueError(f"allowed host {entry!r}: the port is not a number") from None
    if not probe.hostname or ("*" in value and not value.startswith("*.")):
        raise ValueError(f"allowed host {entry!r}: a wildcard may only start the name "
                         "('*.example.com')")
    return value


@dataclass(frozen=True)
class AllowList:
    """The hosts a delivery may call: exact names or addresses (``mail.internal``,
    ``127.0.0.1``, ``[::1]``), optionally with ``:port``, and ``*.example.com`` for every
    subdomain. Names compare case-insensitively. An empty list allows nothing."""

    hosts: tuple[str, ...]

    def __init__(self, hosts: Iterable[str]) -> None:
        if isinstance(hosts, str):
            hosts = [hosts]
        object.__setattr__(self, "hosts", tuple(_host_entry(h) for h in hosts))

    def allows(self, url: str) -> bool:
        """Whether ``url``'s host (and port) is on the list."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower().rstrip(".")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return False
        if not host:
            return False
        shown = f"[{host}]" if ":" in host else host
        for entry in self.hosts:
            probe = urlsplit("//" + entry.replace("*.", "x.", 1))
            if probe.port is not None and probe.port != port:
                continue
            name = (probe.hostname or "").rstrip(".")
            if entry.startswith("*."):
                if host.endswith("." + name[2:]):
                    return True
            elif host == name or shown == name:
                return True
        return False

    def __bool__(self) -> bool:
        return bool(self.hosts)


def decode_service(service: str) -> str:
    """The target URL in ``service`` (URL-safe base64, padding optional).

    Raises ``ValueError`` saying what is wrong: not base64, not UTF-8, not an absolute
    ``http``/``https`` URL with a host.

    >>> decode_service("aHR0cDovLzEyNy4wLjAuMTo4MDAwL2RpZ2VzdA")
    'http://127.0.0.1:8000/digest'
    """
    text = service.strip()
    if not text or len(text) > MAX_URL_LENGTH * 2:
        raise ValueError("service must be the target URL in URL-safe base64")
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
        url = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        raise ValueError(f"service {text[:40]!r} is not URL-safe base64 of a URL") from None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"service decodes to {url[:80]!r}, which is not an http(s) URL")
    if not parts.hostname:
        raise ValueError(f"service decodes to {url[:80]!r}, which has no host")
    try:
        _ = parts.port
    except ValueError:
        raise ValueError(f"service decodes to {url[:80]!r}, whose port is not valid") from None
    if len(url) > MAX_URL_LENGTH or any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise ValueError(f"service decodes to {url[:80]!r}: too long, or with spaces or "
                         "control characters")
    return url


@dataclass(frozen=True)
class HttpTarget:
    """Where a merged batch goes, and the batch key it is merged under."""

    method: str
    url: str
    key: str

    def data(self) -> dict[str, str]:
        """The key row's data: what a delivery needs to send the batch."""
        return {"method": self.method, "url": self.url}


def http_target(merge_key: str, method: str, service: str, allow: AllowList | None
                ) -> HttpTarget:
    """Check a queue push's path: ``ValueError`` for bad input, :class:`TargetRefused` for a
    host off the allow-list (``None``: not checked, for a drop, which calls nobody)."""
    verb = method.upper()
    if verb not in METHODS:
        raise ValueError(f"method {method!r} is not one of {', '.join(METHODS)}")
    url = decode_service(service)
    if allow is not None and not allow.allows(url):
        host = urlsplit(url).netloc
        raise TargetRefused(
            f"target host {host!r} is not on the allow-list; add it with --allow-host "
            f"(Scheduler(http_delivery_hosts=[...]))" if allow else
            f"target host {host!r} refused: no target host is allowed; start the service "
            "with --allow-host HOST (Scheduler(http_delivery_hosts=[...]))"
        )
    digest = hashlib.sha256(f"{verb} {url}".encode()).hexdigest()[:_DIGEST_HEX]
    return HttpTarget(verb, url, f"{merge_key} {verb} {digest}")


class HttpDelivery:
    """The batch handler that sends a key's items to its target with httpx."""

    def __init__(self, allow: AllowList, timeout: float = TIMEOUT,
                 connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.allow = allow
        self.timeout = timeout
        self.connect_timeout = connect_timeout

    def __call__(self, ctx: TaskContext, items: Sequence[Any]) -> None:
        import httpx

        target = ctx.data if isinstance(ctx.data, dict) else {}
        method, url = target.get("method"), target.get("url")
        if method not in METHODS or not isinstance(url, str):
            raise ValueError(f"batch {ctx.name!r} has no HTTP target in its data ({ctx.data!r})")
        if not self.allow.allows(url):
            # The list changed since the push: never call a host that is no longer allowed.
            raise TargetRefused(f"target host of {url[:80]!r} is not on this node's allow-list")
        body = json.dumps(list(items), ensure_ascii=False).encode("utf-8")
        headers = {
            "Content-Type": "application/json",
            "X-Dbscheduler-Batch": quote(ctx.name, safe=""),
            "X-Dbscheduler-Attempt": str(ctx.attempt),
        }
        timeout = httpx.Timeout(self.timeout, connect=self.connect_timeout)
        # No redirects: a redirect could lead to a host off the allow-list.
        with httpx.Client(timeout=timeout, follow_redirects=False) as client:
            answer = client.request(method, url, content=body, headers=headers)
        if not 200 <= answer.status_code < 300:
            text = answer.text[:200].replace("\n", " ")
            raise DeliveryFailed(f"{method} {url[:200]} answered {answer.status_code}: {text}")
        log.debug("batch %r: %d item(s) delivered to %s %s", ctx.name, len(items), method, url)
