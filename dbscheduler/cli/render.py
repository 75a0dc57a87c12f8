"""Rendering tasks for a terminal or a pipe (rich tables, relative times) and as JSON."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..context import RunInfo, TaskInfo
from .target import Target

NON_TTY_WIDTH = 1000
"""Line width limit when stdout is not a terminal and ``$COLUMNS`` is unset (rich would use
80): piped output keeps one task per line, at its natural width, for grep and awk."""
STATUS_STYLES = {"success": "green", "error": "red", "lost": "yellow", "cancelled": "magenta",
                 "timeout": "red", "skipped": "dim"}


def make_console(wide: bool = False) -> Console:
    """A console on stdout: colours only on a terminal, a wide table when piped (or
    ``wide``)."""
    width = None
    if wide or (not sys.stdout.isatty() and "COLUMNS" not in os.environ):
        width = NON_TTY_WIDTH
    return Console(file=sys.stdout, width=width, highlight=False, emoji=False, soft_wrap=False)


def render(renderable: Any, wide: bool = False) -> None:
    """Print a rich renderable on stdout; when piped, without trailing blanks on any line;
    ``wide``: at its natural width, however narrow the terminal."""
    console = make_console(wide)
    if console.is_terminal:
        console.print(renderable)
        return
    with console.capture() as captured:
        console.print(renderable)
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def humanize(delta: timedelta) -> str:
    """``"in 3m 10s"`` for a future offset, ``"5s ago"`` for a past one, ``"now"`` within 1 s.

    >>> humanize(timedelta(seconds=190)), humanize(timedelta(seconds=-5))
    ('in 3m 10s', '5s ago')
    >>> humanize(timedelta(days=1, hours=2, minutes=3))
    'in 1d 2h'
    """
    seconds = delta.total_seconds()
    if abs(seconds) < 1:
        return "now"
    rest = int(abs(seconds))
    days, rest = divmod(rest, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    first = next(i for i, (value, _) in enumerate(units) if value)
    text = " ".join(f"{value}{unit}" for value, unit in units[first : first + 2] if value)
    return f"in {text}" if seconds > 0 else f"{text} ago"


def human_duration(value: timedelta) -> str:
    """``"340 ms"``, ``"12.4 s"``, ``"3m 5s"``, ``"2h 10m"``, ``"1d 3h"``.

    >>> human_duration(timedelta(seconds=0.3404)), human_duration(timedelta(seconds=185))
    ('340 ms', '3m 5s')
    """
    seconds = value.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return humanize(value).removeprefix("in ")


def fmt_time(value: datetime) -> str:
    """``2026-03-29 02:30:00`` in UTC (whole seconds; ``--json`` keeps the microseconds)."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def fmt_when(value: datetime | None, now: datetime) -> str:
    """Absolute UTC time and relative to the database clock, or ``-`` when unset."""
    if value is None:
        return "-"
    return f"{fmt_time(value)} ({humanize(value - now)})"


def _next_run(info: TaskInfo, now: datetime) -> Text:
    if info.running:
        return Text("after the current run", style="dim")
    text = Text(fmt_when(info.next_process_at, now))
    if info.paused:
        text.stylize("dim")
    return text


def _last_run(info: TaskInfo, now: datetime) -> Text:
    """The ``list`` column: the running execution, else how the last one ended and when."""
    if info.running and info.last_started_at is not None:
        return Text(f"running, started {humanize(info.last_started_at - now)}", style="cyan")
    return _last_status(info, now)


def _last_status(info: TaskInfo, now: datetime) -> Text:
    if info.last_status is None:
        return Text("never ran", style="dim")
    text = Text(info.last_status, style=STATUS_STYLES.get(info.last_status, ""))
    if info.last_finished_at is not None:
        text.append(f" {humanize(info.last_finished_at - now)}")
    return text


def _last_error(info: TaskInfo, now: datetime) -> Text:
    """``last_error``; marked as old when the last run did not fail (a success keeps it)."""
    if not info.last_error:
        return Text("-")
    if info.last_status in ("error", "lost"):
        return Text(info.last_error, style="red")
    text = Text(info.last_error, style="dim")
    ended = info.last_status or "later"
    if info.last_finished_at is not None:
        ended += f" at {fmt_when(info.last_finished_at, now)}"
    text.append(f"  (from an earlier failure; the last run ended: {ended})", style="dim")
    return text


def _name(info: TaskInfo) -> Text:
    text = Text(info.name)
    if info.overdue:
        text.append(" overdue", style="bold red")
    if info.builtin:
        text.append(" (built-in)", style="dim")
    return text


NARROW_DROPS = ("options", "paused", "runs", "last run", "handler")
"""Columns of ``list`` left out, in this order, until the table fits the terminal
(``-o wide`` keeps them all)."""


def fitted(build: Callable[[frozenset[str]], Table], drops: Sequence[str]) -> Table:
    """``build(left_out)`` leaving out the fewest of ``drops`` (in order) for the table to fit
    the console's width: names are never folded to make room."""
    console = make_console()
    left_out: frozenset[str] = frozenset()
    table = build(left_out)
    for column in drops:
        if console.measure(table, options=console.options.update_width(NON_TTY_WIDTH)
                           ).maximum <= console.width:
            break
        left_out = left_out | {column}
        table = build(left_out)
    return table


def tasks_table(infos: Sequence[TaskInfo], now: datetime, target: Target, wide: bool = False,
                caption: str | None = None) -> Table:
    """The ``list`` table: one line per task, overdue ones marked; in a narrow terminal the
    least needed columns go (unless ``wide``) rather than a name being broken. ``caption``
    replaces the count under it (``""``: none, for a part of a longer listing)."""
    if wide:
        return _tasks_table(infos, now, target, frozenset(), caption)
    return fitted(lambda out: _tasks_table(infos, now, target, out, caption), NARROW_DROPS)


def _tasks_table(infos: Sequence[TaskInfo], now: datetime, target: Target,
                 left_out: frozenset[str], caption: str | None = None) -> Table:
    if caption is None:
        late = sum(1 for i in infos if i.overdue)
        caption = (f"{len(infos)} task(s) in {target.table}"
                   + (f", {late} overdue" if late else "")
                   + f", database time {fmt_time(now)} UTC")
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        caption=caption or None,
        caption_justify="left",
    )
    # Options only when a task has any: a narrow terminal has no room for an empty column.
    with_options = any(info.options for info in infos) and "options" not in left_out
    shown = {c: c not in left_out for c in ("handler", "last run", "runs", "paused")}
    # A name is never broken: other columns wrap or go first (an overlong one is cut with
    # an ellipsis; -o wide shows it whole).
    longest = max((len(_name(info)) for info in infos), default=4)
    table.add_column("name", style="bold", no_wrap=True, overflow="ellipsis",
                     min_width=min(longest, 60))
    table.add_column("schedule", overflow="fold", min_width=8)
    if shown["handler"]:
        table.add_column("handler", overflow="fold", min_width=7)
    if with_options:
        table.add_column("options", overflow="fold", min_width=7)
    table.add_column("next run (UTC)", overflow="fold", min_width=19)
    if shown["last run"]:
        table.add_column("last run", no_wrap=True)
    table.add_column("attempt", justify="right")
    if shown["runs"]:
        table.add_column("runs", justify="right")
    if shown["paused"]:
        table.add_column("paused")
    table.add_column("running on" if not left_out else "node", overflow="fold", min_width=4)
    for info in infos:
        cells: list[Any] = [_name(info), Text(info.schedule or "-")]
        if shown["handler"]:
            cells.append(handler_text(info, now))
        if with_options:
            cells.append(options_text(info))
        cells.append(_next_run(info, now))
        if shown["last run"]:
            cells.append(_last_run(info, now))
        cells.append(str(info.attempt))
        if shown["runs"]:
            cells.append(str(info.total_attempt))
        if shown["paused"]:
            cells.append(Text("yes", style="yellow") if info.paused else Text("no"))
        cells.append(Text(info.locked_by or "-"))
        table.add_row(*cells)
    if left_out:
        gone = [c for c in NARROW_DROPS if c in left_out]
        fit = f"left out to fit: {', '.join(gone)} (-o wide)"
        table.caption = f"{table.caption}\n{fit}" if table.caption else fit
    return table


def options_text(info: TaskInfo) -> Text:
    """The row's execution options that differ from the defaults, ``key=value`` each."""
    if not info.options:
        return Text("-", style="dim")
    parts = []
    for key, value in info.options.items():
        shown = f"{value:g}s" if key in ("timeout", "grace", "jitter") else value
        parts.append(f"{key}={shown}")
    return Text(" ".join(parts))


UNRUN_AFTER = timedelta(seconds=60)
"""A row due longer ago than this that no node has picked is marked: no running node seems to
have its handler (nodes keep no registry, so it is read from the row itself)."""


def handler_text(info: TaskInfo, now: datetime) -> Text:
    """The handler's name, marked when no running node seems to have it."""
    text = Text(info.handler or "-")
    if (info.locked_by is None and not info.paused
            and now - info.next_process_at > UNRUN_AFTER
            and (info.last_started_at is None or info.last_started_at < info.next_process_at)):
        text.append(" (unknown: no node ran it)", style="red")
    return text


def task_details(info: TaskInfo, now: datetime) -> Table:
    """The ``show`` view: every field of :class:`TaskInfo`, one per line."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")

    def when(value: datetime | None) -> Text:
        return Text(fmt_when(value, now))

    if info.running:
        status = Text(f"running on {info.locked_by}", style="cyan")
        if info.stop_requested:
            status.append(" (cancel requested)", style="magenta")
        next_label = "lease expires"
    else:
        status = Text("idle")
        next_label = "next run"
    rows: list[tuple[str, Text]] = [
        ("name", Text(info.name)),
        ("schedule", Text(info.schedule or "-")),
        ("handler", handler_text(info, now)),
        ("data", Text("-" if info.data is None else json.dumps(info.data))),
        ("options", options_text(info)),
        ("status", status),
        (next_label, when(info.next_process_at)),
        ("paused", Text("yes" if info.paused else "no", style="yellow" if info.paused else "")),
        ("last status", _last_status(info, now)),
        ("last success", when(info.last_success_at)),
        ("overdue", Text("yes", style="bold red") if info.overdue else Text("no")),
        ("alert after", Text("-" if info.alert_after is None
                             else human_duration(info.alert_after))),
        ("alerted", when(info.alerted_at)),
        ("last error", _last_error(info, now)),
        ("last started", when(info.last_started_at)),
        ("last finished", when(info.last_finished_at)),
        ("heartbeat", when(info.heartbeat_at)),
        ("attempt", Text(f"{info.attempt} (attempts of the current occurrence)")),
        ("runs", Text(f"{info.total_attempt} started, {info.reenqueue_attempt} succeeded")),
        ("state", Text("-" if info.state is None else json.dumps(info.state))),
        ("created", when(info.created_at)),
        ("locked by", Text(info.locked_by or "-")),
        ("id", Text(str(info.id))),
    ]
    for label, value in rows:
        grid.add_row(label, value)
    return grid


def runs_table(runs: Sequence[RunInfo], now: datetime, caption: str) -> Table:
    """The ``runs`` table: one line per finished execution, newest first."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, caption=caption,
                  caption_justify="left")
    table.add_column("finished (UTC)", no_wrap=True)
    table.add_column("task", style="bold", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("duration", justify="right", no_wrap=True)
    table.add_column("attempt", justify="right")
    table.add_column("node", overflow="fold")
    table.add_column("token", justify="right")
    table.add_column("error", overflow="fold")
    for run in runs:
        table.add_row(
            Text(fmt_when(run.finished_at, now)),
            Text(run.name),
            Text(run.status, style=STATUS_STYLES.get(run.status, "")),
            human_duration(run.duration),
            str(run.attempt),
            Text(run.node_id),
            str(run.token),
            Text(run.error or "-", style="red" if run.error else "dim"),
        )
    return table


STREAM_BATCH = 500
"""Objects :func:`stream_json` writes per call to stdout."""


def stream_json(values: Iterable[Any]) -> int:
    """Print ``values`` as one JSON array on stdout, one object per line, each written as
    it comes (a few hundred per write) rather than held all at once; returns how many.

    >>> stream_json(iter([{"name": "a"}, {"name": "b"}]))   # doctest: +SKIP
    [
    {"name": "a"},
    {"name": "b"}
    ]
    2
    """
    count = 0
    lines: list[str] = []
    # Compact objects: the indenting encoder is pure Python and several times slower.
    encode = json.JSONEncoder(ensure_ascii=False).encode
    for value in values:
        lines.append(encode(value))
        count += 1
        if len(lines) == STREAM_BATCH:
            click.echo(("[\n" if count == STREAM_BATCH else ",\n") + ",\n".join(lines), nl=False)
            lines = []
    if lines:
        click.echo(("[\n" if count == len(lines) else ",\n") + ",\n".join(lines), nl=False)
    click.echo("\n]" if count else "[]")
    return count


def emit_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout (timestamps already ISO 8601 UTC)."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))
