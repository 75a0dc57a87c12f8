"""``runs``: the run history, newest first."""

from __future__ import annotations

import click

from ..table import RUN_STATUSES
from .group import cli
from .render import emit_json, fmt_time, render, runs_table
from .target import OperationFailed, database_options, opened, resolve
from .tasks import parse_aware


@cli.command()
@click.argument("name", required=False)
@click.option("--status", type=click.Choice(RUN_STATUSES), multiple=True,
              help="only runs that ended so (repeat for several)")
@click.option("--since", metavar="ISO8601",
              help="only runs finished at or after this time, with its offset "
                   "(2026-03-29T00:00:00Z)")
@click.option("--until", metavar="ISO8601",
              help="only runs finished before this time, with its offset")
@click.option("--node", metavar="NODE_ID", help="only runs of this node (see `dbscheduler nodes`)")
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True,
              help="at most this many runs")
@click.option("--cursor", metavar="CURSOR",
              help="the runs older than a previous page (the cursor it printed)")
@click.option("--traceback", "tracebacks", is_flag=True,
              help="after the table, the traceback of each run whose function raised")
@click.option("--json", "as_json", is_flag=True,
              help="print a JSON array of runs (tracebacks included)")
@database_options
def runs(name: str | None, status: tuple[str, ...], since: str | None, until: str | None,
         node: str | None, limit: int, cursor: str | None, tracebacks: bool, as_json: bool,
         url: str | None, table: str | None) -> None:
    """Finished executions, newest first: of task NAME, or of every task.

    Each run: when it finished, status, duration, attempt, the node that ran it, its fencing
    token and its error. Runs are kept as the nodes' history settings say (7 days and 1,000
    per task by default).
    """
    target = resolve(url, table)
    after = parse_aware(since, "--since") if since is not None else None
    before = parse_aware(until, "--until") if until is not None else None
    with opened(target) as client:
        try:
            found = client.runs(name, status=status or None, since=after, until=before,
                                limit=limit, node=node, cursor=cursor)
        except ValueError as exc:
            raise OperationFailed(str(exc)) from None
        if as_json:
            emit_json([run.to_dict() for run in found])
            return
        now = client.db_now()
    what = f"task {name!r}" if name is not None else "any task"
    if status:
        what += f" with status {' or '.join(status)}"
    if node is not None:
        what += f" on node {node}"
    if since is not None:
        what += f" since {since}"
    if until is not None:
        what += f" until {until}"
    if not found:
        click.echo(f"no runs of {what} in {target.table}_runs on {target.safe_url}")
        return
    more = (f" (older ones: --cursor {found[-1].cursor})" if len(found) == limit else "")
    render(runs_table(found, now, f"{len(found)} run(s) of {what}{more}, database time "
                                  f"{fmt_time(now)} UTC"))
    if tracebacks:
        shown = [run for run in found if run.traceback]
        for run in shown:
            click.echo(f"\n{run.name} · token {run.token} · {run.status} · finished "
                       f"{fmt_time(run.finished_at)} UTC on {run.node_id}")
            click.echo(run.traceback)
        if not shown:
            click.echo("\nno traceback among these runs (only a function that raised has one)")
