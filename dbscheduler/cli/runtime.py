"""The commands on runtime tasks: ``schedule``, ``unschedule``, ``sync``."""

from __future__ import annotations

import json
from typing import Any

import click

from ..schedules import Cron, FixedDelay, FixedRate, Once, Schedule
from .controls import execution_options, given_options
from .group import cli
from .node import load_scheduler
from .target import OperationFailed, database_options, opened, resolve
from .tasks import parse_aware


def _schedule_from(cron: str | None, tz: str, every: float | None, delay: float | None,
                   at: str | None) -> Schedule:
    given = [x for x in (cron, every, delay, at) if x is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --cron, --every, --delay, --at")
    try:
        if cron is not None:
            return Cron(cron, tz=tz)
        if every is not None:
            return FixedRate(every)
        if delay is not None:
            return FixedDelay(delay)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    assert at is not None
    return Once(parse_aware(at))


@cli.command()
@click.argument("name")
@click.option("--handler", required=True, help="the handler that runs it (any node having it)")
@click.option("--cron", help="a cron expression, e.g. '0 3 * * *'")
@click.option("--tz", default="UTC", show_default=True, help="the time zone of --cron")
@click.option("--every", type=float, help="run every S seconds (fixed rate)")
@click.option("--delay", type=float, help="run S seconds after each run ends (fixed delay)")
@click.option("--at", metavar="ISO8601", help="run once at this time (a one-off job)")
@click.option("--data", metavar="JSON", help="JSON the handler receives as ctx.data")
@execution_options
@database_options
def schedule(name: str, handler: str, cron: str | None, tz: str, every: float | None,
             delay: float | None, at: str | None, data: str | None, url: str | None,
             table: str | None, **flags: Any) -> None:
    """Create or update a runtime task run by HANDLER (its counters are kept), with its
    execution options."""
    options = given_options(flags)
    when = _schedule_from(cron, tz, every, delay, at)
    value: Any = None
    if data is not None:
        try:
            value = json.loads(data)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="'--data'") from None
    target = resolve(url, table)
    with opened(target) as client:
        try:
            client.schedule(name, handler, when, data=value, **options)
        except ValueError as exc:
            raise OperationFailed(str(exc)) from None
        info = client.info(name)
    click.echo(f"scheduled {name!r} ({info.schedule}, handler {handler!r}), next run "
               f"{info.next_process_at.isoformat()}")


@cli.command()
@click.argument("name")
@database_options
def unschedule(name: str, url: str | None, table: str | None) -> None:
    """Delete a runtime task (a running execution ends; its finish then changes nothing)."""
    target = resolve(url, table)
    with opened(target) as client:
        if not client.unschedule(name):
            raise OperationFailed(f"no task {name!r} in table {target.table}")
    click.echo(f"unscheduled {name!r}")


@cli.command()
@click.argument("spec", metavar="MODULE:ATTR")
def sync(spec: str) -> None:
    """Write the rows of the tasks the Scheduler at MODULE:ATTR declares, without starting."""
    scheduler = load_scheduler(spec)
    scheduler.sync()
    click.echo(f"synced {len(scheduler._tasks)} task(s) to table {scheduler.table}")
