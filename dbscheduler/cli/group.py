"""The ``dbscheduler`` command group; the commands attach themselves to it."""

from __future__ import annotations

import click

from .. import __version__
from ..dialects import DEFAULT_URL
from ..table import DEFAULT_TABLE
from .target import TABLE_HELP, URL_HELP, Target


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="DBSCHEDULER_URL", default=DEFAULT_URL, metavar="URL",
              help=URL_HELP)
@click.option("--table", envvar="DBSCHEDULER_TABLE", default=DEFAULT_TABLE, metavar="NAME",
              help=TABLE_HELP)
@click.version_option(__version__, prog_name="dbscheduler")
@click.pass_context
def cli(ctx: click.Context, url: str, table: str) -> None:
    """Operate dbscheduler's periodic tasks, stored in one SQL table.

    --url and --table may also be given after the command. Exit codes: 0 ok, 1 the operation
    failed, 2 usage error.
    """
    ctx.obj = Target(url, table)
