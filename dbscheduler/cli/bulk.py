"""Bulk creation from JSON lines on stdin: ``schedule-many``, ``schedule-once-many``,
``push-many``.

Each line is one JSON object, the keyword arguments of the single command's Python method::

    {"name": "r-1", "handler": "report", "schedule": "cron 0 8 * * * Europe/Berlin"}
    {"name": "mail-1", "handler": "send-mail", "at": "2030-01-01T08:00:00Z", "data": {}}
    {"key": "ann@example.com", "item": {"event": "comment"}, "handler": "digest"}

Every line is checked before anything is written; the first bad one fails the command with its
line number, and nothing is written.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import IO, Any

import click

from ..client import Client
from .group import cli
from .target import OperationFailed, database_options, opened, resolve

_ITEM = re.compile(r"^item (\d+)")


def _read_lines(stream: IO[str]) -> tuple[list[dict[str, Any]], list[int]]:
    """The JSON objects of ``stream``'s non-blank lines, and their line numbers."""
    items: list[dict[str, Any]] = []
    lines: list[int] = []
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise click.UsageError(f"line {number}: not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise click.UsageError(f"line {number}: a JSON object is expected, got "
                                   f"{type(value).__name__}")
        items.append(value)
        lines.append(number)
    return items, lines


def _run(url: str | None, table: str | None, stream: IO[str],
         write: Callable[[Client, list[dict[str, Any]]], int], done: str) -> None:
    items, lines = _read_lines(stream)
    target = resolve(url, table)
    with opened(target) as client:
        try:
            count = write(client, items)
        except ValueError as exc:
            # The item's position in the list is a line of the input here.
            message = _ITEM.sub(lambda m: f"line {lines[int(m.group(1))]}", str(exc), count=1)
            raise OperationFailed(f"{message} (nothing was written)") from None
    click.echo(f"{done} {count}")


_FILE = click.option("--file", "stream", type=click.File("r"), default="-",
                     show_default="stdin", help="read the JSON lines from this file")


@cli.command("schedule-many")
@_FILE
@database_options
def schedule_many(stream: IO[str], url: str | None, table: str | None) -> None:
    """Create or update many runtime tasks, one JSON object per line: name, handler,
    schedule (as `dbscheduler list` shows it: "fixed-rate 60s", "fixed-delay 5s",
    "cron 0 3 * * * UTC"), optionally data and execution options (priority, group …)."""
    _run(url, table, stream if stream is not None else sys.stdin,
         lambda c, items: c.schedule_many(items), "scheduled")


@cli.command("schedule-once-many")
@_FILE
@database_options
def schedule_once_many(stream: IO[str], url: str | None, table: str | None) -> None:
    """Create many one-off jobs, one JSON object per line: name, handler, at (ISO 8601 with
    its offset), optionally data and execution options."""
    _run(url, table, stream if stream is not None else sys.stdin,
         lambda c, items: c.schedule_once_many(items), "scheduled")


@cli.command("push-many")
@_FILE
@database_options
def push_many(stream: IO[str], url: str | None, table: str | None) -> None:
    """Queue many batch items, in order, one JSON object per line: key, item, handler,
    optionally ontime (Unix seconds or ISO 8601), update ("always" or "once"), data."""
    _run(url, table, stream if stream is not None else sys.stdin,
         lambda c, items: c.push_many(items), "pushed")
