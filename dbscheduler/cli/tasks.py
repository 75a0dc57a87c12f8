"""The commands on tasks: ``list``, ``show``, ``trigger``, ``pause``, ``resume``, ``reschedule``,
``cancel``, ``delete``."""

from __future__ import annotations

from datetime import datetime

import click

from ..client import Client
from ..errors import TaskRunning
from .group import cli
from .render import emit_json, fmt_when, render, task_details, tasks_table
from .target import OperationFailed, database_options, opened, resolve


@cli.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="print a JSON array of TaskInfo objects")
@click.option("--overdue", is_flag=True,
              help="only the overdue tasks; exit 1 if there is any (a monitoring probe)")
@click.option("--overdue-after", type=click.FloatRange(min=0), default=60.0, show_default=True,
              metavar="SECONDS", help="how late an unpicked task is overdue")
@click.option("-o", "--output", type=click.Choice(["table", "wide"]), default="table",
              show_default=True,
              help="wide: every column, however wide the terminal (table: the least needed "
                   "columns go in a narrow one, names are never broken)")
@database_options
def list_(as_json: bool, overdue: bool, overdue_after: float, output: str, url: str | None,
          table: str | None) -> None:
    """Every task: schedule, next run, last run, attempt, paused, running on which node.

    Overdue tasks are marked: due longer ago than --overdue-after and not picked by any
    node, or without a success for longer than their alert_after.
    """
    target = resolve(url, table)
    with opened(target, overdue_after) as client:
        infos = client.tasks()
        if overdue:
            infos = [info for info in infos if info.overdue]
        if as_json:
            emit_json([info.to_dict() for info in infos])
        else:
            now = client.db_now()
    if not as_json:
        if overdue and not infos:
            click.echo(f"no overdue tasks in table {target.table} on {target.safe_url}")
        elif not infos:
            click.echo(f"no tasks in table {target.table} on {target.safe_url}")
        else:
            wide = output == "wide"
            render(tasks_table(infos, now, target, wide=wide), wide=wide)
    if overdue and infos:
        click.get_current_context().exit(1)


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
