"""The ``dbscheduler`` command group; the commands attach themselves to it."""

from __future__ import annotations

import logging
import sys

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
    if ctx.invoked_subcommand not in _LOGGING_COMMANDS:
        # A client's warnings (a handler no node has) are the command's: "warning: …" on
        # stderr, once, nothing else of the library's logging.
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
        handler.setFormatter(logging.Formatter("warning: %(message)s"))
        logger = logging.getLogger("dbscheduler.client")
        propagate = logger.propagate
        logger.addHandler(handler)
        logger.propagate = False

        def restore() -> None:
            logger.removeHandler(handler)
            logger.propagate = propagate

        ctx.call_on_close(restore)


_LOGGING_COMMANDS = ("run", "web", "serve")
"""Commands that set up logging of their own (a node's or a server's)."""
