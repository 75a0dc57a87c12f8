"""Execution controls on the command line: ``groups`` (running/limit of each concurrency
group, and setting limits), and the option flags of ``schedule``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich import box
from rich.table import Table
from rich.text import Text

from .group import cli
from .render import emit_json, render
from .target import OperationFailed, database_options, opened, resolve

__all__ = ["execution_options", "given_options"]

F = TypeVar("F", bound=Callable[..., Any])

_FLAGS: list[tuple[str, dict[str, Any]]] = [
    ("--priority", {"type": int, "help": "higher runs first when more is due than fits"}),
    ("--group", {"help": "concurrency group (limit it with `dbscheduler groups --set`)"}),
    ("--requires", {"help": "only nodes with this tag (or node id) run it"}),
    ("--timeout", {"type": float, "metavar": "S", "help": "stop the run after S seconds"}),
    ("--isolation", {"type": click.Choice(["thread", "process"]),
                     "help": "process: run in a child process that can be killed"}),
    ("--misfire", {"type": click.Choice(["run", "skip"]),
                   "help": "skip: a run picked later than --grace after its time is skipped"}),
    ("--grace", {"type": float, "metavar": "S", "help": "how late a --misfire skip may start"}),
    ("--jitter", {"type": float, "metavar": "S",
                  "help": "delay each next time by a random 0..S seconds"}),
]


def execution_options(fn: F) -> F:
    """Add the execution option flags (``--priority`` … ``--jitter``) to a command."""
    for flag, attrs in reversed(_FLAGS):
        fn = click.option(flag, default=None, **attrs)(fn)
    return fn


def given_options(params: dict[str, Any]) -> dict[str, Any]:
    """The execution options among a command's parameters that were given (removed from
    ``params``)."""
    names = [flag[2:] for flag, _ in _FLAGS]
    return {n: v for n in names if (v := params.pop(n, None)) is not None}


def _limit(text: str) -> tuple[str, int]:
    name, sep, number = text.rpartition("=")
    try:
        if not sep or not name:
            raise ValueError
        return name, int(number)
    except ValueError:
        raise click.BadParameter(f"expected NAME=N (an integer >= 0), got {text!r}",
                                 param_hint="'--set'") from None


@cli.command()
@click.option("--set", "set_", multiple=True, metavar="NAME=N",
              help="limit group NAME to N executions at once across the cluster")
@click.option("--remove", multiple=True, metavar="NAME", help="remove the limit of NAME")
@click.option("--json", "as_json", is_flag=True, help="print a JSON array of the groups")
@database_options
def groups(set_: tuple[str, ...], remove: tuple[str, ...], as_json: bool, url: str | None,
           table: str | None) -> None:
    """Concurrency groups: executions running now / limit, and tasks of each."""
    changes = [_limit(text) for text in set_]
    target = resolve(url, table)
    with opened(target) as client:
        try:
            for name, limit in changes:
                client.set_group_limit(name, limit)
            for name in remove:
                client.set_group_limit(name, None)
        except ValueError as exc:
            raise OperationFailed(str(exc)) from None
        infos = client.groups()
    if as_json:
        emit_json([g.to_dict() for g in infos])
        return
    if not infos:
        click.echo(f"no groups in table {target.table} on {target.safe_url}")
        return
    view = Table(box=box.SIMPLE_HEAD, show_edge=False)
    view.add_column("group", style="bold", overflow="fold")
    view.add_column("running / limit", justify="right")
    view.add_column("tasks", justify="right")
    for g in infos:
        shown = "no limit" if g.limit is None else str(g.limit)
        full = g.limit is not None and g.running >= g.limit
        view.add_row(Text(g.name), Text(f"{g.running} / {shown}", style="red" if full else ""),
                     str(g.tasks))
    render(view)
