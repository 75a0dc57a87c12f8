"""The ``dbscheduler`` command line: migrate, inspect and operate the tasks of one table.

::

    dbscheduler [--url URL] [--table NAME] COMMAND [ARGS]

``--url`` and ``--table`` are accepted before or after the command (the command's own wins),
and default to ``$DBSCHEDULER_URL`` / ``$DBSCHEDULER_TABLE``, then to the embedded SQLite file
``./dbscheduler.sqlite3`` and ``scheduled_tasks``.

Exit codes: ``0`` success, ``1`` the operation failed (unknown task, task running, missing
table, database error: one message on stderr, no traceback), ``2`` usage error (bad option,
invalid table name, naive ``--at``, unknown dialect).

Every command except ``run`` works through a :class:`~dbscheduler.Client`: it opens the
database, runs one short transaction and exits. ``run MODULE:ATTR`` starts a node for the
:class:`~dbscheduler.Scheduler` found at that import path and stops it gracefully on Ctrl-C or
SIGTERM.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import (  # noqa: F401  (the commands attach themselves to the group)
    batches,
    bulk,
    controls,
    node,
    nodes,
    runs,
    runtime,
    schema,
    tasks,
    web,
)
from .group import cli
from .node import load_scheduler
from .render import humanize
from .target import OperationFailed

__all__ = ["OperationFailed", "cli", "humanize", "load_scheduler", "main"]


def main(argv: Sequence[str] | None = None) -> None:
    """The ``dbscheduler`` console script (also ``python -m dbscheduler``); exits the process."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="dbscheduler")
