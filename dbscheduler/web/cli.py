"""``dbscheduler web``: serve the dashboard and the REST API with uvicorn; ``dbscheduler
serve``: the same app plus a node that delivers the ``/v3/queue`` batches over HTTP — the whole
queue service in one command.

Without authentication anyone who reaches the port can operate every task, so the commands
bind 127.0.0.1 by default and refuse another address unless the app is ``--read-only`` or
the operator says ``--insecure`` (for a network that is already protected, e.g. behind an
authenticating proxy). The queue only calls hosts on its ``--allow-host`` list.
"""

from __future__ import annotations

import ipaddress
import logging
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import click

from ..cli.target import OperationFailed, database_options, opened, resolve, translated_errors

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["command", "is_loopback", "serve", "serve_app", "web"]


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


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="address to bind; another than loopback needs --read-only or --insecure")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--read-only", "read_only", is_flag=True,
              help="hide every control and refuse changes (403)")
@click.option("--insecure", is_flag=True,
              help="allow a non-loopback --host with full control and no authentication")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="HOST",
              help="a host /v3/queue pushes may target (repeat; host, host:port or "
                   "*.domain); without one every push is refused (403)")
@database_options
def web(host: str, port: int, read_only: bool, insecure: bool, log_level: str,
        allow_hosts: tuple[str, ...], url: str | None, table: str | None) -> None:
    """Serve the web dashboard and the REST API (/api) until Ctrl-C."""
    _check_exposure(host, read_only, insecure)
    uvicorn, create_app = _web_modules("web")
    target = resolve(url, table)
    _log(log_level)
    with opened(target) as client:
        client.tasks(limit=1)  # a missing table or an unreachable database stops here, exit 1
        try:
            app = serve_app(create_app(client, read_only=read_only,
                                       http_delivery_hosts=allow_hosts), host)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--allow-host'") from None
        mode = " (read-only)" if read_only else ""
        click.echo(f"dbscheduler web{mode}: table {target.table} on {target.safe_url}, "
                   f"http://{host}:{port}/", err=True)
        uvicorn.run(app, host=host, port=port, log_level=log_level)


def _check_exposure(host: str, read_only: bool, insecure: bool) -> None:
    if not is_loopback(host) and not (read_only or insecure):
        raise click.UsageError(
            f"refusing to serve on {host}: anyone who reaches it could pause, trigger and "
            "delete tasks. Pass --read-only, or --insecure if the network is protected "
            "(or mount create_app(..., auth=...) in your own app)."
        )


def _web_modules(command: str) -> tuple[Any, Any]:
    try:
        import uvicorn

        from .app import create_app
    except ImportError as exc:
        raise OperationFailed(
            f"`dbscheduler {command}` needs the web extra: pip install 'dbscheduler[web]' "
            f"({exc})"
        ) from exc
    return uvicorn, create_app


def _log(level: str) -> None:
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="address to bind; another than loopback needs --insecure")
@click.option("--port", type=click.IntRange(0, 65535), default=23334, show_default=True)
@click.option("--allow-host", "allow_hosts", multiple=True, required=True, metavar="HOST",
              help="a host deliveries may call (repeat; host, host:port or *.domain): "
                   "pushes to any other are refused with 403")
@click.option("--insecure", is_flag=True,
              help="allow a non-loopback --host with full control and no authentication")
@click.option("--node-id", default=None, help="this node's id [default: host-pid-random]")
@click.option("--workers", type=click.IntRange(1, 1000), default=8, show_default=True,
              help="deliveries at once")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
@click.option("--listen-url", default=None, metavar="URL",
              help="PostgreSQL behind a pooler: a direct URL to the server for LISTEN")
@database_options
def serve(host: str, port: int, allow_hosts: tuple[str, ...], insecure: bool,
          node_id: str | None, workers: int, log_level: str, listen_url: str | None,
          url: str | None, table: str | None) -> None:
    """The queue service in one command: /v3/queue, the dashboard and the API, and a node
    delivering the batches to their targets, until Ctrl-C. Run it on several machines
    against one database for redundancy."""
    _check_exposure(host, False, insecure)
    uvicorn, create_app = _web_modules("serve")
    from ..scheduler import Scheduler

    target = resolve(url, table)
    _log(log_level)
    with translated_errors(target):
        try:
            node = Scheduler(target.url, table=target.table, node_id=node_id,
                             max_workers=workers, http_delivery_hosts=allow_hosts,
                             listen_url=listen_url)
        except ValueError as exc:
            hint = "'--listen-url'" if "listen_url" in str(exc) else "'--allow-host'"
            raise click.BadParameter(str(exc), param_hint=hint) from None
        _count_executions(node)
        node.start()
    try:
        app = serve_app(create_app(node), host)
        click.echo(f"dbscheduler serve: node {node.node_id}, table {target.table} on "
                   f"{target.safe_url}, delivering to {', '.join(node.http_delivery_hosts)}; "
                   f"http://{host}:{port}/v3/queue/…", err=True)
        uvicorn.run(app, host=host, port=port, log_level=log_level)
    finally:
        node.shutdown()


def _count_executions(node: Any) -> None:
    """The node's executions and the cluster-wide gauges on the app's ``/metrics``, when
    prometheus_client is installed."""
    try:
        from ..metrics import PrometheusMetrics, reports_cluster
    except ImportError:
        return
    if not reports_cluster():
        try:
            node.add_listener(PrometheusMetrics(client=node.client))
        except ValueError as exc:  # the global registry has them from another listener
            logging.getLogger("dbscheduler.web").info("metrics: %s", exc)


def command() -> click.Command:
    """The ``web`` command, for ``dbscheduler.cli`` to register."""
    return web
