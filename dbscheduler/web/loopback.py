"""Serving the app on a loopback address: only loopback host names are answered.

Used by ``dbscheduler web`` and ``dbscheduler serve`` (:mod:`dbscheduler.cli.web`); needs
nothing of the web extra until :func:`serve_app` wraps an app.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["LOOPBACK_NAMES", "is_loopback", "serve_app"]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def serve_app(app: ASGIApp, host: str) -> ASGIApp:
    """``app`` as the command serves it on ``host``.

    On a loopback address only loopback host names are answered (400 otherwise): a web page
    that rebinds its own domain name to 127.0.0.1 (DNS rebinding) would else be "same origin"
    with the dashboard and could operate it from the user's browser.
    """
    if not is_loopback(host):
        return app
    from starlette.responses import PlainTextResponse

    refuse = PlainTextResponse("dbscheduler web answers loopback host names only", 400)

    async def loopback_only(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            name = urlsplit("//" + headers.get(b"host", b"").decode("latin-1")).hostname
            if name not in LOOPBACK_NAMES:
                await refuse(scope, receive, send)
                return
        await app(scope, receive, send)

    return loopback_only
