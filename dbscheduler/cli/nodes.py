"""``nodes``: the node registry, which nodes are alive and what each runs now."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import click
from rich import box
from rich.table import Table
from rich.text import Text

from ..nodes import NodeInfo
from .group import cli
from .render import emit_json, fmt_time, fmt_when, render
from .target import database_options, opened, resolve


def nodes_table(nodes: Sequence[NodeInfo], now: datetime, caption: str) -> Table:
    """One line per node: alive or gone, last contact, what it runs."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, caption=caption, caption_justify="left")
    table.add_column("node", style="bold", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("last seen (UTC)", no_wrap=True)
    table.add_column("running", justify="right")
    table.add_column("host", no_wrap=True)
    table.add_column("pid", justify="right")
    table.add_column("version", no_wrap=True)
    table.add_column("started (UTC)", no_wrap=True)
    table.add_column("tags", overflow="fold")
    table.add_column("handlers", overflow="fold")
    table.add_column("tasks running", overflow="fold")
    for n in nodes:
        table.add_row(
            Text(n.node_id),
            Text("alive", style="green") if n.alive else Text("gone", style="dim"),
            Text(fmt_when(n.last_seen, now)),
            str(len(n.tasks) if n.alive else n.running),
            Text(n.host), str(n.pid), Text(n.version), Text(fmt_time(n.started_at)),
            Text(", ".join(t for t in n.tags if t != n.node_id) or "-"),
            Text(", ".join(n.handlers) or "-"),
            Text(", ".join(n.tasks) or "-"),
        )
    return table


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print a JSON array of the nodes")
@database_options
def nodes(as_json: bool, url: str | None, table: str | None) -> None:
    """The nodes of the table: alive or gone (no contact for 30 s), last contact on the
    database clock, host, pid, version, tags, handlers, and the tasks each runs now.

    Each started node writes its row with its heartbeat; nodes unseen for 7 days are removed.
    """
    target = resolve(url, table)
    with opened(target) as client:
        found = client.nodes()
        if as_json:
            emit_json([n.to_dict() for n in found])
            return
        now = client.db_now()
    if not found:
        click.echo(f"no nodes have registered in {target.table} on {target.safe_url} (a node "
                   "writes its row when it starts; `dbscheduler migrate` adds the registry to "
                   "an older table)")
        return
    alive = sum(1 for n in found if n.alive)
    render(nodes_table(found, now, f"{len(found)} node(s), {alive} alive, database time "
                                   f"{fmt_time(now)} UTC"))
