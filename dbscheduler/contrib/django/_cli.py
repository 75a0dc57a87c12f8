"""The ``dbscheduler`` command line with the project's database and table as defaults."""

from __future__ import annotations

from collections.abc import Sequence

from ._settings import database_url, settings_of

DJANGO_SPEC = "dbscheduler.contrib.django._settings:discovered_scheduler"
"""What ``run`` and ``sync`` load when given no MODULE:ATTR: the project's scheduler with
every app's tasks module imported."""

# Options of `run` that take a value: the word after them is not MODULE:ATTR.
_VALUED = frozenset({"--log-level", "--shutdown-timeout", "--metrics-port", "--url", "--table"})


def django_args(args: Sequence[str]) -> list[str]:
    """``args`` for the CLI: ``run``/``sync`` without MODULE:ATTR run the project's
    scheduler; every other command gets the project's ``--url`` and ``--table`` (its own
    ``--url`` after the command still wins).

    >>> django_args(["run", "--log-level", "DEBUG"])  # doctest: +SKIP
    ['run', 'dbscheduler.contrib.django._settings:discovered_scheduler', '--log-level', 'DEBUG']
    """
    args = list(args)
    if args and args[0] in ("run", "sync"):
        if _spec_index(args) is None:
            args.insert(1, DJANGO_SPEC)
        return args  # the Scheduler knows its database: --url would only be compared
    if not args or args[0] in ("--help", "-h", "--version"):
        return args
    return ["--url", database_url(), "--table", settings_of().table, *args]


def _spec_index(args: list[str]) -> int | None:
    i = 1
    while i < len(args):
        word = args[i]
        if word in _VALUED:
            i += 2
            continue
        if not word.startswith("-"):
            return i
        i += 1
    return None


def run_cli(args: Sequence[str], prog_name: str = "manage.py dbscheduler") -> int:
    """Run the ``dbscheduler`` command line on ``args`` (see :func:`django_args`); its exit
    code."""
    from ...cli import cli

    try:
        cli.main(args=django_args(args), prog_name=prog_name)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
