"""The commands on tasks: ``list``, ``show``, ``trigger``, ``pause``, ``resume``, ``reschedule``,
``cancel``, ``delete``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import click

from .._store.listing import STATES
from ..client import Client
from ..context import TaskInfo
from ..errors import TaskRunning
from .group import cli
from .render import emit_json, fmt_time, fmt_when, render, stream_json, task_details, tasks_table
from .target import OperationFailed, Target, database_options, opened, resolve

LIST_LIMIT = 100
"""Tasks ``list`` shows unless told otherwise: a page to read, not a table of the world."""

CHUNK = 1000
"""Rows read per statement (and rendered per table) when ``list`` shows more than a page."""


@cli.command(name="list")
@click.option("--json", "as_json", is_flag=True,
              help="print a JSON array of TaskInfo objects (written as the rows arrive)")
@click.option("--limit", type=click.IntRange(min=0), default=LIST_LIMIT, show_default=True,
              metavar="N", help="at most N tasks; 0: every task, read and printed in chunks")
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="N", help="skip the first N tasks (in name order)")
@click.option("--handler", metavar="NAME", help="only the tasks this handler runs")
@click.option("--state", type=click.Choice(STATES),
              help="only the tasks in this state (failing: the last run ended in error, was "
                   "lost or timed out; idle: none of the others)")
@click.option("--match", metavar="TEXT",
              help="only the tasks whose name, handler or schedule contains TEXT "
                   "(case-insensitive)")
@click.option("--overdue", is_flag=True,
              help="only the overdue tasks (--state overdue); exit 1 if there is any (a "
                   "monitoring probe)")
@click.option("--overdue-after", type=click.FloatRange(min=0), default=60.0, show_default=True,
              metavar="SECONDS", help="how late an unpicked task is overdue")
@click.option("-o", "--output", type=click.Choice(["table", "wide"]), default="table",
              show_default=True,
              help="wide: every column, however wide the terminal (table: the least needed "
                   "columns go in a narrow one, names are never broken)")
@database_options
def list_(as_json: bool, limit: int, offset: int, handler: str | None, state: str | None,
          match: str | None, overdue: bool, overdue_after: float, output: str,
          url: str | None, table: str | None) -> None:
    """The tasks in name order, a page at a time: schedule, next run, last run, attempt,
    paused, running on which node.

    Filtered, counted and paged by the database: a page of a table of any size comes at
    once. A footer says how many more tasks match and how to see them.

    Overdue tasks are marked: due longer ago than --overdue-after and not picked by any
    node, or without a success for longer than their alert_after.
    """
    if overdue:
        if state not in (None, "overdue"):
            raise click.UsageError(f"--overdue lists the overdue tasks; it cannot be combined "
                                   f"with --state {state}")
        state = "overdue"
    if handler is not None and not handler.strip():
        raise click.BadParameter("give a handler's name", param_hint="'--handler'")
    if match is not None and len(match) > 255:
        raise click.BadParameter(f"{len(match)} characters; the limit is 255",
                                 param_hint="'--match'")
    target = resolve(url, table)
    filters: dict[str, Any] = {"state": state, "handler": handler, "match": match or None}
    with opened(target, overdue_after) as client:
        # One COUNT(*) for the footer; the numbers by state only where the caption says one.
        matching = client.count_tasks(**filters)
        rows = client.iter_tasks(**filters, limit=limit or None, offset=offset,
                                 chunk=min(limit or CHUNK, CHUNK))
        if as_json:
            shown = stream_json(info.to_dict() for info in rows)
        else:
            late: int | None = None
            if state is None:
                late = client.count_tasks(**{**filters, "state": "overdue"})
            elif state == "overdue":
                late = matching
            shown = _print_tables(rows, client.db_now(), target, output == "wide", matching,
                                  offset, late)
    more = max(0, matching - offset - shown)
    if as_json:
        if more:
            # On stderr: stdout stays one JSON document.
            click.echo(_more_hint(more, offset + shown, limit), err=True)
    elif not shown:
        narrowed = handler or match or state not in (None, "overdue")
        filtered = " matching the filters" if narrowed else ""
        what = "overdue tasks" if state == "overdue" else "tasks"
        beyond = f" after the first {offset}" if offset and matching else ""
        click.echo(f"no {what}{filtered}{beyond} in table {target.table} on {target.safe_url}")
    if overdue and matching:
        click.get_current_context().exit(1)


def _more_hint(more: int, next_offset: int, limit: int) -> str:
    """The footer of a listing that did not show every matching task."""
    page = f"--offset {next_offset}" + (f" for the next {limit}" if limit else "")
    return f"{more} more task(s): {page}, --limit 0 for all"


def _print_tables(rows: Iterator[TaskInfo], now: datetime, target: Target, wide: bool,
                  matching: int, offset: int, late: int | None) -> int:
    """Print ``rows`` as tables of up to :data:`CHUNK` rows (the caption and footer under the
    last); returns how many were printed."""
    shown = 0
    chunk: list[TaskInfo] = []
    pending = iter(rows)
    nxt = next(pending, None)
    while nxt is not None:
        chunk.append(nxt)
        nxt = next(pending, None)
        if len(chunk) < CHUNK and nxt is not None:
            continue
        shown += len(chunk)
        last = nxt is None
        caption = ""
        if last:
            caption = _caption(shown, matching, offset, target, now, late)
            more = max(0, matching - offset - shown)
            if more:
                caption += "\n" + _more_hint(more, offset + shown, shown)
        render(tasks_table(chunk, now, target, wide=wide, caption=caption), wide=wide)
        chunk = []
    return shown


def _caption(shown: int, matching: int, offset: int, target: Target, now: datetime,
             late: int | None) -> str:
    """``2 task(s) in T, database time …``; a part of the listing says which part."""
    if shown == matching and not offset:
        counted = f"{shown} task(s) in {target.table}"
    else:
        counted = (f"tasks {offset + 1}-{offset + shown} of {matching} in {target.table}")
    late_text = f", {late} overdue" if late else ""
    return f"{counted}{late_text}, database time {fmt_time(now)} UTC"


@cli.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="print the TaskInfo as a JSON object")
@database_options
def show(name: str, as_json: bool, url: str | None, table: str | None) -> None:
    """Every field of one task."""
    target = resolve(url, table)
    with opened(target) as client:
        info = client.info(name)
        if as_json:
            emit_json(info.to_dict())
            return
        now = client.db_now()
    render(task_details(info, now))


def _next_line(client: Client, name: str) -> str:
    info = client.info(name)
    now = client.db_now()
    paused = " (paused: it will not run until resumed)" if info.paused else ""
    return f"next run {fmt_when(info.next_process_at, now)}{paused}"


@cli.command()
@click.argument("name")
@database_options
def trigger(name: str, url: str | None, table: str | None) -> None:
    """Make a task due now (nodes on PostgreSQL wake at once; others within a poll)."""
    target = resolve(url, table)
    with opened(target) as client:
        client.trigger(name)
        click.echo(f"triggered {name!r}: {_next_line(client, name)}")


@cli.command()
@click.argument("name")
@database_options
def pause(name: str, url: str | None, table: str | None) -> None:
    """Stop picking a task on every node (a running execution goes on)."""
    target = resolve(url, table)
    with opened(target) as client:
        client.pause(name)
        click.echo(f"paused {name!r} on every node")


@cli.command()
@click.argument("name")
@database_options
def resume(name: str, url: str | None, table: str | None) -> None:
    """Undo pause: the task runs at its stored next time (at once if that passed)."""
    target = resolve(url, table)
    with opened(target) as client:
        client.resume(name)
        click.echo(f"resumed {name!r}: {_next_line(client, name)}")


def parse_aware(value: str, option: str = "--at") -> datetime:
    """An ISO 8601 date-time with an offset (``Z`` or ``+02:00``); naive is a usage error."""
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO 8601 date-time, e.g. 2026-03-29T03:00:00Z",
            param_hint=f"'{option}'",
        ) from None
    if at.tzinfo is None or at.utcoffset() is None:
        raise click.BadParameter(
            f"{value!r} has no UTC offset; add one, e.g. {value}Z or {value}+02:00",
            param_hint=f"'{option}'",
        )
    return at


@cli.command()
@click.argument("name")
@click.option("--at", "at", required=True, metavar="ISO8601",
              help="the new due time with its offset, e.g. 2026-03-29T03:00:00Z")
@database_options
def reschedule(name: str, at: str, url: str | None, table: str | None) -> None:
    """Set when a task is next due."""
    target = resolve(url, table)
    when = parse_aware(at)
    with opened(target) as client:
        client.reschedule(name, when)
        click.echo(f"rescheduled {name!r}: {_next_line(client, name)}")


@cli.command()
@click.argument("name")
@database_options
def cancel(name: str, url: str | None, table: str | None) -> None:
    """Ask a running execution to stop (its ctx.stop_requested is set within one heartbeat)."""
    target = resolve(url, table)
    with opened(target) as client:
        if not client.cancel(name):
            click.echo(f"{name!r} is not running: nothing to cancel")
            return
        node = client.info(name).locked_by
        on = f" on node {node}" if node else ""
        click.echo(f"asked the running execution of {name!r}{on} to stop")


@cli.command()
@click.argument("name")
@click.option("--force", is_flag=True, help="delete it even while it runs")
@database_options
def delete(name: str, force: bool, url: str | None, table: str | None) -> None:
    """Delete a task's row (refused while it runs, unless --force).

    A node that still registers the task inserts it again when it starts.
    """
    target = resolve(url, table)
    with opened(target) as client:
        try:
            client.delete(name, force=force)
        except TaskRunning as exc:
            raise OperationFailed(
                f"task {name!r} is running on node {exc.node}: refusing to delete it; "
                "pass --force to delete it anyway"
            ) from exc
        click.echo(f"deleted {name!r}")
