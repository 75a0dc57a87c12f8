"""The commands on keyed delayed batches: ``push``, ``drop``, ``batches``."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..batches import BatchInfo
from .group import cli
from .render import emit_json, fmt_when, render
from .target import OperationFailed, database_options, opened, resolve


def _ontime(value: str | None) -> datetime | float | None:
    """``--ontime``: Unix seconds or an ISO 8601 date-time with its offset."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise click.BadParameter(f"{value!r} is not a time", param_hint="'--ontime'")
        return seconds
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither Unix seconds nor an ISO 8601 date-time "
            "(e.g. 2026-03-29T03:00:00Z)", param_hint="'--ontime'") from None
    if at.tzinfo is None or at.utcoffset() is None:
        raise click.BadParameter(f"{value!r} has no UTC offset; add one, e.g. {value}Z",
                                 param_hint="'--ontime'")
    return at


@cli.command()
@click.argument("key")
@click.argument("item", metavar="JSON")
@click.option("--handler", required=True, help="the batch handler that delivers the key")
@click.option("--ontime", metavar="TIME",
              help="when the key is due: Unix seconds or ISO 8601 [default: now]")
@click.option("--update", type=click.Choice(["always", "once"]), default="always",
              show_default=True,
              help="always: the key is due at this --ontime; once: only a new batch is")
@database_options
def push(key: str, item: str, handler: str, ontime: str | None, update: str,
         url: str | None, table: str | None) -> None:
    """Queue the JSON item under KEY; HANDLER gets the key's items together when it is due."""
    try:
        value: Any = json.loads(item)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="'JSON'") from None
    when = _ontime(ontime)
    target = resolve(url, table)
    with opened(target) as client:
        try:
            client.push(key, value, handler=handler, ontime=when, update=update)
        except ValueError as exc:
            raise OperationFailed(str(exc)) from None
        now = client.db_now()
        pending = [b for b in client.batches(handler) if b.key == key]
    due = pending[0].due_at if len(pending) == 1 else None
    items = sum(b.items for b in pending)
    click.echo(f"pushed to {handler}/{key}: {items} item(s) pending"
               + (f", due {fmt_when(due, now)}" if due is not None else ""))


@cli.command()
@click.argument("key")
@click.option("--handler", required=True, help="the batch handler of the key")
@database_options
def drop(key: str, handler: str, url: str | None, table: str | None) -> None:
    """Remove the pending items of KEY (a delivery under way ends as usual)."""
    target = resolve(url, table)
    with opened(target) as client:
        try:
            dropped = client.drop(key, handler=handler)
        except ValueError as exc:
            raise OperationFailed(str(exc)) from None
    click.echo(f"dropped {dropped} item(s) of {handler}/{key}")


def batches_table(infos: list[BatchInfo], now: datetime) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("handler", "key", "items", "next delivery", "last delivery"):
        table.add_column(column, justify="right" if column == "items" else "left")
    for b in infos:
        if b.running:
            due = Text(f"now, on {b.locked_by}", style="cyan")
        elif b.due_at is None:
            due = Text("with the key's next push", style="dim")
        else:
            due = Text(fmt_when(b.due_at, now))
        if b.attempt:
            last = Text(f"failed {b.attempt}x: {(b.last_error or '')[:60]}", style="red")
        else:
            last = Text(b.last_status or "none yet",
                        style="green" if b.last_status == "success" else "dim")
        key = b.key + (f"  {b.data['method']} {b.data['url']}"
                       if isinstance(b.data, dict) and "url" in b.data else "")
        table.add_row(b.handler, key, str(b.items), due, last)
    return table


@cli.command()
@click.option("--handler", help="only the keys of this batch handler")
@click.option("--json", "as_json", is_flag=True, help="print a JSON array of BatchInfo objects")
@database_options
def batches(handler: str | None, as_json: bool, url: str | None, table: str | None) -> None:
    """The keys with pending items: item count, next delivery, last failure."""
    target = resolve(url, table)
    with opened(target) as client:
        infos = client.batches(handler)
        if as_json:
            emit_json([b.to_dict() for b in infos])
            return
        now = client.db_now()
    if not infos:
        click.echo(f"no pending batches in table {target.table} on {target.safe_url}")
        return
    render(batches_table(infos, now))
