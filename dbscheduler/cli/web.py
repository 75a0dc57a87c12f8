"""``dbscheduler web``: serve the dashboard and the REST API with uvicorn; ``dbscheduler
serve``: the same app plus a node that delivers the ``/v3/queue`` batches over HTTP — the whole
queue service in one command.

Without authentication anyone who reaches the port can operate every task, so the commands
bind 127.0.0.1 by default and refuse another address unless the app is ``--read-only`` or
the operator says ``--insecure`` (for a network that is already protected, e.g. behind an
authenticating proxy). The queue only calls hosts on its ``--allow-host`` list.

The web package is imported when a command runs, never when the command line loads: the rest
of the command line works without the web extra, and the web package needs nothing of this one.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from .group import cli
from .target import OperationFailed, database_options, opened, resolve, translated_errors

__all__ = ["serve", "web"]


@cli.command()
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
    uvicorn, create_app, serve_app = _web_modules("web")
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
    from ..web.loopback import is_loopback

    if not is_loopback(host) and not (read_only or insecure):
        raise click.UsageError(
            f"refusing to serve on {host}: anyone who reaches it could pause, trigger and "
            "delete tasks. Pass --read-only, or --insecure if the network is protected "
            "(or mount create_app(..., auth=...) in your own app)."
        )


def _web_modules(command: str) -> tuple[Any, Any, Any]:
    try:
        import uvicorn

        from ..web.app import create_app
    except ImportError as exc:
        raise OperationFailed(
            f"`dbscheduler {command}` needs the web extra: pip install 'dbscheduler[web]' "
            f"({exc})"
        ) from exc
    from ..web.loopback import serve_app

    return uvicorn, create_app, serve_app


def _log(level: str) -> None:
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")


@cli.command()
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
    uvicorn, create_app, serve_app = _web_modules("serve")
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

